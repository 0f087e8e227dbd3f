"""FP32's sigmoid, silu and exp go through the library's own exp, tanh through its own tanh
(exp_f32, tanh_f32 in csrc/lut.c, accel.h): the engine equals the NumPy reference's bit for
bit, exp_f32 stays within EXP_ULPS of e^t and tanh_f32 within TANH_ULPS of tanh (both measured
over every fp32 input when they were written; here on a dense sample, the range ends, the
subnormal results, the overflow threshold and tanh's switch at 0.625).
"""
from fractions import Fraction

import numpy as np
import pytest

from accel_codegen import Device, Sdp
from accel_codegen import reference as ref
from accel_codegen.sim.lut_math import fma_f32
from conftest import assert_same

DEVICE = Device("nv_full", num_threads=1)
FLT_MAX = float(np.finfo(np.float32).max)
#: exp_f32's and tanh_f32's bounds in ulp (accel.h): exp 1.0095 at -59.92 over every input
#: (0.99 before its multiply-adds were fused)
EXP_ULPS = 1.01
TANH_ULPS = 1.34


def _inputs():
    rng = np.random.default_rng(3)
    dense = rng.uniform(-110, 95, 400_000).astype(np.float32)
    small = (rng.standard_normal(100_000) * 1e-3).astype(np.float32)
    # every float around the overflow threshold (ln(FLT_MAX) = 88.7228...) and the ends of
    # the subnormal results (e^t < 2^-126 from t = -87.34; 0 from about -103.97)
    around = []
    for centre in (88.72283935546875, -87.33654022216797, -103.97207641601562, -104.0, 89.0,
                   0.625, -0.625, 9.01, -9.01):
        c = np.float32(centre).view(np.int32)
        around.append(np.arange(c - 3000, c + 3000, dtype=np.int32).view(np.float32))
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                        0.34657359, -0.34657359, 1e30, -1e30], np.float32)
    return np.concatenate([special, *around, small, dense])  # specials first: never cut off


def _ulps(y: np.ndarray, x: np.ndarray, function=np.exp) -> np.ndarray:
    """|y - f(x)| in units of the last place of f(x) (rounded to fp32), subnormals included."""
    with np.errstate(over="ignore", invalid="ignore"):
        exact = function(x.astype(np.float64))
        finite = np.abs(exact) <= FLT_MAX
        _, exponent = np.frexp(np.where(finite, np.abs(exact), 1.0))  # m 2^exponent, m < 1
        spacing = np.maximum(np.ldexp(1.0, exponent - 24), 2.0 ** -149)
        err = np.abs(y.astype(np.float64) - exact) / spacing
    return np.where(finite, err, 0.0)


def test_exp_f32_is_within_its_bound():
    x = _inputs()
    y = ref.exp_f32(x)
    real = ~np.isnan(x)
    assert np.all(np.isnan(y[~real]))
    ulps = _ulps(y[real], x[real])
    assert ulps.max() <= EXP_ULPS, x[real][np.argmax(ulps)]
    assert ulps.max() > 0.5  # not correctly rounded: the bound is the polynomial's, not libm's
    # infinite exactly where e^t rounds to infinity, 0 where it rounds to 0
    with np.errstate(over="ignore"):
        exact32 = np.exp(x[real].astype(np.float64)).astype(np.float32)
    assert_same(np.isinf(y[real]), np.isinf(exact32), "overflow")
    assert_same(y[real] == 0, exact32 == 0, "underflow")


def test_tanh_f32_is_within_its_bound():
    x = _inputs()
    y = ref.tanh_f32(x)
    real = ~np.isnan(x)
    assert np.all(np.isnan(y[~real]))
    ulps = _ulps(y[real], x[real], np.tanh)
    assert ulps.max() <= TANH_ULPS, x[real][np.argmax(ulps)]
    assert ulps.max() > 0.5
    assert_same(y[np.isinf(x)], np.sign(x[np.isinf(x)]), "tanh(+-inf)")
    tiny = real & (np.abs(x) < 2.0 ** -20)  # tanh(t) = t in fp32, signed zeros included
    assert_same(y[tiny].view(np.uint32), x[tiny].view(np.uint32), "tiny")


