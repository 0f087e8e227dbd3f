"""The CONV's input modes (accel.h: pixel_format, multi_batch): the same values as direct
convolution, NVDLA's costs computed by hand, and every refusal naming its field."""
import dataclasses

import numpy as np
import pytest

from accel_codegen import (AccelConfig, AccelInvalidError, AccelShapeError, AccelUnsupportedError,
                           Conv, Device, Sdp, estimate_chain)

DEVICE = Device("nv_full", num_threads=2)


def _int8_sdp(k):
    return Sdp(bias=np.zeros(k, np.int32), mul=np.ones(k, np.int16), rshift=np.full(k, 7, np.uint8),
               precision="int8")


@pytest.mark.parametrize("precision, pixel_format, channels", [
    ("int8", "a8b8g8r8", 3), ("int8", "r8", 1), ("fp32", "a16b16g16r16_f", 4),
    ("fp16", "a16b16g16r16_f", 3)])
def test_image_input_gives_the_direct_convolutions_values(precision, pixel_format, channels):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, channels, 23, 19)).astype(np.float32)
    w = rng.standard_normal((40, channels, 7, 7)).astype(np.float32)
    if precision == "int8":
        x = rng.integers(-128, 128, x.shape).astype(np.int8)
        w = rng.integers(-128, 128, w.shape).astype(np.int8)
    elif precision == "fp16":
        x, w = x.astype(np.float16), w.astype(np.float16)

    def chain(fmt):
        ops = [Conv(w, stride=2, padding=(3, 2, 1, 3), precision=precision, pixel_format=fmt,
                    in_zero=5 if precision == "int8" else 0)]
        if precision == "int8":
            ops.append(_int8_sdp(40))
        elif precision == "fp16":
            ops.append(Sdp(precision="fp16"))
        return ops

    direct, direct_stats = DEVICE.run(chain(None), x)
    image, image_stats = DEVICE.run(chain(pixel_format), x)
    np.testing.assert_array_equal(image, direct)
    assert image_stats.ops[0].op == "conv2d_image" and direct_stats.ops[0].op == "conv2d"
    assert image_stats.mac_cycles < direct_stats.mac_cycles


def test_image_input_cost_by_hand():
    """nv_full int8 (atomic C 64, K 32, 32-byte atoms), the RGB stem 3x224x224 -> 64, 7x7/2, pad 3.
    A8B8G8R8: a kernel row is 7 pixels x 4 channels = 28 pre-extended channels; 4 rows would
    need 112 > 64, 2 rows 56 <= 64 (stride 2 x 4 = 8, x 2 = 16 <= 64): post-extension 2.
    mac_cycles = 112 * 112 positions * ceil(7 / 2) * ceil(56 / 64) * ceil(64 / 32) = 100,352
    (direct: 12,544 * ceil(3/64) * 2 * 49 = 1,229,312).
    input      = 224 lines of 224 pixels x 4 B (896 B, whole atoms)            = 200,704 B
    weights    = 64 * 3 * 49                                                   =   9,408 B
    output     = 12,544 positions x 64 channels (two atoms each)               = 802,816 B"""
    ops = [Conv(None, weight_shape=(64, 3, 7, 7), stride=2, padding=3, precision="int8",
                pixel_format="a8b8g8r8"), _int8_sdp(64)]
    op = estimate_chain("nv_full", ops, (1, 3, 224, 224), precision="int8").ops[0]
    assert (op.mac_cycles, op.input_bytes, op.weight_bytes) == (100_352, 200_704, 9_408)
    direct = estimate_chain("nv_full", [dataclasses.replace(ops[0], pixel_format=None), ops[1]],
                            (1, 3, 224, 224), precision="int8").ops[0]
    # direct: a whole 32-byte atom per position (1.6 MB: CBUF slices it, re-reading halos)
    assert direct.mac_cycles == 1_229_312 and direct.input_bytes >= 224 * 224 * 32


@pytest.mark.parametrize("kernel, stride, cycles_per_position", [
    (3, 1, 1),   # row 3 x 4 = 12: four rows (48) fit 64: ceil(3/4) x ceil(48/64) = 1
    (4, 1, 1),   # row 16: four rows exactly 64 (NVDLA's own example: 25 % -> 100 %)
    (7, 2, 4),   # row 28: two rows (56): ceil(7/2) = 4
    (11, 4, 11),  # row 44: one row: 11 x ceil(44/64)
    (5, 8, 3),   # row 20: two rows (40; stride 8 x 4 x 2 = 64 fits): ceil(5/2) = 3
    (3, 8, 2),   # row 12 would take four rows (48), but stride 8 x 4 x 4 = 128 > 64: two
])
def test_post_extension_rows_follow_nvdlas_limits(kernel, stride, cycles_per_position):
    conv = Conv(None, weight_shape=(32, 4, kernel, kernel), stride=stride, precision="int8",
                pixel_format="a8b8g8r8")
    stats = estimate_chain("nv_full", [conv, _int8_sdp(32)], (1, 4, 64, 64), precision="int8")
    op = stats.ops[0]
    positions = op.macs // (32 * 4 * kernel * kernel)
    assert op.mac_cycles == positions * cycles_per_position


