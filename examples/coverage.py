"""Coverage of the zoo on the accelerator: what is offloaded, in how many functions, how long
the build takes, and whether the result is right. One row per model.

For each zoo model (all of them, or the names given), through the public API only:

1. import: ``frontend.from_pytorch`` (or, with ``--onnx``, ``frontend.export_onnx`` -- which is
   ``torch.onnx.export`` -- then ``frontend.from_onnx``);
2. ``partition_for_accel(mod, config=CONFIG, precision="fp32")`` (partitioning and the C code
   generation), then ``partition_report``: operators offloaded / total, external functions,
   the most frequent reasons an operator stayed on the host;
3. ``build`` (``tvm.compile``: the host code and the module), then ``export_library`` to a
   temporary directory (the generated C compiled and linked into one shared library);
4. ``virtual_machine`` on the exported library, one run of the example input on the simulator,
   compared with PyTorch's output of the same model and input.

Times are wall clock (``time.perf_counter``) of one run of each step, in this process, after
TVM and the package are imported and warmed up on a one-layer model (so the first model does
not pay for TVM's start-up). "build s" is ``build`` alone; "build+export s" is ``build`` plus
``export_library`` (the C compile and link included); neither includes the import or the
partition, which have their own columns. The machine's load average is printed: on a shared
machine the times move with it. The error is ``max |accel - torch| / max |torch|`` over the
logits (fp32; PyTorch is the reference also for ``--onnx``).

    python examples/coverage.py [MODEL ...] [--onnx] [--config nv_full] [--reasons 3]
                                [--json coverage.json]

The header and the table go to standard output, the progress (each model's total time) to
standard error. Exit status 1 if any model failed (its row says how); 0 otherwise. The numbers are reported,
not judged: the issue's goals (>= 95% offloaded, <= 2 external functions per CNN,
EfficientNet-B0 build + export < 5 s) are printed for reference.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOALS = ">= 95% of operators offloaded, <= 2 external functions per CNN, " \
        "EfficientNet-B0 build + export < 5 s"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _import(model, x, onnx: bool, workdir: Path):
    from accel_codegen import frontend

    if not onnx:
        return frontend.from_pytorch(model, (x,))[0]
    path = frontend.export_onnx(model, (x,), workdir / "model.onnx")
    return frontend.from_onnx(path)[0]


def measure(name: str, args, row: dict) -> None:
    """Fill ``row``: import, partition, build, export, run and compare one zoo model;
    ``row["stage"]`` says which step runs (the one that failed, after an exception)."""
    import numpy as np
    import torch
    import tvm

    import accel_codegen as ac
    from accel_codegen import models

    row["stage"] = "zoo"
    model, (x,) = models.get_model(name)
    with torch.no_grad():
        expected = model(x).numpy()
    with tempfile.TemporaryDirectory(prefix="coverage-") as tmp:
        workdir = Path(tmp)
        row["stage"] = "import"
        start = time.perf_counter()
        mod = _import(model, x, args.onnx, workdir)
        row["import_s"] = time.perf_counter() - start

        row["stage"] = "partition"
        start = time.perf_counter()
        partitioned = ac.partition_for_accel(mod, config=args.config, precision="fp32")
        row["partition_s"] = time.perf_counter() - start
        report = ac.partition_report(partitioned)
        row["ops"], row["offloaded"] = len(report.ops), len(report.offloaded)
        row["functions"] = len(report.functions)
        row["host_reasons"] = report.host_reasons()

        row["stage"] = "build"
        start = time.perf_counter()
        exe = ac.build(partitioned)
        row["build_s"] = time.perf_counter() - start
        row["stage"] = "export"
        library = ac.export_library(exe, workdir / f"{name}.so")
        row["build_export_s"] = time.perf_counter() - start
        row["library_mb"] = library.stat().st_size / 1e6

        row["stage"] = "run"
        vm = ac.virtual_machine(library)
        start = time.perf_counter()
        actual = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        row["run_s"] = time.perf_counter() - start
    scale = float(np.max(np.abs(expected)))
    row["max_error"] = float(np.max(np.abs(actual.astype(np.float64) - expected))) / scale
    del row["stage"]


def _warm_up(args) -> None:
    """Import TVM and the compiler and import (through the measured frontend), build, export
    and run a one-layer model once, so that the first measured model pays no start-up cost."""
    import torch

    import accel_codegen as ac

    layer = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 16, 16)
    with tempfile.TemporaryDirectory(prefix="coverage-") as tmp:
        partitioned = ac.partition_for_accel(_import(layer, x, args.onnx, Path(tmp)),
                                             config=args.config)
        library = ac.export_library(ac.build(partitioned), Path(tmp) / "warm_up.so")
        import tvm

        ac.virtual_machine(library)["main"](tvm.runtime.tensor(x.numpy()))


def _commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty=+changes"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def format_rows(rows: list, reasons: int) -> str:
    header = (f"{'model':<19} {'offloaded ops':>17} {'ext fns':>7} {'import s':>8} "
              f"{'partition s':>11} {'build s':>7} {'build+export s':>14} {'max err/scale':>13}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<19} failed at {r['stage']}: {r['error']}")
            continue
        share = f"{r['offloaded']}/{r['ops']} ({100.0 * r['offloaded'] / r['ops']:.1f}%)"
        lines.append(f"{r['model']:<19} {share:>17} {r['functions']:>7} {r['import_s']:>8.2f} "
                     f"{r['partition_s']:>11.2f} {r['build_s']:>7.2f} "
                     f"{r['build_export_s']:>14.2f} {r['max_error']:>13.1e}")
    lines += ["", f"top host reasons (operators), {reasons} per model:"]
    for r in rows:
        if "error" in r:
            continue
        host = r["ops"] - r["offloaded"]
        if not host:
            lines.append(f"  {r['model']}: none (every operator offloaded)")
            continue
        lines.append(f"  {r['model']}: {host} on the host")
        for reason, count in r["host_reasons"][:reasons]:
            lines.append(f"    {count:>4} x {reason}")
        rest = r["host_reasons"][reasons:]
        if rest:
            lines.append(f"    {sum(c for _, c in rest):>4} x ({len(rest)} other reason"
                         f"{'s' if len(rest) > 1 else ''})")
    return "\n".join(lines)


def main() -> int:
    from accel_codegen.models import MODELS

    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                            category=FutureWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"zoo models (default: all: {' '.join(MODELS)})")
    parser.add_argument("--onnx", action="store_true",
                        help="import through torch.onnx.export + from_onnx instead of "
                             "from_pytorch")
    parser.add_argument("--config", default="nv_full", help="a preset name (nv_full)")
    parser.add_argument("--reasons", type=int, default=3,
                        help="host reasons shown per model (3)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {' '.join(MODELS)}")
    names = args.models or list(MODELS)

    import torch

    started = datetime.datetime.now().astimezone()
    print(f"{started:%Y-%m-%d %H:%M %Z}, commit {_commit()}: python examples/coverage.py "
          + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print(f"config {args.config}, fp32, fused; frontend "
          f"{'torch.onnx.export + from_onnx' if args.onnx else 'from_pytorch'}; "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"goals (issue #11): {GOALS}")
    _warm_up(args)
    rows = []
    for name in names:
        start = time.perf_counter()
        row = {"model": name}
        rows.append(row)
        try:
            measure(name, args, row)
        except Exception as error:  # pylint: disable=broad-except  (a row, not the end)
            row["error"] = _first_line(error)
        print(f"  {name}: {time.perf_counter() - start:.1f} s in all", file=sys.stderr,
              flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end\n")
    print(format_rows(rows, args.reasons))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": started.isoformat(timespec="seconds"), "commit": _commit(),
            "command": ["python", "examples/coverage.py", *sys.argv[1:]],
            "config": args.config, "precision": "fp32", "onnx": args.onnx, "rows": rows},
            indent=1))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
