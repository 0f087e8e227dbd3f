"""The FP32 SDP's lookup-table activations in NumPy, in the C library's operation order
(``csrc/lut.c``), written apart from the C: the building blocks of the activations' reference
definitions, which each LUT activation's row of the op vocabulary holds (``vocabulary.py``:
``exact``, ``function64``) and :mod:`.reference` reads. NumPy, and the C library for GELU's table
(one copy of its coefficients)."""
from __future__ import annotations

import math

import numpy as np

from .._accel_ffi import ffi, lib
from ..errors import check

_erfc = np.frompyfunc(math.erfc, 1, 1)
_SQRT1_2 = 0.70710678118654752440
_SQRT_2_PI = 0.79788456080286535588  # sqrt(2 / pi)
_exp64 = np.frompyfunc(math.exp, 1, 1)  # libm's exp, as the C library's


def gelu_tanh64(t: np.ndarray, libm: bool = True) -> np.ndarray:
    """GELU's tanh form in float64 as the C library computes it (csrc/lut_tables.c: gelu_tanh64):
    t / (1 + exp(-2 u)), u = sqrt(2 / pi) (t + 0.044715 t^3), the exponent held to 709;
    through libm's exp (the FP32 SDP's bits), or NumPy's (``libm`` False: the table entries,
    rounded to half, where the two never differ)."""
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        u = _SQRT_2_PI * (t + 0.044715 * (t * t * t))
        z = -2.0 * u
        z = np.where(z > 709.0, 709.0, z)  # NaN stays NaN (C's `z > 709` is false for it)
        return t / (1.0 + (_exp64(z).astype(np.float64) if libm else np.exp(z)))