@pytest.mark.parametrize("fields, shape, config, error, message", [
    (dict(pixel_format="a8b8g8r8"), (1, 3, 16, 16), "no_image", AccelUnsupportedError,
     "has no image-input mode"),
    (dict(pixel_format="a16b16g16r16_f"), (1, 3, 16, 16), "nv_full", AccelInvalidError,
     "holds FP16 pixels, the conv is int8"),
    (dict(pixel_format="r8"), (1, 3, 16, 16), "nv_full", AccelShapeError,
     "holds 1 channels, the input has 3"),
    (dict(pixel_format="a8b8g8r8", groups=2), (1, 4, 16, 16), "nv_full", AccelUnsupportedError,
     "direct convolution only: groups 2"),
    (dict(pixel_format="a8b8g8r8", dilation=2), (1, 3, 16, 16), "nv_full", AccelUnsupportedError,
     "dilation 2x2"),
    (dict(pixel_format="rgb"), (1, 3, 16, 16), "nv_full", AccelInvalidError,
     "pixel_format = 'rgb' is not one of"),
    (dict(multi_batch=True), (4, 64, 1, 1), "nv_large", AccelUnsupportedError,
     "has no multi-batch mode"),
    (dict(multi_batch=True), (4, 64, 2, 2), "nv_full", AccelUnsupportedError,
     "multi_batch is for fully connected layers"),
    (dict(multi_batch=1), (4, 64, 1, 1), "nv_full", AccelInvalidError, "is not a bool"),
], ids=["feature", "precision", "channels", "groups", "dilation", "name", "batch-feature",
        "batch-not-fc", "batch-type"])
def test_modes_are_refused_with_the_reason(fields, shape, config, error, message):
    if config == "no_image":
        config = AccelConfig.preset("nv_full").replace(
            name="no_image", features=tuple(f for f in AccelConfig.preset("nv_full").features
                                            if f != "image_input"))
    groups = fields.pop("groups", 1)
    kernel = 1 if "multi_batch" in fields else 3
    conv = Conv(None, weight_shape=(32, shape[1] // groups, kernel, kernel), groups=groups,
                precision="int8", **fields)
    with pytest.raises(error, match=message):
        estimate_chain(config, [conv, _int8_sdp(32)], shape, precision="int8")


def test_image_input_must_read_the_runs_input():
    ops = [Conv(None, weight_shape=(8, 3, 1, 1), precision="fp32"),
           Conv(None, weight_shape=(8, 8, 3, 3), precision="fp32",
                pixel_format="a16b16g16r16_f")]
    with pytest.raises(AccelInvalidError, match="the CONV must be op 0"):
        estimate_chain("nv_full", ops, (1, 3, 8, 8), mode="independent")


def test_multi_batch_reads_the_weights_once_per_batch():
    """nv_full int8, a 9216 -> 4096 dense layer (AlexNet's fc6) on a batch of 16: the weights
    (37,748,736 B) do not fit CBUF; one image's vector (9,216 B) fits with an atomic-K group of
    kernels (32 x 9216 B). Without multi-batch every image streams the weights again: 16 x; with
    it, 16 vectors (147 KiB) stay in CBUF and the weights stream once. In banks of 32 KiB: the
    kernel group takes 9, the 16 vectors 5 (they hold 17). Same values."""
    shape, weights = (16, 9216, 1, 1), 4096 * 9216

    def cost(batch):
        conv = Conv(None, weight_shape=(4096, 9216, 1, 1), precision="int8", multi_batch=batch)
        return estimate_chain("nv_full", [conv, _int8_sdp(4096)], shape, precision="int8").ops[0]

    single, batched = cost(False), cost(True)
    assert (single.weight_bytes, batched.weight_bytes) == (16 * weights, weights)
    assert single.input_bytes == batched.input_bytes == 16 * 9216
    assert batched.op == "conv2d_batch" and batched.mac_cycles == single.mac_cycles
    assert (batched.data_banks, batched.weight_banks) == (5, 9)
    # 40 images: the data banks are sized for ACCEL_MAX_BATCH (32) vectors, 9 banks, which do
    # not fit beside the kernel group's 9 of 16; the split gives the data the 7 left, which
    # hold 7 x 32768 / 9216 = 24 vectors: ceil(40 / 24) = 2 weight fetches
    conv = Conv(None, weight_shape=(4096, 9216, 1, 1), precision="int8", multi_batch=True)
    big = estimate_chain("nv_full", [conv, _int8_sdp(4096)], (40, 9216, 1, 1),
                         precision="int8").ops[0]
    assert big.weight_bytes == 2 * weights and (big.data_banks, big.weight_banks) == (7, 9)

    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (5, 96, 1, 1)).astype(np.int8)
    w = rng.integers(-128, 128, (48, 96, 1, 1)).astype(np.int8)
    runs = [DEVICE.run([Conv(w, precision="int8", multi_batch=b), _int8_sdp(48)], x)[0]
            for b in (False, True)]
    np.testing.assert_array_equal(runs[0], runs[1])
