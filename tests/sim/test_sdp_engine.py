"""The SDP engine alone and after a CONV against the NumPy reference, fixed seeds: fp32 bit
for bit (sigmoid and tanh within libm's last bit), every INT8 converter bit for bit (saturation,
rounding, zero points), FP16 bit for bit (the same float32 operations, one final rounding; the
LUT activations through the same LUT model, see test_lut.py)."""
import numpy as np
import pytest

from accel_codegen import Conv, Device, Pool, Sdp
from accel_codegen import reference as ref
from conftest import assert_close, assert_same, fp16_sdp, run_and_compare

DEFAULT_DEVICE = Device("nv_full")  # as many threads as CPUs
DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]


# --- fp32 --------------------------------------------------------------------------------------

EPILOGUES = {
    "bias": dict(shift=True),
    "bn": dict(scale=True, shift=True),
    "scale_only": dict(scale=True),
    "bn_relu": dict(scale=True, shift=True, act="relu"),
    "bn_relu6": dict(scale=True, shift=True, act="clip"),
    "bn_prelu": dict(scale=True, shift=True, act="prelu"),
    "bn_add_relu": dict(scale=True, shift=True, ew_op="add", act="relu"),
    "mul": dict(ew_op="mul"),
    "max": dict(ew_op="max"),
    "min_sigmoid": dict(ew_op="min", act="sigmoid"),
    "tanh": dict(shift=True, act="tanh"),
}


def _sdp(spec, shape, rng):
    c = shape[1]
    return Sdp(
        scale=rng.uniform(-2, 2, c).astype(np.float32) if spec.get("scale") else None,
        shift=rng.standard_normal(c).astype(np.float32) if spec.get("shift") else None,
        ew_op=spec.get("ew_op"),
        operand=rng.standard_normal(shape).astype(np.float32) if spec.get("ew_op") else None,
        act=spec.get("act"), clip=(0.0, 6.0) if spec.get("act") == "clip" else (-1.0, 1.0),
        prelu_slope=rng.uniform(0, 0.5, c).astype(np.float32) if spec.get("act") == "prelu"
        else None)


@pytest.mark.parametrize("name", EPILOGUES)
def test_sdp_matches_reference_bit_for_bit(name, rng):
    shape = (2, 5, 7, 9)
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    op = _sdp(EPILOGUES[name], shape, rng)
    y, stats = DEFAULT_DEVICE.run([op], x)
    expected = ref.run_op(op, x)
    if op.act in ("sigmoid", "tanh"):  # libm and NumPy may differ in the last bit
        np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(y, expected)
    assert stats.ops[0].engine == "SDP"


@pytest.mark.parametrize("name", EPILOGUES)
def test_fused_and_independent_agree_exactly(name, rng):
    """Conv -> SDP -> pool, fused vs independent: the same bits, different memory traffic."""
    x = rng.standard_normal((1, 6, 12, 12), dtype=np.float32)
    w = rng.standard_normal((10, 6, 3, 3), dtype=np.float32)
    conv = Conv(w, padding=1)
    sdp = _sdp(EPILOGUES[name], (1, 10, 12, 12), rng)
    chain = [conv, sdp, Pool("max", 2, 2)]
    fused, fused_stats = DEFAULT_DEVICE.run(chain, x, mode="fused")
    independent, independent_stats = DEFAULT_DEVICE.run(chain, x, mode="independent")
    np.testing.assert_array_equal(fused, independent)
    assert fused_stats.bytes_read < independent_stats.bytes_read
    assert fused_stats.bytes_written < independent_stats.bytes_written
    assert_close(fused, ref.run_chain(chain, x), rtol=1e-5)