@pytest.mark.parametrize("act", ["exp", "sigmoid", "silu", "tanh"])
def test_engine_equals_the_reference_bit_for_bit(act):
    x = _inputs()
    x = x[:x.size // 384 * 384].reshape(2, 3, -1, 64)
    y = DEVICE.run([Sdp(act=act)], x)[0]
    assert_same(y, ref.activation_exact(act, x), act)


@pytest.mark.parametrize("act", ["exp", "sigmoid", "silu", "tanh"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 100_003), (1, 5, 3, 7)])
def test_planes_of_any_length_are_the_reference_bit_for_bit(act, shape):
    """A plane's last count % 8 values (AVX2 passes: through the scalar functions) or count %
    16 (AVX-512: a masked vector) give the same bits as the whole vectors and the reference's:
    planes of 100,003 values and of 21 (two vectors of 8 and 5 left, or one masked)."""
    x = _inputs()[:int(np.prod(shape))].reshape(shape)
    y = DEVICE.run([Sdp(act=act)], x)[0]
    assert_same(y, ref.activation_exact(act, x), act)


@pytest.mark.parametrize("act", ["sigmoid", "silu"])
def test_sigmoid_and_silu_stay_close_to_the_exact_functions(act):
    """What exp_f32's bound gives them: within 3 ulp of the function in float64 (measured: 2.43
    for sigmoid, 2.21 for silu; through NumPy's float32 exp: 3.08, 3.25) for |t| <= 80; below
    -80 the formulas' 1 + e^-t overflows, giving 0 as before, not the tiny exact value."""
    x = _inputs()
    x = x[np.isfinite(x) & (np.abs(x) <= 80)]
    y = ref.activation_exact(act, x).astype(np.float64)
    exact = ref.function64(act, x.astype(np.float64))
    spacing = np.maximum(np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64),
                         2.0 ** -149)
    assert (np.abs(y - exact) / spacing).max() <= 3


#: (a, b, c, C's fmaf(a, b, c)) as float32 bits where a b + c rounded to float64 then to float32
#: is not a b + c rounded once (a b halfway between two floats, c tiny): found among 20 M
#: random triples against fmaf, which a plain float64 sum gets wrong
DOUBLE_ROUNDINGS = [
    (0x2A7D8000, 0xD8857B00, 0x98C1B1F6, 0xC3842D4D),
    (0xE7AF8000, 0xCF51DF00, 0x5B71BCBE, 0x778FE061),
    (0xC13F8000, 0xE8DCFF00, 0x4CF986FE, 0x6AA550C1),
    (0x54F18000, 0x69DF6300, 0x587C1DC6, 0x7F52BBE5),
    (0x57608000, 0xB8E74100, 0x8D94CF82, 0xD0CACC81),
    (0xAF108000, 0xD9F9A100, 0x23161242, 0x498CE761),
    (0xD3EC8000, 0x43365900, 0x872375B2, 0xD7A87539),
    (0xC3D58000, 0x5CEE2B00, 0xA3533756, 0xE146A0DD),
    (0xF8478000, 0x3AB80F00, 0xB510BF1E, 0xF38F6FB1),
]


