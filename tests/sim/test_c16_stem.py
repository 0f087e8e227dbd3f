"""The image layer's C16 kernel (csrc/stem_c16.c): a conv reading an NCHW input of 1-4 channels
and writing a C16 output gives, bit for bit, what the all-NCHW run gives (conv_f32's implicit
GEMM, or its packed panels without a dot-product tail), at 1-3 threads, every epilogue it
takes, MobileNet's and ResNet's stem geometries (ResNet's with its max pool in the run) and
odd ones, -0.0 in the data and an inf
weight; accel_c16_native answers for an NCHW input (in_layout="nchw") without changing its
answer for a C16 one."""
import numpy as np
import pytest

from accel_codegen import Conv, Pool, Sdp
from accel_codegen.sim.device import c16_native
from accel_codegen.sim.layout import c16_shape, from_c16, to_c16
from conftest import assert_same
from test_c16_layout import C16_KERNELS, DEVICES, _data, _epilogue

EPILOGUES = ["none", "bn_relu", "bn_clip", "scale_add_relu", "shift"]

# (n, c, k, h, w, kernel, stride, pad): MobileNet-v1/v2's and ResNet's stems, then odd ones:
# 2-4 channels, k of 16-80 (groups of 1-4 blocks and a last smaller one), odd planes, rows
# of fewer positions than a tile, stride 1 and mixed strides, asymmetric and large padding,
# a batch, and planes on conv_f32's packed path (fewer than 512 grid columns, 16 | ohw).
MOBILENET = (1, 3, 32, 224, 224, 3, (2, 2), (1, 1, 1, 1))
RESNET = (1, 3, 64, 224, 224, 7, (2, 2), (3, 3, 3, 3))
ODD = [
    (1, 3, 16, 57, 45, 3, (2, 2), (1, 1, 1, 1)), (2, 3, 48, 33, 29, 3, (1, 1), (1, 1, 1, 1)),
    (1, 2, 80, 40, 37, 5, (2, 2), (2, 2, 2, 2)), (1, 4, 32, 31, 64, 7, (2, 2), (3, 3, 3, 3)),
    (1, 2, 64, 30, 23, 3, (2, 1), (0, 1, 2, 0)), (1, 3, 96, 41, 35, 4, (1, 2), (3, 0, 1, 2)),
    (2, 3, 16, 16, 16, 3, (2, 2), (1, 1, 1, 1)), (1, 3, 32, 12, 12, 1, (1, 1), (0, 0, 0, 0)),
    (1, 3, 16, 70, 13, 3, (1, 1), (1, 1, 1, 1))]


