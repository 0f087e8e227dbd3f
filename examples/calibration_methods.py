"""Our int8 output SQNR per calibration method, side by side on the zoo (issue #13, item 2).

For each model: the fp32 build of the int8 partition runs the calibration inputs once (32
random N(0, 1) inputs, seed 1234) with an observer; each method turns the same statistics into
scales, and each int8 build is evaluated on 16 other inputs (seed 1235) against the fp32
build's output, as ``accel-codegen accuracy`` does. ``--ort FILE`` adds ONNX Runtime's int8
SQNR from an ``examples/accuracy_vs_ort.py`` JSON measured with the same models and inputs
(ONNX Runtime's figure does not depend on our method) and our best method's gap to it.

    python examples/calibration_methods.py [--models lenet5 resnet18] [--methods mse percentile]
                                           [--ort docs/accuracy_vs_ort.json]
                                           [--out docs/calibration_methods.txt]

Rows are printed (and appended to OUT) as each model finishes.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

MODELS = ("lenet5", "resnet18", "mobilenet_v1", "vgg11_bn", "mobilenet_v2", "squeezenet1_1",
          "shufflenet_v2", "googlenet", "mobilenet_v3_small", "efficientnet_b0",
          "densenet121", "resnet50")
CALIBRATION_SEED, EVALUATION_SEED = 1234, 1235
REPO = Path(__file__).resolve().parents[1]


def measure(name: str, methods, args) -> dict:
    import tvm
    from accel_codegen import frontend, models
    from accel_codegen.compiler.partition import generate_partition
    from accel_codegen.compiler.vm import virtual_machine
    from accel_codegen.quantization import Calibration, Observer, observing
    from accel_codegen.tools.model_spec import random_inputs

    model, (x,) = models.get_model(name)
    mod, _ = frontend.from_pytorch(model, (x,))
    calibration = random_inputs([x.numpy()], args.calibration, CALIBRATION_SEED)
    evaluation = random_inputs([x.numpy()], args.inputs, EVALUATION_SEED)
    reference = generate_partition(mod, None, args.config, True, "int8", "fp32", None)
    ref_vm = virtual_machine(tvm.compile(reference, target="llvm"))

    def run(vm, example):
        args_ = (tvm.runtime.tensor(np.ascontiguousarray(a)) for a in example)
        return np.asarray(vm["main"](*args_).numpy(), np.float64)

    observer = Observer()
    with observing(observer):
        for example in calibration:
            run(ref_vm, example)
    expected = [run(ref_vm, example) for example in evaluation]
    row = {"model": name, "db": {}, "scales_s": {}}
    for method in methods:
        start = time.process_time()
        scales = Calibration.from_observer(observer, method, len(calibration))
        row["scales_s"][method] = time.process_time() - start
        vm = virtual_machine(tvm.compile(
            generate_partition(mod, None, args.config, True, "int8", "int8", scales),
            target="llvm"))
        signal = noise = 0.0
        for example, want in zip(evaluation, expected):
            got = run(vm, example)
            signal += float(np.sum(want * want))
            noise += float(np.sum((got - want) ** 2))
        row["db"][method] = 10 * np.log10(signal / noise)
    return row


def format_row(row: dict, methods, ort: dict) -> str:
    cells = [f"{row['model']:<19}"] + [f"{row['db'][m]:9.2f}" for m in methods]
    if ort:
        theirs = ort.get(row["model"])
        best = max(row["db"].values())
        cells += [f"{theirs:8.2f}", f"{best - theirs:+9.2f}"] if theirs is not None else \
            [f"{'-':>8}", f"{'-':>9}"]
    return " ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--methods", nargs="+", default=["percentile", "mse"])
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--ort", default=None, help="accuracy_vs_ort.py JSON: ORT's figures")
    parser.add_argument("--out", default=None, help="write the table to OUT (appending rows)")
    args = parser.parse_args()
    from accel_codegen import AccelConfig

    args.config = AccelConfig.resolve("nv_full")
    warnings.simplefilter("ignore")
    ort = {}
    if args.ort:
        ort = {r["model"]: r["ort_db"] for r in json.loads(Path(args.ort).read_text())["rows"]
               if "ort_db" in r}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    head = (f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
            f"{commit}: python examples/calibration_methods.py "
            f"{' '.join(sys.argv[1:])}\n"
            f"int8 output SQNR (dB) against our fp32 build on nv_full, calibrated on "
            f"{args.calibration} random N(0, 1) inputs (seed {CALIBRATION_SEED}), evaluated on "
            f"{args.inputs} others (seed {EVALUATION_SEED})"
            + (f"; ORT int8: ONNX Runtime's static QDQ figure from {args.ort}, best - ORT: our "
               "best method's gap to it" if ort else "") + "\n"
            + " ".join([f"{'model':<19}"] + [f"{m:>9}" for m in args.methods]
                       + ([f"{'ORT int8':>8}", f"{'best-ORT':>9}"] if ort else [])))
    print(head, flush=True)
    out = Path(args.out) if args.out else None
    if out:
        out.write_text(head + "\n")
    for name in args.models:
        row = measure(name, args.methods, args)
        line = format_row(row, args.methods, ort)
        print(line, flush=True)
        if out:
            with out.open("a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