def mish_f32(t: np.ndarray) -> np.ndarray:
    """Mish in fp32 as the FP32 SDP computes it (csrc/lut.c: mish_f32): e = exp_f32(t),
    n = e (e + 2), t (n / (n + 2)), each step rounded once; t itself above 20."""
    t = np.asarray(t, dtype=_F32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        e = exp_f32(t)
        n = e * (e + _F32(2.0))
        y = t * (n / (n + _F32(2.0)))
    return np.where(t > _F32(20.0), t, y).astype(_F32)


def _mish1(t: float) -> float:
    return t * math.tanh(t if t > 30.0 else math.log1p(math.exp(t)))


_mish = np.frompyfunc(_mish1, 1, 1)


def mish64(t: np.ndarray) -> np.ndarray:
    """Mish in float64 as the C library computes it (csrc/lut_tables.c: mish64): t tanh(ln(1 + e^t))
    through libm's exp, log1p and tanh (Python's math module calls them), t from 30 on."""
    return _mish(np.asarray(t, dtype=np.float64)).astype(np.float64)


def _softplus1(t: float) -> float:
    return t if t > 30.0 else math.log1p(math.exp(t))


_softplus = np.frompyfunc(_softplus1, 1, 1)


def softplus64(t: np.ndarray) -> np.ndarray:
    """softplus in float64 as the C library computes it (csrc/lut_tables.c: softplus64):
    ln(1 + e^t) through libm's log1p and exp (Python's math module calls them), t from 30 on;
    rounded to float32 once, the FP32 SDP's softplus."""
    return _softplus(np.asarray(t, dtype=np.float64)).astype(np.float64)


def _log1(t: float) -> float:
    if t > 0.0:
        return math.log(t)  # libm's log (math.log raises for t <= 0, which C's answers)
    return -math.inf if t == 0.0 else math.nan


_log = np.frompyfunc(_log1, 1, 1)


def log64(t: np.ndarray) -> np.ndarray:
    """ln(t) in float64 through libm's log, as the FP32 SDP's log before its one rounding
    (csrc/lut.c): -inf at +-0, NaN below 0 and for NaN, +inf at +inf."""
    return _log(np.asarray(t, dtype=np.float64)).astype(np.float64)


def gelu64(t: np.ndarray) -> np.ndarray:
    """GELU in float64 through libm's erfc: the function its tables are built from
    (csrc/lut_tables.c: lut_function); the FP32 SDP computes :func:`gelu_f32` instead."""
    return 0.5 * t * _erfc(-t * _SQRT1_2).astype(np.float64)


_F32 = np.float32


def fma_f32(a, b, c) -> np.ndarray:
    """a b + c rounded once to float32, as C's fmaf (the FP32 SDP's fused multiply-adds):
    a b is exact in float64 (24 + 24 bits < 53); the sum is rounded to odd in float64 (the
    round-to-nearest sum, stepped one ulp towards the exact sum where it is inexact and even;
    the error from TwoSum, exact without overflow, which float32 operands cannot reach), and
    a sum rounded to odd with 53 bits rounds to the nearest float32 (24 bits, fewer than 53 -
    2) as the exact sum does: no double rounding. Infinities and NaN as the float64 sum's."""
    with np.errstate(invalid="ignore", over="ignore"):
        c64 = np.asarray(c, dtype=np.float32).astype(np.float64)
        p = (np.asarray(a, dtype=np.float32).astype(np.float64)
             * np.asarray(b, dtype=np.float32).astype(np.float64))
        s = p + c64
        v = s - p
        e = (p - (s - v)) + (c64 - v)  # TwoSum: s + e = p + c exactly
        bits = np.atleast_1d(s).view(np.uint64)
        even = (bits & np.uint64(1)) == 0
        step = np.isfinite(s) & (e != 0) & even
        # towards the exact sum: away from zero where e has s's sign (s is not 0 there)
        up = (e > 0) == (s > 0)
        bits = np.where(step, np.where(up, bits + np.uint64(1), bits - np.uint64(1)), bits)
        return bits.view(np.float64).astype(np.float32).reshape(np.shape(s))
#: exp_f32's constants (csrc/lut.c): log2(e), 1.5 2^23, ln 2 in two parts, the polynomial
_EXP_LOG2E, _EXP_ROUND = _F32(1.44269502163), _F32(12582912.0)
_LN2_HI, _LN2_LO = _F32(0.693359375), _F32(-2.12194440e-4)
_EXP_Q = [_F32(4.999999404e-01), _F32(1.666652113e-01), _F32(4.166838899e-02),
          _F32(8.368745446e-03), _F32(1.381453942e-03)]


def _exp_parts(a: np.ndarray, d: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """e^(a + d) taken apart as the C library's exp does (exp_parts in csrc/lut.c), for exp_f32
    (d None: e^a) and gelu_f32 (a exact, d small): k = (a + d) log2(e) + 1.5 2^23, whose bits
    hold n = round((a + d) / ln 2) (ties to even), r = a - n ln2_hi (exact), + d, - n ln2_lo,
    and p = 1 + r + r^2 q(r); returns (p, k), e^(a + d) being p 2^n (:func:`_exp_scales`)."""
    k = fma_f32(a if d is None else a + d, _EXP_LOG2E, _EXP_ROUND)
    n = k - _EXP_ROUND
    r = a - n * _LN2_HI  # exact product: the C library's fmaf(-n, LN2_HI, a)
    if d is not None:
        r = r + d
    r = fma_f32(-n, _LN2_LO, r)
    q = fma_f32(_EXP_Q[4], r, _EXP_Q[3])
    for coefficient in (_EXP_Q[2], _EXP_Q[1], _EXP_Q[0]):
        q = fma_f32(q, r, coefficient)
    p = fma_f32(r * r, q, r)
    return p + _F32(1), k


def _exp_scales(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2^h and 2^(n - h) as uint32 bits, h = n >> 1, n from k's bits (:func:`_exp_parts`): two
    powers of two, each normal where the exps hold their arguments, whose product 2^n is
    multiplied in one at a time, so a subnormal result rounds once."""
    ni = np.atleast_1d(k).view(np.uint32) - np.uint32(0x4B400000)
    h = (ni.view(np.int32) >> 1).view(np.uint32)
    return (h + np.uint32(127)) << np.uint32(23), (ni - h + np.uint32(127)) << np.uint32(23)


def exp_f32(t: np.ndarray) -> np.ndarray:
    """e^t in float32 as the FP32 SDP computes it (exp_f32 in csrc/lut.c, the same operations
    in the same order, so the same bits): at most 0.99 ulp from the exact value (accel.h)."""
    t = np.asarray(t, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.where(t < _F32(-104), _F32(-104), t)  # NaN stays
        c = np.where(c > _F32(89), _F32(89), c).astype(np.float32)
        p, k = _exp_parts(c)
        s1, s2 = _exp_scales(k)
        return ((np.atleast_1d(p) * s1.view(np.float32)) * s2.view(np.float32)).reshape(t.shape)


#: tanh_f32's polynomial (csrc/lut.c): tanh(t) = t + t^3 P(t^2) for |t| < 0.625
_TANH_P = [_F32(-3.333328068e-01), _F32(1.333144158e-01), _F32(-5.373971164e-02),
           _F32(2.063908055e-02), _F32(-5.704979878e-03)]


def tanh_f32(t: np.ndarray) -> np.ndarray:
    """tanh in float32 as the FP32 SDP computes it (tanh_f32 in csrc/lut.c, the same
    operations, so the same bits): a polynomial below |t| = 0.625, 1 - 2 / (exp_f32(2|t|) + 1)
    with t's sign from there."""
    shape = np.shape(t)
    t = np.atleast_1d(np.asarray(t, dtype=np.float32))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        sign = t.view(np.uint32) & np.uint32(0x80000000)
        a = (t.view(np.uint32) ^ sign).view(np.float32)
        z = t * t
        q = _TANH_P[4] * z + _TANH_P[3]
        for coefficient in (_TANH_P[2], _TANH_P[1], _TANH_P[0]):
            q = q * z + coefficient
        near = t + (t * z) * q
        e = exp_f32(a + a)
        far = (_F32(1) - _F32(2) / (e + _F32(1))).astype(np.float32)
        y = np.where(a < _F32(0.625), near, far).astype(np.float32)
        return (y.view(np.uint32) | sign).view(np.float32).reshape(shape)  # -0 stays -0


def _gelu_coefficients() -> np.ndarray:
    """gelu_f32's table, the floats the C library evaluates (csrc/lut.c: GELU_C, exported by
    accel_gelu_coefficients, so one copy): [j][n] is d^j's coefficient of C(x) =
    erfcx(x / sqrt 2) / 2 on [n, n + 1), d = x - (n + 0.5)."""
    count = lib.ACCEL_GELU_COEFFICIENTS
    out = ffi.new("float[]", count)
    check(lib.accel_gelu_coefficients(out, count))
    table = np.frombuffer(ffi.buffer(out), dtype=np.float32).copy()
    return table.reshape(lib.ACCEL_GELU_DEGREE + 1, lib.ACCEL_GELU_INTERVALS)


_GELU_C = _gelu_coefficients()


def gelu_f32(t: np.ndarray) -> np.ndarray:
    """GELU in float32 as the FP32 SDP computes it (gelu_f32 in csrc/lut.c, the same float32
    operations in the same order, so the same bits): t (1 - E) for t >= 0, t E below, E =
    erfc(|t| / sqrt 2) / 2 = exp(A + D) C(x), x = |t| held to 15, s = x with 12 low bits
    cleared, A = -s^2 / 2 (exact), D = (s - x)(s + x) / 2, the exp taken apart as exp_f32
    does (one range reduction of A + D, A's part exact), C a degree-7 polynomial per unit
    interval of x; within the bound accel.h states of the exact value."""
    t = np.asarray(t, dtype=np.float32)
    shape = t.shape
    t = np.atleast_1d(t)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        a = (t.view(np.uint32) & np.uint32(0x7FFFFFFF)).view(np.float32)
        x = np.where(a < _F32(15), a, _F32(15)).astype(np.float32)  # NaN: 15
        n = x.astype(np.int32)
        d = x - (n.astype(np.float32) + _F32(0.5))
        q = _GELU_C[7][n]
        for j in range(6, -1, -1):
            q = fma_f32(q, d, _GELU_C[j][n])
        sq = x * x
        big = sq * _F32(-0.5)
        small = fma_f32(x, x, -sq) * _F32(-0.5)  # x^2 = sq + fma(x, x, -sq) exactly
        p, k = _exp_parts(big, small)
        u = q * p
        b1, b2 = _exp_scales(k)
        s1 = b1.view(np.float32)
        inside = np.where(a < _F32(15), np.uint32(0xFFFFFFFF), np.uint32(0))
        s2 = (b2 & inside).view(np.float32)
        y = np.where(t < 0, ((t * u) * s1) * s2,
                     t * (_F32(1) - (u * s1) * s2)).astype(np.float32)
        return y.reshape(shape)
