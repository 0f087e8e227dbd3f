"""Our int8 against ONNX Runtime's static int8 on the zoo: output SQNR against fp32, side by side.

For each model: the PyTorch model is exported to ONNX (``frontend.export_onnx``), and
``accuracy_report(..., onnx_model=...)`` builds our int8 (calibrated, default method, on random
N(0, 1) inputs drawn with seed 1234) and quantises the ONNX file with ONNX Runtime
(``quantize_static``, QDQ, per-channel int8 weights, uint8 activations, MinMax) calibrated on
the very same inputs; both are evaluated on other random inputs (seed 1235) against our fp32
build's output. The same figures for one model:
``accel-codegen accuracy MODEL --precision int8 --calibration 32 --inputs 16``.

Issue #13's goal: our int8 SQNR >= ONNX Runtime's + 3 dB. The table reports the gap as
measured; it does not tune. ``--before`` adds our int8 without cross-layer equalisation
(``equalize=False``), ``--gptq`` our int8 with GPTQ weight rounding
(``weight_rounding="gptq"``); ``--unseen`` measures the architectures of examples/unseen_models.py
(ResNet-34, RegNetY-400MF-like, MobileNet-v2, EfficientNet-B0-like, written from torch.nn)
instead of the zoo.

    python examples/accuracy_vs_ort.py [--models resnet18 resnet50] [--calibration 32]
                                       [--inputs 16] [--before] [--gptq] [--unseen]
                                       [--out docs/accuracy_vs_ort]

Writes OUT.txt (the table) and OUT.json (the rows, with every report).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from accel_codegen.quantization import DEFAULT_METHOD
from accel_codegen.tables import Column, render_table
from accel_codegen.tools.model_spec import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unseen_models import UNSEEN, get_unseen  # noqa: E402  (examples/ is not a package)

CALIBRATION_SEED, EVALUATION_SEED = 1234, 1235
GOAL_GAP_DB = 3.0
MODELS = ("lenet5", "resnet18", "resnet50", "vgg11_bn", "mobilenet_v1", "mobilenet_v2",
          "efficientnet_b0", "mobilenet_v3_small", "googlenet", "squeezenet1_1",
          "shufflenet_v2", "densenet121")
REPO = Path(__file__).resolve().parents[1]


def measure(name: str, args) -> dict:
    import accel_codegen as ac
    from accel_codegen import frontend, models

    if name in UNSEEN:
        model, (x,) = get_unseen(name)
    else:
        model, (x,) = models.get_model(name)
    mod, _ = frontend.from_pytorch(model, (x,))
    calibration = random_inputs([x.numpy()], args.calibration, CALIBRATION_SEED)
    evaluation = random_inputs([x.numpy()], args.inputs, EVALUATION_SEED)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        path = frontend.export_onnx(model, (x,), Path(directory) / f"{name}.onnx")
        report = ac.accuracy_report(mod, None, evaluation, config=args.accel_config,
                                    precision="int8", calibration=calibration, onnx_model=path)
    ort = report.ort
    gptq = gptq_seconds = None
    if args.gptq:  # the same build with GPTQ weight rounding (weight_rounding="gptq")
        begin = time.perf_counter()
        gptq = ac.accuracy_report(mod, None, evaluation, config=args.accel_config,
                                  precision="int8", calibration=calibration,
                                  weight_rounding="gptq").output_sqnr_db
        gptq_seconds = time.perf_counter() - begin
    plain = None
    if args.before:  # the same build without cross-layer equalisation, as before it came
        plain = ac.accuracy_report(mod, None, evaluation, config=args.accel_config,
                                   precision="int8", calibration=calibration,
                                   equalize=False).output_sqnr_db
    return {"model": name, "plain_db": plain, "gptq_db": gptq, "gptq_seconds": gptq_seconds,
            "ours_db": report.output_sqnr_db,
            "ort_db": ort.output_sqnr_db,
            "gap_db": report.ort_gap_db, "meets_goal": report.ort_gap_db >= GOAL_GAP_DB,
            "ours_top1": report.top1_agreement, "ort_top1": ort.top1_agreement,
            "ort_fp32_db": ort.fp32_sqnr_db, "seconds": time.perf_counter() - start,
            "report": report.to_dict()}


COLUMNS = (Column("model", 20, "<"), Column("no CLE dB", 9), Column("ours dB", 8, spec=".2f"),
           Column("GPTQ dB", 8), Column("GPTQ-ORT", 8),
           Column("ORT dB", 7, spec=".2f"), Column("ours-ORT", 8, spec="+.2f"),
           Column("goal +3", 7), Column("top-1 ours", 10), Column("top-1 ORT", 9),
           Column("ORT fp32 dB", 11, spec=".1f"), Column("s", 6, spec=".0f"))


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def format_table(rows: list, args) -> str:
    cells = [f"{r['model']:<18} error: {r['error']}" if "error" in r else
             [r["model"], "-" if r["plain_db"] is None else f"{r['plain_db']:.2f}",
              r["ours_db"], "-" if r["gptq_db"] is None else f"{r['gptq_db']:.2f}",
              "-" if r["gptq_db"] is None else f"{r['gptq_db'] - r['ort_db']:+.2f}",
              r["ort_db"], r["gap_db"],
              "met" if r["meets_goal"] else "below", _pct(r["ours_top1"]), _pct(r["ort_top1"]),
              r["ort_fp32_db"], r["seconds"]] for r in rows]
    return render_table(COLUMNS, cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--config", default="nv_full")
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--out", default=None, help="write OUT.txt and OUT.json")
    parser.add_argument("--unseen", action="store_true",
                        help="the architectures of examples/unseen_models.py instead of the zoo")
    parser.add_argument("--before", action="store_true",
                        help="also our int8 without cross-layer equalisation (column "
                        "'no CLE dB')")
    parser.add_argument("--gptq", action="store_true",
                        help="also our int8 with GPTQ weight rounding (column 'GPTQ dB')")
    args = parser.parse_args()
    if args.unseen and args.models == list(MODELS):
        args.models = list(UNSEEN)
    from accel_codegen import AccelConfig
    from accel_codegen.quantization import ort_baseline

    reason = ort_baseline.unavailable()
    if reason:
        print(f"cannot compare: {reason}", file=sys.stderr)
        return 1
    args.accel_config = AccelConfig.resolve(args.config)
    warnings.simplefilter("ignore")
    rows = []
    for name in args.models:
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(measure(name, args))
        except Exception as error:  # pylint: disable=broad-except  (a row, not the run)
            rows.append({"model": name, "error": f"{type(error).__name__}: "
                         f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}"})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    head = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
            f"{commit}: python examples/accuracy_vs_ort.py {' '.join(sys.argv[1:])}\n"
            f"int8 output SQNR against our fp32 build on {args.config}; both calibrated on the "
            f"same {args.calibration} random N(0, 1) inputs (seed {CALIBRATION_SEED}), evaluated "
            f"on {args.inputs} others (seed {EVALUATION_SEED}); ours: {DEFAULT_METHOD}; ONNX "
            f"Runtime {ort_baseline.version()}: {ort_baseline.Int8Settings().describe()}, after "
            f"quant_pre_process; goal (issue #13): ours >= ORT + {GOAL_GAP_DB:g} dB")
    text = head + "\n" + format_table(rows, args)
    print(text)
    if args.out:
        Path(args.out + ".txt").write_text(text + "\n")
        Path(args.out + ".json").write_text(json.dumps(
            {"header": head, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
