"""The PP-OCRv4 recogniser's int8 against ONNX Runtime's static int8, on 12 rendered lines
(issue 33: int8 SQNR and task agreement at least ONNX Runtime's, the same calibration).

The set's 2 compared lines, its 2 held-out lines and 8 more (``tm.MORE_TEXTS``), against
ONNX Runtime fp32's run of the same file; both int8 builds calibrated on the set's 2
calibration lines (``model.inputs(4)[2:]``, as examples/trained_models.py calibrates). Prints
the SQNR over the 12 lines (and the worst line's), the strings equal to ONNX Runtime fp32's
(exactly, and with leading and trailing spaces ignored: PP-OCRv4 ends most of these lines
with a space, a marginal CTC decision either int8 flips), the time steps whose class (the
argmax before CTC's collapse) is ONNX Runtime fp32's, of the 40 per line, and the characters'
edit distance to ONNX Runtime fp32's strings summed over the lines; then each line whose
string differs. Exact strings count a line lost for one space, so 12 lines rank two int8
builds coarsely: the steps and the edits see every decision (docs/trained_models.md,
session 14).

    python examples/recogniser_int8.py [--calibration-method mse] [--no-bias-correction]
                                       [--no-ort-int8] [--debug-files DIR]
                                       [--lines compared validation] [--keep-float NAME ...]

``--lines validation`` compares 12 other lines instead (``tm.VALIDATION_TEXTS``), none of
them calibrated on, nor looked at while the int8 settings were chosen on the 12 above;
``--lines compared validation`` both sets, one table each, from one build (a calibration
that searches, ``mse_outputs``, runs once).

``--keep-float NAME ...`` keeps those layers in fp16 (keys ``f0.3`` or source names, as
``partition_for_accel(keep_float=...)`` takes them; a mixed build, which does not equalise):
``--keep-float f0.{0..19}`` (bash expands it) keeps the first stage, the layers whose
outputs are 160 wide, where the trailing spaces are lost (docs/trained_models.md, "The
recogniser's ends of lines").

``--debug-files DIR`` also writes the static-shape ONNX file and the lines as .npz archives,
for the per-layer table of the debugger::

    accel-codegen debug DIR/ppocrv4_rec.onnx --precision int8 --inputs DIR/lines.npz \\
        --calibration-data DIR/calibration.npz
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from accel_codegen.tools import trained_models as tm

NAME = "ppocrv4_rec"


def lines(which: str = "compared"):
    """The 12 texts compared (``validation``: the 12 lines kept for validating)."""
    if which == "validation":
        return tm.VALIDATION_TEXTS
    return tm.TEXTS[:2] + tm.HELD_OUT_TEXTS + tm.MORE_TEXTS


def edit_distance(a: str, b: str) -> int:
    """Levenshtein's distance: the fewest characters inserted, deleted or replaced that turn
    ``a`` into ``b`` (a dropped trailing space costs 1, as it costs one line's exactness)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[-1]


def step_agreement(outputs, references) -> tuple:
    """(time steps whose class is the reference's, time steps): the argmax over the classes
    of every step of every line, before CTC collapses repeats and blanks."""
    same = total = 0
    for o, r in zip(outputs, references):
        got, want = np.asarray(o[0]).argmax(axis=-1), np.asarray(r[0]).argmax(axis=-1)
        same += int(np.count_nonzero(got == want))
        total += want.size
    return same, total


def per_line_sqnr(outputs, references):
    return [tm.compare([o], [r])[1] for o, r in zip(outputs, references)]


def summary(label, model, outputs, references, texts, offloaded="-"):
    """One row: SQNR over all lines (worst output), the worst line, strings exact / stripped,
    time steps of the same class, the strings' edit distance (characters) over all lines;
    then the lines whose string differs from ONNX Runtime fp32's."""
    _, sqnr = tm.compare(outputs, references)
    worst = min(per_line_sqnr(outputs, references))
    got = [model.answers(o)[0] for o in outputs]
    want = [model.answers(r)[0] for r in references]
    exact = sum(g == w for g, w in zip(got, want))
    stripped = sum(g.strip() == w.strip() for g, w in zip(got, want))
    same, steps = step_agreement(outputs, references)
    edits = sum(edit_distance(g, w) for g, w in zip(got, want))
    row = (f"{label:<10} {offloaded:<16} {sqnr:8.2f} {worst:8.2f} {exact:>5}/{len(texts)}"
           f" {stripped:>5}/{len(texts)} {same:>5}/{steps} {edits:>3}/{sum(map(len, want))}")
    misses = [f"    {t!r}: fp32 {w!r}, {label} {g!r}" for t, g, w in zip(texts, got, want)
              if g != w]
    return row, misses


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration-method", default=None,
                        help="ours (default: partition_for_accel's)")
    parser.add_argument("--bias-correction", action=argparse.BooleanOptionalAction,
                        default=True)
    parser.add_argument("--ort-int8", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--debug-files", type=Path, default=None)
    parser.add_argument("--lines", nargs="+", choices=("compared", "validation"),
                        default=["compared"])
    parser.add_argument("--keep-float", nargs="+", default=None, metavar="NAME",
                        help="layers to keep in fp16 (keys or source names)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    from accel_codegen.compiler.vm import virtual_machine
    from accel_codegen.flows.pipeline import build, partition_for_accel, partition_report

    model = tm.load(NAME)
    calibration = model.inputs(4)[2:]
    session = tm.ort_session(model)
    print(f"# python examples/recogniser_int8.py {' '.join(argv or sys.argv[1:])}")
    if args.debug_files is not None:
        args.debug_files.mkdir(parents=True, exist_ok=True)
        (args.debug_files / f"{NAME}.onnx").write_bytes(model.serialized())
        name = session.get_inputs()[0].name
        inputs = tm.recogniser_lines(lines(args.lines[0]))
        np.savez(args.debug_files / "lines.npz", **{name: np.concatenate([x[0] for x in inputs])})
        np.savez(args.debug_files / "calibration.npz",
                 **{name: np.concatenate([x[0] for x in calibration])})
    header = (f"{'int8':<10} {'offloaded':<16} {'SQNR dB':>8} {'worst':>8} {'exact':>7}"
              f" {'stripped':>7} {'steps':>9} {'edits':>7}")

    started, cpu = time.time(), time.process_time()
    mod, params = tm.import_model(model)
    options = {"bias_correction": args.bias_correction}
    if args.calibration_method is not None:
        options["calibration_method"] = args.calibration_method
    if args.keep_float:
        options["keep_float"] = args.keep_float
    part = partition_for_accel(mod, params, config="nv_full", precision="int8",
                               calibration=calibration, **options)
    report = partition_report(part)
    offloaded = f"{len(report.offloaded)}/{len(report.ops)} in {len(report.functions)} f"
    vm = virtual_machine(build(part))
    print(f"# ours: calibrated and built in {time.time() - started:.0f} s "
          f"({time.process_time() - cpu:.0f} s of CPU)")
    for which in args.lines:
        texts = lines(which)
        inputs = tm.recogniser_lines(texts)
        references = [tm.ort_run(session, x) for x in inputs]
        print(f"\n# {len(texts)} {which} lines against ONNX Runtime fp32; int8 calibrated on "
              f"{[tm.TEXTS[2], tm.TEXTS[3]]}")
        rows, misses = [header, "-" * len(header)], []
        outputs = [tm.run_vm(vm, x) for x in inputs]
        row, miss = summary("ours", model, outputs, references, texts, offloaded)
        rows.append(row)
        misses += miss
        if args.ort_int8:
            with tempfile.TemporaryDirectory() as work:
                outputs, pre_processed, errors = tm.ort_int8_outputs(model, inputs, calibration,
                                                                     Path(work))
            if outputs is None:
                rows.append(f"ort int8 RAISED {'; '.join(errors)}")
            else:
                row, miss = summary("ort int8" if pre_processed else "ort int8*", model,
                                    outputs, references, texts)
                rows.append(row)
                misses += miss
        print("\n".join(rows))
        print("\nstrings that differ from ONNX Runtime fp32's:")
        print("\n".join(misses) if misses else "    none")


if __name__ == "__main__":
    main()
