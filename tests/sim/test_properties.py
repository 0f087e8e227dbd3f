"""Property-based tests of the simulator's Python API (hypothesis, derandomised and bounded).

1. Random valid CONV -> SDP -> PDP chains (fp32 and int8) equal the NumPy reference, and the
   fused and independent modes give the same bits.
   Random BDMA copies (any precision, random ranges, into a destination holding other data)
   equal the reference bit for bit, or are refused with a typed error when out of range, and
   their estimate equals the run's cost.
2. Descriptors whose fields are drawn from valid values mixed with garbage (wrong types, huge
   integers, NaN, strings, arrays of the wrong size) either raise a typed AccelError or run and
   equal the reference: never another exception, a crash or a wrong answer.
test_sanitizers.py runs this file again with the library built under ASan and UBSan.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accel_codegen import (AccelError, AccelShapeError, Bdma, Conv, Device, Pool, Sdp,
                           estimate_chain)
from accel_codegen.sim.reference import run_chain, run_op
from accel_codegen.sim.vocabulary import ACTIVATIONS
from conftest import assert_close

DEVICE = Device("nv_full", num_threads=2)
BOUNDED = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def shapes(draw):
    return (draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 9)),
            draw(st.integers(1, 9)))


def _array(draw, shape, precision, low=-2.0, high=2.0):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if precision == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.uniform(low, high, shape).astype(np.float32)


@st.composite
def convs(draw, channels, precision):
    groups = draw(st.sampled_from(_divisors(channels)))
    out_c = groups * draw(st.integers(1, max(1, 8 // groups)))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    weights = _array(draw, (out_c, channels // groups, *kernel), precision)
    return Conv(weights, stride=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=tuple(draw(st.integers(0, 2)) for _ in range(4)),
                dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))), groups=groups,
                precision=precision,
                in_zero=draw(st.integers(-128, 127)) if precision == "int8" else 0)


@st.composite
def sdps(draw, shape, precision, after_conv):
    channels = shape[1]
    ew_op = draw(st.sampled_from([None, "add", "mul", "max", "min"]))
    operand = _array(draw, shape, precision) if ew_op else None
    if precision == "fp32":
        act = draw(st.sampled_from(ACTIVATIONS.names))  # every activation, LUT ones included
        maybe = lambda: draw(st.booleans())  # noqa: E731
        return Sdp(scale=_array(draw, channels, precision) if maybe() else None,
                   shift=_array(draw, channels, precision) if maybe() else None,
                   ew_op=ew_op, operand=operand, act=act,
                   clip=tuple(sorted([draw(st.floats(-3, 3)), draw(st.floats(-3, 3))])),
                   prelu_slope=_array(draw, channels, precision) if act == "prelu" else None)
    act = draw(st.sampled_from([None, "relu", "clip", "prelu"]))
    lo = draw(st.integers(-128, 127))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return Sdp(precision="int8", ew_op=ew_op, operand=operand, act=act,
               bias=rng.integers(-2**20, 2**20, channels).astype(np.int32),
               mul=rng.integers(-2**15, 2**15, channels).astype(np.int16),
               rshift=rng.integers(0, 24, channels).astype(np.uint8),
               in_zero=0 if after_conv else draw(st.integers(-128, 127)),
               ew_zero=draw(st.integers(-128, 127)), ew_mul=draw(st.integers(-2**15, 2**15 - 1)),
               ew_shift=draw(st.integers(0, 20)),
               prelu_mul=rng.integers(-2**15, 2**15, channels).astype(np.int16)
               if act == "prelu" else None,
               prelu_shift=draw(st.integers(0, 20)),
               out_mul=draw(st.integers(-2**15, 2**15 - 1)), out_shift=draw(st.integers(0, 40)),
               out_zero=draw(st.integers(-128, 127)),
               clip_lo=lo if act == "clip" else None,
               clip_hi=draw(st.integers(lo, 127)) if act == "clip" else None)


@st.composite
def pools(draw, precision):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    kind = draw(st.sampled_from(["max", "avg"]))
    padding = (draw(st.integers(0, kernel[0] - 1)), draw(st.integers(0, kernel[1] - 1)),
               draw(st.integers(0, kernel[0] - 1)), draw(st.integers(0, kernel[1] - 1)))
    include = draw(st.booleans())
    if precision == "int8" and kind == "avg" and any(padding):
        include = True  # NVDLA's int8 average divides by the whole window (accel.h)
    return Pool(kind, kernel, (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                padding=padding, count_include_pad=include, precision=precision,
                zero=draw(st.integers(-128, 127)) if precision == "int8" else 0)


def _conv_out(shape, conv):
    n, _, h, w = shape
    k, _, r, s = conv.weights.shape
    t, left, b, right = conv.padding
    out_h = (h + t + b - conv.dilation[0] * (r - 1) - 1) // conv.stride[0] + 1
    out_w = (w + left + right - conv.dilation[1] * (s - 1) - 1) // conv.stride[1] + 1
    return (n, k, out_h, out_w)


@st.composite
def chains(draw):
    """A valid chain in CONV -> SDP -> PDP order and its input."""
    precision = draw(st.sampled_from(["fp32", "int8"]))
    shape = draw(shapes())
    x = _array(draw, shape, precision)
    ops, seen = [], shape
    if draw(st.booleans()):
        conv = draw(convs(shape[1], precision))
        seen = _conv_out(shape, conv)
        assume(min(seen[2:]) >= 1)
        ops.append(conv)
    if ops and precision == "int8" or draw(st.booleans()):
        ops.append(draw(sdps(seen, precision, after_conv=bool(ops))))
    if not ops or draw(st.booleans()):
        ops.append(draw(pools(precision)))
    return ops, x


def _run_or_reject_shape(ops, x, mode):
    """A window larger than its input is a shape error the generator does not rule out."""
    try:
        return DEVICE.run(ops, x, mode=mode)[0]
    except AccelShapeError:
        assume(False)


def _assert_matches_reference(ops, x, y):
    expected = run_chain(ops, x)
    if x.dtype == np.int8:
        np.testing.assert_array_equal(y, expected)
    else:
        expected = expected.astype(np.float32)
        # Outside a function's domain (rsqrt or reciprocal of a negative or zero input) the
        # IEEE answers, NaN and infinity, must match where they are; the rest within the bound
        special = ~np.isfinite(expected)
        np.testing.assert_array_equal(y[special], expected[special])
        with np.errstate(all="ignore"):
            assert_close(np.where(special, 0, y), np.where(special, 0, expected), rtol=1e-4)


@given(chains())
@BOUNDED
def test_valid_chains_equal_the_reference_in_both_modes(chain):
    ops, x = chain
    fused = _run_or_reject_shape(ops, x, "fused")
    independent = DEVICE.run(ops, x, mode="independent")[0]
    np.testing.assert_array_equal(fused, independent)
    _assert_matches_reference(ops, x, fused)


@st.composite
def copies(draw):
    """A BDMA op (in range or not), its input, and the destination's previous contents."""
    precision = draw(st.sampled_from(["fp32", "fp16", "int8"]))
    n, c, h, w = (draw(st.integers(1, 2)), draw(st.integers(1, 40)), draw(st.integers(1, 5)),
                  draw(st.integers(1, 5)))
    channels = draw(st.integers(1, c + 1))
    src_stride = draw(st.integers(1, 4))
    src_offset = draw(st.integers(0, c))
    dst_stride = draw(st.integers(1, 40))
    dst_offset = draw(st.integers(0, 40))
    extra = draw(st.one_of(st.none(), st.integers(-1, 5)))
    dst_channels = None if extra is None else max(
        1, dst_offset + (channels - 1) * dst_stride + 1 + extra)
    op = Bdma(channels, src_offset, src_stride, dst_offset, dst_stride, dst_channels, precision)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    dtype = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}[precision]
    x = rng.integers(-128, 128, (n, c, h, w)).astype(dtype) if precision == "int8" else \
        rng.standard_normal((n, c, h, w)).astype(dtype)
    return op, x, rng.integers(-128, 128, (n, op.output_channels, h, w)).astype(dtype)


