"""The SDP's lookup-table activations (accel_lut in accel.h).

FP16 evaluates them through the model of NVDLA's LUT: the engine equals the NumPy model bit for
bit on every half (alone, and as a CONV's fused or independent epilogue), and the model stays
within the error bound accel.h states for each function, which these tests read from the
header itself. FP32 computes the functions themselves: sigmoid, silu, exp and tanh through the
library's own exp and tanh, bit for bit the NumPy reference's (tests/sim/test_lut_fp32_exp.py),
GELU with libm against NumPy within the last bit; all against PyTorch.
"""
import dataclasses
import math
import pathlib
import re

import numpy as np
import pytest

from accel_codegen import (AccelBufferError, AccelUnsupportedError, Conv, Device, Sdp,
                           estimate_chain)
from accel_codegen import reference as ref
from accel_codegen.sim.vocabulary import ACTIVATIONS
from conftest import assert_same

DEVICE = Device("nv_full", num_threads=2)
LUT_ACTS = [e.name for e in ACTIVATIONS if e.feature == "lut"]
#: The functions whose LE table runs in exponent mode (accel.h), tested on their own below:
#: rsqrt and reciprocal with relative bounds, log (which crosses 0) with absolute ones.
EXPONENT_ACTS = ["rsqrt", "reciprocal"]
LINEAR_ACTS = [a for a in LUT_ACTS if a not in EXPONENT_ACTS + ["log"]]
HEADER = pathlib.Path(__file__).parents[2] / "runtime" / "include" / "accel" / "accel.h"


def _fraction(text):
    num, _, den = text.partition("/")
    return float(num) / float(den or 1)


def _stated():
    """accel.h's table: act -> (lo range, lo step, le range, le step, slopes, E or None)."""
    rows = {}
    pattern = re.compile(
        r"^ \*   (\w+)\s+LO \[(-?\d+), (-?\d+)\) (\S+)\s+LE \[(-?\d+), (-?\d+)\) (\S+)\s+"
        r"slopes (\S+) / (\S+)(?:\s+E = ([\d.e-]+))?", re.M)
    for m in pattern.finditer(HEADER.read_text()):
        rows[m[1]] = dict(lo=(float(m[2]), float(m[3])), lo_step=_fraction(m[4]),
                          le=(float(m[5]), float(m[6])), le_step=_fraction(m[7]),
                          slopes=(m[8], m[9]), bound=float(m[10]) if m[10] else None)
    return rows


STATED = _stated()


def _every_half():
    halves = np.arange(-2**15, 2**15).astype(np.int16).view(np.float16)
    return np.ascontiguousarray(halves.reshape(1, 1, 256, 256))


def _dense_grid():
    """Every finite half and a dense fp32 grid on [-40, 40] (1e-5 apart)."""
    halves = _every_half().astype(np.float32).ravel()
    grid = np.linspace(-40, 40, 8_000_001, dtype=np.float64).astype(np.float32)
    values = np.concatenate([halves, grid])
    return values[np.isfinite(values)]


def test_the_header_states_every_lut_activation_and_its_geometry():
    assert sorted(STATED) == sorted(LINEAR_ACTS)
    for act in LINEAR_ACTS:
        tables, row = ref.lut_tables(act), STATED[act]
        assert (tables.lo_start, tables.lo_end) == row["lo"] and tables.lo_step == row["lo_step"]
        assert (tables.le_start, tables.le_end) == row["le"] and tables.le_step == row["le_step"]
        assert tables.le_start <= tables.lo_start and tables.lo_end <= tables.le_end
        assert tables.lo.size == 257 and tables.le.size == 65  # NVDLA's LO and LE sizes
        if act == "exp":  # exp's slope is its own derivative at the end: the last entry
            assert tables.overflow_slope == tables.le[-1] == np.float16(np.exp(11.0))
        else:
            assert (str(tables.underflow_slope.item()).rstrip("0").rstrip("."),
                    str(tables.overflow_slope.item()).rstrip("0").rstrip(".")) == row["slopes"]


