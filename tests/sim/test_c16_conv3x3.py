"""The C16 dense 3x3 kernel (csrc/conv3x3_c16.c): a C16 run gives, bit for bit, what the NCHW
run gives (conv_f32, whichever of its paths the geometry takes: implicit GEMM, packed panels
with dot-product tail positions), at strides 1 and 2, 1-3 threads, every epilogue it takes,
with and without weights packed at load; the geometries it refuses are converted around."""
import numpy as np
import pytest

from accel_codegen import Conv
from conftest import assert_same
from test_c16_layout import _data, _epilogue, _same_either_way

EPILOGUES = ["none", "bn_relu", "bn_clip", "scale_add_relu", "shift"]

# (n, c, k, h, w, stride): ResNet-18/50's 3x3 layers, then odd planes, tails of 1-8 positions
# (14x14: 4, 7x7: 1; 7x3: 5 over two rows; <= 8 positions: all), k % 64 of 16, 32, 48 at
# both strides (tiles of 2 or 4 blocks), batches.
RESNET = [
    (1, 64, 64, 56, 56, 1), (1, 128, 128, 28, 28, 1), (1, 256, 256, 14, 14, 1),
    (1, 64, 128, 56, 56, 2), (1, 128, 128, 56, 56, 2), (1, 128, 256, 28, 28, 2),
    (1, 256, 256, 28, 28, 2)]
# 7x7 outputs from >= 256 channels: the kernel measured slower there, so it refuses them
RESNET_7X7 = [(1, 512, 512, 7, 7, 1), (1, 256, 512, 14, 14, 2), (1, 512, 512, 14, 14, 2)]
ODD = [
    (1, 16, 16, 7, 7, 1), (2, 32, 48, 13, 17, 1), (1, 48, 80, 5, 11, 2), (1, 16, 32, 7, 3, 1),
    (2, 48, 16, 3, 3, 1), (1, 32, 64, 9, 20, 1), (2, 16, 32, 2, 3, 2), (1, 16, 16, 1, 1, 1),
    (1, 80, 16, 4, 4, 2), (2, 32, 32, 15, 15, 2), (1, 16, 64, 10, 31, 1), (1, 32, 112, 9, 7, 2)]


def _out(h, w, stride, pad=(1, 1, 1, 1)):
    return (h + pad[0] + pad[2] - 3) // stride + 1, (w + pad[1] + pad[3] - 3) // stride + 1


def _conv_run(rng, n, c, k, h, w, stride, epilogue, pad=(1, 1, 1, 1), threads=2, packed=False,
              native=True):
    x = _data(rng, (n, c, h, w))
    conv = Conv(_data(rng, (k, c, 3, 3), zeros=False), stride=(stride, stride), padding=pad)
    if packed:
        conv = conv.packed_for("nv_full")
    sdp = _epilogue(epilogue, rng, k, (n, k) + _out(h, w, stride, pad))
    return _same_either_way([conv] + ([sdp] if sdp is not None else []), x, threads=threads,
                            native=native)


@pytest.mark.parametrize("n,c,k,h,w,stride", RESNET)
@pytest.mark.parametrize("epilogue", ["bn_relu", "scale_add_relu"])
def test_resnet_3x3_layers_c16_equal_nchw(rng, n, c, k, h, w, stride, epilogue):
    _conv_run(rng, n, c, k, h, w, stride, epilogue)


@pytest.mark.parametrize("n,c,k,h,w,stride", RESNET_7X7)
def test_resnet_7x7_outputs_are_converted_around(rng, n, c, k, h, w, stride):
    _conv_run(rng, n, c, k, h, w, stride, "bn_relu", native=False)
    _conv_run(rng, n, 128, k, h, w, stride, "bn_relu")  # fewer input channels: C16


@pytest.mark.parametrize("n,c,k,h,w,stride", ODD)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_odd_3x3_layers_c16_equal_nchw(rng, n, c, k, h, w, stride, epilogue):
    _conv_run(rng, n, c, k, h, w, stride, epilogue)


@pytest.mark.parametrize("pad", [(0, 0, 0, 0), (0, 0, 1, 1), (1, 1, 0, 0), (2, 2, 2, 2),
                                 (1, 0, 2, 1)])
