"""Watching the tensors of every run in the process (``accel_set_observer`` in accel.h).

Calibration and the accuracy report see each run's input, each SDP's element-wise operand and
the output of every engine pass, including what a fused chain keeps on chip. A tensor is named
by its run's label and an op index: the op whose output it is, or one of the two markers below.
"""
from __future__ import annotations

import numpy as np

from .._accel_ffi import ffi, lib
from .hooks import CallbackHook

#: The op index of a run's input.
INPUT = lib.ACCEL_OBSERVE_INPUT


def operand_index(sdp_index: int) -> int:
    """The op index of the element-wise operand of the SDP at ``sdp_index`` in its chain."""
    return lib.ACCEL_OBSERVE_OPERAND_BASE - sdp_index


_HOOK = CallbackHook(lambda on: lib.accel_set_observer(
    lib.accel_python_observer if on else ffi.NULL, ffi.NULL))


@ffi.def_extern()
def accel_python_observer(user, label, op_index, tensor):  # pragma: no cover - called from C
    del user
    _HOOK.call(_hand_over, label, op_index, tensor)


def _hand_over(observer, label, op_index, tensor) -> None:
    count = int(tensor.n) * int(tensor.c) * int(tensor.h) * int(tensor.w)
    dtype = np.int8 if tensor.precision == lib.ACCEL_INT8 else np.float32
    x = np.frombuffer(ffi.buffer(ffi.cast("char*", tensor.data), count * np.dtype(dtype).itemsize),
                      dtype).reshape(int(tensor.n), int(tensor.c), int(tensor.h), int(tensor.w))
    observer.add(ffi.string(label).decode("utf-8", "replace"), int(op_index), x)


def observing(observer):
    """Route every run's tensors in this process to ``observer.add(label, op_index, x)``, one
    observer at a time (the tensor is valid during the call only: copy what is kept). An
    exception the observer raises is raised here when the block ends (cffi cannot unwind the
    simulator's C frames: the runs it watched finish first), unless the block raised its own."""
    return _HOOK.active(observer)