@pytest.mark.parametrize("act", [a for a in LINEAR_ACTS if a not in ("exp", "softmax_exp")])
def test_the_lut_stays_within_the_stated_bound(act):
    """|half(LUT(t)) - f(t)| <= E + 2^-10 |f(t)| (plus the half's subnormal rounding), and E is
    the interpolation error of the tables with exact entries (measured, not a loose guess)."""
    t = _dense_grid()
    exact = ref.function64(act, t.astype(np.float64))
    y = ref.lut(act, t).astype(np.float16).astype(np.float64)
    bound = STATED[act]["bound"]
    excess = np.abs(y - exact) - (bound + 2**-10 * np.abs(exact) + 2**-25)
    worst = int(np.argmax(excess))
    assert excess[worst] <= 0, f"{act} at t = {t[worst]!r}: {y[worst]!r} vs {exact[worst]!r}"
    tables = ref.lut_tables(act)
    exact_entries = dataclasses.replace(
        tables, lo=ref.function64(act, float(tables.lo_start) + float(tables.lo_step) *
                                  np.arange(257)).astype(np.float32),
        le=ref.function64(act, float(tables.le_start) + float(tables.le_step) *
                          np.arange(65)).astype(np.float32))
    interpolation = np.max(np.abs(ref.lut(act, t, exact_entries) - exact))
    assert bound / 1.3 <= interpolation <= bound, (act, interpolation, bound)


def test_exp_stays_within_its_stated_bound():
    """accel.h: |y - e^t| <= 1.7e-4 + 1.5e-3 e^t below 11, within 0.5 % while e^t is a half,
    infinity from 11.0944 on, 0 far below."""
    t = _dense_grid()
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.exp(t.astype(np.float64))
        y = ref.lut("exp", t).astype(np.float16).astype(np.float64)
        below = t < 11
        assert np.all(np.abs(y - exact)[below] <= 1.7e-4 + 1.5e-3 * exact[below])
        top = (t >= 11) & (exact <= 65504)
        assert np.all(np.abs(exact - y)[top] <= 5e-3 * exact[top])
    assert np.all(np.isinf(y[t >= 11.0944])) and np.all(np.isfinite(y[t < 11.0943]))
    assert ref.lut("exp", np.float32(-1e30)) == 0


def test_softmax_exp_stays_within_its_stated_bound_and_below_exps():
    """accel.h: softmax's exp (t - max <= 0): |y - e^t| <= 1e-5 + 1.1e-3 e^t for t <= 0, its
    RMS relative error below exp's table's (the attention passes' E^T, FP16), 1 + t above 0."""
    t = _dense_grid()
    t = t[t <= 0]
    exact = np.exp(t.astype(np.float64))
    y = ref.lut("softmax_exp", t).astype(np.float16).astype(np.float64)
    assert np.all(np.abs(y - exact) <= 1e-5 + 1.1e-3 * exact)
    big = exact > 0.01
    rms = {act: np.sqrt(np.mean(((ref.lut(act, t[big]).astype(np.float16) - exact[big])
                                 / exact[big]) ** 2)) for act in ("exp", "softmax_exp")}
    assert rms["softmax_exp"] <= 0.7 * rms["exp"], rms
    above = np.float32([0.0, 0.001, 0.01])
    np.testing.assert_array_equal(ref.lut("softmax_exp", above), 1 + above)
    assert ref.lut("softmax_exp", np.float32(-1e30)) == 0


def _run_fp16(act, x, **sdp):
    op = Sdp(act=act, precision="fp16", **sdp)
    return DEVICE.run([op], x)[0], ref.run_op(op, x)


@pytest.mark.parametrize("act", LUT_ACTS)
def test_fp16_engine_equals_the_lut_model_on_every_half(act):
    """Every half (infinities, NaN, subnormals, every table grid point) bit for bit; with a
    scale and shift, so the LUT also sees fp32 values between the halves."""
    x = _every_half()
    y, expected = _run_fp16(act, x)
    assert_same(y, expected, f"fp16 {act}")
    scale, shift = np.array([0.3], np.float16), np.array([-0.7], np.float16)
    y, expected = _run_fp16(act, x, scale=scale, shift=shift)
    assert_same(y, expected, f"fp16 {act} after scale/shift")


@pytest.mark.parametrize("act", LUT_ACTS)
@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_fp16_lut_as_a_conv_epilogue(act, mode, rng):
    x = (rng.standard_normal((2, 6, 9, 9)) * 2).astype(np.float16)
    w = (rng.standard_normal((8, 6, 3, 3)) * 0.3).astype(np.float16)
    chain = [Conv(w, padding=1, precision="fp16"),
             Sdp(shift=rng.standard_normal(8).astype(np.float16), act=act, precision="fp16")]
    y = DEVICE.run(chain, x, mode=mode)[0]
    # The CONV's fp32 sums differ from the reference's in order: the LUT then sees values
    # that can differ in fp32's last bits, so allow one half ulp of difference.
    expected = ref.run_chain(chain, x)
    ulps = np.abs(y.view(np.int16).astype(np.int32) - expected.view(np.int16).astype(np.int32))
    assert ulps.max() <= 1, (act, mode, ulps.max())
    assert (ulps == 0).mean() > 0.98


