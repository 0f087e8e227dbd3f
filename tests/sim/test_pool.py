"""The kernels' thread pool (csrc/pool.c) on its own, optimised as the library is built.

tests/c/test_pool.c checks that every item of a loop runs exactly once for any participant and
item count, that 200,000 short loops in a row sum right, that a worker asleep after a pause
wakes and takes an item of the next loop, that loops started inside an item or by three threads
at once run on their callers, and that a forked child starts workers of its own. The sanitized
build runs the same program (test_sanitizers.py); this one runs it at -O2, where the atomics'
races have the timing of the real library.
"""
import pytest

from conftest import build_c_program, run_c_program


@pytest.fixture(scope="module")
def pool_test(tmp_path_factory):
    return build_c_program(tmp_path_factory, "test_pool.c", ["csrc/pool.c"], ["-O2"])


def test_thread_pool(pool_test):
    passed, lines = run_c_program(pool_test)
    assert passed >= 140, "\n".join(lines[-40:])
