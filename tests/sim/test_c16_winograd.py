"""Winograd mode on channel-blocked (C16) fp32 tensors (csrc/winograd_c16.c): a stride-1 3x3
CONV in WINOGRAD mode, alone or with its SDP fused, gives bit for bit the NCHW Winograd run's
output (csrc/winograd.c) at 1-3 threads, with every one-pass epilogue, odd planes and
ResNet's shapes, packed or unpacked weights; the runs it does not take are converted around."""
import numpy as np
import pytest

from accel_codegen import Conv, Sdp
from conftest import assert_same
from test_c16_layout import _data, _epilogue, _same_either_way

EPILOGUES = ["none", "bn_relu", "bn_clip", "scale_add_relu", "shift"]

SHAPES = [  # (n, c, k, h, w, padding)
    (1, 16, 16, 7, 7, 1), (2, 32, 48, 13, 17, 1), (1, 48, 16, 5, 3, 1), (1, 16, 32, 1, 1, 1),
    (1, 16, 16, 9, 6, 0), (1, 32, 16, 8, 11, (0, 2, 1, 0)), (2, 16, 64, 2, 29, 1),
    (1, 64, 64, 56, 56, 1), (1, 128, 128, 28, 28, 1), (1, 256, 256, 14, 14, 1)]


def _winograd(rng, c, k, padding, packed=False):
    conv = Conv(_data(rng, (k, c, 3, 3), zeros=False), padding=padding, mode="winograd")
    return conv.packed_for("nv_full") if packed else conv


def _out_shape(n, k, h, w, padding):
    top, left, bottom, right = (padding,) * 4 if isinstance(padding, int) else padding
    return n, k, h + top + bottom - 2, w + left + right - 2


@pytest.mark.parametrize("n,c,k,h,w,padding", SHAPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_winograd_c16_equals_nchw(rng, n, c, k, h, w, padding, epilogue):
    x = _data(rng, (n, c, h, w))
    sdp = _epilogue(epilogue, rng, k, _out_shape(n, k, h, w, padding))
    ops = [_winograd(rng, c, k, padding, packed=c >= 64)] + ([sdp] if sdp is not None else [])
    _same_either_way(ops, x)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n,h,w", [(1, 15, 11), (2, 6, 9), (1, 28, 28)])
def test_winograd_c16_does_not_depend_on_the_thread_count(rng, threads, n, h, w):
    """Blocks of tile rows and parts of the kernels change with the thread count; the bits do
    not, packed weights or not."""
    x = _data(rng, (n, 48, h, w))
    bn = _epilogue("bn_relu", rng, 80, None)
    unpacked = _winograd(rng, 48, 80, 1)
    packed = unpacked.packed_for("nv_full")
    single = _same_either_way([unpacked, bn], x, threads=1)
    assert_same(_same_either_way([unpacked, bn], x, threads=threads), single)
    assert_same(_same_either_way([packed, bn], x, threads=threads), single)


def test_winograd_c16_keeps_signed_zeros_and_the_residual_operand(rng):
    """Zero weights give +0 sums; a negative scale makes them -0, which adding a -0 operand
    (and no shift: the kernel's -0.0) and a ReLU keep."""
    x = _data(rng, (1, 32, 10, 10))
    weights = _data(rng, (32, 32, 3, 3))
    weights[:16] = 0.0
    operand = _data(rng, (1, 32, 10, 10))
    operand[:, :16] = -0.0
    scale = -np.abs(_data(rng, (32,), zeros=False))
    ops = [Conv(weights, padding=1, mode="winograd"),
           Sdp(scale=scale, ew_op="add", operand=operand, act="relu")]
    out = _same_either_way(ops, x)
    assert np.all(out[:, :16] == 0) and np.all(np.signbit(out[:, :16]))


def test_winograd_runs_without_a_c16_kernel_are_converted_around(rng):
    """Folded strides, groups and epilogues beyond one pass (MUL, PReLU) stay on winograd.c
    between conversions."""
    x = _data(rng, (1, 32, 12, 10))
    chains = [
        [Conv(_data(rng, (32, 32, 5, 5)), stride=(2, 2), padding=2, mode="winograd")],
        [Conv(_data(rng, (32, 16, 3, 3)), padding=1, groups=2, mode="winograd")],
        [Conv(_data(rng, (32, 32, 3, 3)), padding=1, mode="winograd"),
         Sdp(ew_op="mul", operand=_data(rng, (1, 32, 12, 10)))],
        [Conv(_data(rng, (32, 32, 3, 3)), padding=1, mode="winograd"),
         Sdp(act="prelu", prelu_slope=_data(rng, (32,)))],
    ]
    for ops in chains:
        _same_either_way(ops, x, native=False)


def test_an_independent_winograd_chain_is_converted_around(rng):
    x = _data(rng, (1, 16, 8, 8))
    ops = [Conv(_data(rng, (16, 16, 3, 3)), padding=1, mode="winograd"),
           _epilogue("bn_relu", rng, 16, None)]
    _same_either_way(ops, x, mode="independent", native=False)
