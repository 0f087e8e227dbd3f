"""Pooling on channel-blocked (C16) fp32 tensors (pdp_c16.c): a PDP run alone has a C16 kernel,
which gives pdp.c's bits on the NCHW tensors for every geometry it takes (max with +0/-0 and
NaNs, average with and without the padding counted, global pooling), at 1-3 threads."""
import numpy as np
import pytest

from accel_codegen import Conv, Pool, Sdp
from conftest import assert_same
from test_c16_layout import _data, _same_either_way


def _with_nans(rng, shape):
    """_data with quiet NaNs of several payloads and signs (the last one a window meets wins),
    and infinities."""
    x = _data(rng, shape)
    bits = x.view(np.uint32)
    bits.flat[5::23] = 0x7FC00001
    bits.flat[9::31] = 0xFFC00002
    bits.flat[2::37] = 0x7FC00003
    x.flat[13::41] = -np.inf
    x.flat[17::43] = np.inf
    return x


POOLS = [  # (kind, kernel, stride, padding (top, left, bottom, right), count_include_pad)
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), False),  # ResNet's
    ("max", (2, 2), (2, 2), (0, 0, 0, 0), False),
    ("max", (3, 3), (1, 1), (1, 1, 1, 1), False),
    ("max", (5, 4), (3, 2), (2, 1, 0, 3), False),
    ("avg", (2, 2), (2, 2), (0, 0, 0, 0), False),
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), False),
    ("avg", (3, 3), (1, 1), (1, 1, 1, 1), True),
    ("avg", (3, 2), (2, 3), (2, 0, 1, 1), True),
    ("avg", (5, 4), (3, 2), (2, 1, 0, 3), False),
]
SHAPES = [(1, 16, 7, 9), (2, 32, 15, 13), (1, 48, 8, 8), (1, 16, 1, 3)]
# each pool on each shape its window fits (padded)
CASES = [pool + (shape,) for pool in POOLS for shape in SHAPES
         if shape[2] + pool[3][0] + pool[3][2] >= pool[1][0] and
         shape[3] + pool[3][1] + pool[3][3] >= pool[1][1]]


@pytest.mark.parametrize("kind,kernel,stride,padding,include,shape", CASES)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_pool_c16_equals_nchw(rng, kind, kernel, stride, padding, include, shape, threads):
    pool = Pool(kind, kernel=kernel, stride=stride, padding=padding, count_include_pad=include)
    _same_either_way([pool], _with_nans(rng, shape), threads=threads)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("n,c,hw", [(1, 2048, 7), (2, 512, 7), (1, 1024, 8), (3, 16, 5)])
def test_global_pool_c16_equals_nchw(rng, kind, n, c, hw):
    """A global pool's 1x1 output is a C16 tensor too: [n][c/16][1][1][16]."""
    x = _with_nans(rng, (n, c, hw, hw))
    for threads in (1, 2, 3):
        _same_either_way([Pool(kind, kernel=(hw, hw), stride=(1, 1))], x, threads=threads)


def test_resnet_max_pool_c16_equals_nchw(rng):
    """ResNet's 3x3/2 max pool over 64x112x112, plain data and data with NaNs (pdp.c pools a
    plane without NaN by rows, one with NaN tap by tap: the same bits)."""
    pool = Pool("max", kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))
    for x in (_data(rng, (1, 64, 112, 112)), _with_nans(rng, (1, 64, 112, 112))):
        single = _same_either_way([pool], x, threads=1)
        for threads in (2, 3):
            assert_same(_same_either_way([pool], x, threads=threads), single)


def test_pooling_chains_are_converted_around(rng):
    """Only a PDP alone has a C16 kernel: a fused CONV -> SDP -> PDP, a PDP then an SDP
    (independent) are converted around, with the same bits."""
    x = _data(rng, (1, 32, 10, 10))
    bn = Sdp(scale=_data(rng, 32), shift=_data(rng, 32), act="relu")
    pool = Pool("max", kernel=(2, 2), stride=(2, 2))
    _same_either_way([Conv(_data(rng, (32, 32, 1, 1))), bn, pool], x, native=False)
    _same_either_way([pool, bn], x, mode="independent", native=False)
