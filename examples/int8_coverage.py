"""What an int8 build keeps on the accelerator, and how close it stays to fp32, on zoo models.

For each model: the int8 partition (calibrated on random N(0, 1) inputs, seed 1234) and its
report (operators offloaded, external functions, the host operators' reasons), then
``accuracy_report`` with ONNX Runtime's static int8 beside ours (as
``examples/accuracy_vs_ort.py``): output SQNR against our fp32 build on other inputs (seed
1235). Run it at two commits to see what a change moves.

    python examples/int8_coverage.py [--models efficientnet_b0 mobilenet_v3_small]
                                     [--calibration 32] [--inputs 16] [--out PREFIX]

Writes PREFIX.txt (the table and the host reasons) and PREFIX.json.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from accel_codegen.tools.model_spec import random_inputs

CALIBRATION_SEED, EVALUATION_SEED = 1234, 1235
MODELS = ("efficientnet_b0", "mobilenet_v3_small", "squeezenet1_1", "googlenet",
          "shufflenet_v2", "densenet121")
REPO = Path(__file__).resolve().parents[1]


def measure(name: str, args) -> dict:
    import accel_codegen as ac
    from accel_codegen import frontend, models

    model, (x,) = models.get_model(name)
    mod, _ = frontend.from_pytorch(model, (x,))
    calibration = random_inputs([x.numpy()], args.calibration, CALIBRATION_SEED)
    evaluation = random_inputs([x.numpy()], args.inputs, EVALUATION_SEED)
    start = time.perf_counter()
    report = ac.partition_report(ac.partition_for_accel(mod, precision="int8",
                                                        calibration=calibration))
    reasons = collections.Counter(op.reason for op in report.host)
    with tempfile.TemporaryDirectory() as directory:
        path = frontend.export_onnx(model, (x,), Path(directory) / f"{name}.onnx")
        accuracy = ac.accuracy_report(mod, None, evaluation, precision="int8",
                                      calibration=calibration, onnx_model=path)
    return {"model": name, "offloaded": len(report.offloaded), "ops": len(report.ops),
            "functions": len(report.functions), "ours_db": accuracy.output_sqnr_db,
            "ort_db": accuracy.ort.output_sqnr_db, "gap_db": accuracy.ort_gap_db,
            "top1": accuracy.top1_agreement, "seconds": time.perf_counter() - start,
            "host": dict(reasons.most_common())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--out", default=None, help="write OUT.txt and OUT.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for name in args.models:
        print(f"{name} ...", file=sys.stderr, flush=True)
        rows.append(measure(name, args))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    lines = [f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
             f"{commit}: python examples/int8_coverage.py {' '.join(sys.argv[1:])}",
             f"int8 on nv_full, calibrated on {args.calibration} random N(0, 1) inputs (seed "
             f"{CALIBRATION_SEED}), output SQNR against our fp32 build on {args.inputs} others "
             f"(seed {EVALUATION_SEED}); ORT: ONNX Runtime's static QDQ int8 on the same inputs",
             f"{'model':<20}{'offloaded':>12}{'functions':>10}{'ours dB':>9}{'ORT dB':>8}"
             f"{'ours-ORT':>9}{'top-1':>7}{'s':>6}"]
    for r in rows:
        lines.append(f"{r['model']:<20}{r['offloaded']:>6} / {r['ops']:<3}{r['functions']:>10}"
                     f"{r['ours_db']:>9.2f}{r['ort_db']:>8.2f}{r['gap_db']:>+9.2f}"
                     f"{(r['top1'] or 0) * 100:>6.1f}%{r['seconds']:>6.0f}")
    for r in rows:
        for reason, count in r["host"].items():
            lines.append(f"  {r['model']}: {count} x {reason}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out + ".txt").write_text(text + "\n")
        Path(args.out + ".json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
