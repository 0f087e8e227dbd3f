"""FP32's sigmoid, silu and exp go through the library's own exp, tanh through its own tanh
(exp_f32, tanh_f32 in csrc/lut.c, accel.h): the engine equals the NumPy reference's bit for
bit, exp_f32 stays within 0.99 ulp of e^t and tanh_f32 within TANH_ULPS of tanh (both measured
over every fp32 input when they were written; here on a dense sample, the range ends, the
subnormal results, the overflow threshold and tanh's switch at 0.625).
"""
import numpy as np
import pytest

from accel_codegen import Device, Sdp
from accel_codegen import reference as ref
from conftest import assert_same

DEVICE = Device("nv_full", num_threads=1)
FLT_MAX = float(np.finfo(np.float32).max)
#: tanh_f32's bound in ulp (accel.h)
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
    assert ulps.max() <= 0.99, x[real][np.argmax(ulps)]
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