def test_the_lut_differs_from_the_exact_function():
    """FP16 does not compute these with libm: some half results differ from the exact
    function rounded to half (this is what the LUT model changes)."""
    x = _every_half()
    for act in LUT_ACTS:
        y, _ = _run_fp16(act, x)
        with np.errstate(over="ignore", invalid="ignore"):
            exact = ref.function64(act, x.astype(np.float64)).astype(np.float16)
        differ = (y != exact) & ~(np.isnan(y) & np.isnan(exact))
        assert differ.any(), act


@pytest.mark.parametrize("act", LUT_ACTS)
def test_fp32_is_exact(act, rng):
    """FP32 equals the NumPy reference (bit for bit through exp_f32, tanh_f32 and gelu_f32,
    within libm's last bit otherwise), and PyTorch within 1e-6."""
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    x = (rng.standard_normal((2, 4, 8, 16)) * 6).astype(np.float32)
    x.flat[:6] = [0.0, -0.0, 88.0, -100.0, np.inf, -np.inf]
    y = DEVICE.run([Sdp(act=act)], x)[0]
    expected = ref.run_op(Sdp(act=act), x)
    if act in ("sigmoid", "silu", "exp", "softmax_exp", "tanh", "rsqrt", "reciprocal",
               "gelu_tanh", "gelu", "mish", "softplus", "log"):
        assert_same(y, expected, act)
    else:
        np.testing.assert_allclose(y, expected, rtol=3e-7, atol=1e-38)
    torch_fn = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": functional.silu,
                "hardswish": functional.hardswish, "hardsigmoid": functional.hardsigmoid,
                "gelu": functional.gelu, "exp": torch.exp, "softmax_exp": torch.exp,
                "gelu_tanh": lambda t: functional.gelu(t, approximate="tanh"), "rsqrt": torch.rsqrt,
                "reciprocal": torch.reciprocal, "mish": functional.mish,
                "softplus": functional.softplus, "log": torch.log}[act]
    theirs = torch_fn(torch.from_numpy(x)).numpy()
    # Infinities follow the formulas (PyTorch's vectorised gelu(inf) is NaN, not inf).
    finite = np.isfinite(x) & (np.isfinite(theirs) | (act != "log"))  # log: NaN below 0
    np.testing.assert_allclose(y[finite], theirs[finite], rtol=1e-6, atol=1e-6)


def _hard_inputs(rng):
    """Inputs where a division by 6 done another way (a product and an FMA correction) can
    lose the bits: ordinary values; products below 2^-124 (subnormal and tiny normal
    quotients) alone and in vectors of ordinary ones; +-0, infinities, NaN, the largest
    floats; planes of 17 x 59 = 1003 values, so that vector loops' tails run too."""
    t = (rng.standard_normal((2, 3, 1003)) * 4).astype(np.float32)
    exponents = rng.integers(-149, -118, size=200)
    tiny = np.ldexp(rng.uniform(1, 2, 200), exponents).astype(np.float32)
    t[0, 1, :200] = tiny * rng.choice([-1, 1], 200).astype(np.float32)
    t[1, 2, 37] = np.float32(2.0 ** -130)  # one tiny value among ordinary ones
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, np.finfo(np.float32).max,
               -np.finfo(np.float32).max, np.finfo(np.float32).tiny, -3.0, 3.0, -2.9999998]
    t[1, 0, 100:100 + len(special)] = special
    return t.reshape(2, 3, 17, 59)


@pytest.mark.parametrize("affine", ["none", "scale_shift"])
@pytest.mark.parametrize("act", ["hardswish", "hardsigmoid"])
def test_fp32_hard_functions_are_the_references_bits(act, affine, rng):
    """Hardswish and hardsigmoid in fp32 are the NumPy reference's float32 bits (t c / 6 and
    c / 6, each step rounded alone), also on tiny, zero, infinite and NaN values, alone and
    after a per-channel scale and shift (test_fp32_is_exact holds them to 3e-7 only)."""
    x = _hard_inputs(rng)
    sdp = Sdp(act=act)
    if affine == "scale_shift":
        sdp = Sdp(act=act, scale=np.array([0.75, 1.0, -1.5], np.float32),
                  shift=np.array([0.0, 0.25, -0.5], np.float32))
    assert_same(DEVICE.run([sdp], x)[0], ref.run_op(sdp, x), f"{act} {affine}")


#: gelu_f32's bound in ulp of the result (accel.h)
GELU_ULPS = 4.0