def test_nan_and_infinity_follow_the_reference():
    """NaN survives ReLU, clip and max as in NumPy and PyTorch; an all -inf window pools to
    -inf."""
    x = np.array([np.nan, -1.0, 2.0, np.inf, -np.inf, 0.5], np.float32).reshape(1, 1, 2, 3)
    for op in (Sdp(act="relu"), Sdp(act="clip", clip=(0.0, 6.0)),
               Sdp(ew_op="max", operand=np.zeros_like(x)),
               Sdp(ew_op="min", operand=np.zeros_like(x))):
        np.testing.assert_array_equal(DEFAULT_DEVICE.run([op], x)[0], ref.run_op(op, x))
    pool = Pool("max", (1, 2), (1, 1))
    windows = np.array([[np.nan, 1.0, -np.inf, -np.inf]], np.float32).reshape(1, 1, 1, 4)
    np.testing.assert_array_equal(DEFAULT_DEVICE.run([pool], windows)[0], ref.run_op(pool, windows))


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("scale,shift", [(False, False), (True, False), (False, True),
                                         (True, True)])
def test_one_pass_epilogues_match_the_reference(scale, shift, add, act, rng):
    """Every combination sdp.c computes in one pass (scale and/or shift, ADD or nothing, NONE /
    RELU / CLIP), with NaNs, infinities and values on the clip bounds, alone and after a CONV,
    bit for bit with the reference."""
    shape = (1, 6, 9, 23)
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    x.flat[::37] = np.nan
    x.flat[5::41] = np.inf
    x.flat[7::43] = -np.inf
    x.flat[11::29] = 6.0
    spec = dict(scale=scale, shift=shift, ew_op="add" if add else None, act=act)
    op = _sdp(spec, shape, rng)
    assert_same(DEFAULT_DEVICE.run([op], x)[0], ref.run_op(op, x), f"{spec} alone")
    w = rng.standard_normal((6, 6, 3, 3), dtype=np.float32)
    chain = [Conv(w, padding=1), op]
    fused = DEFAULT_DEVICE.run(chain, x, mode="fused")[0]
    assert_same(fused, DEFAULT_DEVICE.run(chain, x, mode="independent")[0], f"{spec} fused")


@pytest.mark.parametrize("scale,shift", [(False, False), (True, False), (False, True),
                                         (True, True)])
def test_multiply_and_per_channel_exp_passes_match_the_reference(scale, shift, rng):
    """The passes sdp.c runs without a copy first: (x s + b) * operand (a layer norm's d * d,
    its normalise step after the broadcast), and softmax's exp(x + one value per channel) (and
    GELU's), bit for bit with the reference, with NaNs and infinities, a plane length (197)
    that ends in a part vector, in place and not."""
    shape = (1, 6, 1, 197)
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    x.flat[::37] = np.nan
    x.flat[5::41] = np.inf
    x.flat[7::43] = -np.inf
    op = _sdp(dict(scale=scale, shift=shift, ew_op="mul"), shape, rng)
    assert_same(DEFAULT_DEVICE.run([op], x)[0], ref.run_op(op, x), "mul")
    for act in ("exp", "softmax_exp", "gelu"):
        per_channel = Sdp(ew_op="add", ew_per_channel=True, act=act,
                          operand=-np.abs(rng.standard_normal((1, 6), dtype=np.float32)))
        if scale or shift:  # the general path: the affine step first
            per_channel = Sdp(ew_op="add", ew_per_channel=True, act=act,
                              operand=per_channel.operand, **{
                                  k: v for k, v in (("scale", op.scale), ("shift", op.shift))
                                  if v is not None})
        y = DEFAULT_DEVICE.run([per_channel], x)[0]
        assert_same(y, ref.run_op(per_channel, x), act)
        inplace = x.copy()
        DEFAULT_DEVICE.run([per_channel], inplace, out=inplace)
        assert_same(inplace, y, f"{act} in place")


# --- INT8: the converters' edges, one at a time ------------------------------------------------

