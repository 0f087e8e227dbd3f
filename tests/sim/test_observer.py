"""The observer's callback runs inside the simulator's C frames: an exception it raises must
reach the caller (when the observed block ends), not be printed and lost."""
import numpy as np
import pytest

from accel_codegen import Device, Pool
from accel_codegen.sim.observer import observing


class _Failing:
    def __init__(self):
        self.calls = 0

    def add(self, label, op_index, x):
        self.calls += 1
        raise ZeroDivisionError(f"observer failed on {label} op {op_index}")


class _Counting:
    def __init__(self):
        self.seen = []

    def add(self, label, op_index, x):
        self.seen.append((label, op_index, x.shape))


def test_an_observer_exception_is_raised_when_observing_ends(capfd):
    x = np.arange(2 * 8 * 8, dtype=np.float32).reshape(1, 2, 8, 8)
    expected, _ = Device("nv_full").run([Pool("max", kernel=2, stride=2)], x)
    failing = _Failing()
    with pytest.raises(ZeroDivisionError, match="observer failed"):
        with observing(failing):
            y, _ = Device("nv_full").run([Pool("max", kernel=2, stride=2)], x)
    assert failing.calls == 1  # the first failure stops the hand-over, the run finishes
    np.testing.assert_array_equal(y, expected)
    assert "observer failed" not in capfd.readouterr().err  # raised, not printed by cffi

    # the next observer starts clean and sees every tensor
    counting = _Counting()
    with observing(counting):
        Device("nv_full").run([Pool("max", kernel=2, stride=2)], x)
    assert len(counting.seen) >= 2


def test_the_block_s_own_exception_wins():
    x = np.ones((1, 1, 4, 4), np.float32)
    with pytest.raises(KeyError):
        with observing(_Failing()):
            Device("nv_full").run([Pool("max", kernel=2, stride=2)], x)
            raise KeyError("the block's own")
    counting = _Counting()
    with observing(counting):  # the stale failure does not leak into the next block
        Device("nv_full").run([Pool("max", kernel=2, stride=2)], x)
    assert counting.seen
