"""Watching the tensors of every run in the process (``accel_set_observer`` in accel.h).

Calibration and the accuracy report see each run's input, each SDP's element-wise operand and
the output of every engine pass, including what a fused chain keeps on chip. A tensor is named
by its run's label and an op index: the op whose output it is, or one of the two markers below.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional

import numpy as np

from .._accel_ffi import ffi, lib

#: The op index of a run's input.
INPUT = lib.ACCEL_OBSERVE_INPUT


def operand_index(sdp_index: int) -> int:
    """The op index of the element-wise operand of the SDP at ``sdp_index`` in its chain."""
    return lib.ACCEL_OBSERVE_OPERAND_BASE - sdp_index


_ACTIVE: Optional[object] = None
_LOCK = threading.Lock()
#: The first exception the observer raised inside the callback. cffi cannot let it cross the C
#: frames (it would print it and go on), so it is kept and raised when observing ends.
_RAISED: Optional[BaseException] = None


@ffi.def_extern()
def accel_python_observer(user, label, op_index, tensor):  # pragma: no cover - called from C
    del user
    global _RAISED
    observer = _ACTIVE
    if observer is None or _RAISED is not None:
        return
    try:
        _hand_over(observer, label, op_index, tensor)
    except BaseException as error:  # noqa: BLE001 - re-raised by observing()
        _RAISED = error


def _hand_over(observer, label, op_index, tensor) -> None:
    count = int(tensor.n) * int(tensor.c) * int(tensor.h) * int(tensor.w)
    dtype = np.int8 if tensor.precision == lib.ACCEL_INT8 else np.float32
    x = np.frombuffer(ffi.buffer(ffi.cast("char*", tensor.data), count * np.dtype(dtype).itemsize),
                      dtype).reshape(int(tensor.n), int(tensor.c), int(tensor.h), int(tensor.w))
    observer.add(ffi.string(label).decode("utf-8", "replace"), int(op_index), x)


@contextlib.contextmanager
def observing(observer) -> Iterator:
    """Route every run's tensors in this process to ``observer.add(label, op_index, x)``, one
    observer at a time (the tensor is valid during the call only: copy what is kept). An
    exception the observer raises is raised here when the block ends (cffi cannot unwind the
    simulator's C frames: the runs it watched finish first), unless the block raised its own."""
    global _ACTIVE, _RAISED
    with _LOCK:
        _ACTIVE, _RAISED = observer, None
        lib.accel_set_observer(lib.accel_python_observer, ffi.NULL)
        try:
            yield observer
        finally:
            lib.accel_set_observer(ffi.NULL, ffi.NULL)
            _ACTIVE = None
        raised, _RAISED = _RAISED, None
        if raised is not None:
            raise raised