@given(copies(), st.sampled_from(["fused", "independent"]))
@BOUNDED
def test_bdma_copies_equal_the_reference_or_are_refused(copy, mode):
    op, x, before = copy
    out = before.copy()
    try:
        _, stats = DEVICE.run([op], x, mode=mode, out=out)
    except AccelError:
        in_range = (op.src_offset + (op.channels - 1) * op.src_stride < x.shape[1] and
                    op.dst_offset + (op.channels - 1) * op.dst_stride < op.output_channels)
        assert not in_range, op
        np.testing.assert_array_equal(out, before)  # a refused run writes nothing
        return
    np.testing.assert_array_equal(out.view(np.uint8), run_op(op, x, before).view(np.uint8))
    assert stats == estimate_chain("nv_full", [op], x.shape, mode=mode)


GARBAGE = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3), st.floats(allow_nan=True),
    st.integers(-2**70, 2**70), st.lists(st.integers(-3, 3), max_size=5),
    st.just(np.float64(1.5)), st.just(np.array([1, 2])), st.just(object()))


def _field(draw, valid):
    return draw(st.one_of(valid, GARBAGE)) if draw(st.integers(0, 4)) == 0 else draw(valid)


@st.composite
def hostile_chains(draw):
    """A valid chain whose ops have one to three fields replaced by drawn values, valid or not,
    and sometimes an operand array of another dtype or size."""
    ops, x = draw(chains())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(ops))
        field = draw(st.sampled_from([f for f in vars(op) if f != "weights"]))
        current = getattr(op, field)
        if isinstance(current, np.ndarray):
            valid = st.sampled_from([current, current[:-1], current.astype(np.float64),
                                     current.astype(np.int64) * 300, current.reshape(-1)])
        else:
            valid = st.just(current)
        setattr(op, field, _field(draw, valid))
    return ops, x


@given(hostile_chains(), st.sampled_from(["fused", "independent"]))
@BOUNDED
def test_garbage_fields_raise_typed_errors_or_equal_the_reference(chain, mode):
    ops, x = chain
    try:
        y = DEVICE.run(ops, x, mode=mode)[0]
    except AccelError:
        return
    _assert_matches_reference(ops, x, y)


def test_the_strategies_reach_every_engine_and_precision():
    """The generator is not vacuous: it yields conv, SDP and pool ops in both precisions."""
    seen = set()

    @given(chains())
    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def collect(chain):
        ops, x = chain
        seen.update((type(op).__name__, x.dtype.name) for op in ops)

    collect()
    assert seen == {(k, p) for k in ("Conv", "Sdp", "Pool") for p in ("float32", "int8")}, seen


@pytest.mark.parametrize("seed", range(3))
def test_wrong_answers_are_caught_by_the_comparison(seed):
    """The reference comparison can fail: a perturbed output does not pass it."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    ops = [Conv(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), padding=1),
           Sdp(act="relu")]
    y = DEVICE.run(ops, x)[0]
    _assert_matches_reference(ops, x, y)
    y.reshape(-1)[rng.integers(y.size)] += 1.0
    with pytest.raises(AssertionError):
        _assert_matches_reference(ops, x, y)
