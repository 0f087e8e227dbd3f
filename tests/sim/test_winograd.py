"""The CONV's Winograd mode (accel_conv_mode in accel.h): the kernel against the NumPy reference
(bit for bit in every precision) and the stated bound against the exact convolution in each precision (random and adversarial
inputs), INT8 bit for bit equal to direct convolution, the weights pre-transformed once at
packing bit for bit as the reference's, the cost model's figures computed by hand, and the
conditions the C library refuses by name. Fixed seeds."""
import dataclasses

import numpy as np
import pytest

from accel_codegen import AccelConfig, AccelInvalidError, AccelUnsupportedError, Conv, Device, Sdp
from accel_codegen import reference as ref
from accel_codegen.sim.device import estimate_chain

DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2)}
DEVICE = DEVICES[2]

# (C, K, H, W, kernel, stride, padding, groups): 3x3 stride 1, strides folded into channels,
# and grouped convs (one Winograd convolution per group: AlexNet's conv4 and conv5 have 2); rows
# of more than 16 tiles, an odd width (the vector transforms' full vectors, tail and last column)
CASES = [(5, 9, 6, 37, 3, 1, 1, 1), (5, 7, 9, 11, 3, 1, 1, 1), (16, 8, 8, 8, 3, 1, 0, 1), (3, 33, 6, 5, 3, 1, (0, 2, 1, 0), 1),
         (4, 6, 13, 10, 5, 2, 2, 1), (3, 5, 12, 12, 6, 2, (1, 2, 0, 3), 1),
         (2, 3, 20, 17, 9, 3, 4, 1), (70, 20, 7, 7, 3, 1, 1, 1), (12, 18, 9, 10, 3, 1, 1, 2),
         (6, 9, 11, 8, 5, 2, 2, 3), (16, 16, 6, 6, 3, 1, 1, 8)]


def _case_id(case):
    c, k, h, w, kernel, stride, padding, groups = case
    return f"c{c}-k{k}-{h}x{w}-r{kernel}-s{stride}-p{padding}-g{groups}"


