"""INT8 and FP16 engines against the NumPy reference (accel_codegen.reference), fixed seeds.

INT8 is bit-exact by definition: every comparison is np.array_equal. FP16 SDP and PDP are
bit-exact too (the same float32 operations, one final rounding); an FP16 CONV sums in fp32 in
the kernel's own order, so CONV + SDP is checked against a derived error bound (see
fp16_conv_bound).
"""
import dataclasses
import math

import numpy as np
import pytest

from accel_codegen import AccelConfig, Conv, Device, Pool, Sdp, estimate_chain
from accel_codegen import reference as ref
from accel_codegen.ops import SHAPE_ONLY, AccelDtypeError
from accel_codegen.errors import AccelInvalidError

DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]


def assert_same(actual, expected, what="output"):
    """Shape, dtype, then every element equal; on failure say where and how many differ."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if np.array_equal(actual, expected, equal_nan=actual.dtype.kind == "f"):
        return
    differ = actual != expected
    if actual.dtype.kind == "f":
        differ &= ~(np.isnan(actual) & np.isnan(expected))
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    raise AssertionError(
        f"{what}: {int(differ.sum())} of {differ.size} elements differ; first at {first}: "
        f"got {actual[first]!r}, expected {expected[first]!r}")


# --- INT8 CONV + SDP over random layers -------------------------------------------------------

KINDS = ("dense", "dense", "depthwise", "grouped", "fc", "dense_strided")


def _int8_geometry(rng, kind):
    """A random conv geometry of a kind: dict of shapes and Conv keyword arguments."""
    if kind == "fc":  # batched fully connected: [N, C] input, 1x1 weights, [N, K] output
        c, k = int(rng.integers(1, 200)), int(rng.integers(1, 70))
        return dict(in_shape=(int(rng.integers(2, 6)), c), weight_shape=(k, c, 1, 1),
                    conv=dict(), depth=c)
    kernel = tuple(int(v) for v in rng.integers(1, 6, size=2))
    dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
    stride = tuple(int(v) for v in rng.integers(1, 4 if kind == "dense_strided" else 3, size=2))
    pads = tuple(int(v) for v in rng.integers(0, 4, size=4))  # top, left, bottom, right
    if kind == "depthwise":
        c = k = groups = int(rng.integers(1, 24))
    elif kind == "grouped":
        groups = int(rng.integers(2, 5))
        c, k = groups * int(rng.integers(1, 6)), groups * int(rng.integers(1, 6))
    else:
        groups, c, k = 1, int(rng.integers(1, 40)), int(rng.integers(1, 40))
    reach = [d * (r - 1) + 1 for d, r in zip(dilation, kernel)]
    h = int(rng.integers(max(1, reach[0] - pads[0] - pads[2]), 18))
    w = int(rng.integers(max(1, reach[1] - pads[1] - pads[3]), 18))
    n = int(rng.integers(1, 3))
    return dict(in_shape=(n, c, h, w), weight_shape=(k, c // groups, *kernel),
                conv=dict(stride=stride, padding=pads, dilation=dilation, groups=groups),
                depth=(c // groups) * kernel[0] * kernel[1])


def _shift_for(spread, target):
    """The right shift that brings values of size `spread` to about `target` (0..62)."""
    return np.clip(np.rint(np.log2(np.maximum(spread, 1.0) / target)), 0, 62).astype(np.int64)


def _channel_spread(t):
    """Per channel: the root mean square of t (at least 1)."""
    return np.sqrt((t.astype(np.float64) ** 2).mean(axis=(0, 2, 3))) + 1.0


def _nonzero_int16(rng, size=None, low=-32768, high=32768):
    values = rng.integers(low, high, size=size)
    return np.where(values == 0, 1, values)


def _int8_sdp(rng, acc, case):
    """Random INT8 SDP converters for a CONV's accumulators. Each stage's parameters are chosen
    from the size of what reaches it (computed with the reference's primitives), so that most
    outputs land inside int8 and spread over many codes, whatever the geometry; the edges are
    mixed in on purpose: shifts 0 and 62, mul -32768, an int32-saturating bias, negative
    multipliers, a few saturating outputs."""
    k = acc.shape[1]
    per_channel = lambda a: np.asarray(a, np.int64).reshape(1, -1, 1, 1)  # noqa: E731
    ew_op = [None, None, "add", "mul", "max", "min"][case % 6]
    act = [None, "relu", "prelu", "clip"][(case // 2) % 4]
    identity_out = ew_op != "mul" and act != "relu" and case % 4 == 1  # out_mul = 0: t small
    target = 25 if identity_out else 2**10
    params = {}

    # X: bias, then multiplier and per-channel shift
    t = acc
    if case % 5 != 4:
        spread = int(_channel_spread(acc).max())
        bias = rng.integers(-2 * spread, 2 * spread + 1, size=k)
        if case % 10 == 3:
            bias[0] = rng.choice([-2**31, 2**31 - 1])     # sat32(v + bias) on channel 0
        params["bias"] = bias.astype(np.int32)
        t = ref.sat32(t + per_channel(bias))
    mul = _nonzero_int16(rng, k)
    if case % 7 == 0:
        mul[0] = -32768
    if case % 8 == 5:  # rshift alone: t = rhaz(t, rshift)
        rshift = _shift_for(_channel_spread(t), target)
    else:
        params["mul"] = mul.astype(np.int16)
        rshift = _shift_for(_channel_spread(t) * np.abs(mul), target)
        t = t * per_channel(mul)
    rshift = np.clip(rshift + rng.integers(-1, 2, size=k), 0, 62)
    if case % 9 == 0:
        rshift[-1] = 62
    if case % 9 == 1:
        rshift[-1] = 0
    params["rshift"] = rshift.astype(np.uint8)
    t = ref.sat32(ref.rhaz(t, per_channel(rshift)))

    # Y: the element-wise operand's converter, scaled like t (add, max, min) or small (mul)
    if ew_op is not None:
        operand = rng.integers(-128, 128, size=acc.shape).astype(np.int8)
        ew_zero = int(rng.choice([-128, 127])) if case % 12 == 2 else int(rng.integers(-40, 41))
        if ew_op == "mul":
            ew_mul, ew_shift = int(_nonzero_int16(rng, None, -3, 4)), 0
        else:
            ew_mul = int(_nonzero_int16(rng))
            size = float(np.median(_channel_spread(t)))  # edge channels do not count
            ew_shift = int(_shift_for(100 * abs(ew_mul), size))
        params.update(ew_op=ew_op, operand=operand, ew_zero=ew_zero, ew_mul=ew_mul,
                      ew_shift=ew_shift)
        e = ref.sat32(ref.rhaz((operand.astype(np.int64) - ew_zero) * ew_mul, ew_shift))
        t = {"add": lambda: ref.sat32(t + e), "mul": lambda: ref.sat32(t * e),
             "max": lambda: np.maximum(t, e), "min": lambda: np.minimum(t, e)}[ew_op]()

    # activation
    if act is not None:
        params["act"] = act
    if act == "relu":
        t = np.maximum(t, 0)
    if act == "prelu":
        params["prelu_shift"] = prelu_shift = int(rng.integers(0, 12))
        prelu_mul = rng.integers(-(2 << prelu_shift), (2 << prelu_shift) + 1, size=k)
        params["prelu_mul"] = prelu_mul.clip(-32768, 32767).astype(np.int16)
        t = np.where(t < 0, ref.rhaz(t * per_channel(params["prelu_mul"]), prelu_shift), t)

    # output converter: to about +-30 codes around the zero point; a zero point on a rail
    # (ReLU's output is one-sided: the multiplier's sign points it into the range)
    out_zero = int(rng.integers(-40, 41))
    sign = int(rng.choice([-1, 1]))
    if act == "relu" and case % 3 == 0:
        out_zero = int(rng.choice([-128, 127]))
        sign = 1 if out_zero < 0 else -1
    if not identity_out:
        out_mul = sign * abs(int(_nonzero_int16(rng)))
        size = float(np.median(_channel_spread(t)))  # edge channels do not count
        params.update(out_mul=out_mul, out_shift=int(_shift_for(size * abs(out_mul), 30)))
    params["out_zero"] = out_zero
    sdp = Sdp(precision="int8", **params)
    if act == "clip":  # bounds inside the codes' range, so that both sides clip some
        codes = ref.run_op(dataclasses.replace(sdp, act=None), acc)
        lo = int(np.quantile(codes, 0.2))
        sdp.clip_lo, sdp.clip_hi = lo, max(lo, int(np.quantile(codes, 0.8)))
    return sdp


def _int8_case(case):
    """Layer `case`: input, conv, SDP and maybe a pool after them, all INT8."""
    rng = np.random.default_rng(1000 + case)
    kind = KINDS[case % len(KINDS)]
    g = _int8_geometry(rng, kind)
    x = rng.integers(-128, 128, size=g["in_shape"]).astype(np.int8)
    weights = rng.integers(-128, 128, size=g["weight_shape"]).astype(np.int8)
    in_zero = int(rng.choice([0, -128, 127, int(rng.integers(-128, 128))]))
    conv = Conv(weights, precision="int8", in_zero=in_zero, **g["conv"])
    acc = ref.run_op(conv, x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x)
    sdp = _int8_sdp(rng, acc, case)
    chain = [conv, sdp]
    if kind != "fc" and min(acc.shape[2:]) >= 2 and case % 3 == 0:
        kind_pool = "max" if case % 2 else "avg"
        chain.append(Pool(kind_pool, 2, int(rng.integers(1, 3)), padding=(0, 0, 1, 1),
                          count_include_pad=bool(case % 4 == 0), precision="int8",
                          zero=sdp.out_zero))
    return x, chain, kind


INT8_CASES = range(120)


@pytest.mark.parametrize("case", INT8_CASES, ids=lambda c: f"{c}-{KINDS[c % len(KINDS)]}")
def test_int8_conv_sdp_matches_reference_exactly(case):
    """Fused at 1, 2 and 3 threads, independent, and with pre-packed weights: all the
    reference's codes exactly."""
    x, chain, kind = _int8_case(case)
    expected = ref.run_chain(chain, x)
    runs = {f"fused, {t} threads": DEVICES[t].run(chain, x)[0] for t in DEVICES}
    runs["independent"] = DEVICE.run(chain, x, mode="independent")[0]
    packed = [chain[0].packed_for(DEVICE.config), *chain[1:]]
    runs["packed weights"] = DEVICE.run(packed, x)[0]
    for what, y in runs.items():
        assert_same(y, expected, f"case {case} ({kind}) {what}")


INT8_LAYERS = [  # in_shape, weight_shape, conv arguments: the zoo's shapes and every kernel path
    ((1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),               # implicit GEMM, many tiles
    ((1, 3, 64, 64), (32, 3, 7, 7), dict(stride=2, padding=3)),       # RGB stem, stride phases
    ((2, 128, 14, 14), (128, 128, 3, 3), dict(padding=1)),            # batch of implicit GEMMs
    ((1, 256, 7, 7), (512, 256, 1, 1), dict()),                       # 1x1, few positions
    ((4, 512, 1, 1), (100, 512, 1, 1), dict()),                       # FC: matrix-vector
    ((16, 300), (10, 300, 1, 1), dict()),                             # batched FC: columns
    ((1, 96, 28, 28), (96, 1, 3, 3), dict(stride=2, padding=1, groups=96)),   # depthwise
    ((1, 32, 20, 20), (64, 1, 3, 3), dict(padding=1, groups=32)),     # depthwise multiplier 2
    ((1, 64, 15, 15), (64, 16, 3, 3), dict(padding=(1, 0, 2, 1), groups=4)),  # grouped
    ((1, 16, 12, 12), (24, 16, 3, 3), dict(dilation=5)),              # mostly-garbage grid
]


@pytest.mark.parametrize("layer", range(len(INT8_LAYERS)),
                         ids=lambda i: "x".join(map(str, INT8_LAYERS[i][0])) + "-" +
                         "x".join(map(str, INT8_LAYERS[i][1])))
def test_int8_real_layers_match_reference_exactly(layer):
    in_shape, weight_shape, conv_args = INT8_LAYERS[layer]
    rng = np.random.default_rng(300 + layer)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    x4 = x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x
    acc = ref.run_op(conv, x4)
    chain = [conv, _int8_sdp(rng, acc, 24 * layer)]   # no element-wise op, no activation
    expected = ref.run_chain(chain, x)
    assert len(np.unique(expected)) > 10
    for threads in (1, 3):
        assert_same(DEVICES[threads].run(chain, x)[0], expected, f"{threads} threads")
    packed = [conv.packed_for(DEVICE.config), chain[1]]
    assert_same(DEVICE.run(packed, x)[0], expected, "packed weights")


def test_int8_cases_are_not_degenerate():
    """The random converters keep most outputs off the rails and spread over many codes, and
    every listed edge occurs."""
    saturated = total = 0
    spreads, edges = [], set()
    for case in INT8_CASES:
        x, chain, _ = _int8_case(case)
        sdp = chain[1]
        y = ref.run_chain(chain[:2], x)
        total += y.size
        saturated += int(np.isin(y, (-128, 127)).sum())
        spreads.append(len(np.unique(y)))
        edges.add(f"ew_{sdp.ew_op}")
        edges.add(f"act_{sdp.act}")
        if sdp.rshift is not None:
            edges.update(f"shift{s}" for s in (0, 62) if s in sdp.rshift)
        if sdp.mul is not None and -32768 in sdp.mul:
            edges.add("mul_min")
        if sdp.mul is not None and (sdp.mul < 0).any():
            edges.add("mul_negative")
        if sdp.bias is not None and (np.abs(sdp.bias.astype(np.int64)) >= 2**31 - 1).any():
            edges.add("bias_sat32")
        edges.add(f"in_zero_{chain[0].in_zero}" if chain[0].in_zero in (-128, 127) else "")
        edges.add("pool" if len(chain) == 3 else "")
    assert saturated / total < 0.25, f"{saturated / total:.0%} of outputs saturate"
    assert np.median(spreads) >= 40, f"median distinct codes per case {np.median(spreads)}"
    for edge in ("ew_add", "ew_mul", "ew_max", "ew_min", "ew_None", "act_relu", "act_prelu",
                 "act_clip", "act_None", "shift0", "shift62", "mul_min", "mul_negative",
                 "bias_sat32", "in_zero_-128", "in_zero_127", "pool"):
        assert edge in edges, f"no case covers {edge}"


# --- INT8 edges, one at a time -----------------------------------------------------------------

def _run_and_compare(chain, x, what):
    for mode in ("fused", "independent"):
        y, _ = DEVICE.run(chain, x, mode=mode)
        assert_same(y, ref.run_chain(chain, x), f"{what} ({mode})")
    return y


def test_int8_padding_reads_as_the_zero_point():
    """A constant image equal to in_zero convolves to exactly 0 everywhere, borders included:
    out = sat8(bias + out_zero)."""
    for in_zero in (-128, -7, 0, 127):
        x = np.full((1, 3, 5, 5), in_zero, np.int8)
        w = np.full((4, 3, 3, 3), -128, np.int8)
        sdp = Sdp(bias=np.array([0, 1, -1, 100], np.int32), precision="int8", out_zero=3)
        y = _run_and_compare([Conv(w, padding=(2, 1, 0, 3), precision="int8", in_zero=in_zero),
                              sdp], x, f"in_zero {in_zero}")
        np.testing.assert_array_equal(np.unique(y[0, 1]), [4])
        np.testing.assert_array_equal(np.unique(y[0, 3]), [103])


def test_int8_rounding_is_half_away_from_zero():
    """Accumulators +-(2k+1) * 2^(s-1) are exact halves: each rounds away from zero."""
    s = 3
    # a 1x1 conv of weight 4: accumulators (1, 3, 5, ...) * 2^(s-1), i.e. +-0.5, 1.5, ... * 2^s
    x = np.array([1, 3, 5, -1, -3, -5, 7, -7], np.int8).reshape(1, 1, 1, 8)
    conv = Conv(np.full((1, 1, 1, 1), 4, np.int8), precision="int8")
    sdp = Sdp(mul=np.array([1], np.int16), rshift=np.array([s], np.uint8), precision="int8")
    y = _run_and_compare([conv, sdp], x, "halves")
    np.testing.assert_array_equal(y.ravel(), [1, 2, 3, -1, -2, -3, 4, -4])


def test_int8_saturation_at_each_step():
    """sat32 after the bias and after the multiplier, then sat8 at the output."""
    x = np.array([[127, -128, 127, -128]], np.int8).reshape(1, 1, 1, 4)
    w = np.full((3, 1, 1, 1), 127, np.int8)
    chain = [Conv(w, precision="int8", in_zero=-128),       # v = 255*127, 0, 255*127, 0
             Sdp(bias=np.array([2**31 - 1, -2**31, 5], np.int32),
                 mul=np.array([-32768, 32767, 2], np.int16),
                 rshift=np.array([62, 0, 1], np.uint8), precision="int8")]
    y = _run_and_compare(chain, x, "saturation")
    # channel 0: sat32(v + 2^31-1) = 2^31-1, * -32768 / 2^62 = -0.0000152.. -> rounds to 0
    # channel 1: sat32(v - 2^31) = -2^31 + v or -2^31, * 32767 -> sat32 -> -2^31 -> sat8 -128
    # channel 2: (v + 5) * 2 / 2 = v + 5 -> sat8 127 for v = 32385, 5 for v = 0
    np.testing.assert_array_equal(y[0, :, 0], [[0, 0, 0, 0], [-128] * 4, [127, 5, 127, 5]])


def test_int8_element_wise_saturates_at_int32():
    """sat32(t + e) and sat32(t * e): a kernel that wraps around in int32 flips the sign."""
    x = np.zeros((1, 1, 1, 4), np.int8)
    operand = np.array([127, -128, 0, 1], np.int8).reshape(x.shape)
    add = Sdp(bias=np.array([2**31 - 1], np.int32), ew_op="add", operand=operand, ew_zero=-128,
              ew_mul=32767, ew_shift=0, out_mul=1, out_shift=24, out_zero=-128, precision="int8")
    # t = 2^31 - 1, e = (255, 0, 128, 129) * 32767: t + e saturates; (2^31 - 1) / 2^24 -> 128
    np.testing.assert_array_equal(_run_and_compare([add], x, "ew add").ravel(), [0, 0, 0, 0])
    operand = np.array([127, -128, 1, 0], np.int8).reshape(x.shape)
    mul = Sdp(bias=np.array([2**20], np.int32), ew_op="mul", operand=operand, ew_zero=0,
              ew_mul=32767, ew_shift=0, out_mul=1, out_shift=25, precision="int8")
    # t * e = 2^20 * (127, -128, 1, 0) * 32767 saturates to +-2^31 (not for 0); / 2^25 -> +-64
    np.testing.assert_array_equal(_run_and_compare([mul], x, "ew mul").ravel(), [64, -64, 64, 0])


def test_int8_prelu_beyond_int32_is_not_saturated():
    """accel.h puts no sat32 after the PReLU multiply: t * prelu_mul with t = -2^31 and a
    large multiplier leaves int32, and the output converter brings it back into range."""
    x = np.full((1, 1, 1, 2), -128, np.int8)
    chain = [Sdp(bias=np.array([-2**31 + 128], np.int32), act="prelu",
                 prelu_mul=np.array([32767], np.int16), prelu_shift=0, out_mul=1,
                 out_shift=40, precision="int8")]
    # v = -128, t = -2^31; PReLU: -2^31 * 32767 (about -2^46); / 2^40 = -63.998 -> -64
    # (a sat32 after the PReLU would give -2^31 / 2^40 -> 0)
    y = _run_and_compare(chain, x, "prelu range")
    np.testing.assert_array_equal(y.ravel(), [-64, -64])


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
            _run_and_compare([op], x, f"ew {ew_op} {ew_zero}/{ew_mul}/{ew_shift}")


# --- INT8 SDP and PDP alone ------------------------------------------------------------------

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


INT8_POOLS = [
    ("max", 2, 2, 0, False), ("max", 3, 2, 1, False), ("max", (1, 3), (1, 2), (0, 1, 0, 1), False),
    ("avg", 2, 2, 0, False), ("avg", 3, 1, 1, True), ("avg", 3, 2, 1, False),
    ("avg", (2, 4), 3, (1, 0, 0, 2), False), ("avg", (2, 4), 3, (1, 0, 0, 2), True),
    ("avg", 7, 1, 0, False), ("avg", 8, 8, 0, False), ("avg", 5, 3, 2, True),
]


@pytest.mark.parametrize("zero", [-128, -5, 0, 77, 127])
@pytest.mark.parametrize("kind,kernel,stride,padding,include_pad", INT8_POOLS, ids=str)
def test_int8_pool_matches_reference_exactly(kind, kernel, stride, padding, include_pad, zero):
    rng = np.random.default_rng(abs(zero) + 7)
    x = rng.integers(-128, 128, (2, 3, 15, 16)).astype(np.int8)
    if zero in (-128, 127):  # codes crowded at one rail: averages that round at the edge
        x = np.clip(x // 8 + zero, -128, 127).astype(np.int8)
    op = Pool(kind, kernel, stride, padding, include_pad, precision="int8", zero=zero)
    expected = ref.run_op(op, x)
    for threads in (1, 3):
        y, stats = DEVICES[threads].run([op], x)
        assert_same(y, expected, f"pool {kind} zero {zero}, {threads} threads")
    assert stats.ops[0].op == f"pdp:{kind}"


def test_int8_average_rounds_half_away_from_zero():
    """Window sums S = +-1, +-3 over 2 elements: +-0.5, +-1.5 round away from zero (around the
    zero point); count_include_pad divides by the whole window."""
    zero = 10
    x = (np.array([[0, 1, 0, -1, 1, 2, -1, -2]]) + zero).astype(np.int8).reshape(1, 1, 1, 8)
    y, _ = DEVICE.run([Pool("avg", (1, 2), (1, 2), precision="int8", zero=zero)], x)
    np.testing.assert_array_equal(y.ravel() - zero, [1, -1, 2, -2])
    x = (np.array([[3, 3]]) + zero).astype(np.int8).reshape(1, 1, 1, 2)   # S = 3 (+ 0 pad)
    y, _ = DEVICE.run([Pool("avg", (1, 2), (1, 2), (0, 1, 0, 1), True, precision="int8",
                            zero=zero)], x)
    np.testing.assert_array_equal(y.ravel() - zero, [2, 2])   # 3/2 = 1.5 -> 2


def test_int8_independent_chain_of_many_ops():
    """Independent mode: the CONV -> SDP pair on the fly, then SDPs and a pool through memory,
    each reading the previous op's codes with its zero point."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 5, 11, 11)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 5, 3, 3)).astype(np.int8)
    chain = [Conv(w, padding=1, precision="int8", in_zero=-7),
             Sdp(bias=rng.integers(-5000, 5000, 8).astype(np.int32),
                 mul=rng.integers(100, 900, 8).astype(np.int16),
                 rshift=np.full(8, 18, np.uint8), out_zero=4, precision="int8"),
             Sdp(in_zero=4, act="relu", out_mul=3, out_shift=1, out_zero=-128, precision="int8"),
             Pool("max", 3, 2, 1, precision="int8", zero=-128),
             Sdp(in_zero=-128, act="clip", clip_lo=-100, clip_hi=90, out_zero=-128,
                 precision="int8"),
             Pool("avg", 2, 1, precision="int8", zero=-128)]
    y, stats = DEVICE.run(chain, x, mode="independent")
    assert_same(y, ref.run_chain(chain, x), "independent chain")
    assert [op.engine for op in stats.ops] == ["CONV", "SDP", "SDP", "PDP", "SDP", "PDP"]
    assert len(np.unique(y)) > 10


def test_int8_conv_weights_packed_once_serve_many_inputs():
    rng = np.random.default_rng(12)
    w = rng.integers(-128, 128, (16, 3, 5, 5)).astype(np.int8)
    conv = Conv(w, stride=2, padding=2, precision="int8", in_zero=5)
    packed = conv.pack("nv_full")
    assert packed.dtype == np.uint8 and packed.ctypes.data % 64 == 0
    sdp = Sdp(mul=np.full(16, 3, np.int16), rshift=np.full(16, 12, np.uint8), precision="int8")
    with_packed = dataclasses.replace(conv, packed=packed)
    for n in (1, 3):
        x = rng.integers(-128, 128, (n, 3, 20, 17)).astype(np.int8)
        assert_same(DEVICE.run([with_packed, sdp], x)[0], ref.run_chain([conv, sdp], x),
                    f"packed, batch {n}")
    # a misaligned copy of the bytes is re-aligned, not refused
    shifted = np.zeros(packed.size + 1, np.uint8)[1:]
    shifted[:] = packed
    x = rng.integers(-128, 128, (1, 3, 9, 9)).astype(np.int8)
    assert_same(DEVICE.run([dataclasses.replace(conv, packed=shifted), sdp], x)[0],
                ref.run_chain([conv, sdp], x), "re-aligned packed bytes")


# --- FP16 --------------------------------------------------------------------------------------

U32 = 2.0 ** -24  # unit roundoff of fp32


def ulp16(values: np.ndarray) -> np.ndarray:
    """The spacing of halves at each value (2^-24 at zero and for subnormals)."""
    return np.spacing(np.abs(np.asarray(values, np.float16))).astype(np.float64)


def fp16_conv_bound(x, w, conv, reference, lipschitz):
    """How far an FP16 CONV + SDP output may be from the reference, element-wise:

        |sim - ref| <= ulp16(ref) + L * gamma(kd) * sum|x * w| * |scale|,  gamma(n) = n u / (1 - n u)

    Derivation. Products of halves are exact in fp32 (11 + 11 significand bits). The kernel
    adds the kd = C/groups * R * S products in fp32 in its own order: kd - 1 roundings, each at
    most u = 2^-24 of a partial sum, and every partial sum is at most S = sum|x * w|, so its
    accumulator is within (kd - 1) u S of the exact sum (Higham's bound, to first order; gamma
    covers the higher orders). The reference rounds the exact sum once to fp32: within u S. So
    the two accumulators differ by at most gamma(kd) S. The SDP applies the same float32
    operations to both: scale multiplies the difference by |scale|, the element-wise op and
    the activation by at most L (1 for add, max, min, ReLU, clip and PReLU with |slope| <= 1;
    |operand| for mul); their own fp32 roundings are monotone, so they do not separate the two
    results by more than that (up to fp32 ulps, far below a half's). Last, both round to half
    to nearest: values within d of each other round to halves within d + ulp16 (the rounding
    boundary may fall between them). Cancellation makes a pure ulp bound wrong: an output near
    zero from large products may differ by many half-ulps (the summation term covers it).
    Prototype measurement (docs/precision-design.md section 4): the excess over ulp16 stays
    below 1 % of the summation term.
    """
    magnitude = ref.conv2d(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                           conv.stride, conv.padding, conv.dilation, conv.groups)
    kd = w.shape[1] * w.shape[2] * w.shape[3]
    gamma = kd * U32 / (1 - kd * U32)
    return ulp16(reference) + lipschitz * gamma * magnitude


FP16_EPILOGUES = ["bias", "bn_relu", "bn_relu6", "bn_prelu", "bn_add", "mul", "max_min",
                  "scale_only"]


def _fp16_sdp(rng, spec, shape):
    c = shape[1]
    half = lambda a: np.asarray(a, np.float16)  # noqa: E731
    scale = half(rng.uniform(0.5, 2, c) * rng.choice([-1, 1], c)) if spec in (
        "bn_relu", "bn_relu6", "bn_prelu", "bn_add", "scale_only") else None
    shift = half(rng.standard_normal(c) * 0.5) if spec not in ("scale_only", "mul",
                                                              "max_min") else None
    ew_op = {"bn_add": "add", "mul": "mul", "max_min": rng.choice(["max", "min"])}.get(spec)
    operand = half(rng.standard_normal(shape) * 1.5) if ew_op else None
    act = {"bn_relu": "relu", "bn_relu6": "clip", "bn_prelu": "prelu"}.get(spec)
    slope = half(rng.uniform(-1, 1, c)) if act == "prelu" else None
    return Sdp(scale=scale, shift=shift, ew_op=ew_op, operand=operand, act=act,
               clip=(-1.5, 2.25) if act == "clip" else None, prelu_slope=slope, precision="fp16")


def _fp16_case(case):
    rng = np.random.default_rng(2000 + case)
    kind = KINDS[case % len(KINDS)]
    g = _int8_geometry(rng, kind)
    x = rng.standard_normal(g["in_shape"]).astype(np.float16)
    w = (rng.standard_normal(g["weight_shape"]) / np.sqrt(g["depth"])).astype(np.float16)
    conv = Conv(w, precision="fp16", **g["conv"])
    out_shape = ref.run_op(conv, x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x).shape
    sdp = _fp16_sdp(rng, FP16_EPILOGUES[case % len(FP16_EPILOGUES)], out_shape)
    return x, conv, sdp, kind


@pytest.mark.parametrize("case", range(40), ids=lambda c: f"{c}-{KINDS[c % len(KINDS)]}-"
                         f"{FP16_EPILOGUES[c % len(FP16_EPILOGUES)]}")
def test_fp16_conv_sdp_within_the_summation_bound(case):
    x, conv, sdp, kind = _fp16_case(case)
    chain = [conv, sdp]
    expected = ref.run_chain(chain, x)
    y, stats = DEVICE.run(chain, x)
    assert y.dtype == np.float16 and y.shape == expected.shape
    assert np.isfinite(expected).all()
    x4 = x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x   # batched FC runs as 1x1 NCHW
    out_shape = ref.run_op(conv, x4).shape
    lipschitz = np.ones(out_shape)
    if sdp.scale is not None:
        lipschitz *= np.abs(sdp.scale.astype(np.float64)).reshape(1, -1, 1, 1)
    if sdp.ew_op == "mul":
        lipschitz *= np.abs(sdp.operand.astype(np.float64)).reshape(out_shape)
    bound = fp16_conv_bound(x4, conv.weights, conv, expected.reshape(out_shape), lipschitz)
    error = np.abs(y.astype(np.float64) - expected.astype(np.float64)).reshape(out_shape)
    worst = float((error / bound).max())
    assert worst <= 1.0, f"case {case} ({kind}): error {worst:.3g} x the bound"
    # the same bits whatever the mode or the thread count
    for threads in (1, 3):
        assert_same(DEVICES[threads].run(chain, x)[0], y, f"fp16 case {case}, {threads} threads")
    assert_same(DEVICE.run(chain, x, mode="independent")[0], y, f"fp16 case {case} independent")
    assert stats.ops[0].precision == "fp16"


FP16_LAYERS = [
    ((1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ((1, 512, 7, 7), (128, 512, 3, 3), dict(padding=1)),                # depth 4608
    ((8, 2048), (100, 2048, 1, 1), dict()),                             # batched FC
    ((1, 96, 28, 28), (96, 1, 3, 3), dict(stride=2, padding=1, groups=96)),
]


def _fp16_layer(layer):
    in_shape, weight_shape, conv_args = FP16_LAYERS[layer]
    rng = np.random.default_rng(400 + layer)
    x = rng.standard_normal(in_shape).astype(np.float16)
    depth = weight_shape[1] * weight_shape[2] * weight_shape[3]
    w = (rng.standard_normal(weight_shape) / np.sqrt(depth)).astype(np.float16)
    k = weight_shape[0]
    sdp = Sdp(scale=rng.uniform(0.5, 2, k).astype(np.float16),
              shift=rng.standard_normal(k).astype(np.float16), act="relu", precision="fp16")
    return x, Conv(w, precision="fp16", **conv_args), sdp


FP16_LAYER_IDS = ["x".join(map(str, i)) + "-" + "x".join(map(str, w)) for i, w, _ in FP16_LAYERS]


@pytest.mark.parametrize("layer", range(len(FP16_LAYERS)), ids=FP16_LAYER_IDS)
def test_fp16_real_layers_within_the_summation_bound(layer):
    x, conv, sdp = _fp16_layer(layer)
    expected = ref.run_chain([conv, sdp], x)
    y, _ = DEVICE.run([conv, sdp], x)
    x4 = x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x
    shape4 = ref.run_op(conv, x4).shape
    bound = fp16_conv_bound(x4, conv.weights, conv, expected.reshape(shape4),
                            np.abs(sdp.scale.astype(np.float64)).reshape(1, -1, 1, 1))
    error = np.abs(y.astype(np.float64) - expected.astype(np.float64)).reshape(shape4)
    assert float((error / bound).max()) <= 1.0


@pytest.mark.parametrize("layer", range(len(FP16_LAYERS)), ids=FP16_LAYER_IDS)
def test_fp16_real_layers_give_the_same_bits_at_any_thread_count(layer):
    """The fp32 accumulation runs in an order fixed by the geometry (precision design,
    section 4), not by the thread count."""
    x, conv, sdp = _fp16_layer(layer)
    one = DEVICES[1].run([conv, sdp], x)[0]
    for threads in (2, 3):
        assert_same(DEVICES[threads].run([conv, sdp], x)[0], one, f"{threads} threads vs 1")


def test_fp16_conv_sdp_pool_fused_equals_independent():
    """The CONV + SDP pair rounds once (at the SDP), the pool pools the rounded halves."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 6, 12, 12)).astype(np.float16)
    w = (rng.standard_normal((10, 6, 3, 3)) / 5).astype(np.float16)
    for pool in (Pool("max", 2, 2, precision="fp16"), Pool("avg", 3, 2, 1, precision="fp16")):
        chain = [Conv(w, padding=1, precision="fp16"),
                 Sdp(shift=rng.standard_normal(10).astype(np.float16), act="relu",
                     precision="fp16"), pool]
        fused, fused_stats = DEVICE.run(chain, x)
        independent, independent_stats = DEVICE.run(chain, x, mode="independent")
        assert_same(fused, independent, f"fused vs independent, {pool.kind}")
        assert fused_stats.bytes_written < independent_stats.bytes_written
        # the pool on the simulator's own rounded SDP output gives the fused result exactly
        sdp_out, _ = DEVICE.run(chain[:2], x)
        assert_same(fused, ref.run_op(pool, sdp_out), f"pool of the rounded halves, {pool.kind}")


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
        op = _fp16_sdp(rng, spec, shape)
    expected = ref.run_op(op, x)
    y, stats = DEVICE.run([op], x)
    if spec in ("sigmoid", "tanh"):  # libm and NumPy may differ in fp32's last bit
        np.testing.assert_allclose(y.astype(np.float32), expected.astype(np.float32),
                                   rtol=2**-10, atol=2**-24)
    else:
        assert_same(y, expected, f"fp16 sdp {spec}")
    assert stats.ops[0].precision == "fp16"


def test_fp16_sdp_overflow_and_nan():
    """Results beyond the half range round to infinity; NaN survives ReLU as in fp32."""
    x = np.array([60000, -60000, np.nan, np.inf, -np.inf, 1], np.float16).reshape(1, 1, 2, 3)
    for op in (Sdp(scale=np.array([2], np.float16), precision="fp16"),
               Sdp(act="relu", precision="fp16"),
               Sdp(shift=np.array([65504], np.float16), act="clip", clip=(-1e6, 1e6),
                   precision="fp16")):
        assert_same(DEVICE.run([op], x)[0], ref.run_op(op, x), f"specials {op}")


FP16_POOLS = INT8_POOLS


@pytest.mark.parametrize("kind,kernel,stride,padding,include_pad", FP16_POOLS, ids=str)
def test_fp16_pool_alone_is_bit_exact(kind, kernel, stride, padding, include_pad):
    """Halves of any exponent: the average's fp32 sum rounds, in the engine's order."""
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((2, 3, 15, 16)) * np.exp2(rng.integers(-14, 12, (2, 3, 15, 16)))
         ).astype(np.float16)
    op = Pool(kind, kernel, stride, padding, include_pad, precision="fp16")
    expected = ref.run_op(op, x)
    for threads in (1, 3):
        y, _ = DEVICES[threads].run([op], x)
        assert_same(y, expected, f"fp16 pool {kind}, {threads} threads")


# --- the cost model: 1-byte int8, 2-byte fp16 ------------------------------------------------

def test_cost_int8_is_one_byte_at_full_atomic_k_fp16_two_bytes_at_half():
    config = AccelConfig.preset("nv_full")
    n, c, h, w, k = 1, 64, 14, 14, 128
    shape = (n, c, h, w)

    def layer(precision):
        conv = Conv(None, weight_shape=(k, c, 3, 3), padding=1, precision=precision)
        if precision == "int8":
            sdp = Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, act="relu",
                      precision="int8")
        else:
            sdp = Sdp(scale=SHAPE_ONLY, shift=SHAPE_ONLY, act="relu", precision=precision)
        return estimate_chain(config, [conv, sdp], shape)

    i8, f16 = layer("int8"), layer("fp16")
    positions = n * h * w

    def feature(channels, element):
        atom = config.memory_atom_bytes
        return positions * -(-channels * element // atom) * atom

    assert i8.macs == f16.macs == positions * k * c * 9
    assert i8.ops[0].mac_cycles == positions * -(-c // config.atomic_c) * -(-k // config.atomic_k) * 9
    assert f16.ops[0].mac_cycles == positions * -(-c // config.atomic_c) * -(-k // (
        config.atomic_k // 2)) * 9
    assert f16.ops[0].mac_cycles == 2 * i8.ops[0].mac_cycles
    assert config.macs_per_cycle("int8") == 2 * config.macs_per_cycle("fp16")
    assert (i8.ops[0].input_bytes, f16.ops[0].input_bytes) == (feature(c, 1), feature(c, 2))
    assert (i8.ops[0].weight_bytes, f16.ops[0].weight_bytes) == (k * c * 9, k * c * 9 * 2)
    assert (i8.ops[1].bytes_written, f16.ops[1].bytes_written) == (feature(k, 1), feature(k, 2))
    assert i8.ops[1].weight_bytes == k * (4 + 2 + 1)       # int32 bias, int16 mul, uint8 shift
    assert f16.ops[1].weight_bytes == k * 2 * 2            # fp16 scale and shift
    assert i8.utilization == pytest.approx(f16.utilization)
    # the fp32 reference precision is charged as fp16
    f32 = estimate_chain(config, [Conv(None, weight_shape=(k, c, 3, 3), padding=1),
                                  Sdp(scale=SHAPE_ONLY, shift=SHAPE_ONLY, act="relu")], shape)
    assert (f32.cycles, f32.bytes_read) == (f16.cycles, f16.bytes_read)
    # an executed run costs what the estimate says
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    chain = [Conv(rng.integers(-128, 128, (k, c, 3, 3)).astype(np.int8), padding=1,
                  precision="int8"),
             Sdp(bias=np.zeros(k, np.int32), mul=np.ones(k, np.int16), rshift=np.zeros(k, np.uint8),
                 act="relu", precision="int8")]
    _, run = DEVICE.run(chain, x)
    assert (run.cycles, run.bytes_read, run.bytes_written) == (i8.cycles, i8.bytes_read,
                                                               i8.bytes_written)


def test_cost_independent_int8_and_fp16_convs_hand_the_sdp_their_accumulators():
    """INDEPENDENT mode: an INT8/FP16 CONV's result goes on the fly to its SDP (CACC feeds SDP);
    an fp32 CONV writes it to memory and the SDP reads it back."""
    shape = (1, 32, 16, 16)
    for precision in ("int8", "fp16", "fp32"):
        conv = Conv(None, weight_shape=(32, 32, 3, 3), padding=1, precision=precision)
        sdp = (Sdp(bias=SHAPE_ONLY, precision="int8") if precision == "int8"
               else Sdp(shift=SHAPE_ONLY, precision=precision))
        stats = estimate_chain("nv_full", [conv, sdp, Pool("max", 2, 2, precision=precision)],
                               shape, mode="independent")
        on_chip = precision != "fp32"
        assert (stats.ops[0].bytes_written == 0) == on_chip, precision
        assert (stats.ops[1].input_bytes == 0) == on_chip, precision
        assert stats.ops[1].bytes_written > 0 and stats.ops[2].input_bytes > 0


# --- the Python API: dtypes and conversions ----------------------------------------------------

def test_run_precision_follows_the_input_dtype():
    rng = np.random.default_rng(5)
    x8 = rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)
    y, stats = DEVICE.run([Pool("max", 2, 2, precision="int8")], x8)
    assert y.dtype == np.int8 and stats.ops[0].precision == "int8"
    x16 = rng.standard_normal((1, 4, 6, 6)).astype(np.float16)
    y, stats = DEVICE.run([Pool("max", 2, 2, precision="fp16")], x16)
    assert y.dtype == np.float16 and stats.ops[0].precision == "fp16"
    # an exactly representable fp32 / int64 array converts when the precision is given
    y2, _ = DEVICE.run([Pool("max", 2, 2, precision="fp16")], x16.astype(np.float32),
                       precision="fp16")
    assert_same(y2, y, "fp32 input holding halves")
    y3, _ = DEVICE.run([Pool("max", 2, 2, precision="int8")], x8.astype(np.int64),
                       precision="int8")
    assert_same(y3, ref.run_op(Pool("max", 2, 2, precision="int8"), x8), "int64 codes")


DTYPE_ERRORS = [
    ("float input for int8 ops",
     lambda: DEVICE.run([Pool(precision="int8")], np.zeros((1, 1, 4, 4), np.float32)),
     AccelDtypeError, "precision int8 differs from the input's fp32"),
    ("float weights for int8",
     lambda: DEVICE.run([Conv(np.ones((2, 1, 1, 1), np.float32), precision="int8"),
                         Sdp(precision="int8")], np.zeros((1, 1, 4, 4), np.int8)),
     AccelDtypeError, "conv weights: int8 values are needed, got a float32 array"),
    ("code out of int8 range",
     lambda: DEVICE.run([Pool(precision="int8")], np.full((1, 1, 4, 4), 200), precision="int8"),
     AccelInvalidError, "value 200 at [0, 0, 0, 0] is outside the int8 range"),
    ("fp32 data that is not a half",
     lambda: DEVICE.run([Pool(precision="fp16")], np.full((1, 1, 4, 4), 0.1, np.float32),
                        precision="fp16"),
     AccelDtypeError, "value 0.10000000149011612 at [0, 0, 0, 0] of the float32 array is not"),
    ("fp16 scale that is not a half",
     lambda: DEVICE.run([Sdp(scale=[0.1], precision="fp16")], np.zeros((1, 1, 2, 2), np.float16)),
     AccelDtypeError, "sdp scale: value 0.1 at [0] of the float64 array is not a float16"),
    ("int8 bias that is not int32",
     lambda: DEVICE.run([Sdp(bias=[2**31], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp bias: value 2147483648 at [0] is outside the int32 range"),
    ("float mul",
     lambda: DEVICE.run([Sdp(mul=[0.5], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelDtypeError, "sdp mul: int16 values are needed"),
    ("negative rshift",
     lambda: DEVICE.run([Sdp(rshift=[-1], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp rshift: value -1 at [0] is outside the uint8 range"),
    ("int8 out for an fp16 run",
     lambda: DEVICE.run([Pool(precision="fp16")], np.zeros((1, 1, 4, 4), np.float16),
                        out=np.zeros((1, 1, 2, 2), np.int8)),
     AccelDtypeError, "out must be a float16 array for a fp16 chain, got int8"),
    ("float clip bounds in int8",
     lambda: DEVICE.run([Sdp(act="clip", clip=(0.0, 6.0), precision="int8")],
                        np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp clip = (0.0, 6.0) holds float bounds"),
    ("packed bytes of the wrong type",
     lambda: DEVICE.run([Conv(np.ones((2, 1, 1, 1), np.int8), precision="int8",
                              packed=np.zeros(64, np.int32)), Sdp(precision="int8")],
                        np.zeros((1, 1, 4, 4), np.int8)),
     AccelDtypeError, "conv packed: the bytes of Conv.packed_for() are needed"),
]


@pytest.mark.parametrize("what,call,error,words", DTYPE_ERRORS, ids=[e[0] for e in DTYPE_ERRORS])
def test_wrong_dtypes_are_named(what, call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value), str(info.value)
    if error is AccelDtypeError:
        assert isinstance(info.value, TypeError)


def test_shape_only_int8_and_fp16_operands_estimate_but_do_not_run():
    conv = Conv(None, weight_shape=(8, 4, 3, 3), precision="int8")
    sdp = Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, ew_op="add",
              operand=SHAPE_ONLY, act="prelu", prelu_mul=SHAPE_ONLY, precision="int8")
    stats = estimate_chain("nv_full", [conv, sdp], (1, 4, 8, 8))
    assert stats.ops[1].operand_bytes > 0 and stats.ops[1].weight_bytes == 8 * (4 + 2 + 1 + 2)
    with pytest.raises(AccelInvalidError, match="shape-only operands"):
        DEVICE.run([sdp], np.zeros((1, 8, 6, 6), np.int8))
    fp16 = estimate_chain("nv_full", [Sdp(scale=SHAPE_ONLY, precision="fp16")], (1, 4, 8, 8))
    assert fp16.ops[0].precision == "fp16"
