"""The integer maths of an int8 layer, as NVDLA's converters need it: pure NumPy, no TVM, no C
text, so each step is tested alone.

Real values in an int8 layer: SDP result = g[c] * (accumulator in units unit[c]) + h[c], with
batch norm, bias and a per-channel scale as the affine (g, h); a conv takes g into its weights
before quantising them, so its g becomes 1.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import numpy as np

from ...errors import AccelInvalidError
from ...quantization import (TensorQuant, covering_quant, encode_multiplier, encode_multipliers,
                             round_half_away)
from ...sim import reference

#: How far below the output's step an int8 SDP sums an element-wise operand (NVDLA aligns
#: the two streams before the adder): 8 extra bits, one rounding at the output.
EW_EXTRA_BITS = 8


def range_quant(value: np.ndarray) -> TensorQuant:
    """The quantisation of a constant tensor from its own range (unsigned when it has no
    negative value: zero point -128 over [0, max])."""
    if not value.size:
        return covering_quant(0.0, 1.0)
    return covering_quant(min(float(value.min()), 0.0), max(float(value.max()), 0.0))


def bias_correction(means: Optional[np.ndarray], groups: int, codes: np.ndarray,
                    weight_scales: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Bias correction (Nagel et al., "Data-free quantization", 2019): the rounding error of
    the weights [K, C/groups, R, S] shifts each output channel's mean by sum(error * E[input]);
    the calibration's per-channel input means give it, and the bias takes it back (border
    positions, where padding reads zero, are treated like the interior). Zero without means."""
    k, c_group = weights.shape[:2]
    if means is None or len(means) != c_group * groups:
        return np.zeros(k)
    error = codes.astype(np.float64) * weight_scales.reshape(-1, 1, 1, 1) - weights
    group_means = means.reshape(groups, 1, c_group)
    per_k = error.sum(axis=(2, 3)).reshape(groups, k // groups, c_group)
    return (per_k * group_means).sum(axis=2).reshape(-1)


@dataclasses.dataclass
class Elementwise:
    """How an element-wise operand joins an int8 SDP: the domain the SDP sums in (``target``,
    the output step or a fraction of it) and the operand's and the output's converters."""

    target: float
    ew_mul: int
    ew_shift: int
    out_mul: int
    out_shift: int
    extra_bits: int


def elementwise(ew_op: str, out_quant: TensorQuant, ew_quant: TensorQuant,
                what: str) -> Elementwise:
    """Align the operand and the SDP's own stream 2^-extra below the output step (one rounding
    at the output); a multiply keeps the operand in its codes and scales at the output."""
    extra = EW_EXTRA_BITS
    if ew_op != "mul":
        fits = int(np.floor(np.log2(32767.0 * out_quant.scale / ew_quant.scale)))
        extra = min(extra, fits)
        if extra < 0:
            raise AccelInvalidError(f"{what}: the element-wise operand's scale "
                                    f"{ew_quant.scale:g} is too large for the output's "
                                    f"{out_quant.scale:g}")
    target = out_quant.scale / 2 ** extra
    if ew_op == "mul":
        out_mul, out_shift = encode_multiplier(target * ew_quant.scale / out_quant.scale,
                                               f"{what} output converter")
        return Elementwise(target, 1, 0, out_mul, out_shift, extra)
    ew_mul, ew_shift = encode_multiplier(ew_quant.scale / target,
                                         f"{what} element-wise converter")
    return Elementwise(target, ew_mul, ew_shift, 1, extra, extra)


@dataclasses.dataclass(frozen=True, eq=False)
class Converters:
    """An int8 SDP's converters, as a run's quantisation holds them (``RunQuant.converters``):
    the per-channel int32 bias, int16 multiplier and right shift (:func:`channel_converters`),
    and where the layer has them the element-wise operand's (:class:`Elementwise`), a LUT
    activation's tables (``quantization.lut.LayerLut``), a clip's bounds as output codes and
    PReLU's slopes (int16 multipliers and their one shift)."""

    bias: np.ndarray
    mul: np.ndarray
    rshift: np.ndarray
    ew: Optional[Elementwise] = None
    lut: Optional[object] = None
    clip: Optional[Tuple[int, int]] = None
    prelu: Optional[Tuple[np.ndarray, int]] = None

    def to_dict(self) -> dict:
        """As JSON data (the Program's): the arrays as lists, the LUT by its scales."""
        data = {"bias": self.bias.tolist(), "mul": self.mul.tolist(),
                "rshift": self.rshift.tolist(), "ew": None, "lut": None,
                "clip": [int(c) for c in self.clip] if self.clip is not None else None,
                "prelu": None}
        if self.ew is not None:
            data["ew"] = {k: (float(v) if k == "target" else int(v))
                          for k, v in dataclasses.asdict(self.ew).items()}
        if self.lut is not None:
            data["lut"] = {"input_step": float(self.lut.input_step),
                           "out_shift": int(self.lut.out_shift)}
        if self.prelu is not None:
            data["prelu"] = {"mul": self.prelu[0].tolist(), "shift": int(self.prelu[1])}
        return data


#: Where a shift goes when it cannot be expressed in the channel's own accumulator units:
#: 2^30 accumulator steps, half of int32's reach, so that the accumulator (below 2^30 for
#: every conv the ISA holds in practice: 255 x 127 x C x R x S) still adds without sat32.
BIAS_REACH = 2.0 ** 30
#: The largest multiplier factor: one accumulator step worth 32767 target units.
FACTOR_MAX = 32767.0
#: The largest right shift of a layer's channels. NVDLA has one BN shifter per layer: BS
#: multiplies each channel by 2^(S - rshift), S the largest shift, saturating at int32
#: (accel.h). With the encoding's multipliers (|mul| >= 2^14 where the shift is its own) and
#: every output code within 256 steps of saturating, a channel's codes saturate once |t| *
#: |mul| / 2^rshift >= 256, so before BS does (|t| 2^(S - rshift) >= 2^31) while 256 * 2^S /
#: 2^14 <= 2^31: S <= 37. A channel whose most precise shift is larger (a factor below 2^-23:
#: a dead or negligible channel beside live ones) keeps 37 and a shorter multiplier, off by
#: at most 2^-38 of a target unit per accumulator step.
SHIFT_MAX = 37


def channel_converters(g: np.ndarray, h: np.ndarray, unit: np.ndarray, target: float,
                       what: str) -> Dict[str, np.ndarray]:
    """The per-channel converters that take g * (accumulator * unit) + h to ``target`` units:
    an int32 bias (in accumulator units) and an int16 multiplier with a right shift.

    With f = g * unit / target (the factor) and s = h / target (the shift in target units),
    a channel computes rhaz(sat32(acc + bias) * mul, rshift) ~ f * acc + s. Where f and s / f
    fit (|f| < 32767.5, |s / f| < 2^31), bias = round(s / f) and mul / 2^rshift ~ f, the
    multiplier with the most precise shift. Two cases that trained networks produce do not
    fit, and are encoded without raising, the error stated for each:

    - **A shift beyond int32 in accumulator units** (|s / f| >= 2^31, f = 0 included: a bias
      of 1e6 on weights of 1e-3, a scale of 0 or 1e-34, an input scale of 1e-22). The
      channel's accumulator then moves its output by at most |f| A < |s| A / 2^31 target
      units (A: the accumulator's bound), so the output is the shift up to that. The
      multiplier is raised to f' = sign(f) |s| / 2^30 and the bias is s over the encoded
      multiplier, ~2^30 steps: the shift is exact to |f'| / 2 (the bias' rounding; the
      multiplier's own is inside it), and the accumulator's part is off by
      (|f'| - |f|) |acc| < |s| |acc| / 2^30: at most twice what the whole of it could be,
      which is at most |s| A / 2^31. For the issue's cases that is far below a step: an
      SDP's own input (A = 255) moves it by < 2^-22 of |s|; a conv by |s| 2^-30 x 255 x
      sum |codes| (a dead channel's codes are 0 by the weight floor of quantize_weights, so
      its part is exactly 0). A shift beyond 2^40 target units is clamped there first: the
      multiplier's sat32 takes either to int32's end, the same value.
    - **A factor of 32767.5 or more**: one accumulator step is worth more than 32767 target
      units, more than 127 output steps, so the calibrated range of the output is narrower
      than one input or weight step (calibration saw that tensor constant). The multiplier
      saturates at +-32767 (shift 0): acc + bias = 0 still gives 0 and any other value
      lands more than 127 output steps out on its own side, as f would put it, so the codes
      are f's (with an element-wise add, unless the operand cancels that). What int8 cannot
      do here it could not do before either: the bias is rounded to half an accumulator
      step, here more than 16383 target units.
    """
    g, h, unit = (np.asarray(a, np.float64).reshape(-1) for a in (g, h, unit))
    factor = g * unit / target
    shift = h / target
    if not (np.all(np.isfinite(factor)) and np.all(np.isfinite(shift))):
        bad = int(np.argmax(~(np.isfinite(factor) & np.isfinite(shift))))
        raise AccelInvalidError(f"{what}: channel {bad}'s scale {g[bad]:g} x {unit[bad]:g} "
                                f"or shift {h[bad]:g} is not finite in the output's "
                                f"units ({target:g}): no int8 converter")
    with np.errstate(divide="ignore", invalid="ignore"):
        bias = round_half_away(h / (g * unit))
    beyond = (factor == 0) | ~(np.abs(bias) <= 2 ** 31 - 1)
    saturated = ~beyond & (np.abs(factor) >= FACTOR_MAX + 0.5)
    # The factor each channel is encoded with (the exact one where it fits).
    shift = np.clip(shift, -2.0 ** 40, 2.0 ** 40)
    raised = np.where(factor < 0, -1.0, 1.0) * np.maximum(np.abs(factor),
                                                          np.abs(shift) / BIAS_REACH)
    encoded = np.where(beyond, raised, factor)
    encoded = np.clip(np.where(saturated, np.sign(factor) * FACTOR_MAX, encoded), -FACTOR_MAX,
                      FACTOR_MAX)  # a raised factor can only reach it with a clamped shift
    mul, rshift = encode_multipliers(encoded, f"{what} multiplier")
    capped = rshift > SHIFT_MAX
    if np.any(capped):
        mul = np.where(capped, round_half_away(encoded * 2.0 ** SHIFT_MAX), mul).astype(np.int16)
        rshift = np.minimum(rshift, SHIFT_MAX).astype(np.uint8)
    if np.any(beyond):  # the shift in the encoded multiplier's units: s / (mul / 2^rshift)
        real = mul.astype(np.float64) / np.exp2(rshift.astype(np.float64))
        with np.errstate(divide="ignore", invalid="ignore"):
            moved = np.where(real != 0, round_half_away(shift / np.where(real != 0, real, 1)),
                             0.0)
        bias = np.where(beyond, moved, bias)
    return {"bias": bias.astype(np.int32), "mul": mul, "rshift": rshift}


def clip_codes(clip: Tuple[float, float], out_quant: TensorQuant) -> Tuple[int, int]:
    """Float CLIP bounds as output codes (an infinite bound, of a one-sided clip, saturates)."""
    steps = np.clip(np.asarray(clip, np.float64) / out_quant.scale, -256, 256)
    return tuple(int(np.clip(round_half_away(v) + out_quant.zero, -128, 127)) for v in steps)


def prelu_converter(slope: np.ndarray, channels: int, what: str) -> Tuple[np.ndarray, int]:
    """PReLU slopes as int16 multipliers with one shift for every channel (the one the largest
    slope allows)."""
    slope = np.asarray(slope, np.float64).reshape(-1)
    slope = np.broadcast_to(slope, (channels,)) if slope.size == 1 else slope
    _, shift = encode_multiplier(float(np.max(np.abs(slope))), f"{what} PReLU slope")
    return round_half_away(slope * 2.0 ** shift).astype(np.int16), shift


def pool_rounding_bias(kernel_h: int, kernel_w: int) -> float:
    """The mean error, in codes, of the int8 average pool's result over a window of positive
    sum: the PDP divides by two 0.16 reciprocals, rounding half away from zero after each
    (``reference.pool2d_int8``), so a 2x2 window's quarter of an odd sum is rounded up
    twice (+0.375 codes on average over the sums' residues; a negative sum the mirror).
    Averaged over every sum of codes 1..127 per position."""
    n = kernel_h * kernel_w
    sums = np.arange(1, 127 * n + 1, dtype=np.int64)
    first = reference.rhaz(sums * reference.pdp_reciprocal(kernel_w), 16)
    pooled = reference.rhaz(first * reference.pdp_reciprocal(kernel_h), 16)
    return float(np.mean(pooled - sums / n))


def concat_quant(inputs) -> TensorQuant:
    """The quantisation of an int8 concat: one that covers every input's range (unsigned when
    every input is), so no input saturates that did not already."""
    quants = list(inputs)
    if all(q == quants[0] for q in quants[1:]):
        # one quantisation (pieces of one tensor: a reflection padding's slices) is its own
        # cover: recomputed from its range it could differ by a rounding, and every copy
        # would then round its codes again
        return quants[0]
    return covering_quant(min(-(q.zero + 128) * q.scale for q in quants),
                          max((127 - q.zero) * q.scale for q in quants))
