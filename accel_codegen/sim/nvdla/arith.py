"""NVDLA's int8 datapath arithmetic, bit for bit, in NumPy (int64; no value here exceeds 2^62).

Sources: nvdla/doc ``precision.rst`` and the C model's HLS blocks (nvdla/hw ``cmod/hls``:
``sdp_x``/``sdp_c`` for the SDP, ``cdma_cvt`` for CDMA's input converter, ``cdp_icvt``/
``cdp_ocvt`` for the CDP's converters) and ``cmod/cacc`` and ``cmod/pdp``. The rules, in words:

* a right shift by ``n`` rounds half away from zero (ac_fixed's AC_RND_INF) and then saturates
  to the destination width (AC_SAT);
* a left shift saturates to the destination width;
* additions and multiplications are exact (the hardware widens them: 33-bit ALU, 49-bit
  multiplier);
* the final conversion to int8 saturates.
"""
from __future__ import annotations

import numpy as np


def signed(value: int, bits: int) -> int:
    """The two's-complement value of the low ``bits`` bits of ``value``."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def saturate(x: np.ndarray, bits: int) -> np.ndarray:
    hi = (1 << (bits - 1)) - 1
    return np.clip(x, -hi - 1, hi)


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Keep the low ``bits`` bits as a signed value (a plain truncating assignment)."""
    mask = (1 << bits) - 1
    x = np.asarray(x, np.int64) & mask
    return np.where(x >> (bits - 1), x - (1 << bits), x)


def shift_right_round(x: np.ndarray, shift: int) -> np.ndarray:
    """x / 2^shift rounded half away from zero (NVDLA's truncation with rounding)."""
    x = np.asarray(x, np.int64)
    if shift <= 0:
        return x
    half = np.int64(1) << np.int64(shift - 1)
    mag = (np.abs(x) + half) >> np.int64(shift)
    return np.where(x < 0, -mag, mag)


def shift_right_sat(x: np.ndarray, shift: int, bits: int) -> np.ndarray:
    return saturate(shift_right_round(x, shift), bits)


def shift_left_sat(x: np.ndarray, shift: int, bits: int) -> np.ndarray:
    x = np.asarray(x, np.int64)
    # shifts of up to 63 would overflow int64: saturate from the sign first
    limit = np.int64(1) << np.int64(bits - 1)
    if shift >= bits:
        return np.where(x > 0, limit - 1, np.where(x < 0, -limit, 0))
    return saturate(x << np.int64(shift), bits)


def sdp_x(data: np.ndarray, *, bypass: bool, alu_bypass: bool, alu_algo: int, alu_op,
          alu_shift: int, mul_bypass: bool, mul_op, mul_prelu: bool, mul_shift: int,
          relu_bypass: bool) -> np.ndarray:
    """One SDP X unit (BS or BN): ALU -> multiplier -> shifter -> ReLU, int8/int16 mode.

    ``data`` is the 32-bit input; ``alu_op``/``mul_op`` are 16-bit operands (scalars or arrays
    broadcasting against ``data``). The ALU's operand is shifted left (saturating to 32 bits);
    MAX/MIN/SUM work in 33 bits; the multiplier gives 49 bits; the shifter rounds and saturates
    to 32 bits, and runs even when the multiplier is bypassed; a PReLU pass-through of a
    non-negative value skips the shifter."""
    x = np.asarray(data, np.int64)
    if bypass:
        return x
    if not alu_bypass:
        operand = shift_left_sat(np.asarray(alu_op, np.int64), alu_shift, 32)
        if alu_algo == 0:
            x = np.maximum(x, operand)
        elif alu_algo == 1:
            x = np.minimum(x, operand)
        else:
            x = x + operand
    if mul_bypass:
        out = shift_right_sat(x, mul_shift, 32)
    else:
        product = x * np.asarray(mul_op, np.int64)
        shifted = shift_right_sat(product, mul_shift, 32)
        out = np.where(x >= 0, wrap(x, 32), shifted) if mul_prelu else shifted
    if not relu_bypass:
        out = np.maximum(out, 0)
    return out


def sdp_cvt(data: np.ndarray, offset: int, scale: int, shift: int, out_bits: int = 8):
    """The SDP's output converter: (x - offset) * scale, shifted right with rounding,
    saturated to 17 bits and then to the output precision."""
    x = (np.asarray(data, np.int64) - offset) * scale
    return saturate(shift_right_sat(x, shift, 17), out_bits)


def cacc_truncate(acc: np.ndarray, clip: int) -> np.ndarray:
    """CACC: the accumulator shifted right by CLIP_TRUNCATE with rounding, saturated to int32."""
    return saturate(shift_right_round(acc, clip), 32)


def cdma_cvt(data: np.ndarray, offset: int, scale: int, truncate: int) -> np.ndarray:
    """CDMA's input converter (int8 in, int8 out): (x - offset) * scale >> truncate, rounded,
    saturated to 17 and then 8 bits."""
    x = (np.asarray(data, np.int64) - offset) * scale
    return saturate(shift_right_sat(x, truncate, 17), 8)


def div_round(x: np.ndarray, recip: int) -> np.ndarray:
    """x * recip / 2^16 rounded half away from zero (PDP's average: the reciprocal of the
    kernel size as an unsigned 0.16 fixed-point number)."""
    return shift_right_round(np.asarray(x, np.int64) * recip, 16)