def test_int8_element_wise_saturates_at_int32():
    """sat32(t + e) and sat32(t * e): a kernel that wraps around in int32 flips the sign."""
    x = np.zeros((1, 1, 1, 4), np.int8)
    operand = np.array([127, -128, 0, 1], np.int8).reshape(x.shape)
    add = Sdp(bias=np.array([2**31 - 1], np.int32), ew_op="add", operand=operand, ew_zero=-128,
              ew_mul=32767, ew_shift=0, out_mul=1, out_shift=24, out_zero=-128, precision="int8")
    # t = 2^31 - 1, e = (255, 0, 128, 129) * 32767: t + e saturates; (2^31 - 1) / 2^24 -> 128
    y = run_and_compare(DEVICE, [add], x, "ew add")
    np.testing.assert_array_equal(y.ravel(), [0, 0, 0, 0])
    operand = np.array([127, -128, 1, 0], np.int8).reshape(x.shape)
    mul = Sdp(bias=np.array([2**20], np.int32), ew_op="mul", operand=operand, ew_zero=0,
              ew_mul=32767, ew_shift=0, out_mul=1, out_shift=25, precision="int8")
    # t * e = 2^20 * (127, -128, 1, 0) * 32767 saturates to +-2^31 (not for 0); / 2^25 -> +-64
    y = run_and_compare(DEVICE, [mul], x, "ew mul")
    np.testing.assert_array_equal(y.ravel(), [64, -64, 64, 0])


def test_int8_prelu_saturates_at_int32_as_nvdla_x_unit():
    """PReLU is an X unit's multiplier in PReLU mode (accel.h): t * prelu_mul with t = -2^31
    and a large multiplier saturates to int32 at the shifter, as NVDLA's does."""
    x = np.full((1, 1, 1, 2), -128, np.int8)
    chain = [Sdp(bias=np.array([-2**31 + 128], np.int32), act="prelu",
                 prelu_mul=np.array([32767], np.int16), prelu_shift=0, out_mul=1,
                 out_shift=40, precision="int8")]
    # v = -128, t = -2^31; PReLU: sat32(-2^31 * 32767) = -2^31; / 2^40 -> 0 (unsaturated, the
    # product about -2^46, it would be -64)
    y = run_and_compare(DEVICE, chain, x, "prelu range")
    np.testing.assert_array_equal(y.ravel(), [0, 0])


def _nvdla_units(v, bias, mul, rshift, act, out_zero, prelu_mul=None, prelu_shift=0):
    """NVDLA's SDP as the nv_small front end computes it (sim/nvdla/arith.py, from the C
    model's sdp_x): BS (ALU sum of the bias, multiplier 2^(S - rshift)), BN (multiplier mul,
    shifter S, ReLU; or PReLU in a third X unit), the output converter (offset -out_zero)."""
    from accel_codegen.sim.nvdla import arith

    shape = (1, -1) + (1,) * (v.ndim - 2)
    s_max = int(rshift.max())
    bs = arith.sdp_x(v, bypass=False, alu_bypass=False, alu_algo=2,
                     alu_op=bias.astype(np.int64).reshape(shape), alu_shift=0, mul_bypass=False,
                     mul_op=(1 << (s_max - rshift.astype(np.int64))).reshape(shape),
                     mul_prelu=False, mul_shift=0, relu_bypass=True)
    t = arith.sdp_x(bs, bypass=False, alu_bypass=True, alu_algo=2, alu_op=0, alu_shift=0,
                    mul_bypass=False, mul_op=mul.astype(np.int64).reshape(shape),
                    mul_prelu=False, mul_shift=s_max, relu_bypass=act != "relu")
    if act == "prelu":
        t = arith.sdp_x(t, bypass=False, alu_bypass=True, alu_algo=2, alu_op=0, alu_shift=0,
                        mul_bypass=False, mul_op=prelu_mul.astype(np.int64).reshape(shape),
                        mul_prelu=True, mul_shift=prelu_shift, relu_bypass=True)
    return arith.sdp_cvt(t, -out_zero, 1, 0).astype(np.int8)


