"""The code generator's pure units, alone: scratch planning, the constant pool, the int8
converter maths and the C text. None of them needs TVM."""
import numpy as np
import pytest

from accel_codegen import AccelConfig, AccelInvalidError
from accel_codegen._accel_ffi import ffi
from accel_codegen.compiler.codegen import emit, int8
from accel_codegen.compiler.codegen.buffers import ScratchPlanner
from accel_codegen.compiler.codegen.constants import ConstantPool
from accel_codegen.quantization import TensorQuant
from accel_codegen.sim import reference


def test_scratch_is_reused_once_dead_and_grows_to_its_largest_use():
    plan = ScratchPlanner()
    a = plan.allocate(100, now=0, free_after=1)   # live through layer 1
    b = plan.allocate(50, now=1, free_after=2)    # a is still live: a new buffer
    assert (a, b) == (0, 1)
    c = plan.allocate(300, now=2, free_after=3)   # a is dead after layer 1: reused, grown
    assert c == a and plan.sizes == [300, 50]
    d = plan.allocate(40, now=4, free_after=4)    # both free: the smallest that fits
    assert d == b and plan.sizes == [300, 50]



def _scan_choice(sizes, ends, size, now):
    """The planner's rule stated as a scan: among the buffers free before ``now``, the smallest
    that fits, else the smallest (grown), the lowest index on a tie; None for a new buffer."""
    free = [i for i, end in enumerate(ends) if end < now]
    fits = [i for i in free if sizes[i] >= size]
    pool = fits or free
    return min(pool, key=lambda i: (sizes[i], i)) if pool else None


@pytest.mark.parametrize("in_order", [True, False])
def test_scratch_choice_equals_the_scan_of_every_buffer(in_order):
    rng = np.random.default_rng(7)
    plan, sizes, ends, now = ScratchPlanner(), [], [], 0
    for _ in range(3000):
        now = now + int(rng.integers(0, 3)) if in_order else int(rng.integers(0, 40))
        size = int(rng.choice([16, 32, 48, 64])) if rng.random() < 0.5 else int(rng.integers(1, 999))
        free_after = now + int(rng.choice([-1, 0, 0, 1, 2, 6, 30]))
        want = _scan_choice(sizes, ends, size, now)
        if want is None:
            want = len(sizes)
            sizes.append(size), ends.append(free_after)
        else:
            sizes[want], ends[want] = max(sizes[want], size), free_after
        assert plan.allocate(size, now, free_after) == want
        assert plan.sizes == sizes

def test_constant_pool_keeps_integer_types_and_takes_the_float_precision():
    pool = ConstantPool("fn", "fp16")
    assert pool.add(np.ones(3)) == 0 and pool.add(np.arange(4, dtype=np.int8)) == 1
    assert [a.dtype for a in pool.arrays.values()] == [np.float16, np.int8]
    assert list(pool.arrays) == ["fn_c0", "fn_c1"]
    assert pool.dl_types() == (("kDLFloat", 16), ("kDLInt", 8))


def test_range_quant_is_unsigned_without_negatives():
    assert int8.range_quant(np.array([0.0, 2.55])) == TensorQuant(np.float32(0.01), -128)
    q = int8.range_quant(np.array([-1.27, 0.5]))  # 254 steps over 1.77, 183 of them below 0
    assert q.zero == 183 - 128 and q.scale == pytest.approx(1.77 / 254)


def test_channel_converters_reproduce_the_affine_map():
    """bias + mul/rshift applied by the reference SDP equal g * acc * unit + h in target
    units, within the rounding of the converters."""
    rng = np.random.default_rng(0)
    g, h = rng.uniform(0.5, 2, 8), rng.uniform(-3, 3, 8)
    unit, target = np.full(8, 0.01), 0.05
    conv = int8.channel_converters(g, h, unit, target, "layer")
    acc = rng.integers(-2000, 2000, (1, 8, 4, 4))
    codes = reference.sdp_int8(acc, bias=conv["bias"], mul=conv["mul"], rshift=conv["rshift"])
    exact = (g.reshape(1, -1, 1, 1) * acc * unit.reshape(1, -1, 1, 1) + h.reshape(1, -1, 1, 1))
    assert np.max(np.abs(codes - np.clip(np.round(exact / target), -128, 127))) <= 1


def test_channel_converters_refuse_only_what_is_not_finite():
    """A scale of 0 and a shift beyond int32 are encoded (tests/quantization/
    test_trained_weights.py checks how); a non-finite one has no converter."""
    int8.channel_converters(np.array([1.0, 0.0]), np.zeros(2), np.ones(2), 1.0, "layer f0.0")
    int8.channel_converters(np.ones(1), np.array([1e12]), np.ones(1), 1.0, "layer f0.0")
    with pytest.raises(AccelInvalidError, match="channel 1"):
        int8.channel_converters(np.ones(2), np.array([0.0, np.inf]), np.ones(2), 1.0,
                                "layer f0.0")


def test_elementwise_alignment():
    out, operand = TensorQuant(0.1, 0), TensorQuant(0.05, 0)
    add = int8.elementwise("add", out, operand, "layer")
    assert add.extra_bits == int8.EW_EXTRA_BITS and add.target == pytest.approx(0.1 / 256)
    assert (add.out_mul, add.out_shift) == (1, int8.EW_EXTRA_BITS)
    assert add.ew_mul / 2 ** add.ew_shift == pytest.approx(0.05 / add.target, rel=1e-4)
    with pytest.raises(AccelInvalidError, match="too large"):
        int8.elementwise("add", TensorQuant(1e-6, 0), TensorQuant(1.0, 0), "layer")