def _data(rng, case, n=2):
    c, k, h, w, kernel, _, _, groups = case
    return (rng.standard_normal((n, c, h, w)).astype(np.float32),
            rng.standard_normal((k, c // groups, kernel, kernel)).astype(np.float32))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fp32_is_within_its_bound_of_the_exact_convolution(case, rng):
    x, w = _data(rng, case)
    stride, padding, groups = case[5:]
    op = Conv(w, stride=stride, padding=padding, groups=groups, mode="winograd")
    exact = ref.conv2d(x, w, stride, padding, groups=groups)
    bound = ref.winograd_error_bound(x, w, stride, padding, "fp32", groups)
    for device in DEVICES.values():
        y, stats = device.run([op], x)
        assert y.shape == exact.shape
        assert np.all(np.abs(y - exact) <= bound)
        assert stats.ops[0].op == "conv2d_winograd"
    reference = ref.run_op(op, x)
    assert np.all(np.abs(reference - exact) <= bound)
    # and the reference's bits: its MAC array sums each M element as the kernel's FMA chain
    np.testing.assert_array_equal(y, reference)
    # the same bits at any thread count (fixed tile blocks), fused or independent
    one, _ = DEVICES[1].run([op], x)
    two, _ = DEVICES[2].run([op], x, mode="independent")
    np.testing.assert_array_equal(one, two)


# One image: a deep layer on a small plane (its U outweighs its V and M: one block whose kernels
# the threads split, on x86-64-v3 builds), kernels not a multiple of 8 or 4; and a plane whose
# tiles take several blocks (threads take blocks).
SINGLE = [(64, 70, 6, 6, 3, 1, 1, 1), (40, 22, 70, 66, 3, 1, 1, 1), (9, 13, 5, 7, 5, 2, 2, 1)]


@pytest.mark.parametrize("case", SINGLE, ids=_case_id)
def test_fp32_one_image_gives_the_reference_bits_at_any_thread_count(case, rng):
    """The MAC array's blocks of tiles and parts of kernels (winograd.c's plan) never change an
    M element's FMA chain: the reference's bits with 1 and 2 threads, fused and not."""
    x, w = _data(rng, case, n=1)
    op = Conv(w, stride=case[5], padding=case[6], groups=case[7], mode="winograd")
    sdp = Sdp(scale=np.linspace(0.5, 1.5, case[1], dtype=np.float32), act="relu")
    reference = ref.run_chain([op, sdp], x)
    for device in DEVICES.values():
        np.testing.assert_array_equal(device.run([op, sdp], x)[0], reference)
        np.testing.assert_array_equal(device.run([op, sdp], x, mode="independent")[0], reference)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fp16_is_within_its_bound_through_the_sdp(case, rng):
    x, w = _data(rng, case)
    x, w = x.astype(np.float16), (w * 0.3).astype(np.float16)
    stride, padding, groups = case[5:]
    chain = [Conv(w, stride=stride, padding=padding, groups=groups, precision="fp16",
                  mode="winograd"), Sdp(precision="fp16")]
    y, _ = DEVICE.run(chain, x)
    wide_x, wide_w = x.astype(np.float32), w.astype(np.float32)
    exact = ref.conv2d(wide_x, wide_w, stride, padding, groups=groups)
    bound = ref.winograd_error_bound(wide_x, wide_w, stride, padding, "fp16", groups)
    # the SDP rounds the accumulator to half once more
    rounding = 2.0 ** -11 * np.abs(exact) * (1 + 2.0 ** -10) + 2.0 ** -25
    assert np.all(np.abs(y.astype(np.float64) - exact) <= bound + rounding)
    reference = ref.run_chain(chain, x)
    assert np.all(np.abs(reference.astype(np.float64) - exact) <= bound + rounding)
    np.testing.assert_array_equal(y, reference)  # bit for bit


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_int8_equals_direct_convolution_bit_for_bit(case, mode, rng):
    c, k, h, w, kernel, stride, padding, groups = case
    x = rng.integers(-128, 128, (2, c, h, w)).astype(np.int8)
    weights = rng.integers(-128, 128, (k, c // groups, kernel, kernel)).astype(np.int8)
    sdp = Sdp(precision="int8", out_mul=1, out_shift=10, out_zero=-3)
    for in_zero in (0, -7, 127):
        chain = [Conv(weights, stride=stride, padding=padding, groups=groups, precision="int8",
                      in_zero=in_zero, mode="winograd"), sdp]
        direct = [Conv(weights, stride=stride, padding=padding, groups=groups,
                       precision="int8", in_zero=in_zero), sdp]
        y, _ = DEVICE.run(chain, x, mode=mode)
        np.testing.assert_array_equal(y, DEVICE.run(direct, x, mode=mode)[0])
        np.testing.assert_array_equal(y, ref.run_chain(chain, x))
        np.testing.assert_array_equal(
            ref.conv2d_winograd(x, weights, stride, padding, "int8", in_zero, groups),
            ref.conv2d_int8(x, weights, stride, padding, groups=groups, in_zero=in_zero))


def test_int8_extremes_stay_exact(rng):
    """Every input -128 against zero point 127 and weights of -128: the largest transformed
    values (|4 G g G^T| = 1152, |B^T d B| = 1020) at the full depth of a deep layer."""
    x = np.full((1, 256, 6, 6), -128, np.int8)
    weights = np.full((4, 256, 3, 3), -128, np.int8)
    weights[1] = 127
    weights[2, :, 1] = 127
    sdp = Sdp(precision="int8", out_mul=1, out_shift=20)
    chain = [Conv(weights, padding=1, precision="int8", in_zero=127, mode="winograd"), sdp]
    direct = [Conv(weights, padding=1, precision="int8", in_zero=127), sdp]
    np.testing.assert_array_equal(DEVICE.run(chain, x)[0], DEVICE.run(direct, x)[0])
    assert np.abs(ref.winograd_weights(weights, 1, "int8")).max() <= 4 * 2.25 * 128


# --- pre-transformed (packed) weights ---------------------------------------------------------

def _unpack(packed, k, cf, groups=1):
    """accel_conv_pack_weights' Winograd layout (csrc/winograd.c): a 64-byte header, then per
    group [16 xi][K/8 blocks][C' channels][8 kernels] float32 (K and C' per group, K rounded
    up with zero kernels), as [K, C', 4, 4]."""
    k //= groups
    blocks = -(-k // 8)
    u = np.frombuffer(packed[64:].tobytes(), np.float32).reshape(groups, 4, 4, blocks, cf, 8)
    u = u.transpose(0, 3, 5, 4, 1, 2).reshape(groups, blocks * 8, cf, 4, 4)
    assert not np.any(u[:, k:])  # the padding kernels are zero
    return u[:, :k].reshape(groups * k, cf, 4, 4)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_packed_weights_are_the_reference_pre_transform(case, precision, rng):
    """The pre-transform done once at packing is winograd_weights' bit for bit, and a run on
    the packed weights gives the bits of a run that transforms them itself (1 or 2 threads,
    fused or independent)."""
    x, w = _data(rng, case)
    c, k, (stride, padding, groups) = case[0], case[1], case[5:]
    if precision == "fp16":
        x, w = x.astype(np.float16), (w * 0.3).astype(np.float16)
        wide = w.astype(np.float32)
    else:
        wide = w
    conv = Conv(w, stride=stride, padding=padding, groups=groups, precision=precision,
                mode="winograd")
    packed = conv.pack("nv_full")
    np.testing.assert_array_equal(_unpack(packed, k, c // groups * stride * stride, groups),
                                  ref.winograd_weights(wide, stride, precision))
    chain = [conv] if precision == "fp32" else [conv, Sdp(precision="fp16")]
    on_packed = [dataclasses.replace(conv, packed=packed)] + chain[1:]
    plain, _ = DEVICES[1].run(chain, x)
    for device in DEVICES.values():
        for mode in ("fused", "independent"):
            np.testing.assert_array_equal(device.run(on_packed, x, mode=mode)[0], plain)


def test_packed_epilogue_matches_the_unfused_sdp(rng):
    """The SDP runs on each block of finished output rows: fused equals independent bit for
    bit, with an element-wise operand and per-channel scale and shift."""
    x = rng.standard_normal((2, 24, 30, 30)).astype(np.float32)
    w = (rng.standard_normal((20, 24, 3, 3)) * 0.2).astype(np.float32)
    operand = rng.standard_normal((2, 20, 30, 30)).astype(np.float32)
    conv = Conv(w, padding=1, mode="winograd").packed_for("nv_full")
    sdp = Sdp(scale=rng.uniform(0.5, 2, 20).astype(np.float32),
              shift=rng.standard_normal(20).astype(np.float32), ew_op="add", operand=operand,
              act="relu")
    fused, _ = DEVICE.run([conv, sdp], x, mode="fused")
    independent, _ = DEVICES[1].run([conv, sdp], x, mode="independent")
    np.testing.assert_array_equal(fused, independent)
    exact = ref.conv2d(x, w, 1, 1)
    bound = ref.winograd_error_bound(x, w, 1, 1, "fp32")
    plain, _ = DEVICE.run([conv], x)
    assert np.all(np.abs(plain - exact) <= bound)


def test_packed_weights_must_be_made_for_the_conv(rng):
    """A Winograd packing is refused by a conv of another shape, stride or precision, and by
    direct mode; direct fp32 weights are not packed."""
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 4, 10, 10)).astype(np.float32)
    conv = Conv(w, padding=1, mode="winograd")
    packed = conv.pack("nv_full")
    DEVICE.run([dataclasses.replace(conv, packed=packed)], x)  # made for it: accepted
    w16 = w.astype(np.float16)
    mismatched = r"weights_packed(_bytes = \d+, this .* packing needs| .* was not packed for this)"
    others = [([Conv(w[:4].copy(), padding=1, mode="winograd", packed=packed)], x),
              ([Conv(w16, padding=1, precision="fp16", mode="winograd", packed=packed),
                Sdp(precision="fp16")], x.astype(np.float16)),
              ([Conv(w, padding=1, precision="fp32", packed=packed)], x)]
    for chain, data in others:
        with pytest.raises(AccelInvalidError, match=mismatched if chain[0].mode == "winograd"
                           else "weights_packed is for INT8 and FP16 weights, Winograd mode"):
            DEVICE.run(chain, data)
    # a 6x6 stride-2 packing holds C*4 folded channels: not a 3x3 stride-1 one
    folded = Conv(rng.standard_normal((8, 1, 6, 6)).astype(np.float32), stride=2,
                  mode="winograd").pack("nv_full")
    with pytest.raises(AccelInvalidError, match=mismatched):
        DEVICE.run([Conv(w, padding=1, mode="winograd", packed=folded)], x)
    # two groups of 4 kernels over 2 channels: the size of one group of 8 over 4, not its packing
    halves = Conv(rng.standard_normal((8, 2, 3, 3)).astype(np.float32), padding=1, groups=2,
                  mode="winograd").pack("nv_full")
    assert halves.nbytes == packed.nbytes
    with pytest.raises(AccelInvalidError, match=mismatched):
        DEVICE.run([Conv(w, padding=1, mode="winograd", packed=halves)], x)
    with pytest.raises(AccelInvalidError, match="fp32 in direct mode: only INT8 and FP16"):
        Conv(w, padding=1).pack("nv_full")
    with pytest.raises(AccelUnsupportedError, match="mode = winograd: kernel 5x5"):
        Conv(rng.standard_normal((8, 4, 5, 5)).astype(np.float32), mode="winograd").pack(
            "nv_full")


def _adversarial(rng, dtype):
    """Large inputs of random sign against weights of +-1 over 64 channels: the exact result
    cancels to a fraction of S, while the transforms round sums of four inputs."""
    x = rng.uniform(30, 60, (1, 64, 12, 12)) * rng.choice([-1, 1], (1, 64, 12, 12))
    w = rng.choice([-1.0, 1.0], (4, 64, 3, 3))
    return x.astype(dtype), w.astype(dtype)


def test_fp32_adversarial_inputs_stay_within_the_bound(rng):
    x, w = _adversarial(rng, np.float32)
    exact = ref.conv2d(x, w, 1, 1)
    y, _ = DEVICE.run([Conv(w, padding=1, mode="winograd")], x)
    bound = ref.winograd_error_bound(x, w, 1, 1, "fp32")
    assert np.all(np.abs(y - exact) <= bound)


def test_fp16_adversarial_error_exceeds_direct_and_stays_within_the_bound(rng):
    x, w = _adversarial(rng, np.float16)
    chain = [Conv(w, padding=1, precision="fp16", mode="winograd"), Sdp(precision="fp16")]
    direct = [Conv(w, padding=1, precision="fp16"), Sdp(precision="fp16")]
    wide_x, wide_w = x.astype(np.float32), w.astype(np.float32)
    exact = ref.conv2d(wide_x, wide_w, 1, 1)
    error = np.abs(DEVICE.run(chain, x)[0].astype(np.float64) - exact)
    direct_error = np.abs(DEVICE.run(direct, x)[0].astype(np.float64) - exact)
    bound = ref.winograd_error_bound(wide_x, wide_w, 1, 1, "fp16")
    assert np.all(error <= bound + 2.0 ** -11 * np.abs(exact) * 1.001)
    # direct's error is its output rounding alone; Winograd's half operands add to it
    assert error.mean() > 1.5 * direct_error.mean()


def test_fp16_transformed_tiles_overflow_where_direct_does_not():
    """accel.h: inputs beyond 16376 can overflow the half operand B^T d B."""
    x = np.zeros((1, 1, 4, 4), np.float16)
    x[0, 0, 0::2, 0::2], x[0, 0, 1::2, 1::2] = 20000, 20000
    x[0, 0, 0::2, 1::2], x[0, 0, 1::2, 0::2] = -20000, -20000
    w = np.zeros((1, 1, 3, 3), np.float16)
    w[0, 0, 0, 0] = 1e-3
    y, _ = DEVICE.run([Conv(w, precision="fp16", mode="winograd"), Sdp(precision="fp16")], x)
    yd, _ = DEVICE.run([Conv(w, precision="fp16"), Sdp(precision="fp16")], x)
    assert np.all(np.isfinite(yd)) and not np.all(np.isfinite(y))
    reference = ref.run_chain([Conv(w, precision="fp16", mode="winograd"),
                               Sdp(precision="fp16")], x)
    np.testing.assert_array_equal(np.isfinite(reference), np.isfinite(y))


# --- cost ---------------------------------------------------------------------------------------

def _op_stats(ops, shape, precision, config="nv_full"):
    return estimate_chain(config, ops, shape, precision=precision).ops[0]


def test_int8_3x3_cost_by_hand():
    """nv_full int8: atomic C 64 (4 channels x 16 tile elements in Winograd), atomic K 32."""
    conv = dict(weight_shape=(64, 64, 3, 3), padding=1, precision="int8")
    sdp = Sdp(bias=None, precision="int8")
    wino = _op_stats([Conv(None, mode="winograd", **conv), sdp], (1, 64, 56, 56), "int8")
    direct = _op_stats([Conv(None, **conv), sdp], (1, 64, 56, 56), "int8")
    assert direct.mac_cycles == 56 * 56 * 1 * 2 * 9
    assert wino.mac_cycles == (14 * 2) * (14 * 2) * (64 // 4) * 2
    assert wino.macs == 28 * 28 * 16 * 64 * 64
    assert direct.weight_bytes == 64 * 64 * 9
    assert wino.weight_bytes == 64 * 64 * 16 * 2  # int16 4 G g G^T
    assert wino.op == "conv2d_winograd" and direct.op == "conv2d"


def test_int8_3x3_cbuf_reads_by_hand():
    """The same layer's CBUF reads: data, one 64-byte atomic-C entry per MAC cycle; weights,
    per stripe of 16 positions (Winograd: 2x2 output tiles) every atomic-C x atomic-K block.
    direct:   3136 x 2 x 9 = 56,448 cycles x 64 B + 196 stripes x (1 x 2 x 9) blocks x 2,048 B
    Winograd: 784 tiles x 32 blocks (16 x 4 channels, 2 x 32 kernels) = 25,088 cycles x 64 B
              + 49 stripes x 32 blocks x 2,048 B."""
    conv = dict(weight_shape=(64, 64, 3, 3), padding=1, precision="int8")
    sdp = Sdp(bias=None, precision="int8")
    wino = _op_stats([Conv(None, mode="winograd", **conv), sdp], (1, 64, 56, 56), "int8")
    direct = _op_stats([Conv(None, **conv), sdp], (1, 64, 56, 56), "int8")
    assert direct.cbuf_read_bytes == 56_448 * 64 + 196 * 18 * 64 * 32
    assert wino.cbuf_read_bytes == 25_088 * 64 + 49 * 32 * 64 * 32


def test_strided_fp16_cost_by_hand():
    """5x5 stride 2 folds to 3x3 over 4x the channels; outputs round up to 4x4 blocks."""
    conv = dict(weight_shape=(16, 8, 5, 5), stride=2, padding=2, precision="fp16")
    wino = _op_stats([Conv(None, mode="winograd", **conv), Sdp(precision="fp16")],
                     (1, 8, 16, 16), "fp16")
    folded = 8 * 2 * 2
    assert wino.mac_cycles == (2 * 2) * (2 * 2) * (folded // 4) * 1  # out 8x8, atomic K 16
    assert wino.macs == 4 * 4 * 16 * folded * 16
    assert wino.weight_bytes == 16 * folded * 16 * 2


def test_grouped_int8_cost_by_hand():
    """AlexNet's conv4 (384 -> 384, 2 groups, 13x13) runs group by group: per group 192 channels
    (48 lanes of 4) and 192 kernels (6 x atomic K 32); outputs round up to 16x16."""
    conv = dict(weight_shape=(384, 192, 3, 3), padding=1, groups=2, precision="int8")
    sdp = Sdp(bias=None, precision="int8")
    wino = _op_stats([Conv(None, mode="winograd", **conv), sdp], (1, 384, 13, 13), "int8")
    direct = _op_stats([Conv(None, **conv), sdp], (1, 384, 13, 13), "int8")
    assert direct.mac_cycles == 13 * 13 * 2 * 3 * 6 * 9
    assert wino.mac_cycles == (4 * 2) * (4 * 2) * 2 * (192 // 4) * 6
    assert wino.macs == 7 * 7 * 16 * 192 * 384
    assert wino.weight_bytes == 384 * 192 * 16 * 2 and direct.weight_bytes == 384 * 192 * 9
    assert wino.op == "conv2d_winograd"


def test_cbuf_pressure_of_the_larger_weights():
    """Weights that fit CBUF direct (512 x 512 x 3 x 3 int8 = 2.25 MiB does not; 256 x 256 x
    9 = 576 KiB neither; 128 x 128: 144 KiB direct, 512 KiB transformed) can force re-reads."""
    conv = dict(weight_shape=(128, 128, 3, 3), padding=1, precision="int8")
    sdp = Sdp(precision="int8")
    shape = (2, 128, 28, 28)
    direct = _op_stats([Conv(None, **conv), sdp], shape, "int8")
    wino = _op_stats([Conv(None, mode="winograd", **conv), sdp], shape, "int8")
    # In 32 KiB banks: direct 5 weight banks + 4 for the input (28 rows of 28 x 128 B) fit the
    # 16; transformed, 16 weight banks do not, so the split keeps the input (4) and two kernel
    # groups (2 x 32 x 128 x 32 B = 8 banks), and the weights stream once per image: the second
    # image re-reads all 524,288 bytes.
    assert direct.reread_bytes == 0 and (direct.data_banks, direct.weight_banks) == (4, 5)
    assert wino.weight_bytes == 2 * 524_288 and wino.reread_bytes == 524_288
    assert (wino.data_banks, wino.weight_banks) == (4, 8)


# --- conditions ---------------------------------------------------------------------------------

REFUSALS = [
    (dict(weight_shape=(8, 8, 3, 3), stride=2), "kernel 3x3 at stride 2 is not 3x3"),
    (dict(weight_shape=(8, 8, 5, 5)), "kernel 5x5 at stride 1 is not 3x3"),
    (dict(weight_shape=(8, 8, 1, 1)), "kernel 1x1"),
    (dict(weight_shape=(8, 8, 3, 3), dilation=2), "dilation 2x2"),
    (dict(weight_shape=(8, 8, 5, 3), stride=(2, 1)), "stride 2x1"),
    (dict(weight_shape=(8, 1, 3, 3), groups=8), "one input channel per group"),
    (dict(weight_shape=(16, 1, 3, 3), groups=8), "one input channel per group"),
]


@pytest.mark.parametrize("conv, message", REFUSALS, ids=[m for _, m in REFUSALS])
def test_refuses_what_does_not_qualify(conv, message):
    with pytest.raises(AccelUnsupportedError, match=f"mode = winograd: {message}"):
        estimate_chain("nv_full", [Conv(None, mode="winograd", **conv)], (1, 8, 16, 16))
    estimate_chain("nv_full", [Conv(None, **conv)], (1, 8, 16, 16))  # direct runs it


@pytest.mark.parametrize("config", ["nv_large", "nv_small"])
def test_refuses_configurations_without_the_feature(config):
    with pytest.raises(AccelUnsupportedError, match=f"configuration {config} has no Winograd"):
        estimate_chain(config, [Conv(None, weight_shape=(8, 8, 3, 3), mode="winograd",
                                     precision="int8"), Sdp(precision="int8")],
                       (1, 8, 8, 8), precision="int8")
    with_it = AccelConfig.preset(config).replace(
        features=(*AccelConfig.preset(config).features, "winograd"))
    estimate_chain(with_it, [Conv(None, weight_shape=(8, 8, 3, 3), mode="winograd",
                                  precision="int8"), Sdp(precision="int8")], (1, 8, 8, 8),
                   precision="int8")


def test_unknown_mode_is_named():
    with pytest.raises(AccelInvalidError, match="conv mode = 'fft'"):
        estimate_chain("nv_full", [Conv(None, weight_shape=(8, 8, 3, 3), mode="fft")],
                       (1, 8, 8, 8))