@pytest.mark.parametrize("act", [None, "relu", "prelu"])
def test_int8_sdp_is_nvdla_bs_then_bn(act):
    """The simulator's int8 SDP is NVDLA's BS -> BN -> converter bit for bit, BS's saturation
    of (v + bias) 2^(S - rshift) included: per-channel shifts 20..34 apart by up to 14 bits
    (2^14: BS's 16-bit multiplier), biases that take v + bias past 2^(31 - p) and past int32
    (NVDLA's ALU is 33 bits), on a CONV's accumulators (the conv epilogue's lanes and their
    fallbacks) and on codes read from memory (the SDP alone)."""
    rng = np.random.default_rng(31 + len(str(act)))
    k, c = 48, 64
    rshift = rng.integers(20, 35, k).astype(np.uint8)
    rshift[0] = 20
    rshift[1] = 34
    mul = rng.integers(1, 32768, k).astype(np.int16)
    mul[::5] = -mul[::5]
    bias = rng.integers(-2**31, 2**31, k, dtype=np.int64)
    bias[::3] = rng.integers(-2**22, 2**22, bias[::3].size)
    # channel 2: p = 14, BS saturates at 2^17 where the codes would not: rhaz(2^20 300, 20)
    # = 300 (code 127) against BS's rhaz((2^31 - 1) 300, 34) = 38 (code 33)
    rshift[2], mul[2], bias[2] = 20, 300, 2**20
    prelu = rng.integers(-32768, 32768, k).astype(np.int16) if act == "prelu" else None
    x = rng.integers(-128, 128, (1, c, 5, 7)).astype(np.int8)
    w = rng.integers(-127, 128, (k, c, 3, 3)).astype(np.int8)
    sdp = Sdp(bias=bias.astype(np.int32), mul=mul, rshift=rshift, act=act, prelu_mul=prelu,
              prelu_shift=9, out_zero=-5, precision="int8")
    conv = Conv(weights=w, padding=1, in_zero=3, precision="int8")
    y = run_and_compare(DEVICE, [conv, sdp], x, f"conv + nvdla sdp {act}")
    v = ref.conv2d_int8(x, w, padding=1, in_zero=3)
    np.testing.assert_array_equal(y, _nvdla_units(v, bias, mul, rshift, act, -5, prelu, 9))
    old = ref.sat8(ref.sat32(ref.rhaz(ref.sat32(v + bias.reshape(1, -1, 1, 1))
                                      * mul.astype(np.int64).reshape(1, -1, 1, 1),
                                      rshift.astype(np.int64).reshape(1, -1, 1, 1))) - 5)
    if act is None:  # BS's saturation shows: the one-rounding form differs somewhere
        assert np.any(old != y)
    # alone, on codes: v = x - in_zero, the channels' biases near BS's limits
    xs = rng.integers(-128, 128, (2, k, 3, 9)).astype(np.int8)
    p = int(rshift.max()) - rshift.astype(np.int64)
    edge = (2**31 - 1) >> p
    alone = Sdp(bias=np.clip(np.where(np.arange(k) % 2, edge, -edge - 1) - 100, -2**31,
                             2**31 - 1).astype(np.int32),
                mul=mul, rshift=rshift, in_zero=7, act=act, prelu_mul=prelu, prelu_shift=9,
                out_zero=-5, precision="int8")
    y = run_and_compare(DEVICE, [alone], xs, f"nvdla sdp alone {act}")
    np.testing.assert_array_equal(
        y, _nvdla_units(xs.astype(np.int64) - 7, alone.bias.astype(np.int64), mul, rshift, act,
                        -5, prelu, 9))


