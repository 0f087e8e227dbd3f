"""The kernels' thread pool (csrc/pool.c) on its own, optimised as the library is built.

tests/c/test_pool.c checks that every item of a loop runs exactly once for any participant and
item count, that 200,000 short loops in a row sum right, that a worker asleep after a pause
wakes and takes an item of the next loop, that loops started inside an item or by three threads
at once run on their callers, and that a forked child starts workers of its own. The sanitized
build runs the same program (test_sanitizers.py); this one runs it at -O2, where the atomics'
races have the timing of the real library.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool_test(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"a C compiler ({cc}) is needed to build tests/c/test_pool.c")
    exe = tmp_path_factory.mktemp("pool") / "test_pool"
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
                    f"-I{ROOT / 'csrc'}", f"-I{ROOT / 'runtime' / 'include'}",
                    str(ROOT / "tests" / "c" / "test_pool.c"), str(ROOT / "csrc" / "pool.c"),
                    "-o", str(exe)], check=True)
    return exe


def test_thread_pool(pool_test):
    result = subprocess.run([pool_test], capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1]
    passed, failed = (int(word) for word in summary.replace(",", "").split()[::2])
    assert result.returncode == 0 and failed == 0 and passed >= 140, result.stdout[-4000:]
