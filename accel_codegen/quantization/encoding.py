"""Integer encodings of real numbers as NVDLA's converters take them: int16 multipliers with
right shifts, and per-output-channel symmetric int8 weights."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .._accel_ffi import lib
from ..errors import AccelInvalidError

#: Codes of a weight the project quantises: symmetric, -127..127 (a channel's largest
#: magnitude sets its step either way, so -128 would buy nothing).
WEIGHT_MAX = 127
#: The lowest code of a weight NVDLA's CONV multiplies (a signed byte; the int8 kernels bound
#: their accumulators with |w| <= 128): a model quantised with a zero point keeps its codes
#: q - zero = -128 (:func:`quantize_weights`).
WEIGHT_MIN = -128


def round_half_away(value) -> np.ndarray:
    """Round half away from zero (the converters' rounding), in float64."""
    v = np.asarray(value, np.float64)
    whole = np.trunc(v)
    # The fraction of an infinity or a NaN is taken as 0 (inf - inf would be NaN, with NumPy's
    # invalid-value warning): they come back as they are.
    fraction = np.subtract(v, whole, out=np.zeros_like(v), where=np.isfinite(v))
    return whole + np.where(np.abs(fraction) >= 0.5, np.sign(v), 0.0)


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


#: The finest weight step of a layer relative to its coarsest channel's (per-channel scales
#: are floored at this fraction of the largest). Training leaves channels whose weights weight
#: decay took to 1e-34 beside channels of ~1; at its own scale such a channel's accumulator
#: unit is ~1e-36 of the others', and its bias (in those units) is far beyond int32. A floor
#: of 2^-16 never binds on a layer whose channels are within 2^16 of each other (any layer a
#: random or healthy trained network has), and where it binds the channel's weight error is at
#: most 2^-17 of the coarsest channel's step: far below what the shared output step resolves.
WEIGHT_SCALE_FLOOR = 2.0 ** -16


#: How far from an integer (in steps) a weight may be and still be read as a code of a
#: per-tensor step: float32 weights that are codes times a float32 step are within 127 x
#: 2^-23 of one; random float weights of a layer all within it have probability ~1e-3^N.
GRID_TOLERANCE = 1e-3


def _on_one_grid(w: np.ndarray, step: float) -> bool:
    """Whether every weight is an integer multiple of ``step`` (to GRID_TOLERANCE) and the
    layer has more than one output channel (a single channel's step is its own anyway)."""
    if w.shape[0] < 2:
        return False
    ratio = w / step
    return bool(np.all(np.abs(ratio - np.rint(ratio)) <= GRID_TOLERANCE))


def quantize_weights(weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-output-channel symmetric int8: (codes [K, ...] int8, scales [K] float64).

    Each channel's scale is its amax / 127, floored at WEIGHT_SCALE_FLOOR of the layer's
    coarsest scale. A channel whose weights all round to 0 at the floor (amax below half of
    it: negligible, or exactly zero) gets codes 0 and the coarsest scale itself: its
    accumulator is exactly 0 whatever the scale, so the scale only sets the units of its
    converter's bias, and the coarsest channel's units keep that bias as small (as far from
    int32's end) as the layer's best-conditioned channel's, as NVDLA's compiler gives a dead
    channel a converter in the layer's range.

    Weights that are already codes of one step for the whole layer (a model quantised per
    tensor, symmetric: ONNX Runtime's ``quantize_static``, PT2E's per-tensor weights; their
    step is the layer's amax / 127) keep those codes: every channel gets that step, so the
    codes are the model's own and represent its weights exactly (per channel they would be
    re-rounded to finer steps, away from what the model's int8 runtime computes).

    Weights that are codes of one step below that (a model quantised per tensor with a zero
    point: ``quantize_static``'s ``WeightSymmetric=False``, whose weights are
    ``(q - zero) * step`` with ``q - zero`` in -255..255) keep the model's codes in every
    channel where they fit int8's -128..127 (WEIGHT_MIN: the CONV's weights are signed bytes),
    so those channels compute what the model's int8 runtime computes; a channel with a code
    beyond (the zero point far from the middle) has
    no int8 form of those codes (NVDLA's CONV has no weight zero point, and a zero point
    folded into the bias would be zero * the sum of the inputs of the window, which depends
    on the input) and is re-quantised on its own: amax / 127, a step finer than 2 x the
    model's (:func:`model_step`).

    Depends on the weights alone: the memory plan counts the same codes the code generator
    emits."""
    w = np.asarray(weights, np.float64)
    flat = np.abs(w.reshape(w.shape[0], -1))
    if not np.all(np.isfinite(flat)):
        bad = int(np.argmax(~np.all(np.isfinite(flat), axis=1)))
        raise AccelInvalidError(f"weights of output channel {bad} are not finite (inf or "
                                "NaN): no int8 scale for them")
    amax = flat.max(axis=1) if flat.size else np.zeros(w.shape[0])
    step = None
    coarsest = float(amax.max()) / WEIGHT_MAX if amax.size else 0.0
    if coarsest > 0 and _on_one_grid(w, coarsest):
        codes = round_half_away(w / coarsest)
        return codes.astype(np.int8), np.full(w.shape[0], coarsest)
    if coarsest > 0:
        floor = coarsest * WEIGHT_SCALE_FLOOR
        negligible = amax < floor / 2  # |w / floor| < 1/2: every code rounds to 0
        scales = np.where(negligible, coarsest, np.maximum(amax / WEIGHT_MAX, floor))
        step = model_step(w)
        if step is not None:  # the model's codes where they fit int8, -128 included
            rows = w.reshape(w.shape[0], -1)
            slack = 1 + GRID_TOLERANCE / WEIGHT_MAX
            own = (rows.max(axis=1) <= WEIGHT_MAX * step * slack) & \
                (rows.min(axis=1) >= WEIGHT_MIN * step * slack)
            scales = np.where(own, step, scales)
            lowest = np.where(own, WEIGHT_MIN, -WEIGHT_MAX)
    else:  # every weight is 0: any scale represents them
        scales = np.ones(w.shape[0])
    codes = round_half_away(w / scales.reshape((-1,) + (1,) * (w.ndim - 1)))
    if step is not None:
        lowest = lowest.reshape((-1,) + (1,) * (w.ndim - 1))
        return np.clip(codes, lowest, WEIGHT_MAX).astype(np.int8), scales
    return np.clip(codes, -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8), scales


def model_step(weights: np.ndarray) -> Optional[float]:
    """The step of a layer's weights that are all codes of one step finer than their amax /
    127 (a per-tensor quantisation with a zero point: ``(q - zero) * step``), else None: the
    smallest non-zero magnitude (a code of +-1 is among a layer's codes but for a handful of
    weights), where every weight is a multiple of it (GRID_TOLERANCE) and their amax is
    within 255 of its steps."""
    w = np.asarray(weights, np.float64)
    magnitudes = np.abs(w[w != 0])
    if w.shape[0] < 2 or not magnitudes.size:
        return None
    step = float(magnitudes.min())
    if float(magnitudes.max()) > 255.5 * step or not _on_one_grid(w, step):
        return None
    return step