def _run_each_shift(op, x, what):
    """run_and_compare on each group of op's channels that share one right shift, as one op
    each: with one shift the layer's BS multiplies by 1 (accel.h), so every channel meets the
    converter's own edges (test_int8_sdp_is_nvdla_bs_then_bn covers shifts apart). Returns the
    codes of every channel."""
    y = np.empty(x.shape, np.int8)
    for shift in np.unique(op.rshift):
        keep = op.rshift == shift
        fields = {k: (v[keep] if k in ("bias", "mul", "rshift", "prelu_mul") and v is not None
                      else v[:, keep] if k == "operand" and v is not None else v)
                  for k, v in op.__dict__.items()}
        y[:, keep] = run_and_compare(DEVICE, [Sdp(**fields)], x[:, keep], f"{what} shift {shift}")
    return y


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("out_zero", [-128, -7, 0, 93, 127])
def test_int8_common_converter_at_its_saturation_edges(act, out_zero):
    """The common converter (bias, mul, shift, NONE / RELU / CLIP) runs in int32 lanes where the
    bounds allow (sdp_i8_avx512.c span_fast32: t clamped to +-T, where codes saturate; a direct and
    a split product), otherwise in int64: every shift 0..44, positive, negative and zero
    multipliers, and biases that put t = v + bias on both sides of +-T and of the int32 ends."""
    rng = np.random.default_rng(400 + out_zero)
    shifts = np.arange(45)
    c = shifts.size * 4
    rshift = np.repeat(shifts, 4).astype(np.uint8)
    mul = rng.integers(1, 32768, c)
    mul[::4] = rng.choice([1, 2, 16384, 32767, -1, -32768, 0], shifts.size)
    r = 128 + abs(out_zero)
    t_edge = -(-(r << rshift.astype(object)) // np.maximum(np.abs(mul), 1).astype(object))
    t_edge = np.array([min(int(t), 2**31) for t in t_edge], np.int64)
    sign = rng.choice([-1, 1], c)
    bias = np.clip(sign * t_edge + rng.integers(-200, 200, c), -2**31, 2**31 - 1)
    bias[1::8] = rng.choice([-2**31, 2**31 - 1, 0], bias[1::8].size)
    x = rng.integers(-128, 128, (1, c, 3, 37)).astype(np.int8)
    op = Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16), rshift=rshift,
             in_zero=int(rng.integers(-128, 128)), act=act, out_zero=out_zero,
             clip_lo=-20 if act == "clip" else None, clip_hi=100 if act == "clip" else None,
             precision="int8")
    y = _run_each_shift(op, x, f"converter edges {act} {out_zero}")
    if not (act == "relu" and out_zero == 127):  # there every code is max(y, 127)
        assert len(np.unique(y)) > 3  # codes inside the range, not only saturated ones


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("out_zero", [-128, -7, 0, 93, 127])
def test_int8_common_converter_rounds_halves_away_from_zero(act, out_zero):
    """The shifts a conv's converter has (17..40, sdp_i8_avx512.c's split form in int32 lanes where
    the bounds allow): multipliers 2^j with t * mul / 2^s landing exactly on halves of both
    signs (v + bias = q * 2^(s-j) + 2^(s-j-1) for v in range), and odd multipliers."""
    rng = np.random.default_rng(900 + out_zero)
    shifts = np.repeat(np.arange(17, 41), 6)
    c = shifts.size
    j = np.minimum(rng.integers(0, 15, c), shifts - 1)
    mul = (1 << j).astype(np.int64)
    mul[5::6] = rng.integers(1, 32768, c // 6) | 1
    d = shifts - j
    q = rng.integers(-130, 131, c)
    bias = np.array([int(qi) * (1 << int(di)) + (1 << int(di - 1)) + int(rng.integers(-100, 100))
                     for qi, di in zip(q, d)], dtype=object)
    bias = np.clip(bias, -2**31, 2**31 - 1).astype(np.int64)
    x = np.tile(np.arange(-128, 128, dtype=np.int8), (1, c, 1, 1)).reshape(1, c, 1, 256)
    op = Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16),
             rshift=shifts.astype(np.uint8), in_zero=0, act=act, out_zero=out_zero,
             clip_lo=-20 if act == "clip" else None, clip_hi=100 if act == "clip" else None,
             precision="int8")
    y = _run_each_shift(op, x, f"converter halves {act} {out_zero}")
    if not (act == "relu" and out_zero == 127):  # there every code is max(y, 127)
        assert len(np.unique(y)) > 3


def _rhaz(p, s):
    half = 1 << (s - 1) if s > 0 else 0
    return -((-p + half) >> s) if p < 0 else (p + half) >> s