def _rounded_once(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """a b + c rounded to the nearest float32, ties to even, from the exact sum (a Fraction):
    the nearest of float32(float64(sum)) and its two neighbours (within an ulp of it)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    guess = np.float32(float(exact))
    near = [np.nextafter(guess, np.float32(-np.inf)), guess,
            np.nextafter(guess, np.float32(np.inf))]
    return min(near, key=lambda f: (abs(Fraction(float(f)) - exact), int(f.view(np.uint32)) & 1))


def test_fma_f32_rounds_once():
    """The reference's fused multiply-add (exp_f32's and gelu_f32's, csrc/lut.c's fmaf) is a b
    + c rounded once: on the double roundings above, on 3,000 random triples whose sums
    cancel or round (exponents close), subnormal results among them, against the exact sum
    rounded once; infinities and NaN as the float64 sum's."""
    rng = np.random.default_rng(11)
    n = 3000
    mantissa = rng.integers(0, 1 << 23, (n, 3), dtype=np.uint32)
    sign = rng.integers(0, 2, (n, 3), dtype=np.uint32) << np.uint32(31)
    ea = rng.integers(60, 190, n)
    eb = rng.integers(100, 150, n)
    ec = np.clip(ea + eb - 127 + rng.integers(-30, 30, n), 0, 254)
    ea[: n // 10] = rng.integers(30, 60, n // 10)  # products about the subnormal range
    eb[: n // 10] = 127 - ea[: n // 10] + rng.integers(-24, 2, n // 10)
    ec[: n // 10] = rng.integers(0, 3, n // 10)
    exponents = np.stack([ea, eb, ec], axis=1).astype(np.uint32) << np.uint32(23)
    t = (sign | exponents | mantissa).view(np.float32)
    hard = np.array(DOUBLE_ROUNDINGS, np.uint32).view(np.float32)
    a = np.concatenate([hard[:, 0], t[:, 0]])
    b = np.concatenate([hard[:, 1], t[:, 1]])
    c = np.concatenate([hard[:, 2], t[:, 2]])
    y = fma_f32(a, b, c)
    expected = np.array([_rounded_once(*abc) for abc in zip(a, b, c)], np.float32)
    assert_same(y.view(np.uint32), expected.view(np.uint32), "fma_f32")
    assert_same(y[:len(hard)].view(np.uint32), hard[:, 3].view(np.uint32), "C's fmaf")
    with np.errstate(over="ignore"):
        wide = a[:len(hard)].astype(np.float64) * b[:len(hard)]
        twice = (wide + c[:len(hard)]).astype(np.float32)
    assert np.all(twice != y[:len(hard)])  # the cases a plain float64 sum gets wrong
    assert (np.abs(y) < np.float32(2.0 ** -126)).sum() > 50  # subnormal results were tried
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    special = fma_f32(np.array([inf, 0, 1, 3e38, -inf], np.float32),
                      np.array([1, inf, nan, 3e38, 2], np.float32),
                      np.array([-1, 1, 1, 0, inf], np.float32))
    assert special[0] == inf and np.isnan(special[1:3]).all() and special[3] == inf
    assert np.isnan(special[4])


@pytest.mark.parametrize("act", ["exp", "softmax_exp"])
def test_softmax_exp_planes_of_every_tail_length_are_the_reference(act):
    """Softmax's exp(s - max) (the add of each plane's value, then exp, one pass in an AVX-512 or
    AVX2 + FMA build: whole vectors, then a masked one of count % 16 or count % 8 values) and exp's two forms of
    2^n (one power of two where a vector's lanes all lie in [-86, 89], two elsewhere): planes
    of 1 to 17 values, their values around -86, the subnormal results, the overflow threshold,
    NaN and infinities, each plane's value too (a NaN max, +-inf), bit for bit, in place and
    not."""
    rng = np.random.default_rng(5)
    for hw in range(1, 18):
        c = 24
        around = np.float32(-86.0).view(np.int32) + np.arange(-c * hw // 2, c * hw - c * hw // 2,
                                                               dtype=np.int32)
        x = np.concatenate([
            around.view(np.float32),  # every float about -86: a vector's lanes both sides
            rng.uniform(-110, 95, c * hw).astype(np.float32),
            rng.uniform(-20, 0, c * hw).astype(np.float32)]).reshape(1, 3 * c, 1, hw)
        x.flat[::29] = np.nan
        x.flat[3::31] = np.inf
        x.flat[4::37] = -np.inf
        value = rng.uniform(-3, 3, (1, 3 * c)).astype(np.float32)
        value[0, 1:4] = [np.nan, np.inf, -np.inf]
        value[0, 5] = -0.0
        op = Sdp(ew_op="add", ew_per_channel=True, act=act, operand=value)
        y = DEVICE.run([op], x)[0]
        with np.errstate(invalid="ignore"):  # inf + -inf in the reference: NaN, as in ours
            expected = ref.run_op(op, x)
        assert_same(y, expected, f"{act}, planes of {hw}")
        inplace = x.copy()
        DEVICE.run([op], inplace, out=inplace)
        assert_same(inplace, y, f"{act}, planes of {hw}, in place")
