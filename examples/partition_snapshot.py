"""A snapshot of every zoo model's partition, to hold a change of the pattern table or the
lowering to the same behaviour: which ops go where, the composite names, the report's reasons.

For each zoo model (all of them, or the names given) and each of a few settings (nv_full fp32
fused, nv_full fp32 one op per run, nv_small fp32 (no LUT: activations refused), nv_full int8
chains), the partition is matched (``match_composites``, no code generation) and its report
written to ``OUT/<model>.<setting>.txt``: the report's text (every op, where it runs, its
primitive or reason) followed by the external functions and their primitives. Run it before
and after a change and compare the two directories with ``diff -r``.

The time of each match (wall clock, one run, on whatever else the machine runs) goes to
standard error and to ``OUT/times.json``, for a rough before/after figure only.

    python examples/partition_snapshot.py OUT [MODEL ...] [--settings full small ...] [--onnx]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

SETTINGS = {  # name -> (config, fuse, precision of the chains)
    "full": ("nv_full", True, "fp32"),
    "unfused": ("nv_full", False, "fp32"),
    "small": ("nv_small", True, "fp32"),
    "int8": ("nv_full", True, "int8"),
}


def _module(name: str, onnx_dir: Optional[Path]):
    """The zoo model through torch.export, or exported to ONNX in ``onnx_dir`` and imported
    from there (other op forms: biases as [1, C, 1, 1] adds, Gemm's dense layers)."""
    from accel_codegen.compiler import frontend
    from accel_codegen.tools.models import get_model

    model, inputs = get_model(name)
    if onnx_dir is not None:
        path = frontend.export_onnx(model, inputs, onnx_dir / f"{name}.onnx")
        mod, params = frontend.from_onnx(path)
    else:
        mod, params = frontend.from_pytorch(model, inputs)
    return frontend.bind_params(mod, params) if params else mod


def snapshot(mod, setting: str):
    """(the report's text with the functions' primitives, seconds to match)."""
    from accel_codegen.compiler import partition
    from accel_codegen.compiler.patterns import PartitionLog
    from accel_codegen.sim.config import AccelConfig

    config, fuse, precision = SETTINGS[setting]
    config = AccelConfig.resolve(config)
    log = PartitionLog()
    start = time.perf_counter()
    matched = partition.match_composites(mod, config=config, fuse=fuse, log=log,
                                         precision=precision)
    seconds = time.perf_counter() - start
    # The report as partition_for_accel builds it (without the code generator's conv modes).
    report = partition._build_report(matched, config, fuse, log, precision)  # noqa: SLF001
    lines = [str(report), ""]
    for function, primitives in report.functions.items():
        lines.append(f"{function}: {' '.join(primitives)}")
    return "\n".join(lines) + "\n", seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    parser.add_argument("--onnx", action="store_true",
                        help="import through ONNX (files <model>.onnx.<setting>.txt)")
    args = parser.parse_args(argv)
    from accel_codegen.compiler import patterns
    from accel_codegen.tools.models import MODELS

    args.out.mkdir(parents=True, exist_ok=True)
    times = {"table_entries": len(patterns.pattern_table())}
    for name in args.models or list(MODELS):
        with tempfile.TemporaryDirectory() as workdir:
            mod = _module(name, Path(workdir) if args.onnx else None)
        name += ".onnx" if args.onnx else ""
        for setting in args.settings:
            try:
                text, seconds = snapshot(mod, setting)
            except Exception as error:  # pylint: disable=broad-except  (recorded, compared)
                text, seconds = f"{type(error).__name__}: {error}\n", 0.0
            (args.out / f"{name}.{setting}.txt").write_text(text)
            times[f"{name}.{setting}"] = round(seconds, 2)
            print(f"{name} {setting}: {seconds:.2f} s", file=sys.stderr, flush=True)
    (args.out / f"times{'.onnx' if args.onnx else ''}.json").write_text(
        json.dumps(times, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