# (out_mul, out_shift, ew_zero, ew_mul, ew_shift): the compiler's residual add (out_mul 1,
# out_shift 8), wide and negative output multipliers, element-wise shifts from 0 to past 23
# (where e is 0), and output shifts where the int32 form no longer fits (30, 31)
ADD_CONVERTERS = [(1, 8, -128, 23170, 7), (1, 0, 0, 1, 0), (3, 15, 17, -32768, 23),
                  (-5, 12, 127, 32767, 24), (32767, 22, -3, 9001, 1), (-32768, 30, 0, 257, 40),
                  (32767, 31, 60, -700, 3)]


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("out_zero", [-128, 0, 93])
@pytest.mark.parametrize("out_mul,out_shift,ew_zero,ew_mul,ew_shift", ADD_CONVERTERS)
def test_int8_residual_add_at_its_saturation_edges(act, out_zero, out_mul, out_shift, ew_zero,
                                                   ew_mul, ew_shift):
    """The residual converter (bias, mul, shift, ADD with its operand converter, an output
    converter, NONE / RELU / CLIP) runs in int32 lanes where the bounds allow (sdp_i8_avx512.c
    span_add32: t clamped to +-T1, where t2 = rhaz(t * mul, s) passes +-(T_out + E) and the sum
    saturates the codes whatever the operand; a direct and a split product), otherwise in int64:
    every channel shift 0..44, positive, negative and zero multipliers, every operand code in
    every channel, and biases that put t on both sides of +-T1, of the t that gives t2 = +-T_out
    and +-(T_out - E), and of the int32 ends."""
    rng = np.random.default_rng(abs(out_zero) * 131 + out_shift * 7 + ew_shift)
    shifts = np.arange(45)
    c = shifts.size * 6
    rshift = np.repeat(shifts, 6).astype(np.uint8)
    mul = rng.integers(1, 32768, c)
    mul[::6] = rng.choice([1, 2, 16384, 32767, -1, -32768, 0], shifts.size)
    # the thresholds as sdp_i8_avx512.c's add32_plan computes them (for mul > 0)
    r = 128 + abs(out_zero)
    t_out = -(-(r << out_shift) // abs(out_mul))
    e_max = max(abs(_rhaz((code - ew_zero) * ew_mul, ew_shift)) for code in (-128, 127))
    targets = [t_out + e_max, t_out, max(t_out - e_max, 0)]  # values of t2
    bias = np.zeros(c, np.int64)
    for ch in range(c):
        m, sh = max(abs(int(mul[ch])), 1), int(rshift[ch])
        edge = -(-(int(targets[ch % 3]) << sh) // m)  # the t that gives t2 = target
        sign = 1 if ch % 2 else -1
        bias[ch] = min(max(sign * edge + int(rng.integers(-200, 200)), -2**31), 2**31 - 1)
    bias[5::12] = rng.choice([-2**31, 2**31 - 1, 0], bias[5::12].size)
    x = rng.integers(-128, 128, (1, c, 2, 128)).astype(np.int8)
    codes = np.arange(-128, 128, dtype=np.int8)
    operand = np.stack([rng.permutation(codes) for _ in range(c)]).reshape(x.shape)
    op = Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16), rshift=rshift,
             in_zero=int(rng.integers(-128, 128)), ew_op="add", operand=operand,
             ew_zero=ew_zero, ew_mul=ew_mul, ew_shift=ew_shift, act=act, out_mul=out_mul,
             out_shift=out_shift, out_zero=out_zero,
             clip_lo=-20 if act == "clip" else None, clip_hi=100 if act == "clip" else None,
             precision="int8")
    y = _run_each_shift(op, x, f"add edges {act} {out_zero} {out_mul}/{out_shift}")
    if not (act == "relu" and out_mul < 0 and out_zero == -128):  # there every code is -128
        assert len(np.unique(y)) > 3  # codes inside the range, not only saturated ones