def test_bias_correction_is_zero_without_means_and_cancels_the_rounding_shift():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 2, 3, 3))
    scales = np.abs(w).reshape(4, -1).max(axis=1) / 127
    codes = np.round(w / scales.reshape(-1, 1, 1, 1)).astype(np.int8)
    assert not int8.bias_correction(None, 1, codes, scales, w).any()
    means = np.array([1.5, -0.5])
    shift = int8.bias_correction(means, 1, codes, scales, w)
    error = codes * scales.reshape(-1, 1, 1, 1) - w
    assert np.allclose(shift, (error.sum(axis=(2, 3)) * means).sum(axis=1))


def test_clip_and_prelu_converters():
    assert int8.clip_codes((0.0, 6.0), TensorQuant(0.05, -128)) == (-128, -8)
    with np.errstate(all="raise"):  # torch's one-sided clips: no inf or NaN on the way
        assert int8.clip_codes((0.0, np.inf), TensorQuant(0.05, -128)) == (-128, 127)
        assert int8.clip_codes((-np.inf, 6.0), TensorQuant(0.05, 0)) == (-128, 120)
    codes, shift = int8.prelu_converter(np.array([0.25]), 3, "layer")
    assert codes.shape == (3,) and codes[0] / 2 ** shift == 0.25


def test_config_is_written_from_every_c_field():
    cfg = AccelConfig.preset("nv_small").replace(name='a "quoted" name')
    text = emit.config_filler(cfg)
    for name, _ in ffi.typeof("accel_config").fields:
        assert f"config->{name}" in text, name
    assert 'a \\"quoted\\" name' in text and "config->atomic_c = 8;" in text


def test_float_literals_read_back_as_the_same_float32():
    for value in (0.1, 1e-30, 3.4e38, -2.5):
        assert np.float32(float(emit.c_float(value)[:-1])) == np.float32(value)
    assert emit.c_float(float("inf")) == "INFINITY"


@pytest.mark.parametrize("size,kernels,rescale", [
    ((7, 7), [(7, 7)], 1.0),                       # within the PDP's window: one pass
    ((14, 14), [(7, 7), (2, 2)], 1.0),             # exact factors
    ((112, 56), [(8, 8), (7, 7), (2, 1)], 1.0),    # three passes; W needs only two
    ((13, 13), [(8, 8), (2, 2)], 256 / 169),       # prime: padded to 16, rescaled
    ((17, 9), [(8, 3), (3, 3)], 24 * 9 / (17 * 9)),
])
def test_a_global_average_wider_than_the_pdp_splits_into_passes(size, kernels, rescale):
    from accel_codegen.compiler.layer import PoolSpec
    spec = PoolSpec("avg", size, (1, 1), (0, 0, 0, 0), False, "relax.mean", is_global=True)
    passes, factor = spec.passes()
    assert [p.kernel for p in passes] == kernels and factor == pytest.approx(rescale)
    assert all(max(p.kernel) <= 8 for p in passes)
    assert len(passes) == 1 or all(p.stride == p.kernel for p in passes)
    # The passes, run by the reference engines and rescaled, give the global mean.
    x = np.random.default_rng(0).standard_normal((1, 3, *size)).astype(np.float64)
    y = x
    for p in passes:
        y = reference.pool2d(y, "avg", p.kernel, p.stride, p.padding, p.count_include_pad)
    np.testing.assert_allclose(y * factor, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)


def test_a_strided_pool_wider_than_the_pdp_is_not_split():
    from accel_codegen.compiler.layer import PoolSpec
    spec = PoolSpec("avg", (10, 10), (2, 2), (0, 0, 0, 0), False, "relax.nn.avg_pool2d")
    assert spec.passes() == ([spec], 1.0)


def test_calibration_histograms_widen_in_one_pass():
    """Calibration reads every tensor once: the |x| histogram doubles its range (two bins
    merge into one) as larger values arrive, and ends as the histogram over the final range."""
    from accel_codegen.quantization import Observer

    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((1, 4, 8, 8)).astype(np.float32) * s for s in (0.3, 1, 5)]
    observer = Observer()
    for x in batches:
        observer.add("f0.0 accel.conv2d", 0, x)
    stats = observer.stats[("f0.0", 0)]
    everything = np.abs(np.concatenate([x.ravel() for x in batches]))
    assert stats.amax == everything.max() and everything.max() <= stats.top < 2 * everything.max()
    direct, _ = np.histogram(everything, bins=stats.histogram.size, range=(0.0, stats.top))
    assert stats.histogram.sum() == everything.size
    assert np.abs(stats.histogram - direct).sum() <= 4  # values on a merged bin edge


def test_read_counts_counts_every_read_at_any_depth():
    """compiler.relax_exprs.read_counts, the one reader counter of the rewrites and the int8
    plan: a variable read twice by one call and once inside a tuple, the result once, an unread
    one absent."""
    from tvm import relax

    from accel_codegen.compiler.relax_exprs import read_counts

    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            square = builder.emit(relax.op.multiply(x, x))
            unread = builder.emit(relax.op.add(x, x))
            joined = builder.emit(relax.op.concat(relax.Tuple([square, x]), axis=1))
            out = builder.emit_output(relax.op.concat(relax.Tuple([joined, square]), axis=1))
        builder.emit_func_output(out)
    counts = {var.name: count for var, count in read_counts(builder.get()["main"]).items()}
    assert counts == {"x": 5, "lv": 2, "lv2": 1, "gv": 1}, counts
    assert (square.name, unread.name, joined.name) == ("lv", "lv1", "lv2")
