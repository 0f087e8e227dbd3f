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


@ffi.def_extern()
def accel_python_observer(user, label, op_index, tensor):  # pragma: no cover - called from C
    del user
    observer = _ACTIVE
    if observer is None:
        return
    count = int(tensor.n) * int(tensor.c) * int(tensor.h) * int(tensor.w)
    dtype = np.int8 if tensor.precision == lib.ACCEL_INT8 else np.float32
    x = np.frombuffer(ffi.buffer(ffi.cast("char*", tensor.data), count * np.dtype(dtype).itemsize),
                      dtype).reshape(int(tensor.n), int(tensor.c), int(tensor.h), int(tensor.w))
    observer.add(ffi.string(label).decode("utf-8", "replace"), int(op_index), x)


@contextlib.contextmanager
def observing(observer) -> Iterator:
    """Route every run's tensors in this process to ``observer.add(label, op_index, x)``, one
    observer at a time (the tensor is valid during the call only: copy what is kept)."""
    global _ACTIVE
    with _LOCK:
        _ACTIVE = observer
        lib.accel_set_observer(lib.accel_python_observer, ffi.NULL)
        try:
            yield observer
        finally:
            lib.accel_set_observer(ffi.NULL, ffi.NULL)
            _ACTIVE = None