@pytest.mark.parametrize("add", [False, True])
def test_int8_converters_in_steps_of_64_and_their_tails(add):
    """The int32-lane converters write 64 codes per step (two saturating packs and a vpermd,
    sdp_i8_avx512.c) and the rest 16 at a time: planes of 1 to 130 values around those steps, for
    the common converter and the residual add, every code of the operand."""
    rng = np.random.default_rng(31 + add)
    for hw in (1, 15, 16, 17, 48, 63, 64, 65, 79, 128, 130):
        c = 6
        x = rng.integers(-128, 128, (1, c, 1, hw)).astype(np.int8)
        common = dict(bias=rng.integers(-3000, 3000, c).astype(np.int32),
                      mul=rng.integers(16384, 32768, c).astype(np.int16),
                      rshift=rng.integers(12, 26, c).astype(np.uint8), in_zero=-3,
                      act=["relu", "clip", None][hw % 3], precision="int8",
                      clip_lo=-20 if hw % 3 == 1 else None, clip_hi=100 if hw % 3 == 1 else None)
        if add:
            op = Sdp(**{**common, "rshift": common["rshift"] - 8}, ew_op="add",
                     operand=rng.integers(-128, 128, x.shape).astype(np.int8), ew_zero=-128,
                     ew_mul=23170, ew_shift=7, out_mul=1, out_shift=8, out_zero=-5)
        else:
            op = Sdp(**common, out_zero=-5)
        run_and_compare(DEVICE, [op], x, f"{hw} values, add {add}")


def test_int8_element_wise_ops_with_converters():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (2, 6, 5, 7)).astype(np.int8)
    operand = rng.integers(-128, 128, x.shape).astype(np.int8)
    for ew_op in ("add", "mul", "max", "min"):
        for ew_zero, ew_mul, ew_shift in ((0, 1, 0), (-128, -32768, 14), (77, 12345, 9),
                                          (127, 3, 0)):
            op = Sdp(ew_op=ew_op, operand=operand, ew_zero=ew_zero, ew_mul=ew_mul,
                     ew_shift=ew_shift, in_zero=-3, out_mul=5, out_shift=3 + 8 * (ew_op == "mul"),
                     out_zero=-9, precision="int8")
            run_and_compare(DEVICE, [op], x, f"ew {ew_op} {ew_zero}/{ew_mul}/{ew_shift}")


# --- INT8 SDP alone, reading codes from memory -------------------------------------------------

def _standalone_sdp(rng, shape, case):
    c = shape[1]
    return Sdp(
        bias=rng.integers(-300, 300, c).astype(np.int32) if case % 2 else None,
        mul=rng.integers(-32768, 32768, c).astype(np.int16) if case % 3 else None,
        rshift=rng.integers(8, 17, c).astype(np.uint8) if case % 3 else None,
        in_zero=int(rng.integers(-128, 128)),
        ew_op=[None, "add", "mul", "max", "min"][case % 5],
        operand=rng.integers(-128, 128, shape).astype(np.int8) if case % 5 else None,
        ew_zero=int(rng.integers(-128, 128)), ew_mul=int(rng.integers(-400, 400)),
        ew_shift=int(rng.integers(0, 9)),
        act=[None, "relu", "prelu", "clip"][case % 4],
        prelu_mul=rng.integers(-600, 600, c).astype(np.int16) if case % 4 == 2 else None,
        prelu_shift=int(rng.integers(0, 10)), out_mul=int(rng.choice([0, 1, 300, -2000])),
        out_shift=int(rng.integers(0, 12)), out_zero=int(rng.integers(-128, 128)),
        clip_lo=-50 if case % 4 == 3 else None, clip_hi=int(rng.integers(-50, 128))
        if case % 4 == 3 else None, precision="int8")


