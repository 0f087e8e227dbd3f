"""The CPU time of each command and Python block of the README, run as
tests/tools/test_readme.py runs them (each block in a temporary folder of its own, verbatim):
where the README tour's share of the suite's time goes.

    python examples/readme_cost.py [BLOCK ...]     # from the repository root; BLOCK: sh-line58, ...

Each line: CPU seconds of the command's processes (user + sys of the waited-for children,
``resource.getrusage``: less inflated by other processes' load than wall time), wall seconds,
exit status and the load average when it ended.
"""
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "tools"), str(ROOT / "tests")]
import test_readme as readme  # noqa: E402  (the test's own parsing of the README)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(only) -> None:
    total = 0.0
    for name, language, text in readme.BLOCKS:
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
            if language == "python":
                (folder / "block.py").write_text(text)
                runs = [(f"{name} (python block)", [sys.executable, str(folder / "block.py")])]
            else:
                runs = [(f"{name}: {command}", ["bash", "-e", "-o", "pipefail", "-c", command])
                        for command in map(readme._without_setup, readme._commands(text))
                        if command is not None]
            for what, argv in runs:
                cpu, wall = children_cpu(), time.perf_counter()
                proc = subprocess.run(argv, cwd=folder, env=readme._environment(),
                                      capture_output=True, text=True)
                cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
                total += cpu
                print(f"{cpu:7.1f} s CPU {wall:7.1f} s wall  exit {proc.returncode}  "
                      f"load {os.getloadavg()[0]:4.1f}  {what}", flush=True)
                if proc.returncode:
                    print(proc.stderr[-2000:])
    print(f"total {total:.1f} s CPU")


if __name__ == "__main__":
    main(sys.argv[1:])
