"""Typed exceptions, one per C status, all rooted in :class:`AccelError`."""
from __future__ import annotations

import functools


class AccelError(Exception):
    """Root of every error accel-codegen raises on purpose."""


class AccelInvalidError(AccelError, ValueError):
    """A descriptor or config field is out of range (ACCEL_ERR_INVALID)."""


class AccelDtypeError(AccelInvalidError, TypeError):
    """An array has the wrong kind of element for its operand (float data for an int8 tensor,
    say). Also a ``TypeError``."""


class AccelShapeError(AccelError, ValueError):
    """Tensor shapes do not agree with each other or with the ops (ACCEL_ERR_SHAPE)."""


class AccelUnsupportedError(AccelError):
    """Valid, but the configuration or the simulator lacks it (ACCEL_ERR_UNSUPPORTED)."""


class AccelBufferError(AccelError, ValueError):
    """A buffer is missing or misaligned (ACCEL_ERR_NULL, ACCEL_ERR_ALIGNMENT)."""


class AccelMemoryError(AccelError, MemoryError):
    """The simulator could not allocate its scratch memory (ACCEL_ERR_NO_MEMORY)."""


class AccelNotFoundError(AccelError, LookupError):
    """An unknown preset name or an index out of range (ACCEL_ERR_NOT_FOUND)."""


def check(status: int) -> None:
    """Raise the exception that matches a non-zero C status, with the C side's message."""
    if status == 0:
        return
    from ._accel_ffi import ffi, lib

    message = ffi.string(lib.accel_last_error()).decode(errors="replace")
    kind = {
        lib.ACCEL_ERR_INVALID: AccelInvalidError,
        lib.ACCEL_ERR_SHAPE: AccelShapeError,
        lib.ACCEL_ERR_UNSUPPORTED: AccelUnsupportedError,
        lib.ACCEL_ERR_NULL: AccelBufferError,
        lib.ACCEL_ERR_ALIGNMENT: AccelBufferError,
        lib.ACCEL_ERR_NO_MEMORY: AccelMemoryError,
        lib.ACCEL_ERR_NOT_FOUND: AccelNotFoundError,
    }.get(status, AccelError)
    name = ffi.string(lib.accel_status_name(status)).decode()
    raise kind(f"{message} [{name}]")


class AccelLibraryError(AccelError, ValueError):
    """A compiled library file is missing, damaged or not loadable here, or could not be
    written: the message names the file and what is wrong with it."""


@functools.lru_cache(maxsize=None)  # once per process: the registry is global
def register_with_tvm_ffi() -> None:
    """Let tvm-ffi carry these exceptions by class name, both ways: generated C raises them by
    name (``TVMFFIErrorSetRaisedFromCStr("AccelShapeError", ...)``, see accel/tvm_glue.h) and
    Python receives the class, not a RuntimeError; one raised in Python under a TVM call (the
    code generator) keeps its class too. The compiler side calls this (partitioning, building,
    loading a library); the simulator never imports tvm-ffi. A process that loads a library
    without accel_codegen sees a RuntimeError with the same message."""
    import tvm_ffi

    for value in list(globals().values()):
        if isinstance(value, type) and issubclass(value, AccelError):
            tvm_ffi.register_error(value.__name__, value)