def _out(h, w, kernel, stride, pad):
    return ((h + pad[0] + pad[2] - kernel) // stride[0] + 1,
            (w + pad[1] + pad[3] - kernel) // stride[1] + 1)


def _ops(rng, n, c, k, h, w, kernel, stride, pad, epilogue, inf_weight=False):
    weights = _data(rng, (k, c, kernel, kernel), zeros=False)
    if inf_weight:  # products with padding's +0 are NaN: they must be summed, not skipped
        weights[5 % k, 0, 0, 0] = np.inf
    conv = Conv(weights, stride=stride, padding=pad)
    sdp = _epilogue(epilogue, rng, k, (n, k) + _out(h, w, kernel, stride, pad))
    return [conv] + ([sdp] if sdp is not None else [])


def _blocked(op):
    """The op with its element-wise operand in C16, as a run with a C16 output reads it."""
    if isinstance(op, Sdp) and op.operand is not None:
        return Sdp(scale=op.scale, shift=op.shift, ew_op=op.ew_op, operand=to_c16(op.operand),
                   act=op.act, clip=op.clip)
    return op


def _nchw_in_c16_out(ops, x, threads=2, native=True, mode="fused"):
    """The run from an NCHW input into a C16 output gives the all-NCHW run's bits and cost;
    ``native``: on the stem kernel (else converted around the NCHW kernels)."""
    assert c16_native("nv_full", ops, x.shape, in_layout="nchw", mode=mode) == (
        native and C16_KERNELS)
    device = DEVICES[threads]
    expected, stats = device.run(ops, x, mode=mode)
    blocked, blocked_stats = device.run([_blocked(op) for op in ops], x, mode=mode,
                                        out_layout="c16")
    assert blocked.shape == c16_shape(expected.shape)
    assert_same(from_c16(blocked).view(np.uint32), expected.view(np.uint32))
    assert blocked_stats.cycles == stats.cycles
    return expected


@pytest.mark.parametrize("geometry", [MOBILENET, RESNET], ids=["mobilenet", "resnet"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_stems(rng, geometry, epilogue):
    _nchw_in_c16_out(_ops(rng, *geometry, epilogue), _data(rng, geometry[:2] + geometry[3:5]))


@pytest.mark.parametrize("geometry", ODD)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_odd_geometries(rng, geometry, epilogue):
    _nchw_in_c16_out(_ops(rng, *geometry, epilogue), _data(rng, geometry[:2] + geometry[3:5]))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("geometry", [MOBILENET, RESNET, ODD[0], ODD[3]])
def test_threads_and_inf_weight(rng, threads, geometry):
    expected = _nchw_in_c16_out(_ops(rng, *geometry, "bn_clip", inf_weight=True),
                                _data(rng, geometry[:2] + geometry[3:5]), threads=threads)
    assert np.isnan(expected).any()


POOLS = [Pool("max", kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1)),
         Pool("avg", kernel=(2, 2), stride=(2, 2)),
         Pool("avg", kernel=(3, 3), stride=(2, 1), padding=(1, 0, 1, 1))]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_resnet_stem_with_its_pool(rng, threads, epilogue):
    """ResNet's CONV -> SDP -> PDP run: the conv into C16 scratch, then the C16 pool."""
    ops = _ops(rng, *RESNET, epilogue) + [POOLS[0]]
    _nchw_in_c16_out(ops, _data(rng, RESNET[:2] + RESNET[3:5]), threads=threads)


@pytest.mark.parametrize("pool", POOLS, ids=["max3s2", "avg2", "avg3s21"])
@pytest.mark.parametrize("geometry", [ODD[0], ODD[3], ODD[6]])
def test_odd_geometries_with_a_pool(rng, pool, geometry):
    for epilogue in ("none", "scale_add_relu"):
        ops = _ops(rng, *geometry, epilogue) + [pool]
        _nchw_in_c16_out(ops, _data(rng, geometry[:2] + geometry[3:5]))


def test_image_input_format(rng):
    """An fp32 image input (pixel_format a16b16g16r16_f, as the compiler sets on the first
    conv) changes nothing: the same kernel, the same bits."""
    n, c, k, h, w, kernel, stride, pad = MOBILENET
    conv, sdp = _ops(rng, *MOBILENET, "bn_clip")
    image = Conv(conv.weights, stride=stride, padding=pad, pixel_format="a16b16g16r16_f")
    x = _data(rng, (n, c, h, w))
    assert_same(_nchw_in_c16_out([image, sdp], x).view(np.uint32),
                _nchw_in_c16_out([conv, sdp], x).view(np.uint32))


def test_which_runs_read_nchw_natively(rng):
    """What the stem kernel refuses runs the NCHW kernels and a conversion, with the same bits;
    the C16-in question (in_layout="c16", the default) is unchanged."""
    x = _data(rng, (1, 3, 32, 32))
    stem = _ops(rng, 1, 3, 32, 32, 32, 3, (2, 2), (1, 1, 1, 1), "bn_relu")
    assert c16_native("nv_full", stem, x.shape, in_layout="nchw") == C16_KERNELS
    assert not c16_native("nv_full", stem, x.shape)  # 3 channels cannot be C16
    odd_k = _ops(rng, 1, 3, 24, 32, 32, 3, (2, 2), (1, 1, 1, 1), "none")
    assert not c16_native("nv_full", odd_k, x.shape, in_layout="nchw")  # no C16 output
    pool = Pool("max", kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))
    refused = {  # (ops, input shape)
        "5 channels": (_ops(rng, 1, 5, 32, 32, 32, 3, (2, 2), (1, 1, 1, 1), "none"),
                       (1, 5, 32, 32)),
        "1 channel (conv_f32's depthwise paths)": (
            _ops(rng, 1, 1, 32, 32, 32, 3, (2, 2), (1, 1, 1, 1), "none"), (1, 1, 32, 32)),
        "stride 3": (_ops(rng, 1, 3, 32, 32, 32, 3, (3, 3), (1, 1, 1, 1), "none"), x.shape),
        "dot-product tail": (_ops(rng, 1, 3, 16, 12, 12, 3, (2, 2), (1, 1, 1, 1), "none"),
                             (1, 3, 12, 12)),
        "a pool after, independent mode": (stem + [pool], x.shape),
        "prelu": (stem[:1] + [Sdp(act="prelu", prelu_slope=np.full(32, 0.1, np.float32))],
                  x.shape),
    }
    for why, (ops, shape) in refused.items():
        mode = "independent" if "independent" in why else "fused"
        _nchw_in_c16_out(ops, _data(rng, shape), native=False, mode=mode)
    # C16 in: the old answers
    x16 = (1, 16, 14, 14)
    assert c16_native("nv_full", [Conv(_data(rng, (32, 16, 1, 1)))], x16) == C16_KERNELS
    assert c16_native("nv_full", [Conv(_data(rng, (32, 16, 3, 3)), padding=(1, 1, 1, 1))],
                      x16) == C16_KERNELS
    assert not c16_native("nv_full", [Conv(_data(rng, (32, 16, 5, 5)), padding=(2, 2, 2, 2))],
                          x16)
    # and an NCHW input with 16 channels asks for the stem kernel, which takes <= 4
    assert not c16_native("nv_full", [Conv(_data(rng, (32, 16, 1, 1)))], x16, in_layout="nchw")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("pool", [POOLS[0], Pool("max", kernel=(7, 7), stride=(3, 1),
                                                 padding=(3, 2, 3, 2))], ids=["max3s2", "max7"])
@pytest.mark.parametrize("geometry", [ODD[1], (2, 3, 32, 21, 28, 3, (1, 1), (1, 1, 1, 1))],
                         ids=["odd1", "w28"])
def test_pool_rows_across_strips(rng, threads, pool, geometry):
    """The pool's rows are taken per conv strip; a window over strips of two participants or
    two images (a batch, a window of 7 rows over three strips) gives the same bits. (w28: rows
    of two 14-position tiles at stride 1.)"""
    ops = _ops(rng, *geometry, "bn_relu") + [pool]
    _nchw_in_c16_out(ops, _data(rng, geometry[:2] + geometry[3:5]), threads=threads)
