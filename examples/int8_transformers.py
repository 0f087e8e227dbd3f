"""The transformer zoo in int8 (issue 29: "int8 reported"): per model, what the int8 partition
offloads (operators, external functions, the host operators by reason) and the output's SQNR
against a float64 run of the PyTorch model, ours beside ONNX Runtime's static int8 of the same
model calibrated on the same inputs:

    python examples/int8_transformers.py [--models encoder_stack vit_ti16 ...]
                                         [--calibration 8] [--inputs 2] [--no-ort]

Calibration on random N(0, 1) inputs (seed 1234, the method's default), evaluation on other
random inputs (seed 1235): the SQNR of all their outputs together. ONNX Runtime: static QDQ,
uint8 activations, per-channel int8 weights, MinMax (``quantization.ort_baseline``).
nv_full. Figures in docs/transformer_ops.md."""
import argparse
import collections
import copy
import tempfile
from pathlib import Path

import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_pytorch
from accel_codegen.compiler.partition import run_main
from accel_codegen.quantization import ort_baseline
from accel_codegen.tools.model_spec import random_inputs
from accel_codegen.tools.models import get_model

DEFAULT = ["encoder_stack", "hybrid_recogniser", "convnext_mini", "vit_ti16", "swin_mini"]


def _sqnr(actual: np.ndarray, expected: np.ndarray) -> float:
    """10 log10(|expected|^2 / |actual - expected|^2) over all the outputs."""
    noise = np.sum((np.asarray(actual, np.float64) - expected) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(expected ** 2) / noise))


def _float64(model: torch.nn.Module, examples) -> np.ndarray:
    exact = copy.deepcopy(model).double()
    with torch.no_grad():
        return np.concatenate([exact(torch.from_numpy(x).double()).numpy().reshape(-1)
                               for (x,) in examples])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=2)
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's int8")
    args = parser.parse_args()
    for name in args.models:
        model, (x,) = get_model(name)
        mod, params = from_pytorch(model, (x,))
        calibration = random_inputs([x.numpy()], args.calibration, 1234)
        evaluation = random_inputs([x.numpy()], args.inputs, 1235)
        partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                             calibration=calibration)
        report = ac.partition_report(partitioned)
        vm = ac.virtual_machine(ac.build(partitioned))
        ours = np.concatenate([run_main(vm, e).reshape(-1) for e in evaluation])
        exact = _float64(model, evaluation)
        line = (f"{name:18s} int8: {len(report.offloaded)} of {len(report.ops)} operators in "
                f"{len(report.functions)} function(s); SQNR against float64 "
                f"{_sqnr(ours, exact):.1f} dB")
        if not args.no_ort:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"{name}.onnx"
                export_onnx(model, (x,), path)
                try:
                    quantized = ort_baseline.quantize_int8(path, calibration, tmp)
                except AssertionError:  # its symbolic shape inference fails on some exports
                    quantized = ort_baseline.quantize_int8(
                        path, calibration, tmp, ort_baseline.Int8Settings(pre_process=False))
                session = ort_baseline.session(quantized, threads=1)
                theirs = np.concatenate([ort_baseline.run(session, e).reshape(-1)
                                         for e in evaluation])
            line += f", ONNX Runtime int8 {_sqnr(theirs, exact):.1f} dB"
        print(line, flush=True)
        for reason, count in collections.Counter(op.reason for op in report.host).most_common():
            print(f"    {count} x {reason}")


if __name__ == "__main__":
    main()
