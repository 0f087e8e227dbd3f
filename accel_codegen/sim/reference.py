"""NumPy reference of every engine op: the living definition of what the simulator computes.

FP32: the convolution sums in the simulator's order (csrc/conv/f32_order.h: 32-deep blocks of
FMAs, the dot-product tail positions of :func:`conv_dot_tail` in 16 lanes; depthwise taps in
order: :func:`conv2d_f32`), bit for bit but for a batch of fully connected rows (the library's
OpenBLAS path); the Winograd mode its transforms and its MAC array's FMA chains over the
channels (:func:`conv2d_winograd`), bit for bit too;
:func:`conv2d` is the float64 sum, rounded once, that the error bounds compare against. SDP and
PDP compute in float32 in the simulator's order, so non-LUT SDP ops and
pooling (max, and average: a float32 sum in the engine's order) match the simulator bit for bit; the CDP's LRN runs in float64 in the simulator's
order, rounded once (bit for bit too).

INT8 (accel.h; bit-exact): tensors hold int8 codes, the convolution sums
``(x - in_zero) * w`` exactly (int64 here: the simulator's int32 accumulator cannot overflow for
depth <= 65536), the SDP runs NVDLA's units (BS, BN, the output converter; accel.h) step by
step with ``sat32`` where accel.h marks it, a LUT activation looks its int32 input up in the tables the descriptor
carries (:func:`lut_int8`), and pooling works on codes with the input's zero point. The CDP's
LRN is NVDLA's (:func:`cdp_int8`: converters, square sum, its LE/LO tables), the one definition
of the simulator's int8 LRN and of the NVDLA trace front end's.

FP16 (accel.h): halves in memory; products of halves are exact, CONV accumulates in fp32 (in
the FP32 CONV's order, on the widened halves: bit for bit the simulator's), SDP and PDP compute in float32 on widened halves exactly as
in fp32, and every engine output is rounded to half once (round to nearest even). A CONV's
accumulators go to its SDP unrounded: the CONV + SDP pair rounds once, at the SDP output.
The lookup-table activations (sigmoid, tanh, silu, ...) are the exception: FP16 evaluates them
through the model of NVDLA's LUT (:func:`lut`, accel_lut in accel.h), fp32 as the functions
themselves (:func:`activation_exact`: each activation's vocabulary row defines them, on
``lut_math.py``'s building blocks; sigmoid, silu, exp and tanh through the library's own
:func:`exp_f32` and :func:`tanh_f32`, bit for bit).

BDMA (any precision): a copy of channels, bit for bit, into a destination whose other
channels keep their values. RUBIK contract (any precision): a rearrangement, bit for bit.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Sequence

import numpy as np

from .._accel_ffi import ffi, lib
from ..errors import (AccelDtypeError, AccelInvalidError, AccelShapeError, AccelUnsupportedError,
                      check)
from .ops import (X_FIELDS, Bdma, CdpInt8, Conv, LutInt8, Lrn, Op, Pool, Rubik, Sdp, _padding,
                  _pair, dtype_for)
from .lut_math import exp_f32, tanh_f32  # noqa: F401  (the FP32 SDP's, for tests and docs)
from .vocabulary import ACTIVATIONS

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


# --- the shared geometry -----------------------------------------------------------------------

def _conv_sum(x: np.ndarray, weights: np.ndarray, stride, padding, dilation, groups: int,
              dtype) -> np.ndarray:
    """sum over c, r, s of x[..] * w[k, c, r, s] with zero padding, in ``dtype``."""
    n, c, h, w = x.shape
    k, c_group, kernel_h, kernel_w = weights.shape
    stride_h, stride_w = _pair(stride, "stride")
    dil_h, dil_w = _pair(dilation, "dilation")
    top, left, bottom, right = _padding(padding)
    padded = np.pad(x.astype(dtype), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_h = (h + top + bottom - dil_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (w + left + right - dil_w * (kernel_w - 1) - 1) // stride_w + 1
    k_group = k // groups
    grouped_x = padded.reshape(n, groups, c_group, *padded.shape[2:])
    grouped_w = weights.astype(dtype).reshape(groups, k_group, c_group, kernel_h, kernel_w)
    out = np.zeros((n, groups, k_group, out_h * out_w), dtype=dtype)
    for r in range(kernel_h):
        for s in range(kernel_w):
            y0, x0 = r * dil_h, s * dil_w
            patch = grouped_x[:, :, :, y0:y0 + stride_h * (out_h - 1) + 1:stride_h,
                              x0:x0 + stride_w * (out_w - 1) + 1:stride_w]
            # [G, K/G, C/G] @ [N, G, C/G, positions] -> [N, G, K/G, positions]
            out += np.matmul(grouped_w[:, :, :, r, s], patch.reshape(n, groups, c_group, -1))
    return out.reshape(n, k, out_h, out_w)


# --- the FP32 CONV's summation order (csrc/conv/f32_order.h) -------------------------------------

#: f32_order.h's SUM_BLOCK: depth steps an accumulator sums from zero before its block joins
#: the running total
SUM_BLOCK = 32
#: f32_order.h's TMAX: the most positions of an image's tail summed as dot products
TAIL_MAX = 8
#: lanes of a dot product's partial sums (one AVX-512 vector)
DOT_LANES = 16


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """A CONV's geometry as the C library's conv_geometry has it (bottom and right padding
    implied by the output size)."""
    n: int
    c: int
    h: int
    w: int
    k: int
    out_h: int
    out_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1

    @property
    def depth(self) -> int:
        return self.c // self.groups * self.kernel_h * self.kernel_w


def conv_geometry(x_shape, w_shape, stride=1, padding=0, dilation=1,
                  groups: int = 1) -> ConvGeometry:
    """The geometry of a CONV of an NCHW input of ``x_shape`` by weights of ``w_shape``."""
    n, c, h, w = x_shape
    k, _, kernel_h, kernel_w = w_shape
    stride_h, stride_w = _pair(stride, "stride")
    dil_h, dil_w = _pair(dilation, "dilation")
    top, left, bottom, right = _padding(padding)
    out_h = (h + top + bottom - dil_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (w + left + right - dil_w * (kernel_w - 1) - 1) // stride_w + 1
    return ConvGeometry(n, c, h, w, k, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w,
                        top, left, dil_h, dil_w, groups)


def implicit_gemm_chosen(g: ConvGeometry, panels_outer: bool = False) -> bool:
    """f32_order.h's f32_implicit_chosen: whether the FP32 CONV sums every output of ``g`` in
    32-deep blocks through the implicit GEMM's grid (where the library's list takes it; the
    packed panels' dot-product tail is then not used). ``panels_outer`` (a 48 KiB L1d) matters
    only for geometries without such a tail, whose orders are equal either way."""
    sh, sw = g.stride_h, g.stride_w
    cg = g.c // g.groups
    ohw = g.out_h * g.out_w
    if cg == 1 or (ohw == 1 and g.n > 1) or sh > 2 or sw > 2:
        return False
    one = g.kernel_h == 1 and g.kernel_w == 1
    sqmax = (g.kernel_w - 1) * g.dilation_w // sw
    direct = (one and sh == 1 and sw == 1 and g.pad_top == 0 and g.pad_left == 0
              and g.out_h == g.h and g.out_w == g.w)
    if direct:
        wq = g.w
    elif sw == 1:
        wq = max(g.w + g.pad_left, g.out_w + sqmax - g.pad_left, g.out_w)
    else:
        wq = g.out_w + sqmax
    if not direct and wq < 16:
        return False
    nph = 1 if one else sh * sw
    all_phases = nph == 1 or (g.kernel_h >= sh and g.kernel_w >= sw and g.dilation_h == 1
                              and g.dilation_w == 1)
    packed_tail = 0 < ohw % 16 <= TAIL_MAX
    strided_max = 512 if panels_outer and not packed_tail else 1024
    return ((wq - g.out_w) * 12 <= wq and g.out_h * wq >= 512 and g.depth <= 2304
            and all_phases and (nph == 1 or g.depth <= strided_max))


def conv_dot_tail(g: ConvGeometry) -> int:
    """f32_order.h's f32_dot_tail: how many of an image's last output positions the FP32 CONV
    sums as 16-lane dot products (0: none; every other position in 32-deep blocks), or -1
    where it sums otherwise: a depthwise conv (its taps in order) or a batch of fully
    connected rows (fc_blas: OpenBLAS's order, not reproduced here)."""
    cg = g.c // g.groups
    ohw = g.out_h * g.out_w
    if cg == 1 or (ohw == 1 and g.n > 1):
        return -1
    t = ohw % 16
    return t if 0 < t <= TAIL_MAX and not implicit_gemm_chosen(g) else 0


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fmaf(a, b, c) element-wise, rounded once: a and b float32 values (as float64: their
    product is exact), c float32. The float64 sum's error (TwoSum) makes it round to odd,
    which then rounds to float32 as the exact sum would (53 >= 24 + 2 bits). Halves' products
    (a and b float32 arrays) are exact in float32: one float32 addition is the FMA then."""
    if a.dtype == np.float32:
        return c + a * b
    if _powers_of_two(a):  # b times a power of two is exact (but for underflow) in float32
        exact = a * b
        if np.all(np.abs(exact[exact != 0]) >= np.finfo(np.float32).tiny):
            return c + exact.astype(np.float32)
    p = a * b
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        bv = s - p
        e = (p - (s - bv)) + (c64 - bv)
        even = (s.view(np.int64) & 1) == 0
        inexact = (e != 0) & even & np.isfinite(s)
        if inexact.any():
            s = np.where(inexact, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def _powers_of_two(a: np.ndarray) -> bool:
    """Whether every value of ``a`` is 0 or +-2^k (a CONV of ones, a layer norm's sums)."""
    mantissa, _ = np.frexp(a)
    return bool(np.all((mantissa == 0.5) | (mantissa == -0.5) | (a == 0)))


def _ordered_sums(cols: np.ndarray, weights: np.ndarray, tail: int,
                  halves: bool = False) -> np.ndarray:
    """[N, G, D, P] im2col columns (float32) by [G, K, D] weights (float32) -> [N, G, K, P]
    float32 sums in f32_order.h's order: tail < 0 each output's D steps one FMA each from zero
    (depthwise); else the last ``tail`` positions as 16 lane sums along the depth (lane l
    taking depths l, l + 16, ..., zeros past D) reduced as GCC's _mm512_reduce_add_ps, the
    others in 32-deep blocks each summed from zero and added to the running total in order.
    ``halves``: the operands are widened halves, whose products float32 holds exactly."""
    n, groups, depth, positions = cols.shape
    k = weights.shape[1]
    out = np.empty((n, groups, k, positions), np.float32)
    wide = np.float32 if halves else np.float64
    cols64, w64 = cols.astype(wide), weights.astype(wide)
    # output channels at a time: a step's arrays of about 2^21 values
    chunk = max(1, (1 << 21) // max(1, n * groups * positions * max(1, -(-depth // SUM_BLOCK))))
    for k0 in range(0, k, chunk):
        w = w64[:, k0:k0 + chunk]
        kc = w.shape[1]
        if tail < 0:
            acc = np.zeros((n, groups, kc, positions), np.float32)
            for d in range(depth):
                acc = _fma32(w[None, :, :, d, None], cols64[:, :, None, d], acc)
            out[:, :, k0:k0 + kc] = acc
            continue
        blocked = positions - tail
        if blocked > 0:
            nb = -(-depth // SUM_BLOCK)
            acc = np.zeros((n, groups, kc, nb, blocked), np.float32)
            for j in range(SUM_BLOCK):
                active = len(range(j, depth, SUM_BLOCK))  # blocks with a step j
                if active == 0:
                    break
                d = slice(j, j + SUM_BLOCK * (active - 1) + 1, SUM_BLOCK)
                acc[:, :, :, :active] = _fma32(
                    w[None, :, :, d, None], cols64[:, :, None, d, :blocked],
                    acc[:, :, :, :active])
            total = acc[:, :, :, 0]
            for b in range(1, nb):
                total = total + acc[:, :, :, b]
            out[:, :, k0:k0 + kc, :blocked] = total
        if tail > 0:
            steps = -(-depth // DOT_LANES)
            pad = steps * DOT_LANES - depth
            wl = np.pad(w, ((0, 0), (0, 0), (0, pad))).reshape(groups, kc, steps, DOT_LANES)
            xl = np.pad(cols64[..., blocked:], ((0, 0), (0, 0), (0, pad), (0, 0))).reshape(
                n, groups, steps, DOT_LANES, tail)
            lanes = np.zeros((n, groups, kc, DOT_LANES, tail), np.float32)
            for i in range(steps):
                lanes = _fma32(wl[None, :, :, i, :, None], xl[:, :, None, i], lanes)
            t3 = lanes[:, :, :, 8:] + lanes[:, :, :, :8]
            t6 = t3[:, :, :, 4:] + t3[:, :, :, :4]
            out[:, :, k0:k0 + kc, blocked:] = ((t6[:, :, :, 0] + t6[:, :, :, 2])
                                               + (t6[:, :, :, 1] + t6[:, :, :, 3]))
    return out


def conv2d_f32(x: np.ndarray, weights: np.ndarray, stride=1, padding=0, dilation=1,
               groups: int = 1, halves: bool = False) -> np.ndarray:
    """The FP32 CONV as the simulator sums it (csrc/conv/f32_order.h), bit for bit: NCHW
    float32 x [K, C/groups, R, S] float32 -> NCHW float32. Each output's depth runs over
    (c, r, s), c the slowest; :func:`conv_dot_tail` says which order each position takes.
    ``halves``: x and weights hold widened halves (the FP16 CONV's, :func:`conv2d_fp16`)."""
    x = np.asarray(x, np.float32)
    weights = np.asarray(weights, np.float32)
    g = conv_geometry(x.shape, weights.shape, stride, padding, dilation, groups)
    n, c, h, w = x.shape
    k, c_group, kernel_h, kernel_w = weights.shape
    top, left, bottom, right = _padding(padding)
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    grouped = padded.reshape(n, groups, c_group, *padded.shape[2:])
    taps = []
    for r in range(kernel_h):
        for s in range(kernel_w):
            y0, x0 = r * g.dilation_h, s * g.dilation_w
            taps.append(grouped[:, :, :, y0:y0 + g.stride_h * (g.out_h - 1) + 1:g.stride_h,
                                x0:x0 + g.stride_w * (g.out_w - 1) + 1:g.stride_w])
    # depth index c * R * S + r * S + s
    cols = np.stack(taps, axis=3).reshape(n, groups, g.depth, g.out_h * g.out_w)
    wmat = weights.reshape(groups, k // groups, g.depth)
    tail = conv_dot_tail(g)
    if tail < 0 and c_group > 1:  # fc_blas's batch: summed here as one image's rows would be
        tail = conv_dot_tail(dataclasses.replace(g, n=1))
    sums = _ordered_sums(cols, wmat, tail, halves)
    return sums.reshape(n, k, g.out_h, g.out_w)


def _pool_windows(x: np.ndarray, kernel, stride, padding, fill):
    """Every window position's element of x (padded with ``fill``) in (r, s) order, and the
    mask of image elements, each shaped [R*S, N, C, out_h, out_w]."""
    n, c, h, w = x.shape
    kernel_h, kernel_w = _pair(kernel, "kernel")
    stride_h, stride_w = _pair(stride, "stride")
    top, left, bottom, right = _padding(padding)
    out_h = (h + top + bottom - kernel_h) // stride_h + 1
    out_w = (w + left + right - kernel_w) // stride_w + 1
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    inside = np.pad(np.ones((h, w), dtype=bool), ((top, bottom), (left, right)))
    windows, masks = [], []
    for r in range(kernel_h):
        for s in range(kernel_w):
            rows = slice(r, r + stride_h * (out_h - 1) + 1, stride_h)
            cols = slice(s, s + stride_w * (out_w - 1) + 1, stride_w)
            windows.append(padded[:, :, rows, cols])
            masks.append(np.broadcast_to(inside[rows, cols], (n, c, out_h, out_w)))
    return np.stack(windows), np.stack(masks)


def _per_channel(values: np.ndarray, ndim: int, dtype=np.float32) -> np.ndarray:
    return np.asarray(values, dtype=dtype).reshape((1, -1) + (1,) * (ndim - 2))


# --- the SDP's lookup-table activations ------------------------------------------------------

def is_lut_activation(act: Optional[str]) -> bool:
    """Whether an activation is a lookup-table one (the vocabulary's feature "lut")."""
    return act is not None and ACTIVATIONS[act].feature == "lut"


def _lut_entry(act: str):
    """The vocabulary row of a LUT activation (AccelInvalidError for any other ``act``)."""
    if act not in ACTIVATIONS or not is_lut_activation(act):
        raise AccelInvalidError(f"act = {act!r} is not a lookup-table activation")
    return ACTIVATIONS[act]


def activation_exact(act: str, t: np.ndarray) -> np.ndarray:
    """A LUT activation as the FP32 SDP computes it (float32 in the C library's operation
    order, bit for bit): its vocabulary row's ``exact`` (sigmoid, silu and exp through
    :func:`exp_f32`, tanh through :func:`tanh_f32`, GELU through ``gelu_f32`` (float32
    polynomials per unit interval and exp_f32), its tanh form in float64 through libm's exp, rounded once)."""
    entry = _lut_entry(act)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return entry.exact(np.asarray(t, dtype=np.float32))


def function64(act: str, t: np.ndarray) -> np.ndarray:
    """A LUT activation in float64, its vocabulary row's ``function64``: the source of the
    table entries (as the C library's); rsqrt and reciprocal held to their domain (t >= the
    FP16 table's start, accel.h)."""
    entry = _lut_entry(act)
    with np.errstate(over="ignore"):
        return entry.function64(t)


@dataclasses.dataclass(frozen=True)
class LutTables:
    """One LUT activation's tables: the geometry the C library states (accel_lut_info), the
    entries computed here (float64, rounded to half, kept as float32)."""

    act: str
    lo_start: np.float32
    lo_step: np.float32
    le_start: np.float32
    le_step: np.float32
    underflow_slope: np.float32
    overflow_slope: np.float32
    lo: np.ndarray
    le: np.ndarray

    @property
    def lo_end(self) -> np.float32:
        return np.float32(self.lo_start + (self.lo.size - 1) * self.lo_step)

    @property
    def exponent(self) -> bool:
        """LE in exponent mode (le_step 0, accel.h): LE[i] = f(le_start 2^i)."""
        return self.le_step == 0

    @property
    def le_end(self) -> np.float32:
        if self.exponent:
            return np.float32(math.ldexp(float(self.le_start), self.le.size - 1))
        return np.float32(self.le_start + (self.le.size - 1) * self.le_step)


@functools.lru_cache(maxsize=None)
def lut_tables(act: str) -> LutTables:
    """The tables of a LUT activation, built once."""
    if not is_lut_activation(act):
        raise AccelInvalidError(f"act = {act!r} is not a lookup-table activation")
    geometry = ffi.new("accel_lut*")
    check(lib.accel_lut_info(ACTIVATIONS.code(act), geometry))

    def entries(start, step, count):
        if step == 0:  # LE's exponent mode: one entry per octave
            grid = float(start) * 2.0 ** np.arange(count, dtype=np.float64)
        else:
            grid = float(start) + float(step) * np.arange(count, dtype=np.float64)
        with np.errstate(over="ignore"):
            return function64(act, grid).astype(np.float16).astype(np.float32)

    g = {name: np.float32(getattr(geometry, name)) for name in
         ("lo_start", "lo_step", "le_start", "le_step", "underflow_slope", "overflow_slope")}
    return LutTables(act, **g, lo=entries(g["lo_start"], g["lo_step"], lib.ACCEL_LUT_LO_ENTRIES),
                     le=entries(g["le_start"], g["le_step"], lib.ACCEL_LUT_LE_ENTRIES))


def _interpolate(entries: np.ndarray, start, step, t: np.ndarray) -> np.ndarray:
    """Linear interpolation in a table, in float32 one operation at a time (the C order)."""
    intervals = entries.size - 1
    u = (t - np.float32(start)) * (np.float32(1) / np.float32(step))
    i = np.clip(np.nan_to_num(u, nan=0.0, posinf=0.0, neginf=0.0), 0, intervals - 1).astype(
        np.int64)  # in range u >= 0, so truncation is floor; out of range the value is unused
    f = u - i.astype(np.float32)
    return entries[i] + (entries[i + 1] - entries[i]) * f


def _interpolate_octaves(entries: np.ndarray, start, t: np.ndarray) -> np.ndarray:
    """LE's exponent mode (csrc/lut_tables.c: interpolate_octaves, the same bits): the octave of t
    above le_start's is the index, t's place within its octave the fraction, both from t's
    exponent bits; out of range the value is unused."""
    t = np.atleast_1d(np.asarray(t, dtype=np.float32))
    bits = t.view(np.uint32)
    start_exp = int((np.float32(start).view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF))
    exp = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    i = np.clip(exp - start_exp, 0, entries.size - 2)
    base_bits = bits & np.uint32(0x7F800000)
    with np.errstate(over="ignore", invalid="ignore"):
        base = base_bits.view(np.float32)
        inverse = (np.uint32(254 << 23) - base_bits).view(np.float32)
        f = (t - base) * inverse
        return entries[i] + (entries[i + 1] - entries[i]) * f


def lut(act: str, t: np.ndarray, tables: Optional[LutTables] = None) -> np.ndarray:
    """The FP16 SDP's LUT model of an activation on float32 values (accel_lut in accel.h),
    before the output's rounding to half. ``tables``: other entries to evaluate (default: the
    activation's, as the engine has them)."""
    tables = tables if tables is not None else lut_tables(act)
    t = np.asarray(t, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        in_lo = (t >= tables.lo_start) & (t < tables.lo_end)
        in_le = (t >= tables.le_start) & (t < tables.le_end)
        under = t < tables.le_start
        first, last = tables.le[0], tables.le[-1]
        below = (first if tables.underflow_slope == 0 else
                 first + (t - tables.le_start) * tables.underflow_slope)
        above = (last if tables.overflow_slope == 0 else
                 last + (t - tables.le_end) * tables.overflow_slope)
        on_le = (_interpolate_octaves(tables.le, tables.le_start, t).reshape(t.shape)
                 if tables.exponent else
                 _interpolate(tables.le, tables.le_start, tables.le_step, t))
        y = np.where(in_lo, _interpolate(tables.lo, tables.lo_start, tables.lo_step, t),
                     np.where(in_le, on_le, np.where(under, below, above)))
    return np.where(np.isnan(t), t, y).astype(np.float32)


# --- FP32 ------------------------------------------------------------------------------------

def conv2d(x: np.ndarray, weights: np.ndarray, stride=1, padding=0, dilation=1,
           groups: int = 1) -> np.ndarray:
    """Direct convolution, NCHW x [K, C/groups, R, S] -> NCHW, float64 accumulation: the exact
    sum the error bounds measure from (the engine's own order: :func:`conv2d_f32`)."""
    return _conv_sum(x, weights, stride, padding, dilation, groups, np.float64)


def sdp(x: np.ndarray, scale: Optional[np.ndarray] = None, shift: Optional[np.ndarray] = None,
        ew_op: Optional[str] = None, operand: Optional[np.ndarray] = None,
        act: Optional[str] = None, clip=(0.0, 6.0),
        prelu_slope: Optional[np.ndarray] = None, use_lut: bool = False,
        x_units: Sequence = (None, None, None, None), x_per_channel=()) -> np.ndarray:
    """``act(ew(x_units(x) * scale[c] + shift[c], operand))`` in float32, one rounding per
    operation. ``x_units``: the X units' operands (x1_alu, x1_mul, x2_alu, x2_mul; accel.h's
    accel_sdp_x), ``t = ((x + x1_alu) * x1_mul + x2_alu) * x2_mul``, each of x's shape or [C]
    where its name is in ``x_per_channel``. A lookup-table activation is computed exactly, or
    through the LUT model with ``use_lut`` (the FP16 SDP)."""
    t = np.array(x, dtype=np.float32)
    for name, value in zip(X_FIELDS, x_units):
        if value is None:
            continue
        value = _per_channel(value, t.ndim) if name in x_per_channel else \
            np.asarray(value, dtype=np.float32).reshape(t.shape)
        t = t + value if name.endswith("alu") else t * value
    if clip is None:
        clip = (0.0, 6.0)
    if scale is not None:
        t = t * _per_channel(scale, t.ndim)
    if shift is not None:
        t = t + _per_channel(shift, t.ndim)
    if ew_op is not None:
        other = np.asarray(operand, dtype=np.float32).reshape(t.shape)
        t = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[ew_op](
            t, other)
    if act == "relu":
        t = np.maximum(t, np.float32(0))
    elif act == "clip":
        t = np.minimum(np.maximum(t, np.float32(clip[0])), np.float32(clip[1]))
    elif act == "prelu":
        t = np.where(t >= 0, t, t * _per_channel(prelu_slope, t.ndim))
    elif is_lut_activation(act):
        t = lut(act, t) if use_lut else activation_exact(act, t)
    elif act is not None:
        raise AccelInvalidError(f"unknown activation {act!r}")
    return t.astype(np.float32)


def pool2d(x: np.ndarray, kind: str = "max", kernel=2, stride=2, padding=0,
           count_include_pad: bool = False) -> np.ndarray:
    """Max or average pooling; padding never wins a max and counts in an average only with
    ``count_include_pad``. The average as the engine computes it (csrc/pdp.c): the window's
    image elements summed in float32 row by row, from 0, then one division by the float32
    divisor, so bit for bit."""
    kernel_h, kernel_w = _pair(kernel, "kernel")
    if kind == "max":
        stacked, _ = _pool_windows(x.astype(np.float64), kernel, stride, padding, -np.inf)
        return stacked.max(axis=0).astype(np.float32)
    values, inside = _pool_windows(np.asarray(x, np.float32), kernel, stride, padding, 0.0)
    total = np.zeros(values.shape[1:], dtype=np.float32)
    # IEEE float32 as the engine sums: a sum past float32's range is inf and inf + -inf is
    # NaN, the engine's defined results, not numerical accidents worth a warning
    with np.errstate(over="ignore", invalid="ignore"):
        for value, mask in zip(values, inside):
            total = np.where(mask, total + value, total)
    divisor = (np.float32(kernel_h * kernel_w) if count_include_pad
               else inside.sum(axis=0).astype(np.float32))
    return (total / divisor).astype(np.float32)


def lrn(x: np.ndarray, size: int = 5, alpha: float = 1e-4, beta: float = 0.75,
        k: float = 1.0) -> np.ndarray:
    """Local response normalisation across channels (the CDP; PyTorch's local_response_norm):
    ``x / (S / size * alpha + k)^beta``, S the sum of squares over channels
    [c - size//2, c + (size-1)//2] (zero outside), in float64 from the lowest channel up, the
    quotient rounded once to float32. alpha, beta and k are the descriptor's float32 values."""
    x = np.asarray(x, dtype=np.float32)
    wide = x.astype(np.float64)
    channels = x.shape[1]
    alpha, beta, k = (float(np.float32(v)) for v in (alpha, beta, k))
    total = np.zeros_like(wide)
    for c in range(channels):
        for j in range(max(c - size // 2, 0), min(c + (size - 1) // 2, channels - 1) + 1):
            total[:, c] += wide[:, j] * wide[:, j]
    base = total / size * alpha + k
    return (wide / np.power(base, beta)).astype(np.float32)


# --- INT8 ------------------------------------------------------------------------------------

def rhaz(p, s) -> np.ndarray:
    """p / 2^s rounded half away from zero (NVDLA's converter rounding), for int64 p and
    0 <= s <= 62 (broadcast): ``sign(p) * ((|p| + 2^(s-1)) >> s)``, nothing added for s = 0."""
    p = np.asarray(p, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    if np.any((s < 0) | (s > 62)):
        raise AccelInvalidError(f"shift {s} is outside [0, 62]")
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    magnitude = (np.abs(p) + half) >> s
    return np.where(p < 0, -magnitude, magnitude)


def sat32(v) -> np.ndarray:
    """Clamp to the int32 range (kept as int64)."""
    return np.clip(np.asarray(v, dtype=np.int64), INT32_MIN, INT32_MAX)


def sat8(v) -> np.ndarray:
    """Clamp to the int8 range (kept as int64)."""
    return np.clip(np.asarray(v, dtype=np.int64), -128, 127)


def conv2d_int8(x: np.ndarray, weights: np.ndarray, stride=1, padding=0, dilation=1,
                groups: int = 1, in_zero: int = 0) -> np.ndarray:
    """The INT8 CONV's accumulators (int64, exact): sum of (x - in_zero) * w, where padding
    reads as in_zero (contributes 0)."""
    if x.dtype != np.int8 or np.asarray(weights).dtype != np.int8:
        raise AccelDtypeError(f"conv2d_int8 takes int8 codes, got {x.dtype} x {weights.dtype}")
    v = x.astype(np.int64) - int(in_zero)
    # Summed in float64 for speed (BLAS), exactly: every product is below 2^15 in magnitude
    # and every partial sum below 2^53 for any depth the ISA allows (< 2^31 weights).
    return _conv_sum(v, weights, stride, padding, dilation, groups, np.float64).astype(np.int64)


def _lut_int8_hit(entries: np.ndarray, d: np.ndarray, select: int) -> np.ndarray:
    """Interpolation between entries d >> select and the next one, with the 16 bits of d
    below the index as the fraction (d >= 0 where used; clamped elsewhere)."""
    intervals = entries.size - 1
    d = np.clip(d, 0, (intervals << select) - 1)
    i = d >> select
    r = d & ((1 << select) - 1)
    f = r >> (select - 16) if select >= 16 else r << (16 - select)
    e = entries.astype(np.int64)
    return rhaz(e[i] * (65536 - f) + e[i + 1] * f, 16)


def lut_int8(t, lut: LutInt8) -> np.ndarray:
    """The INT8 SDP's LUT (accel_lut_int8 in accel.h) on int32 values t: LO hit, else LE hit,
    else the slopes below / above LE; the int32 result before the output converter."""
    t = np.asarray(t, dtype=np.int64)
    lo = np.asarray(lut.lo).astype(np.int64)
    le = np.asarray(lut.le).astype(np.int64)
    lo_sel, le_sel = int(lut.lo_index_select), int(lut.le_index_select)
    d_lo, d_le = t - int(lut.lo_start), t - int(lut.le_start)
    le_end = int(lut.le_start) + ((le.size - 1) << le_sel)
    in_lo = (d_lo >= 0) & (d_lo < ((lo.size - 1) << lo_sel))
    in_le = (d_le >= 0) & (t < le_end)
    below = le[0] + rhaz(d_le * int(lut.underflow_scale), int(lut.underflow_shift))
    above = le[-1] + rhaz((t - le_end) * int(lut.overflow_scale), int(lut.overflow_shift))
    y = np.where(in_lo, _lut_int8_hit(lo, d_lo, lo_sel),
                 np.where(in_le, _lut_int8_hit(le, d_le, le_sel),
                          np.where(d_le < 0, below, above)))
    return sat32(y)


def _sat(x, bits: int) -> np.ndarray:
    hi = (1 << (bits - 1)) - 1
    return np.clip(x, -hi - 1, hi)


def _rhaz_cdp(p, s: int) -> np.ndarray:
    """rhaz for the CDP's shifters, whose fields reach 63: beyond 62 every value here (below
    2^62 in magnitude) rounds to 0."""
    return rhaz(p, s) if s <= 62 else np.zeros_like(np.asarray(p, np.int64))


def _cdp_interp(table: np.ndarray, index: np.ndarray, frac: np.ndarray) -> np.ndarray:
    y0, y1 = table[index], table[index + 1]
    return _sat(y0 + _sat(rhaz((y1 - y0) * frac, 16), 56), 16)


def cdp_lookup(s, p: CdpInt8) -> np.ndarray:
    """The INT8 CDP's two tables (accel_cdp_int8 in accel.h) at square sums ``s`` (int64): each
    table's hit (interpolated, 16 fraction bits), underflow or overflow (its slope from the
    end entry), then the priorities choose; the 16-bit result."""
    s = np.asarray(s, np.int64)
    le = np.asarray(p.le).astype(np.int64)
    lo = np.asarray(p.lo).astype(np.int64)

    def slope(base, delta, scale, shift):
        return _sat(base + _sat(_rhaz_cdp(delta * int(scale), int(shift)), 56), 16)

    def linear(d, sel, entries):
        """index, under, over, fraction of a linear table at offsets d."""
        index = d << -sel if sel < 0 else d >> sel
        under = (index < 0) | (d <= 0)
        over = ~under & (index >= entries - 1)
        if sel < 0:
            frac = np.zeros_like(d)
        else:
            rem = d & ((1 << sel) - 1)
            frac = rem >> (sel - 16) if sel > 16 else rem << (16 - sel)
        return np.clip(index, 0, entries - 2), under, over, frac

    le_off = int(p.le_index_offset)
    d = s - int(p.le_start)
    if p.le_exponent:
        # the octave of d: floor(log2 d), exact from the integer's bit length
        log = np.zeros_like(d)
        pos = d > 0
        log[pos] = np.array([int(v).bit_length() - 1 for v in d[pos].ravel()],
                            np.int64).reshape(d[pos].shape)
        index = log - le_off
        le_under = (index < 0) | (d <= 0)
        le_over = ~le_under & (index >= le.size - 1)
        idx = np.clip(index, 0, le.size - 2)
        e = np.clip(idx + le_off, 0, 62)
        rem = d - (np.int64(1) << e)
        frac = np.where(e > 16, rem >> np.maximum(e - 16, 0), rem << np.maximum(16 - e, 0))
        under_delta = d - (0 if le_off < 0 else (1 << le_off))
    else:
        idx, le_under, le_over, frac = linear(d, int(p.le_index_select), le.size)
        under_delta = d
    le_val = np.where(le_under, slope(le[0], under_delta, p.le_uflow_scale, p.le_uflow_shift),
                      np.where(le_over, slope(le[-1], s - int(p.le_end), p.le_oflow_scale,
                                              p.le_oflow_shift),
                               _cdp_interp(le, idx, frac)))
    idx, lo_under, lo_over, frac = linear(s - int(p.lo_start), int(p.lo_index_select), lo.size)
    lo_val = np.where(lo_under, slope(lo[0], s - int(p.lo_start), p.lo_uflow_scale,
                                      p.lo_uflow_shift),
                      np.where(lo_over, slope(lo[-1], s - int(p.lo_end), p.lo_oflow_scale,
                                              p.lo_oflow_shift),
                               _cdp_interp(lo, idx, frac)))
    le_hit, lo_hit = ~le_under & ~le_over, ~lo_under & ~lo_over
    return np.where(le_under & lo_under, lo_val if p.uflow_priority else le_val,
                    np.where(le_over & lo_over, lo_val if p.oflow_priority else le_val,
                             np.where(le_hit ^ lo_hit, np.where(le_hit, le_val, lo_val),
                                      lo_val if p.hybrid_priority else le_val)))


def cdp_int8(x, size: int, p: CdpInt8) -> np.ndarray:
    """The INT8 CDP (NVDLA's LRN, accel_cdp_int8 in accel.h) on int8 codes ``x`` (N, C, ...):
      v = sat9(rhaz((x - datin_offset) * datin_scale, datin_shift))
      S = sum of v^2 over channels [c - size//2, c + size//2] (0 outside; v with SQSUM bypass)
      y = lookup(S) * v (lookup(S) with MUL bypass), kept to 25 bits (two's complement)
      out = sat8(rhaz((y - datout_offset) * datout_scale, datout_shift))"""
    x = np.asarray(x).astype(np.int64)
    v = _sat(_rhaz_cdp((x - int(p.datin_offset)) * int(p.datin_scale), int(p.datin_shift)), 9)
    if p.sqsum_bypass:
        total = v
    else:
        half, channels = size // 2, v.shape[1]
        sq = v * v
        total = np.zeros_like(v)
        for c in range(channels):
            total[:, c] = sq[:, max(c - half, 0):c + half + 1].sum(axis=1)
    y = cdp_lookup(total, p)
    if not p.mul_bypass:
        y = y * v
    y = y & ((1 << 25) - 1)
    y = np.where(y >> 24, y - (1 << 25), y)
    out = _sat(_rhaz_cdp((y - int(p.datout_offset)) * int(p.datout_scale),
                         int(p.datout_shift)), 8)
    return out.astype(np.int8)


def sdp_int8_bs_bn(v: np.ndarray, bias=None, mul=None, rshift=None) -> np.ndarray:
    """The INT8 SDP's first two steps, NVDLA's X units BS and BN (accel.h), on ``v`` (NCHW or
    NC...): BS adds the bias in its 33-bit ALU and multiplies channel c by 2^(S - rshift[c]),
    S the largest shift, saturating to int32; BN multiplies by mul[c] and shifts by S, rounding
    half away from zero, saturating to int32. Where BS does not saturate this is
    ``sat32(rhaz((v + bias) * mul, rshift))``. Returns int64 values inside int32."""
    t = np.asarray(v, dtype=np.int64)
    ndim = t.ndim
    per_channel = lambda a: _per_channel(a, ndim, np.int64)  # noqa: E731
    shift_max = int(np.max(rshift)) if rshift is not None and np.size(rshift) else 0
    s = per_channel(rshift) if rshift is not None else np.int64(0)
    if bias is not None:
        t = t + per_channel(bias)
    # |t| > 2^31 saturates whatever the power, so the shift is taken on t clamped there (and
    # by at most 31: any t != 0 saturates from 2^31 on): below 2^63
    t = sat32(np.clip(t, -(1 << 31), 1 << 31) << np.minimum(shift_max - s, 31))
    if mul is not None or rshift is not None:
        m = per_channel(mul) if mul is not None else np.int64(1)
        t = sat32(rhaz(t * m, shift_max))
    return t


def sdp_int8(v: np.ndarray, bias=None, mul=None, rshift=None, ew_op: Optional[str] = None,
             operand=None, ew_zero: int = 0, ew_mul: int = 1, ew_shift: int = 0,
             act: Optional[str] = None, prelu_mul=None, prelu_shift: int = 0,
             out_mul: int = 0, out_shift: int = 0, out_zero: int = 0, clip_lo: int = -128,
             clip_hi: int = 127, lut: Optional[LutInt8] = None) -> np.ndarray:
    """The INT8 SDP on ``v``: a CONV's accumulators, or (x - in_zero) for an SDP that reads its
    int8 input from memory. Steps exactly as accel.h lists them; returns int8 codes."""
    t = sdp_int8_bs_bn(v, bias, mul, rshift)                               # 1 BS, 2 BN
    ndim = t.ndim
    per_channel = lambda a: _per_channel(a, ndim, np.int64)  # noqa: E731
    if ew_op is not None:                                                  # 3 Y EW
        e = np.asarray(operand, dtype=np.int64).reshape(t.shape)
        e = sat32(rhaz((e - int(ew_zero)) * int(ew_mul), int(ew_shift)))
        if ew_op == "add":
            t = sat32(t + e)
        elif ew_op == "mul":
            t = sat32(t * e)  # |t|, |e| <= 2^31: the product fits int64
        elif ew_op == "max":
            t = np.maximum(t, e)
        elif ew_op == "min":
            t = np.minimum(t, e)
        else:
            raise AccelInvalidError(f"unknown element-wise op {ew_op!r}")
    if act == "relu":                                                      # 4 activation
        t = np.maximum(t, 0)
    elif act == "prelu":
        # accel.h: an X unit's multiplier in PReLU mode: t < 0: sat32(rhaz(t * prelu_mul[c],
        # prelu_shift)), t >= 0 passes
        t = np.where(t < 0, sat32(rhaz(t * per_channel(prelu_mul), int(prelu_shift))), t)
    elif is_lut_activation(act):
        if lut is None:
            raise AccelInvalidError(f"act = {act!r} in INT8 needs its tables (lut)")
        t = lut_int8(t, lut)
    elif act not in (None, "clip"):
        raise AccelInvalidError(f"act = {act!r} has no INT8 form")
    if out_mul:                                                            # 5 output converter
        t = rhaz(t * int(out_mul), int(out_shift))  # |t| <= 2^32, |out_mul| <= 2^15
    y = sat8(t + int(out_zero))
    if act == "clip":
        y = np.minimum(np.maximum(y, int(clip_lo)), int(clip_hi))
    return y.astype(np.int8)


def pdp_reciprocal(kernel: int) -> int:
    """The 0.16 fixed-point reciprocal of a pooling kernel's side that NVDLA's compiler programs
    (RECIP_KERNEL_WIDTH / HEIGHT): floor(2^16 / kernel), 0x5555 for 3, 0x10000 for 1."""
    return (1 << 16) // int(kernel)


def pool2d_int8(x: np.ndarray, kind: str = "max", kernel=2, stride=2, padding=0,
                count_include_pad: bool = False, zero: int = 0) -> np.ndarray:
    """INT8 pooling on codes with zero point ``zero``, NVDLA's PDP: max of the image elements;
    average ``sat8(rhaz(rhaz(S * rw, 16) * rh, 16))``, S = the sum of the window's codes with
    each padded position reading as ``zero`` (NVDLA's PAD_VALUE), rw / rh the kernel's width /
    height reciprocals (:func:`pdp_reciprocal`): the divisor is always the whole window, so an
    average over the image elements only (count_include_pad False with padding) is refused."""
    if x.dtype != np.int8:
        raise AccelDtypeError(f"pool2d_int8 takes int8 codes, got {x.dtype}")
    kernel_h, kernel_w = _pair(kernel, "kernel")
    values, inside = _pool_windows(x.astype(np.int64), kernel, stride, padding, 0)
    if kind == "max":
        return np.where(inside, values, -129).max(axis=0).astype(np.int8)
    if not count_include_pad and any(_padding(padding)):
        raise AccelUnsupportedError(
            f"an INT8 average over the in-image elements only (count_include_pad False with "
            f"padding {padding}): NVDLA's PDP divides by the whole window")
    total = np.where(inside, values, int(zero)).sum(axis=0)
    first = rhaz(total * pdp_reciprocal(kernel_w), 16)
    return sat8(rhaz(first * pdp_reciprocal(kernel_h), 16)).astype(np.int8)


# --- FP16 ------------------------------------------------------------------------------------

# --- Winograd F(2x2, 3x3) (accel_conv_mode in accel.h) ---------------------------------------

WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
WINOGRAD_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def winograd_fits(kernel, stride, dilation=1) -> bool:
    """Whether a convolution meets Winograd mode's shape conditions, any groups (the
    configuration must also have the feature; the C library is the authority, this mirrors it
    for tests)."""
    (kh, kw), (sh, sw) = _pair(kernel, "kernel"), _pair(stride, "stride")
    return (_pair(dilation, "dilation") == (1, 1) and sh == sw and
            -(-kh // sh) == 3 and -(-kw // sw) == 3)


def _per_group(function, x: np.ndarray, weights: np.ndarray, groups: int, *args):
    """A grouped convolution as one per group (as NVDLA's compiler splits it): group g reads
    input channels g*C/groups .. and computes kernels g*K/groups ..; results along K."""
    if groups == 1:
        return function(x, weights, *args)
    x, weights = np.asarray(x), np.asarray(weights)
    c, k = x.shape[1] // groups, weights.shape[0] // groups
    return np.concatenate([function(x[:, g * c:(g + 1) * c], weights[g * k:(g + 1) * k], *args)
                           for g in range(groups)], axis=1)


def _winograd_fold(x: np.ndarray, weights: np.ndarray, stride, padding):
    """The stride folded into channels: the 4x4 input tiles [N, C*s*s, th, tw, 4, 4] of the
    2x2 output tiles, the folded 3x3 kernels [K, C*s*s, 3, 3] and the output size."""
    n, c, h, w = x.shape
    k, _, kernel_h, kernel_w = weights.shape
    s = _pair(stride, "stride")[0]
    top, left, bottom, right = _padding(padding)
    out_h = (h + top + bottom - kernel_h) // s + 1
    out_w = (w + left + right - kernel_w) // s + 1
    th, tw = -(-out_h // 2), -(-out_w // 2)
    hf, wf = 2 * th + 2, 2 * tw + 2
    padded = np.zeros((n, c, max(hf * s, top + h), max(wf * s, left + w)), x.dtype)
    padded[:, :, top:top + h, left:left + w] = x
    padded = padded[:, :, :hf * s, :wf * s]
    folded = padded.reshape(n, c, hf, s, wf, s).transpose(0, 1, 3, 5, 2, 4).reshape(
        n, c * s * s, hf, wf)
    tiles = np.lib.stride_tricks.sliding_window_view(folded, (4, 4), axis=(2, 3))[:, :, ::2, ::2]
    return tiles, _winograd_kernels(weights, s), (out_h, out_w)


def _winograd_kernels(weights: np.ndarray, s: int) -> np.ndarray:
    """The folded 3x3 kernels [K, C*s*s, 3, 3]: tap (r', s') of channel (c, a, b) is
    weights[k, c, r'*s + a, s'*s + b], 0 beyond the kernel."""
    k, c, kernel_h, kernel_w = weights.shape
    kernels = np.zeros((k, c, 3 * s, 3 * s), weights.dtype)
    kernels[:, :, :kernel_h, :kernel_w] = weights
    return kernels.reshape(k, c, 3, s, 3, s).transpose(0, 1, 3, 5, 2, 4).reshape(
        k, c * s * s, 3, 3)


def _rows_then_columns(d: np.ndarray, transform) -> np.ndarray:
    """transform(d) on the last two axes, rows first, then columns (accel.h's order)."""
    rows = transform(np.swapaxes(d, -1, -2))        # combines rows: each column at a time
    return transform(np.swapaxes(rows, -1, -2))     # then combines columns


def _bt(v: np.ndarray) -> np.ndarray:
    """B^T applied along the last axis, one addition per element, in v's dtype."""
    v0, v1, v2, v3 = (v[..., i] for i in range(4))
    return np.stack([v0 - v2, v1 + v2, v2 - v1, v1 - v3], axis=-1)


def _at(m: np.ndarray) -> np.ndarray:
    """A^T applied along the last axis: (m0 + m1) + m2, (m1 - m2) - m3."""
    m0, m1, m2, m3 = (m[..., i] for i in range(4))
    return np.stack([m0 + m1 + m2, m1 - m2 - m3], axis=-1)


def winograd_weights(weights: np.ndarray, stride=1, precision: str = "fp32") -> np.ndarray:
    """The pre-transformed weights [K, C*s*s, 4, 4]: G g G^T in float32 in the order of NVDLA's
    compiler (G g first, each sum from 0 up), rounded to half for fp16; for int8 the exact
    integers 4 G g G^T (int64)."""
    kernels = _winograd_kernels(np.asarray(weights), _pair(stride, "stride")[0])
    if precision == "int8":
        g2 = (2 * WINOGRAD_G).astype(np.int64)
        return np.einsum("mr,kcrs,qs->kcmq", g2, kernels.astype(np.int64), g2)
    g = kernels.astype(np.float32)
    G = WINOGRAD_G.astype(np.float32)
    t = np.zeros(g.shape[:2] + (4, 3), np.float32)
    for n in range(3):   # t[m][p] = sum_n G[m][n] g[n][p]
        t = t + G[:, n][:, None] * g[..., n, None, :]
    u = np.zeros(g.shape[:2] + (4, 4), np.float32)
    for n in range(3):   # u[r][q] = sum_n t[r][n] G[q][n]
        u = u + t[..., :, n, None] * G[:, n][None, :]
    return u.astype(np.float16).astype(np.float32) if precision == "fp16" else u


def conv2d_winograd(x: np.ndarray, weights: np.ndarray, stride=1, padding=0,
                    precision: str = "fp32", in_zero: int = 0, groups: int = 1) -> np.ndarray:
    """The CONV's accumulators in Winograd mode, as accel.h defines them: float32 for fp32 and
    fp16 (x, weights: float32, or halves for fp16), exact int64 for int8 (codes); a grouped
    conv group by group. The sum over channels runs in float64 here, rounded once to float32:
    the simulator's fp32 GEMM order differs, within gamma(C') of the bound's S."""
    return _per_group(_conv2d_winograd, x, weights, groups, stride, padding, precision, in_zero)


def _conv2d_winograd(x, weights, stride, padding, precision, in_zero) -> np.ndarray:
    if precision == "int8":
        v = np.asarray(x).astype(np.int64) - int(in_zero)
        tiles, _, (out_h, out_w) = _winograd_fold(v, np.asarray(weights), stride, padding)
        u = winograd_weights(weights, stride, "int8")
        vt = _rows_then_columns(tiles, _bt)
        m = np.einsum("kcij,ncyxij->nkyxij", u.astype(np.float64), vt.astype(np.float64))
        y4 = _rows_then_columns(np.rint(m).astype(np.int64), _at)
        y = y4 // 4
    else:
        data = _widen(x) if precision == "fp16" else np.asarray(x, np.float32)
        tiles, _, (out_h, out_w) = _winograd_fold(data, np.asarray(weights), stride, padding)
        wide = _widen(weights) if precision == "fp16" else np.asarray(weights, np.float32)
        u = winograd_weights(wide, stride, precision)
        vt = _rows_then_columns(tiles, _bt)
        if precision == "fp16":  # beyond the half range the operand is infinite (accel.h)
            with np.errstate(over="ignore"):
                vt = vt.astype(np.float16).astype(np.float32)
        # the MAC array: each M element the FMA chain over the channels from 0 up, from 0
        # (winograd.c); halves' products are exact in float32 (_fma32's fast path)
        wide = np.float32 if precision == "fp16" else np.float64
        u, vt = u.astype(wide), vt.astype(wide)
        m = np.zeros((vt.shape[0], u.shape[0], *vt.shape[2:]), np.float32)
        for c in range(u.shape[1]):
            m = _fma32(u[None, :, c, None, None], vt[:, None, c], m)
        y = _rows_then_columns(m, _at)
    n, k, th, tw = y.shape[:4]
    y = y.transpose(0, 1, 2, 4, 3, 5).reshape(n, k, 2 * th, 2 * tw)
    return np.ascontiguousarray(y[:, :, :out_h, :out_w])


def winograd_error_bound(x: np.ndarray, weights: np.ndarray, stride=1, padding=0,
                         precision: str = "fp32", groups: int = 1) -> np.ndarray:
    """accel.h's bound on |Winograd accumulator - exact convolution| per output: eps * S with
    S = sum over channels of |A^T| (|G| |g| |G^T| . |B^T| |d| |B|) |A| (float64), eps =
    gamma(C' + 11) for fp32, (1 + 2^-11)^2 (1 + gamma(C' + 11)) - 1 for fp16, 0 for int8
    (a grouped conv: each group's, C' its folded channels)."""
    return _per_group(_winograd_error_bound, x, weights, groups, stride, padding, precision)


def _winograd_error_bound(x, weights, stride, padding, precision) -> np.ndarray:
    data = np.abs(np.asarray(x, np.float64))
    tiles, kernels, (out_h, out_w) = _winograd_fold(data, np.abs(np.asarray(weights, np.float64)),
                                                    stride, padding)
    G, BT, AT = np.abs(WINOGRAD_G), np.abs(WINOGRAD_BT), np.abs(WINOGRAD_AT)
    u = np.einsum("mr,kcrs,qs->kcmq", G, kernels, G)
    v = np.einsum("ai,ncyxij,bj->ncyxab", BT, tiles, BT)
    m = np.einsum("kcab,ncyxab->nkyxab", u, v)
    total = np.einsum("pa,nkyxab,qb->nkyxpq", AT, m, AT)
    n, k, th, tw = total.shape[:4]
    total = total.transpose(0, 1, 2, 4, 3, 5).reshape(n, k, 2 * th, 2 * tw)[:, :, :out_h, :out_w]
    if precision == "int8":
        return np.zeros_like(total)
    unit = 2.0 ** -24
    terms = kernels.shape[1] + 11
    gamma = terms * unit / (1 - terms * unit)
    eps = gamma if precision == "fp32" else (1 + 2.0 ** -11) ** 2 * (1 + gamma) - 1
    return eps * total


def _widen(values) -> Optional[np.ndarray]:
    """fp16 operands as the engines see them: halves widened (exactly) to float32."""
    if values is None:
        return None
    array = np.asarray(values)
    if array.dtype != np.float16:
        raise AccelDtypeError(f"fp16 operands are float16 halves, got {array.dtype}")
    return array.astype(np.float32)


def conv2d_fp16(x: np.ndarray, weights: np.ndarray, stride=1, padding=0, dilation=1,
                groups: int = 1) -> np.ndarray:
    """The FP16 CONV's accumulators (float32, not rounded to half: they go to the SDP): the
    exact products of halves summed in fp32 in the FP32 CONV's order (:func:`conv2d_f32`)."""
    return conv2d_f32(_widen(x), _widen(weights), stride, padding, dilation, groups,
                      halves=True)


def sdp_fp16(x: np.ndarray, scale=None, shift=None, ew_op: Optional[str] = None, operand=None,
             act: Optional[str] = None, clip=(0.0, 6.0), prelu_slope=None,
             x_units: Sequence = (None, None, None, None), x_per_channel=()) -> np.ndarray:
    """The FP16 SDP: the fp32 SDP on widened halves (x: halves read from memory, or a CONV's
    float32 accumulators), LUT activations through the LUT model, the result rounded once to
    half."""
    x = np.asarray(x)
    t = x.astype(np.float32) if x.dtype in (np.float16, np.float32) else _widen(x)
    # Every half is a valid input, the signalling NaNs too: IEEE arithmetic raises its invalid
    # flag on them and returns a quiet NaN, as the engine does; NumPy's warning about the flag
    # is not an error here.
    with np.errstate(invalid="ignore"):
        wide = sdp(t, _widen(scale), _widen(shift), ew_op, _widen(operand), act, clip,
                   _widen(prelu_slope), use_lut=True,
                   x_units=[_widen(v) for v in x_units], x_per_channel=x_per_channel)
    with np.errstate(over="ignore"):  # beyond the half range: infinity, as the engine rounds
        return wide.astype(np.float16)


def pool2d_fp16(x: np.ndarray, kind: str = "max", kernel=2, stride=2, padding=0,
                count_include_pad: bool = False) -> np.ndarray:
    """The FP16 PDP: pooling in float32 on widened halves as the engine computes it (average:
    the window's image elements summed in float32 row by row, from 0, then divided by the
    float32 divisor), the result rounded once to half."""
    # pool2d on the widened halves is that float32 computation; the result rounded to half
    with np.errstate(over="ignore"):  # beyond the half range: infinity, as the engine rounds
        return pool2d(_widen(x), kind, kernel, stride, padding,
                      count_include_pad).astype(np.float16)


# --- BDMA ------------------------------------------------------------------------------------

def bdma_copy(x: np.ndarray, channels: int, src_offset: int = 0, src_stride: int = 1,
              dst_offset: int = 0, dst_stride: int = 1, dst_channels: Optional[int] = None,
              out: Optional[np.ndarray] = None, repeat: int = 0, src_repeat_stride: int = 0,
              dst_repeat_stride: int = 0) -> np.ndarray:
    """``out[:, dst_offset + r*dst_repeat_stride + i*dst_stride] = x[:, src_offset +
    r*src_repeat_stride + i*src_stride]`` for ``r <= repeat``, ``i < channels``, on a copy of
    ``out`` (default: zeros of (n, dst_channels, h, w)); the other channels keep their values.
    Bits are copied as they are (NaN payloads included). The repeats' destination blocks must
    follow one another or interleave (accel.h: no channel written twice)."""
    x = np.asarray(x)
    if dst_channels is None:
        dst_channels = dst_offset + repeat * dst_repeat_stride + (channels - 1) * dst_stride + 1
    shape = (x.shape[0], dst_channels, *x.shape[2:])
    result = np.zeros(shape, x.dtype) if out is None else np.array(out, dtype=x.dtype)
    if result.shape != shape:
        raise AccelInvalidError(f"bdma out of shape {result.shape}, the copy writes {shape}")
    if channels < 1 or repeat < 0 or min(src_offset, dst_offset, src_repeat_stride,
                                         dst_repeat_stride) < 0 or min(src_stride,
                                                                       dst_stride) < 1:
        raise AccelInvalidError(f"bdma fields out of range: channels {channels}, repeat {repeat}, "
                                f"strides {src_stride}, {dst_stride}, {src_repeat_stride}, "
                                f"{dst_repeat_stride}, offsets {src_offset}, {dst_offset}")
    span = (channels - 1) * dst_stride
    if repeat > 0 and not dst_repeat_stride > span and not (
            dst_repeat_stride >= 1 and dst_stride > repeat * dst_repeat_stride):
        raise AccelInvalidError(f"bdma dst_repeat_stride {dst_repeat_stride} with repeat "
                                f"{repeat}, channels {channels}, dst_stride {dst_stride} writes "
                                "some channel twice")
    repeats = np.arange(repeat + 1, dtype=np.int64)[:, None]
    i = np.arange(channels, dtype=np.int64)
    source = (src_offset + repeats * src_repeat_stride + i * src_stride).ravel()
    target = (dst_offset + repeats * dst_repeat_stride + i * dst_stride).ravel()
    if source.max() >= x.shape[1] or target.max() >= dst_channels:
        raise AccelInvalidError(f"bdma channels {source.min()}..{source.max()} of {x.shape[1]} "
                                f"-> {target.min()}..{target.max()} of {dst_channels} are out "
                                "of range")
    result[:, target] = x[:, source]
    return result


# --- RUBIK -----------------------------------------------------------------------------------

def rubik_contract(x: np.ndarray, stride_x: int, stride_y: int) -> np.ndarray:
    """RUBIK's contract mode (accel.h, accel_rubik_desc): input (n, C, H, W) with
    C = stride_x * stride_y * C', output (n, C', H * stride_y, W * stride_x) with
    ``out[n, c, y*stride_y + a, x*stride_x + b] = x[n, (a*stride_x + b)*C' + c, y, x]``
    (phase-major groups of C' channels). Bits are moved as they are."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise AccelShapeError(f"rubik contract input has shape {x.shape}, not (n, c, h, w)")
    n, c, h, w = x.shape
    phases = stride_x * stride_y
    if stride_x < 1 or stride_y < 1 or c % phases:
        raise AccelShapeError(f"rubik contract: channels {c} are not a multiple of stride_x = "
                              f"{stride_x} x stride_y = {stride_y}")
    groups = x.reshape(n, stride_y, stride_x, c // phases, h, w)   # [n][a][b][c'][y][x]
    return np.ascontiguousarray(groups.transpose(0, 3, 4, 1, 5, 2)).reshape(
        n, c // phases, h * stride_y, w * stride_x)                   # [n][c'][y][a][x][b]


def convert(x: np.ndarray, source: str, target: str, scale: float, zero: int) -> np.ndarray:
    """A converting SDP (int8 <-> fp16): accel_convert's values through fp32."""
    if (source, target) == ("int8", "fp16"):
        return ((x.astype(np.float64) - zero) * np.float64(np.float32(scale))).astype(
            np.float32).astype(np.float16)
    if (source, target) == ("fp16", "int8"):
        steps = x.astype(np.float64) / np.float64(np.float32(scale))
        steps = np.clip(np.where(np.isnan(steps), 0.0, steps), -256, 256)
        return sat8(np.sign(steps) * np.floor(np.abs(steps) + 0.5) + zero).astype(np.int8)
    raise AccelInvalidError(f"a converting SDP converts int8 <-> fp16, not {source} -> {target}")


# --- ops and chains --------------------------------------------------------------------------

def _sdp_int8_op(op: Sdp, x: np.ndarray) -> np.ndarray:
    """An INT8 SDP op on int8 codes read from memory, or on a CONV's int64 accumulators."""
    c = op.int8_converters
    v = x.astype(np.int64) - c["in_zero"] if x.dtype == np.int8 else x
    return sdp_int8(v, op.bias, op.mul, op.rshift, op.ew_op, op.operand, c["ew_zero"],
                    c["ew_mul"], c["ew_shift"], op.act, op.prelu_mul, c["prelu_shift"],
                    c["out_mul"], c["out_shift"], c["out_zero"], c["clip_lo"], c["clip_hi"],
                    op.lut)


def run_op(op: Op, x: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """One engine op, as its descriptor says, in its precision. An INT8 CONV returns its int64
    accumulators and an FP16 CONV its float32 ones: they are the input of the SDP that must
    follow (see run_chain). ``out``: a BDMA's destination before the copy (default zeros)."""
    precision = getattr(op, "precision", "fp32")
    if isinstance(op, Bdma):
        if np.asarray(x).dtype != dtype_for(precision):
            raise AccelDtypeError(f"a {precision} BDMA copies {np.dtype(dtype_for(precision))} "
                                  f"data, got {np.asarray(x).dtype}")
        return bdma_copy(x, op.channels, op.src_offset, op.src_stride, op.dst_offset,
                         op.dst_stride, op.output_channels, out, op.repeat,
                         op.src_repeat_stride, op.dst_repeat_stride)
    if isinstance(op, Rubik):
        if np.asarray(x).dtype != dtype_for(precision):
            raise AccelDtypeError(f"a {precision} RUBIK moves {np.dtype(dtype_for(precision))} "
                                  f"data, got {np.asarray(x).dtype}")
        if op.mode != "contract":
            raise AccelInvalidError(f"rubik mode = {op.mode!r}: the simulator models contract "
                                    "only")
        return rubik_contract(x, op.stride_x, op.stride_y)
    if out is not None:
        raise AccelInvalidError("run_op: out is a BDMA's destination; other ops write all of "
                                "their output")
    if isinstance(op, Conv):
        if op.mode == "winograd":
            return conv2d_winograd(x, op.weights, op.stride, op.padding, precision, op.in_zero,
                                   op.groups)
        if precision == "int8":
            return conv2d_int8(x, op.weights, op.stride, op.padding, op.dilation, op.groups,
                               op.in_zero)
        if precision == "fp16":
            return conv2d_fp16(x, op.weights, op.stride, op.padding, op.dilation, op.groups)
        return conv2d_f32(x, op.weights, op.stride, op.padding, op.dilation, op.groups)
    if isinstance(op, Sdp):
        if op.convert:
            return convert(x, precision, op.output_precision, op.cvt_scale, op.cvt_zero)
        if op.ew_per_channel and op.operand is not None:  # one value per image and channel
            n, c = np.shape(x)[:2]
            operand = np.asarray(op.operand).reshape(n, c, 1, 1)
            op = dataclasses.replace(op, ew_per_channel=False,
                                     operand=np.ascontiguousarray(
                                         np.broadcast_to(operand, np.shape(x))))
        if precision == "int8":
            if op.has_x_units:
                raise AccelUnsupportedError("sdp x1 / x2 operands run in fp32 and fp16 only, "
                                            "not int8")
            return _sdp_int8_op(op, x)
        units = [getattr(op, field) for field in X_FIELDS]
        if precision == "fp16":
            return sdp_fp16(x, op.scale, op.shift, op.ew_op, op.operand, op.act,
                            op.clip_bounds, op.prelu_slope, units, op.x_per_channel_fields())
        return sdp(x, op.scale, op.shift, op.ew_op, op.operand, op.act, op.clip_bounds,
                   op.prelu_slope, x_units=units, x_per_channel=op.x_per_channel_fields())
    if isinstance(op, Lrn):
        if precision == "fp16":  # the fp32 computation on widened halves, rounded once
            y = lrn(_widen(x), op.size, op.alpha, op.beta, op.k)
            with np.errstate(over="ignore"):  # beyond the half range: infinity, as the CDP
                return y.astype(np.float16)
        if precision == "int8":
            if not isinstance(op.int8, CdpInt8):
                raise AccelInvalidError("an INT8 CDP needs its tables (Lrn.int8)")
            return cdp_int8(x, op.size, op.int8)
        return lrn(x, op.size, op.alpha, op.beta, op.k)
    if isinstance(op, Pool):
        if precision == "int8":
            return pool2d_int8(x, op.kind, op.kernel, op.stride, op.padding,
                               op.count_include_pad, op.zero)
        if precision == "fp16":
            return pool2d_fp16(x, op.kind, op.kernel, op.stride, op.padding,
                               op.count_include_pad)
        return pool2d(x, op.kind, op.kernel, op.stride, op.padding, op.count_include_pad)
    raise AccelDtypeError(f"not an engine op: {op!r}")


def run_chain(ops: Sequence[Op], x: np.ndarray) -> np.ndarray:
    """A chain of engine ops; 2-D [N, C] input runs as [N, C, 1, 1]. Fused and independent
    runs compute the same values, so the chain's mode does not matter here."""
    flat = x.ndim == 2
    t = x.reshape(*x.shape, 1, 1) if flat else x
    ops = list(ops)
    for i, op in enumerate(ops):
        if isinstance(op, Conv) and op.precision in ("int8", "fp16") and not (
                i + 1 < len(ops) and isinstance(ops[i + 1], Sdp)):
            raise AccelInvalidError(f"op {i}: an {op.precision} CONV must be followed by an SDP")
        t = run_op(op, t)
    return t.reshape(t.shape[:2]) if flat and t.shape[2:] == (1, 1) else t


# --- decompositions (sim/decompose.py) ----------------------------------------------------------

def run_decomposition(decomposition, x: np.ndarray, inputs=None) -> np.ndarray:
    """A layer norm's, softmax's or attention's engine passes (sim/decompose.py's
    Decomposition) in NumPy: each pass through :func:`run_chain` with its element-wise operand
    and computed weights bound, as the simulator runs them (``inputs``: the tensors besides
    ``x``, attention's K and V); bit for bit the simulator's, its CONVs summing in the
    library's order (:func:`conv2d_f32`; but for a batch of [N, C, 1, 1] rows, N > 1, which
    the library sums through OpenBLAS)."""
    dtype = dtype_for(decomposition.precision)
    x = np.asarray(x, dtype=dtype)

    tensors = decomposition.run(lambda p, ops, data, out: run_chain(ops, data), x,
                                {k: np.asarray(v, dtype)
                                         for k, v in (inputs or {}).items()})
    return decomposition.tensor(tensors, decomposition.output)