@pytest.mark.parametrize("case", range(20))
def test_int8_sdp_alone_matches_reference_exactly(case):
    """An SDP reading int8 codes from memory: v = x - in_zero, every converter."""
    rng = np.random.default_rng(50 + case)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 20)), int(rng.integers(1, 9)),
             int(rng.integers(1, 40)))
    x = rng.integers(-128, 128, shape).astype(np.int8)
    op = _standalone_sdp(rng, shape, case)
    expected = ref.run_op(op, x)
    for threads, device in DEVICES.items():
        y, stats = device.run([op], x)
        assert_same(y, expected, f"sdp case {case}, {threads} threads")
    assert stats.ops[0].precision == "int8"


def test_int8_sdp_on_2d_input_and_in_place():
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (5, 33)).astype(np.int8)
    op = Sdp(bias=rng.integers(-9, 9, 33).astype(np.int32), in_zero=12, act="relu",
             out_zero=-20, precision="int8")
    expected = ref.run_chain([op], x)
    y, _ = DEVICE.run([op], x, out=x)
    assert y is x
    assert_same(x, expected, "in place")


# --- FP16 --------------------------------------------------------------------------------------

FP16_SDPS = ["bias", "bn_relu", "bn_relu6", "bn_prelu", "bn_add", "mul", "max_min", "scale_only",
             "sigmoid", "tanh"]


@pytest.mark.parametrize("spec", FP16_SDPS)
def test_fp16_sdp_alone_is_bit_exact(spec):
    rng = np.random.default_rng(31 + FP16_SDPS.index(spec))
    shape = (2, 5, 7, 9)
    x = (rng.standard_normal(shape) * 4).astype(np.float16)
    x.flat[:4] = [65504, -65504, 6e-8, -0.0]   # the largest halves, a subnormal, -0
    if spec in ("sigmoid", "tanh"):
        op = Sdp(shift=rng.standard_normal(5).astype(np.float16), act=spec, precision="fp16")
    else:
        op = fp16_sdp(rng, spec, shape)
    expected = ref.run_op(op, x)
    y, stats = DEVICE.run([op], x)
    assert_same(y, expected, f"fp16 sdp {spec}")  # sigmoid, tanh: the LUT model, not libm
    assert stats.ops[0].precision == "fp16"


def test_fp16_sdp_overflow_and_nan():
    """Results beyond the half range round to infinity; NaN survives ReLU as in fp32."""
    x = np.array([60000, -60000, np.nan, np.inf, -np.inf, 1], np.float16).reshape(1, 1, 2, 3)
    for op in (Sdp(scale=np.array([2], np.float16), precision="fp16"),
               Sdp(act="relu", precision="fp16"),
               Sdp(shift=np.array([65504], np.float16), act="clip", clip=(-1e6, 1e6),
                   precision="fp16")):
        assert_same(DEVICE.run([op], x)[0], ref.run_op(op, x), f"specials {op}")


@pytest.mark.parametrize("name", [*EPILOGUES, "reciprocal", "rsqrt", "exp", "gelu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_planes_of_one_value_match_the_reference(name, threads, rng):
    """Planes of one value ([N, C, 1, 1]: softmax's negate and reciprocal over its rows, a
    layer norm's 1 / sqrt on one channel), which sdp.c runs as each image's channels side by
    side: every epilogue and activation, several images, NaN and infinities, bit for bit with
    the reference, in place and not."""
    shape = (3, 37, 1, 1)
    spec = EPILOGUES.get(name, dict(scale=True, act=name))
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    x.flat[::7] = np.abs(x.flat[::7])  # rsqrt of positive values too
    x.flat[::13] = np.nan
    x.flat[5::17] = np.inf
    x.flat[6::19] = -np.inf
    x.flat[8::23] = 0.0
    op = _sdp(spec, shape, rng)
    y = DEVICES[threads].run([op], x)[0]
    expected = ref.run_op(op, x)
    if op.act in ("sigmoid", "tanh"):  # as test_sdp_matches_reference_bit_for_bit
        np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-7)
    else:
        assert_same(y, expected, name)
    inplace = x.copy()
    DEVICES[threads].run([op], inplace, out=inplace)
    assert_same(inplace, y, f"{name} in place")