@pytest.mark.parametrize("stride", [1, 2])
def test_other_paddings(rng, pad, stride):
    """No padding, TensorFlow's SAME at stride 2 (bottom and right only), wider and uneven."""
    _conv_run(rng, 1, 32, 48, 11, 9, stride, "bn_clip", pad=pad)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n,c,k,h,w,stride", [(2, 64, 128, 14, 14, 1), (1, 128, 64, 15, 9, 2),
                                              (1, 128, 512, 7, 7, 1)])
def test_threads_do_not_change_the_bits(rng, threads, n, c, k, h, w, stride):
    seed = rng.integers(1 << 30)
    single = _conv_run(np.random.default_rng(seed), n, c, k, h, w, stride, "scale_add_relu",
                       threads=1)
    assert_same(_conv_run(np.random.default_rng(seed), n, c, k, h, w, stride, "scale_add_relu",
                          threads=threads), single)


@pytest.mark.parametrize("n,c,k,h,w,stride", [(1, 256, 256, 14, 14, 1), (1, 48, 80, 5, 11, 2),
                                              (1, 16, 32, 7, 3, 1)])
def test_weights_packed_at_load_give_the_same_bits(rng, n, c, k, h, w, stride):
    assert Conv(_data(rng, (k, c, 3, 3)), stride=(stride, stride)).packs("nv_full", c)
    seed = rng.integers(1 << 30)
    expected = _conv_run(np.random.default_rng(seed), n, c, k, h, w, stride, "bn_relu")
    assert_same(_conv_run(np.random.default_rng(seed), n, c, k, h, w, stride, "bn_relu",
                          packed=True), expected)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_non_finite_weights_meet_the_padding_as_conv_f32_does(rng, packed, bad):
    """Padding taps do their multiply-add with a zero, as conv_f32's: an infinite or NaN weight
    makes NaN at the outputs whose tap reads padding, the same bits either way (with finite
    weights the kernel skips the padding rows' taps, which add exact zeros)."""
    for h, w in ((14, 14), (28, 28), (7, 7)):  # packed (tails), implicit, packed
        weights = _data(rng, (32, 64, 3, 3), zeros=False)
        weights[3, 5, 0, 0] = bad
        weights[17, 60, 2, 1] = -bad
        x = _data(rng, (1, 64, h, w))
        conv = Conv(weights, padding=(1, 1, 1, 1))
        out = _same_either_way([conv.packed_for("nv_full") if packed else conv], x)
        assert np.isnan(out[0, 3, 0, 0]) and np.isnan(out[0, 17, -1, 3])
        assert np.isnan(out[0, 3, h // 2, 0])  # a padding column's tap, inside the plane


@pytest.mark.parametrize("pad", [(1, 1, 1, 1), (1, 1, 0, 0)])
@pytest.mark.parametrize("threads", [1, 3])
def test_large_strided_inputs_are_read_in_place(rng, pad, threads):
    """At stride 2 an input over 1 MB is copied padded only at its left edge, the other tiles
    reading it in place (edge_only): 128 x 51x52 gives 26x26 outputs (25x26 without the
    bottom padding), whose 4-position (1-position) dot-product tail is gathered from the input
    and, with the bottom padding, the padding row; the same bits as conv_f32."""
    _conv_run(rng, 1, 128, 48, 51, 52, 2, "scale_add_relu", pad=pad, threads=threads)


@pytest.mark.parametrize("conv", [
    dict(stride=(3, 3), padding=(1, 1, 1, 1)), dict(dilation=(2, 2), padding=(2, 2, 2, 2)),
    dict(groups=2, padding=(1, 1, 1, 1)), dict(stride=(1, 1), padding=(3, 3, 3, 3))])
def test_geometries_it_refuses_are_converted_around(rng, conv):
    x = _data(rng, (1, 32, 10, 12))
    groups = conv.get("groups", 1)
    ops = [Conv(_data(rng, (32, 32 // groups, 3, 3)), **conv), _epilogue("bn_relu", rng, 32, None)]
    _same_either_way(ops, x, native=False)


def test_a_batch_of_single_positions_is_converted_around(rng):
    """conv_f32 runs a batch of 1x1 output planes as fully connected rows (BLAS): another
    order, so no C16 kernel."""
    x = _data(rng, (2, 32, 1, 1))
    _same_either_way([Conv(_data(rng, (16, 32, 3, 3)), padding=(1, 1, 1, 1))], x, native=False)
    _same_either_way([Conv(_data(rng, (16, 32, 3, 3)), padding=(1, 1, 1, 1))], x[:1])
