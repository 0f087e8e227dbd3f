"""Integer encodings of real numbers as NVDLA's converters take them: int16 multipliers with
right shifts, and per-output-channel symmetric int8 weights."""
from __future__ import annotations

from typing import Tuple

import numpy as np

from .._accel_ffi import lib
from ..errors import AccelInvalidError

#: Codes of a weight: symmetric, -127..127 (never -128, so negation stays in range).
WEIGHT_MAX = 127


def round_half_away(value) -> np.ndarray:
    """Round half away from zero (the converters' rounding), in float64."""
    v = np.asarray(value, np.float64)
    whole = np.trunc(v)
    return whole + np.where(np.abs(v - whole) >= 0.5, np.sign(v), 0.0)


def encode_multipliers(factors, what: str) -> Tuple[np.ndarray, np.ndarray]:
    """Real factors -> (int16 mul, uint8 rshift) with mul / 2^rshift ~ factor, each channel
    with the most precise shift (|mul| <= 32767, 0 <= rshift <= ACCEL_MAX_SHIFT)."""
    f = np.asarray(factors, np.float64).reshape(-1)
    magnitude = np.abs(f)
    if not np.all(np.isfinite(f)) or np.any(magnitude >= 32767.5):
        bad = int(np.argmax(~np.isfinite(f) | (magnitude >= 32767.5)))
        raise AccelInvalidError(f"{what}: factor {f[bad]:g} (channel {bad}) does not fit an "
                                "int16 multiplier")
    with np.errstate(divide="ignore"):
        shift = np.floor(np.log2(32767.0 / np.where(magnitude > 0, magnitude, 1.0)))
    shift = np.clip(np.where(magnitude > 0, shift, 0), 0, lib.ACCEL_MAX_SHIFT)
    mul = round_half_away(f * np.exp2(shift))
    return mul.astype(np.int16), shift.astype(np.uint8)


def encode_multiplier(factor: float, what: str) -> Tuple[int, int]:
    mul, shift = encode_multipliers([factor], what)
    return int(mul[0]), int(shift[0])


def quantize_weights(weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8: (codes [K, ...] int8, scales [K] float64)."""
    w = np.asarray(weights, np.float64)
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
    scales = np.where(amax > 0, amax / WEIGHT_MAX, 1.0)
    codes = round_half_away(w / scales.reshape((-1,) + (1,) * (w.ndim - 1)))
    return np.clip(codes, -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8), scales
