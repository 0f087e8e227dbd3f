"""The FP32 SDP's lookup-table activations in NumPy, in the C library's operation order
(``csrc/lut.c``), written apart from the C: the building blocks of the activations' reference
definitions, which each LUT activation's row of the op vocabulary holds (``vocabulary.py``:
``exact``, ``function64``) and :mod:`.reference` reads. NumPy only."""
from __future__ import annotations

import math

import numpy as np

_erfc = np.frompyfunc(math.erfc, 1, 1)
_SQRT1_2 = 0.70710678118654752440
_SQRT_2_PI = 0.79788456080286535588  # sqrt(2 / pi)
_exp64 = np.frompyfunc(math.exp, 1, 1)  # libm's exp, as the C library's


def gelu_tanh64(t: np.ndarray, libm: bool = True) -> np.ndarray:
    """GELU's tanh form in float64 as the C library computes it (csrc/lut.c: gelu_tanh64):
    t / (1 + exp(-2 u)), u = sqrt(2 / pi) (t + 0.044715 t^3), the exponent held to 709;
    through libm's exp (the FP32 SDP's bits), or NumPy's (``libm`` False: the table entries,
    rounded to half, where the two never differ)."""
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        u = _SQRT_2_PI * (t + 0.044715 * (t * t * t))
        z = -2.0 * u
        z = np.where(z > 709.0, 709.0, z)  # NaN stays NaN (C's `z > 709` is false for it)
        return t / (1.0 + (_exp64(z).astype(np.float64) if libm else np.exp(z)))


def gelu64(t: np.ndarray) -> np.ndarray:
    """GELU in float64 through libm's erfc: the function its tables are built from (csrc/lut.c:
    lut_function); the FP32 SDP computes :func:`gelu_f64` instead."""
    return 0.5 * t * _erfc(-t * _SQRT1_2).astype(np.float64)


_F32 = np.float32
#: exp_f32's constants (csrc/lut.c): log2(e), 1.5 2^23, ln 2 in two parts, the polynomial
_EXP_LOG2E, _EXP_ROUND = _F32(1.44269502163), _F32(12582912.0)
_LN2_HI, _LN2_LO = _F32(0.693359375), _F32(-2.12194440e-4)
_EXP_Q = [_F32(4.999999404e-01), _F32(1.666652113e-01), _F32(4.166838899e-02),
          _F32(8.368745446e-03), _F32(1.381453942e-03)]


def exp_f32(t: np.ndarray) -> np.ndarray:
    """e^t in float32 as the FP32 SDP computes it (exp_f32 in csrc/lut.c, the same operations
    in the same order, so the same bits): at most 0.99 ulp from the exact value (accel.h)."""
    t = np.asarray(t, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.where(t < _F32(-104), _F32(-104), t)  # NaN stays
        c = np.where(c > _F32(89), _F32(89), c).astype(np.float32)
        k = c * _EXP_LOG2E + _EXP_ROUND
        n = k - _EXP_ROUND
        r = c - n * _LN2_HI
        r = r - n * _LN2_LO
        q = _EXP_Q[4] * r + _EXP_Q[3]
        for coefficient in (_EXP_Q[2], _EXP_Q[1], _EXP_Q[0]):
            q = q * r + coefficient
        p = (r * r) * q + r
        p = p + _F32(1)
        ni = np.atleast_1d(k).view(np.uint32) - np.uint32(0x4B400000)
        h = (ni.view(np.int32) >> 1).view(np.uint32)
        s1 = ((h + np.uint32(127)) << np.uint32(23)).view(np.float32)
        s2 = ((ni - h + np.uint32(127)) << np.uint32(23)).view(np.float32)
        return ((np.atleast_1d(p) * s1) * s2).reshape(t.shape)


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


#: gelu_f64's polynomials (csrc/lut.c: the same doubles): erf(a) / a in a^2 on [0, 1), and
#: exp(a^2) erfc(a) in 1 / (a + 4) - 0.135 on [1, 10.5]
_GELU_A = [1.1283791670955126, -0.37612638903183515, 0.1128379167094405, -0.026866170643090832,
           0.005223977605955977, -0.0008548325921832884, 0.00012055293361789941,
           -1.4924708324571507e-05, 1.6447084274239356e-06, -1.6205964194101388e-07,
           1.3709519207384055e-08, -7.77682913736281e-10]
_GELU_B = [0.15921348587767364, 2.379629345296726, 16.81081582883102, 104.19436117406323,
           563.0080875183819, 2620.722423404825, 10290.022841460313, 32766.264300610168,
           77548.52116997201, 100856.85243798897, -107830.48811859265, -851102.8690426609,
           -1280629.0521935227, 2912513.6829396607, 12374987.272467982, 1320276.9524882296]
_EXP64_LN2_HI = float.fromhex("0x1.62e42fefa0000p-1")
_EXP64_C = [1.0 / math.factorial(k) for k in range(14)]


def _exp_f64(x: np.ndarray) -> np.ndarray:
    """e^x in float64 as gelu_f64's exp (csrc/lut.c: exp_f64), for x <= 0."""
    x = np.maximum(x, -708.0)
    k = x * 1.4426950408889634 + 6755399441055744.0
    n = k - 6755399441055744.0
    r = x - n * _EXP64_LN2_HI
    r = r - n * 1.6465717678215697e-12
    p = np.full_like(r, _EXP64_C[13])
    for c in _EXP64_C[12::-1]:
        p = p * r + c
    finite = ~np.isnan(n)
    return np.where(finite, np.ldexp(p, np.where(finite, n, 0).astype(np.int64)), np.nan)


def gelu_f64(t: np.ndarray) -> np.ndarray:
    """GELU in float32 as the FP32 SDP computes it (gelu_f64 in csrc/lut.c, the same double
    operations in the same order, so the same bits): t Phi(t) in double through erf's and
    erfc's polynomials, rounded once, within 0.5 + 1e-6 ulp of the exact value (accel.h)."""
    w = np.asarray(t, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.abs(w) * _SQRT1_2
        q = a * a
        pa = np.full_like(q, _GELU_A[11])
        for c in _GELU_A[10::-1]:
            pa = pa * q + c
        e = a * pa
        v = 1.0 / (a + 4.0) - 0.135
        pb = np.full_like(v, _GELU_B[15])
        for c in _GELU_B[14::-1]:
            pb = pb * v + c
        g = np.where(a > 10.5, 0.0, _exp_f64(-q) * pb)
        positive = ~np.signbit(w)
        phi = np.where(a < 1.0, np.where(positive, 0.5 + 0.5 * e, 0.5 - 0.5 * e),
                       np.where(positive, 1.0 - 0.5 * g, 0.5 * g))
        return (w * phi).astype(np.float32)