def test_fp32_gelu_is_within_its_bound():
    """FP32 GELU (gelu_f32: 16 or 8 lanes, the last vector masked or padded) is the
    reference's bit for bit and within GELU_ULPS of t erfc(-t / sqrt 2) / 2 in float64 (libm's
    erfc, within 1e-15 of exact), relative also where Phi is tiny (t < -3, where 0.5 t (1 +
    erf) cancels), in units of 2^-149 for subnormal results: the worst input of [-15, 15]
    (3.986 ulp at -5.96221066 with the multiply-adds fused, 3.99 before, found over all of
    them by a C harness; -5.72909832 was the worst of the two-exp form), every input of [-16, 16] in steps of 2^-9, random ones,
    every float around the polynomial intervals' ends and the switch at 15, the tails where Phi
    is 0 or 1, subnormals, zeros and NaN; 100,003 values, so the last vector is part."""
    rng = np.random.default_rng(47)
    ends = [np.arange(c - 40, c + 40, dtype=np.int32).view(np.float32)
            for c in np.float32(np.arange(-15, 16)).view(np.int32)]
    x = np.concatenate([[0.0, -0.0, 1e-40, -1e-40, 14.8, -14.8, -14.9, -30.0, 1e30, -1e30,
                         np.inf, np.nan, -5.72909832, -5.96221066], *ends, np.arange(-16, 16, 2.0 ** -9),
                        rng.standard_normal(80_000) * 4]).astype(np.float32)[:100_003]
    y = DEVICE.run([Sdp(act="gelu")], x.reshape(1, 1, 1, -1))[0].ravel()
    assert_same(y, ref.activation_exact("gelu", x), "gelu")
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = 0.5 * wide * np.array([math.erfc(-v * math.sqrt(0.5)) for v in wide])
    finite = np.isfinite(exact)
    _, exponent = np.frexp(np.abs(exact[finite]))
    spacing = np.maximum(np.ldexp(1.0, exponent - 24), 2.0 ** -149)
    ulps = np.abs(y[finite] - exact[finite]) / spacing
    assert ulps.max() <= GELU_ULPS, x[finite][np.argmax(ulps)]
    assert ulps.max() > 1.0  # the bound is the polynomials' and exp_f32's, not a rounding's
    assert np.signbit(y[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()
    assert np.isnan(y[np.isnan(x)]).all() and y[x == np.inf] == np.inf
    assert np.isnan(y[x == -np.inf]).all()  # -inf times Phi = 0, as the formula


def test_fp32_mish_is_within_its_bound():
    """FP32 mish (mish_f32: t (n / (n + 2)), n = e (e + 2), from exp_f32) is the reference's
    bit for bit and within 4 ulp of mish in float64 for t >= -80 (accel.h), the switch to t
    above 20 and both ends included; 100,003 values, so the last vector is part."""
    rng = np.random.default_rng(53)
    around_20 = np.arange(-40, 40, dtype=np.int32) + np.float32(20.0).view(np.int32)
    x = np.concatenate([[0.0, -0.0, -80.0, 20.0, 44.5, 89.0, 1e30, np.inf, -np.inf, np.nan,
                         -3.32273], around_20.view(np.float32), np.arange(-80, 40, 2.0 ** -8),
                        rng.standard_normal(60_000) * 6]).astype(np.float32)[:100_003]
    y = DEVICE.run([Sdp(act="mish")], x.reshape(1, 1, 1, -1))[0].ravel()
    assert_same(y, ref.activation_exact("mish", x), "mish")
    held = np.isfinite(x) & (x >= -80)
    exact = ref.function64("mish", x[held].astype(np.float64))
    _, exponent = np.frexp(np.abs(exact))
    ulps = np.abs(y[held] - exact) / np.maximum(np.ldexp(1.0, exponent - 24), 2.0 ** -149)
    assert 1.0 < ulps.max() <= 4.0, x[held][np.argmax(ulps)]
    assert y[x == np.inf] == np.inf and np.isnan(y[x == -np.inf]).all()
    assert np.isnan(y[np.isnan(x)]).all() and y[x == 44.5] == np.float32(44.5)


def _ulps(y, exact):
    """|y - exact| in ulp of the float32 nearest exact (2^-149 for subnormal results)."""
    _, exponent = np.frexp(np.abs(exact))
    return np.abs(y.astype(np.float64) - exact) / np.maximum(np.ldexp(1.0, exponent - 24),
                                                             2.0 ** -149)


def test_fp32_softplus_is_within_its_bound():
    """FP32 softplus (ln(1 + e^t) in double through libm, t from 30 on, rounded once: accel.h)
    is the reference's bit for bit, within 0.51 ulp of softplus in double, and PyTorch's
    threshold-20 softplus itself from 20 on; -inf gives 0, +inf +inf, NaN NaN."""
    rng = np.random.default_rng(71)
    around = (np.arange(-40, 40, dtype=np.int32)[:, None] +
              np.float32([20.0, 30.0]).view(np.int32)).ravel().view(np.float32)
    x = np.concatenate([[0.0, -0.0, -104.0, -200.0, 88.0, 1e30, np.inf, -np.inf, np.nan],
                        around, np.arange(-110, 40, 2.0 ** -7),
                        rng.standard_normal(60_000) * 8]).astype(np.float32)
    y = DEVICE.run([Sdp(act="softplus")], x.reshape(1, 1, 1, -1))[0].ravel()
    assert_same(y, ref.activation_exact("softplus", x), "softplus")
    held = np.isfinite(x)
    t = x[held].astype(np.float64)
    exact = np.where(t > 700, t, np.log1p(np.exp(np.minimum(t, 700))))  # t: e^t overflows
    assert _ulps(y[held], exact).max() <= 0.51
    above = held & (x > 20)
    assert_same(y[above], x[above], "softplus above 20")
    assert y[x == -np.inf] == 0 and y[x == np.inf] == np.inf and np.isnan(y[np.isnan(x)]).all()


def test_fp32_log_is_within_its_bound():
    """FP32 log (libm's log in double, rounded once: accel.h) is the reference's bit for bit
    and within 0.51 ulp; -inf at +-0, NaN below 0, +inf at +inf."""
    rng = np.random.default_rng(72)
    x = np.concatenate([np.geomspace(1e-38, 3e38, 50_001), rng.uniform(0.5, 2.0, 20_000),
                        [2.0 ** -149, 1.0, 0.0, -0.0, -1.0, -np.inf, np.inf, np.nan]]
                       ).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = DEVICE.run([Sdp(act="log")], x.reshape(1, 1, 1, -1))[0].ravel()
    assert_same(y, ref.activation_exact("log", x), "log")
    held = np.isfinite(x) & (x > 0)
    exact = np.log(x[held].astype(np.float64))
    nonzero = exact != 0
    assert _ulps(y[held][nonzero], exact[nonzero]).max() <= 0.51 and y[x == 1.0] == 0
    assert np.all(y[x == 0] == -np.inf) and np.isnan(y[x == -1.0]).all()
    assert np.isnan(y[x == -np.inf]).all() and y[x == np.inf] == np.inf
    assert np.isnan(y[np.isnan(x)]).all()


def test_fp32_gelu_vectors_below_8_are_the_references():
    """An 8- or 16-lane vector whose |t| all lie below 8 takes one power of two instead of
    two (csrc/lut.c, gelu_f32_x8, gelu_f32_x16; here the 16-lane vectors are rows 0-1 and 2-3,
    narrow, and rows 4-5 and 6-7, each with a wide lane): the same bits as the reference's two-step product, with
    subnormal and zero t (k = 0), t either side of k's first step (|t| = 0.8326) and just
    below 8 (k = -46) in such vectors, and beside them vectors with one lane at 8, 15, inf or
    NaN (the two-step path)."""
    first_step = np.float32(0.83255461)  # k = round(-t^2 / 2 / ln 2) turns -1 here
    around = np.arange(first_step.view(np.int32) - 4, first_step.view(np.int32) + 4,
                       dtype=np.int32).view(np.float32)
    below_8 = np.nextafter(np.float32(8), np.float32(0))
    narrow = [[1e-40, -1e-40, 0.0, -0.0, 1e-45, -3e-39, 7.5, -7.5], list(around),
              list(-around), [below_8, -below_8, 7.0, -7.0, 6.5, -6.5, 3.25, -0.5]]
    wide = [row[:7] + [value] for row, value in zip(narrow, [8.0, -15.0, np.inf, np.nan])]
    x = np.array(narrow + wide, np.float32).reshape(1, 1, 1, -1)
    y = DEVICE.run([Sdp(act="gelu")], x)[0]
    assert_same(y, ref.activation_exact("gelu", x), "gelu")
    rows = y.reshape(8, 8)  # each wide row's first 7 values are a narrow row's, other path
    assert_same(rows[4:, :7], rows[:4, :7], "one power of two against two")


def test_gelu_coefficients_are_one_table_the_c_librarys():
    """gelu_f32's 128 coefficients exist once, in csrc/lut.c: the NumPy reference reads them
    through accel_gelu_coefficients (no copy of the floats in the package's Python), and they
    are what they claim, each interval's polynomial within 2e-7 relative of erfcx(x / sqrt 2) /
    2 (a corrupted or transposed table fails); a wrong count or NULL is a typed error."""
    from accel_codegen._accel_ffi import ffi, lib
    from accel_codegen.errors import AccelBufferError, AccelInvalidError, check
    from accel_codegen.sim import lut_math

    count = lib.ACCEL_GELU_COEFFICIENTS
    out = ffi.new("float[]", count)
    assert lib.accel_gelu_coefficients(out, count) == lib.ACCEL_OK
    exported = np.frombuffer(ffi.buffer(out), np.float32).reshape(lib.ACCEL_GELU_DEGREE + 1,
                                                                  lib.ACCEL_GELU_INTERVALS)
    assert lut_math._GELU_C.tobytes() == exported.tobytes()
    package = pathlib.Path(lut_math.__file__).parents[1]
    first = f"{exported[0][0]:.8e}"  # 3.49618822e-01, as the C source spells it
    assert first in (pathlib.Path(__file__).parents[2] / "csrc" / "lut.c").read_text()
    assert not [p for p in package.rglob("*.py") if first in p.read_text()]
    for n in range(lib.ACCEL_GELU_INTERVALS):
        d = np.linspace(-0.5, 0.5, 101)
        poly = sum(float(exported[j][n]) * d ** j for j in range(lib.ACCEL_GELU_DEGREE + 1))
        x = n + 0.5 + d
        exact = np.array([math.erfc(v * math.sqrt(0.5)) * math.exp(v * v / 2) / 2 for v in x])
        assert np.abs(poly / exact - 1).max() < 2e-7, n
    with pytest.raises(AccelInvalidError, match=f"count = {count - 1}, not {count}"):
        check(lib.accel_gelu_coefficients(out, count - 1))
    with pytest.raises(AccelBufferError, match="out is NULL"):
        check(lib.accel_gelu_coefficients(ffi.NULL, count))


@pytest.mark.parametrize("act", LUT_ACTS)
def test_lut_activations_need_int8_tables_and_a_config_with_the_lut(act):
    with pytest.raises(AccelBufferError, match=f"act = {act} needs its INT8 tables"):
        DEVICE.run([Sdp(act=act, precision="int8")], np.zeros((1, 2, 2, 2), np.int8))
    with pytest.raises(AccelUnsupportedError, match=f"act = {act} needs the SDP lookup table"):
        Device("nv_small").run([Sdp(act=act)], np.zeros((1, 2, 2, 2), np.float32))


@pytest.mark.parametrize("act", LUT_ACTS)
def test_lut_activations_run_on_the_y_unit(act):
    """The Y unit's rate (sdp_ew_throughput), named in the stats as the vocabulary names it."""
    shape = (1, 16, 8, 8)
    stats = estimate_chain("nv_full", [Sdp(act=act)], shape)
    config = DEVICE.config
    assert stats.ops[0].op == f"sdp:{act}"
    assert stats.ops[0].compute_cycles == -(-np.prod(shape) // config.sdp_ew_throughput)
    relu = estimate_chain("nv_full", [Sdp(act="relu")], shape)
    assert relu.ops[0].compute_cycles == -(-np.prod(shape) // config.sdp_throughput)


# --- rsqrt and reciprocal: LE in exponent mode ---------------------------------------------

def _stated_exponent():
    """accel.h's rows for the exponent-mode tables: act -> LO range and step, LE's octaves,
    slopes, R on LO and on LE."""
    pattern = re.compile(
        r"^ \*   (\w+)\s+LO \[([\d.]+), ([\d.]+)\) (\S+)\s+LE 2\^\[(-?\d+), (-?\d+)\) octaves\s+"
        r"slopes (\S+) / (\S+)\s+R = ([\d.e-]+) / ([\d.e-]+)", re.M)
    return {m[1]: dict(lo=(float(m[2]), float(m[3])), lo_step=_fraction(m[4]),
                       le=(2.0 ** int(m[5]), 2.0 ** int(m[6])), slopes=(m[7], m[8]),
                       bound_lo=float(m[9]), bound_le=float(m[10]))
            for m in pattern.finditer(HEADER.read_text())}


EXPONENT = _stated_exponent()


def test_the_header_states_the_exponent_mode_tables():
    assert sorted(EXPONENT) == sorted(EXPONENT_ACTS)
    for act in EXPONENT_ACTS:
        tables, row = ref.lut_tables(act), EXPONENT[act]
        assert tables.exponent and tables.le_step == 0
        assert (tables.lo_start, tables.lo_end) == row["lo"] and tables.lo_step == row["lo_step"]
        assert (tables.le_start, tables.le_end) == row["le"]
        assert row["slopes"] == ("0", "0") and tables.underflow_slope == 0 == tables.overflow_slope
        # the entries are the function at powers of two: LE[i] = half(f(le_start 2^i))
        grid = float(tables.le_start) * 2.0 ** np.arange(65)
        assert_same(tables.le, ref.function64(act, grid).astype(np.float16).astype(np.float32))


def _positive_grid(tables):
    halves = _every_half().astype(np.float32).ravel()
    grid = np.geomspace(float(tables.le_start), float(tables.le_end), 1_000_001)
    values = np.concatenate([halves, grid.astype(np.float32)])
    return values[np.isfinite(values) & (values >= tables.le_start) & (values < tables.le_end)]


@pytest.mark.parametrize("act", EXPONENT_ACTS)
def test_exponent_mode_stays_within_the_stated_relative_bound(act):
    """(R + 2^-10) f(t) where f(t) is a normal half, R measured: the chord error of exact
    entries reaches at least R / 1.3 on each table (the bound is not a loose guess)."""
    tables, row = ref.lut_tables(act), EXPONENT[act]
    t = _positive_grid(tables)
    exact = ref.function64(act, t.astype(np.float64))
    y = ref.lut(act, t).astype(np.float16).astype(np.float64)
    on_lo = (t >= tables.lo_start) & (t < tables.lo_end)
    bound = np.where(on_lo, row["bound_lo"], row["bound_le"])
    normal = exact >= 2**-14
    excess = np.abs(y - exact) - (bound + 2**-10) * exact
    assert np.all(excess[normal] <= 0), act
    # where the result is a subnormal half: the half's own step 2^-24 on top
    assert np.all((np.abs(y - exact) - bound * exact - 2**-24)[~normal] <= 0), act
    exact_entries = dataclasses.replace(
        tables, lo=ref.function64(act, float(tables.lo_start) + float(tables.lo_step) *
                                  np.arange(257)).astype(np.float32),
        le=ref.function64(act, float(tables.le_start) * 2.0 ** np.arange(65)).astype(np.float32))
    relative = np.abs(ref.lut(act, t, exact_entries) - exact) / exact
    for region, stated in ((on_lo, row["bound_lo"]), (~on_lo, row["bound_le"])):
        # (reciprocal's 1/8 is exact at 1.5 2^e: the fp32 steps may round a hair above it)
        assert stated / 1.3 <= relative[region].max() <= stated * (1 + 2**-20), (
            act, relative[region].max())


def _stated_log():
    """accel.h's row for log: LO range and step, LE's octaves, slopes, A on LO and on LE."""
    m = re.search(r"^ \*   log\s+LO \[([\d.]+), ([\d.]+)\) (\S+)\s+LE 2\^\[(-?\d+), "
                  r"(-?\d+)\) octaves\s+slopes (\S+) / (\S+)\s+A = ([\d.e-]+) / ([\d.e-]+)",
                  HEADER.read_text(), re.M)
    return dict(lo=(float(m[1]), float(m[2])), lo_step=_fraction(m[3]),
                le=(2.0 ** int(m[4]), 2.0 ** int(m[5])), slopes=(m[6], m[7]),
                bound_lo=float(m[8]), bound_le=float(m[9]))


def test_log_stays_within_the_stated_absolute_bound():
    """accel.h's log row: its geometry, and |y - ln t| <= A + 2^-10 |ln t| + 2^-24 with half
    entries and output, A measured (the exact entries' error reaches A / 1.3 on each table);
    outside the domain the end entries, on the engine as in the model."""
    tables, row = ref.lut_tables("log"), _stated_log()
    assert tables.exponent and (tables.lo_start, tables.lo_end) == row["lo"]
    assert tables.lo_step == row["lo_step"] and (tables.le_start, tables.le_end) == row["le"]
    assert row["slopes"] == ("0", "0") and tables.underflow_slope == 0 == tables.overflow_slope
    t = _positive_grid(tables)
    exact = np.log(t.astype(np.float64))
    y = ref.lut("log", t).astype(np.float16).astype(np.float64)
    on_lo = (t >= tables.lo_start) & (t < tables.lo_end)
    bound = np.where(on_lo, row["bound_lo"], row["bound_le"])
    assert np.all(np.abs(y - exact) <= bound + 2**-10 * np.abs(exact) + 2**-24)
    exact_entries = dataclasses.replace(
        tables, lo=np.log(float(tables.lo_start) + float(tables.lo_step) *
                          np.arange(257)).astype(np.float32),
        le=np.log(float(tables.le_start) * 2.0 ** np.arange(65)).astype(np.float32))
    error = np.abs(ref.lut("log", t, exact_entries) - exact)
    for region, stated in ((on_lo, row["bound_lo"]), (~on_lo, row["bound_le"])):
        assert stated / 1.3 <= error[region].max() <= stated, error[region].max()
    x = np.array([0.0, -0.0, -1.0, -np.inf, 2.0**-30, 2.0**15, np.inf, np.nan], np.float32)
    model = ref.lut("log", x)
    assert np.all(model[:5] == tables.le[0]) and tables.le[0] == np.float16(np.log(2.0**-24))
    assert model[6] == tables.le[-1] and np.isnan(model[7])
    engine = DEVICE.run([Sdp(act="log", precision="fp16")],
                        x.astype(np.float16).reshape(1, 1, 1, -1))[0].ravel()
    assert_same(engine, model.astype(np.float16), "fp16 log outside the domain")
    assert not ACTIVATIONS["log"].int8


@pytest.mark.parametrize("act", EXPONENT_ACTS)
def test_exponent_mode_index_is_the_octave(act):
    """At a power of two the LUT returns the entry itself; halfway through an octave the mean
    of its two entries (f = 1/2 exactly)."""
    tables = ref.lut_tables(act)
    for i in (0, 1, 7, 40, 63):
        at = np.float32(np.ldexp(float(tables.le_start), i))
        if tables.lo_start <= at < tables.lo_end:
            continue
        assert ref.lut(act, at) == tables.le[i]
        middle = ref.lut(act, np.float32(at * np.float32(1.5)))
        assert middle == tables.le[i] + (tables.le[i + 1] - tables.le[i]) * np.float32(0.5)


@pytest.mark.parametrize("act", EXPONENT_ACTS)
def test_outside_the_domain_the_lut_gives_its_end_entries(act):
    """accel.h: t below le_start (0, negatives, -inf, tiny positives) -> LE[0] = 32768; from
    le_end (and +inf) -> LE[64]; NaN stays; on the engine as in the model. FP32 gives IEEE's
    answers (NaN, inf)."""
    tables = ref.lut_tables(act)
    x = np.array([0.0, -0.0, -1.0, -np.inf, 2.0**-40, 2.0**50, np.inf, np.nan], np.float32)
    y = ref.lut(act, x)
    assert tables.le[0] == 32768 and np.all(y[:5] == tables.le[0])
    assert np.all(y[5:7] == tables.le[-1]) and np.isnan(y[7])
    halves = np.array([0.0, -0.0, -3.0, -np.inf, np.inf, np.nan], np.float16).reshape(1, 1, 1, 6)
    engine = DEVICE.run([Sdp(act=act, precision="fp16")], halves)[0].ravel()
    assert np.all(engine[:4] == 32768) and engine[4] == np.float16(tables.le[-1])
    assert np.isnan(engine[5])
    with np.errstate(divide="ignore", invalid="ignore"):
        fp32 = DEVICE.run([Sdp(act=act)], halves.astype(np.float32))[0].ravel()
    if act == "rsqrt":
        assert fp32[0] == np.inf and np.isnan(fp32[2]) and fp32[4] == 0
    else:
        assert fp32[0] == np.inf and fp32[1] == -np.inf and fp32[2] == np.float32(-1 / 3)


def test_fp32_rsqrt_is_within_one_and_a_half_ulp():
    """accel.h: every fp32 in [1, 4) (rsqrt(4t) = rsqrt(t) / 2: every positive normal)."""
    x = np.arange(0x3F800000, 0x40800000, 16, dtype=np.uint32).view(np.float32)
    y = ref.activation_exact("rsqrt", x).astype(np.float64)
    engine = DEVICE.run([Sdp(act="rsqrt")], x.reshape(1, 1, -1, 1024))[0].ravel()
    assert_same(engine, y.astype(np.float32), "rsqrt")
    exact = 1.0 / np.sqrt(x.astype(np.float64))
    ulps = np.abs(y - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert 1.0 < ulps.max() <= 1.5
    assert_same(ref.activation_exact("reciprocal", x), (np.float32(1) / x).astype(np.float32))


@pytest.mark.parametrize("act", EXPONENT_ACTS)
def test_no_int8_tables_for_rsqrt_and_reciprocal(act):
    """The compiler builds none (a pole at 0: the vocabulary's int8=False); the INT8 engine
    still runs tables it is given, bit for bit the reference (test_lut_int8_lanes.py)."""
    from accel_codegen import AccelUnsupportedError
    from accel_codegen.quantization import TensorQuant
    from accel_codegen.quantization.lut import layer_lut
    assert not ACTIVATIONS[act].int8
    with pytest.raises(AccelUnsupportedError, match=f"no int8 tables for act = {act}"):
        layer_lut(act, TensorQuant(0.1, 0), 0.01, "layer")
