"""Build and export time of one model, step by step (issue 29's goal: a ViT-B/16 built and
exported in under 10 s): wall time and CPU time of each step, the CPU time counting this
process's threads and its waited-for children (the C compiler and linker that export runs),
and of that the kernel's share and the process's page faults (the kernel zeroes each fresh
page: the machine's price, not the build's, and on some VMs most of the export's time).

Steps: the import (``from_pytorch``, not part of the goal), the pattern matching
(``match_composites``: the rewrites, the pattern table's checks, the merge), code generation
(``generate_partition`` on that matching: planning, the memory plan, the C), ``tvm.compile``
(the host part), ``export_library`` (the constants serialised, the generated C compiled and
linked). Together the last four are ``build`` + ``export_library``. ``--profile STEP`` prints
cProfile's top functions of one step (by cumulative time).

    python examples/build_time.py vit_b16 [--precision fp32] [--profile match]
    python examples/build_time.py vit_ti16
    accel-codegen bench examples/build_time.py:vit_b16 --modes fused,ort_fp32 --threads 1

MODEL is a zoo model name or ``vit_b16`` (ViT-B/16: the zoo's VisionTransformer at width 768,
12 blocks of 12 heads, 86.6 M parameters, initialised as the zoo's models are; defined here,
where ``accel-codegen bench examples/build_time.py:vit_b16`` finds it too). Results:
docs/transformer_ops.md, "ViT-B/16: build time and speed".
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path


def vit_b16():
    """ViT-B/16 at 3x224x224 (model, (input,)), as ``file.py:function`` of the CLI wants."""
    from accel_codegen.tools.models import VisionTransformer, build_realistic

    return build_realistic(lambda: VisionTransformer(dim=768, depth=12, heads=12),
                           (3, 224, 224))


def _cpu() -> tuple[float, float, float, int]:
    """(this process's CPU seconds, its waited-for children's CPU seconds, the kernel's share
    of both, the process's page faults). The kernel's share is mostly the zeroing of fresh
    pages at those faults, which costs what the machine makes it cost: on a VM whose freed
    memory goes back to the host, several times what it costs on a bare machine."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime,
            own.ru_stime + children.ru_stime, own.ru_minflt + own.ru_majflt)


class Steps:
    """Times steps and prints a line for each; ``total`` sums the steps named as the goal's."""

    def __init__(self, profile: str | None):
        self.profile = profile
        self.rows: list[tuple] = []
        print(f"{'step':<44} {'wall s':>8} {'CPU s':>8} {'of which children':>18} "
              f"{'of which kernel':>16} {'page faults':>12}")

    def run(self, name: str, fn, *, goal: bool = True):
        profiler = cProfile.Profile() if self.profile == name else None
        wall, before = time.perf_counter(), _cpu()
        result = profiler.runcall(fn) if profiler else fn()
        wall = time.perf_counter() - wall
        own, children, kernel, faults = (b - a for a, b in zip(before, _cpu()))
        row = (name, wall, own + children, children, kernel, faults, goal)
        self.rows.append(row)
        self._print(row)
        if profiler:
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
        return result

    @staticmethod
    def _print(row) -> None:
        name, wall, cpu, children, kernel, faults, _ = row
        print(f"{name:<44} {wall:8.2f} {cpu:8.2f} {children:18.2f} {kernel:16.2f} "
              f"{faults:12,d}", flush=True)

    def total(self) -> None:
        rows = [r for r in self.rows if r[-1]]
        self._print(("build + export", *(sum(r[i] for r in rows) for i in range(1, 6)), True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a zoo model name, or vit_b16")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    parser.add_argument("--config", default="nv_full")
    parser.add_argument("--profile", choices=("match", "codegen", "compile", "export"),
                        help="print cProfile's top functions of this step")
    parser.add_argument("--keep", metavar="DIR", help="write the library here (default: a "
                        "temporary directory)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import tvm
    from accel_codegen import AccelConfig, export_library, frontend, models
    from accel_codegen.compiler.partition import (PartitionLog, generate_partition,
                                                  match_composites)

    model, inputs = vit_b16() if args.model == "vit_b16" else models.get_model(args.model)
    config = AccelConfig.resolve(args.config)
    print(f"{args.model}, {args.precision}, {args.config}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    steps = Steps(args.profile)
    mod, params = steps.run("import (from_pytorch; not in the goal)",
                            lambda: frontend.from_pytorch(model, inputs), goal=False)
    log = PartitionLog()
    matched = steps.run("match", lambda: match_composites(
        mod, params, config=config, log=log, precision=args.precision))
    partitioned = steps.run("codegen", lambda: generate_partition(
        matched, None, config, True, args.precision, args.precision, None,
        matched=(matched, log)))
    exe = steps.run("compile", lambda: tvm.compile(partitioned, target="llvm"))
    with tempfile.TemporaryDirectory(prefix="build-time-") as directory:
        path = Path(args.keep or directory) / f"{args.model}.so"
        steps.run("export", lambda: export_library(exe, path))
        size = path.stat().st_size
    steps.total()
    sources = partitioned.attrs["accel_sources"]
    print(f"library {size / 1e6:.1f} MB; generated C {sum(len(str(s)) for s in sources.values()) / 1e6:.2f} MB "
          f"in {len(sources)} functions; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
