"""Typed exceptions, one per C status, all rooted in :class:`AccelError`."""
from __future__ import annotations


class AccelError(Exception):
    """Root of every error accel-codegen raises on purpose."""


class AccelInvalidError(AccelError, ValueError):
    """A descriptor or config field is out of range (ACCEL_ERR_INVALID)."""


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
