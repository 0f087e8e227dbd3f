"""Channel-blocked (C16) tensors, NVDLA's feature format for fp32: ``[n][c/16][h][w][16]``,
the 16 channels of a position side by side (accel_layout in ``accel/accel.h``). As a NumPy
array a C16 tensor has the shape ``(n, c // 16, h, w, 16)``.

>>> import numpy as np
>>> x = np.arange(32 * 4, dtype=np.float32).reshape(1, 32, 2, 2)
>>> to_c16(x).shape
(1, 2, 2, 2, 16)
>>> bool((from_c16(to_c16(x)) == x).all())
True
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from .._accel_ffi import lib
from ..errors import AccelInvalidError

#: Channels of one atom of the C16 layout (accel.h's ACCEL_C16_CHANNELS).
ATOM = lib.ACCEL_C16_CHANNELS


def c16_shape(shape: Tuple[int, int, int, int]) -> Tuple[int, int, int, int, int]:
    """The C16 array shape of an NCHW shape (c a multiple of 16)."""
    n, c, h, w = shape
    if c % ATOM:
        raise AccelInvalidError(f"a C16 tensor has a multiple of {ATOM} channels, not {c}")
    return n, c // ATOM, h, w, ATOM


def nchw_shape(shape: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    """The NCHW shape of a C16 array shape ``(n, c // 16, h, w, 16)``."""
    if len(shape) != 5 or shape[4] != ATOM:
        raise AccelInvalidError(f"a C16 array has the shape (n, c // {ATOM}, h, w, {ATOM}), "
                                f"got {tuple(shape)}")
    n, blocks, h, w, _ = shape
    return n, blocks * ATOM, h, w


def to_c16(x: np.ndarray) -> np.ndarray:
    """An NCHW array in the C16 layout (a C-contiguous copy)."""
    n, blocks, h, w, _ = c16_shape(x.shape)
    return np.ascontiguousarray(x.reshape(n, blocks, ATOM, h, w).transpose(0, 1, 3, 4, 2))


def from_c16(x: np.ndarray) -> np.ndarray:
    """A C16 array back in NCHW (a C-contiguous copy)."""
    n, c, h, w = nchw_shape(x.shape)
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, c, h, w))
