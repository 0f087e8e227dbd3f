"""The PDP engine (max and average pooling) against the NumPy reference, fixed seeds: fp32
max bit for bit and averages within 1e-6; INT8 bit for bit around its zero point (averages round
half away from zero); FP16 bit for bit (the average's fp32 sum rounds in the engine's order)."""
import numpy as np
import pytest

from accel_codegen import AccelUnsupportedError, Device, Pool
from accel_codegen import reference as ref
from conftest import assert_close, assert_same

DEFAULT_DEVICE = Device("nv_full")  # as many threads as CPUs
DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]


# --- fp32 --------------------------------------------------------------------------------------

POOLS = [
    ("max", 2, 2, 0, False), ("max", 3, 2, 1, False), ("avg", 3, 1, 1, True),
    ("avg", 3, 2, 1, False), ("avg", 7, 1, 0, False), ("max", 8, 8, 0, False),
    ("max", (1, 3), (1, 2), (0, 1, 0, 1), False), ("avg", (2, 4), 3, (1, 0, 0, 2), False),
]


@pytest.mark.parametrize("kind,kernel,stride,padding,include_pad", POOLS, ids=str)
def test_pool_matches_reference(kind, kernel, stride, padding, include_pad, rng):
    x = rng.standard_normal((2, 3, 15, 16), dtype=np.float32)
    op = Pool(kind, kernel, stride, padding, include_pad)
    y, stats = DEFAULT_DEVICE.run([op], x)
    expected = ref.run_op(op, x)
    if kind == "max":
        np.testing.assert_array_equal(y, expected)
    else:
        assert_close(y, expected, rtol=1e-6)
    assert stats.ops[0].op == f"pdp:{kind}"


def _max_pool_in_tap_order(x, kernel, stride, padding):
    """The engine's max rule, one window at a time: taps in rows-then-columns order, v > acc ?
    v : acc from -inf (so the first of equal values, +0 or -0, stays), a NaN wins (the last)."""
    top, left = padding
    n, c, h, w = x.shape
    out_h = (h + 2 * top - kernel) // stride + 1
    out_w = (w + 2 * left - kernel) // stride + 1
    y = np.empty((n, c, out_h, out_w), dtype=np.float32)
    for index in np.ndindex(n, c, out_h, out_w):
        acc = np.float32(-np.inf)
        for r in range(kernel):
            for s in range(kernel):
                iy, ix = index[2] * stride - top + r, index[3] * stride - left + s
                if 0 <= iy < h and 0 <= ix < w:
                    v = x[index[0], index[1], iy, ix]
                    acc = v if (v > acc or v != v) else acc
        y[index] = acc
    return y


@pytest.mark.parametrize("kernel,stride,padding,shape", [
    (3, 2, 1, (2, 3, 20, 37)),     # ResNet's pool: each input row serves 1.5 output rows
    (3, 2, 0, (1, 2, 17, 34)),     # 3x3/2: one whole vector, its last tap's column inside
    (3, 2, 1, (1, 2, 11, 64)),     # 3x3/2: two whole vectors, the last column a tap's
    (2, 2, 0, (1, 4, 16, 33)),
    (3, 1, 1, (1, 3, 9, 20)),
    (5, 1, 2, (1, 3, 12, 30)),     # SPPF's 5x5/1: loads inside the row and across its sides
    (4, 2, 1, (1, 3, 10, 40)),     # 4x4/2: the general row pass (the taps a loop)
    (8, 1, 0, (1, 2, 9, 1110)),    # a ring of 8 rows x 1104 floats: too large, tap by tap
], ids=str)
def test_max_pool_by_rows_keeps_the_tap_order(kernel, stride, padding, shape):
    """fp32 max pooling of rows >= 8 outputs takes each input row's maxima once, then the
    rows' (pdp.c): the same outputs, sign of zero included, as the tap-by-tap rule; a plane
    holding a NaN is pooled tap by tap (the NaN wins), its neighbours by rows, and so is one
    whose +inf meets a padding column's -inf in the NaN probe's sum (plane 2); 1-3 threads."""
    rng = np.random.default_rng(kernel * 10 + stride)
    x = rng.integers(-3, 4, shape).astype(np.float32)  # many ties
    x[x == 0] = np.where(rng.random(int((x == 0).sum())) < 0.5, -0.0, 0.0)
    x[0, 0, 1, 2] = -np.inf
    x[0, 1, 3, 5] = np.nan
    x[0, 1, 4, 9] = np.inf
    if shape[1] > 2:
        x[0, 2, 2, 0] = np.inf
    expected = _max_pool_in_tap_order(x, kernel, stride, (padding, padding))
    for threads, device in DEVICES.items():
        y = device.run([Pool("max", kernel, stride, padding)], x)[0]
        assert_same(y, expected, f"{threads} threads")
        assert np.array_equal(np.signbit(y), np.signbit(expected)), f"{threads} threads: zeros"


def _avg_pool_in_tap_order(x, kernel, stride, padding, include_pad):
    """The engine's average, one window at a time: its image taps summed in float32 in
    rows-then-columns order from +0, then one division."""
    n, c, h, w = x.shape
    out_h = (h + 2 * padding - kernel) // stride + 1
    out_w = (w + 2 * padding - kernel) // stride + 1
    y = np.empty((n, c, out_h, out_w), dtype=np.float32)
    for index in np.ndindex(n, c, out_h, out_w):
        acc, count = np.float32(0), 0
        for r in range(kernel):
            for s in range(kernel):
                iy, ix = index[2] * stride - padding + r, index[3] * stride - padding + s
                if 0 <= iy < h and 0 <= ix < w:
                    acc, count = np.float32(acc + x[index[0], index[1], iy, ix]), count + 1
        y[index] = acc / np.float32(kernel * kernel if include_pad else count)
    return y


@pytest.mark.parametrize("kind,kernel,stride,padding,width", [
    ("max", 3, 2, 0, 34),  # 16 outputs: the last column no window reads
    ("max", 3, 2, 1, 37),  # 19: a partial last vector
    ("max", 2, 2, 0, 35),  # 17: a partial last vector, the last column unread
    ("max", 3, 1, 1, 21),
    ("avg", 3, 2, 1, 37), ("avg", 2, 2, 0, 35), ("avg", 3, 1, 1, 21), ("avg", 5, 1, 2, 19),
], ids=str)
def test_rows_of_vectors_keep_the_tap_order_at_every_column(kind, kernel, stride, padding,
                                                            width):
    """Rows of 8 outputs or more, their vectors' loads masked at both image sides (pdp.c): max
    with a NaN in each column in turn (plane j's at column j: the plane pools tap by tap where
    a window reads it, by rows where none does) and the average, bit for bit the window-by-
    window rule's, on 1 and 3 threads."""
    rng = np.random.default_rng(kernel * 100 + width)
    x = rng.standard_normal((1, width, 5, width)).astype(np.float32)
    if kind == "max":
        for j in range(width):
            x[0, j, 1 + j % 3, j] = np.nan
        expected = _max_pool_in_tap_order(x, kernel, stride, (padding, padding))
    for include_pad in ((False,) if kind == "max" else (False, True)):
        op = Pool(kind, kernel, stride, padding, include_pad)
        if kind == "avg":
            expected = _avg_pool_in_tap_order(x, kernel, stride, padding, include_pad)
        for threads in (1, 3):
            assert_same(DEVICES[threads].run([op], x)[0], expected,
                        f"{kind} include_pad={include_pad}, {threads} threads")


def test_global_average_pool_7x7(rng):
    x = rng.standard_normal((1, 512, 7, 7), dtype=np.float32)
    y, _ = DEFAULT_DEVICE.run([Pool("avg", 7, 1)], x)
    assert_close(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("shape,kernel", [((112, 112), 8), ((14, 14), 7), ((17, 13), (4, 3)),
                                          ((9, 40), (3, 5)), ((8, 72), 8),
                                          ((2, 136), (2, 8)), ((3, 119), (3, 7))], ids=str)
def test_tiled_averages_are_bit_exact(shape, kernel):
    """Averages whose windows tile the image (kernel = stride, a wide pool's passes) run 16
    planes at a time, a plane per lane: bit for bit the reference's and the one-plane path's
    sums (37 planes: two whole blocks and a rest; 1, 2 and 3 threads), -0 and infinities
    included; of two NaNs in a window the first one's bits, as the one-plane path. Windows of 8
    columns (an AVX-512 build's blocks of 16 columns: two windows, or a last block of one), of
    7 (a window across two blocks) and rows of 16 or more outputs (stored through the
    transpose) included."""
    rng = np.random.default_rng(45)
    x = rng.standard_normal((2, 37, *shape), dtype=np.float32) * 3
    x[0, 3] = -0.0
    x[1, 20, 0, 0], x[1, 21, 1, 1], x[1, 21, 0, 1] = np.inf, np.inf, -np.inf
    op = Pool("avg", kernel, kernel)
    expected = ref.run_op(op, x)
    nans = x.copy()
    nans[0, 7, 0, 0:2] = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(np.float32)
    nans[1, 30, 1, 1], nans[1, 30, 1, 0] = nans[0, 7, 0, 1], nans[0, 7, 0, 0]
    one = [np.concatenate([DEVICE.run([op], v[:, c:c + 1])[0] for c in range(v.shape[1])],
                          axis=1) for v in (x, nans)]
    assert_same(one[0], expected, "one plane at a time")
    for threads, device in DEVICES.items():
        y = device.run([op], x)[0]
        assert_same(y, expected, f"{threads} threads")
        assert np.array_equal(np.signbit(y), np.signbit(expected)), f"{threads} threads: zeros"
        assert_same(device.run([op], nans)[0].view(np.uint32), one[1].view(np.uint32),
                    f"{threads} threads: NaNs")


@pytest.mark.parametrize("kind,include_pad", [("max", False), ("avg", True)])
def test_tiles_padded_on_the_right_are_bit_exact(kind, include_pad):
    """Windows that tile a row and run past its right edge (attention's softmax: a max over
    197 keys in windows of 8 from 200, its sum the same counting the padding)
    run 16 planes at a time too: bit for bit the reference's and the one-plane path's, a max's
    first of +0 and -0 and its last NaN, on 1, 2 and 3 threads (37 planes: a rest)."""
    rng = np.random.default_rng(46)
    x = rng.standard_normal((1, 37, 2, 197), dtype=np.float32) * 3
    x[0, 3, 0, 8:16] = 0.0
    x[0, 3, 0, 9] = -0.0  # the window's first largest is +0 (tap 8), then -0 first in another
    x[0, 3, 1, 16], x[0, 3, 1, 17] = -0.0, 0.0
    x[0, 20, 1, 196], x[0, 21, 0, 0] = np.inf, -np.inf
    op = Pool(kind, (1, 8), (1, 8), (0, 0, 0, 3), include_pad)
    expected = ref.run_op(op, x)
    nans = x.copy()
    nans[0, 7, 0, 0:2] = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(np.float32)
    nans[0, 30, 1, 195] = nans[0, 7, 0, 1]
    _assert_tiles_match(op, x, expected, nans)


def _assert_tiles_match(op, x, expected, nans):
    """``op`` on ``x`` gives ``expected`` (the reference's) bit for bit, -0 and +0 included, on
    1 to 3 threads, and on ``nans`` the NaN bits the one-plane path gives plane by plane."""
    one = np.concatenate([DEVICE.run([op], nans[:, c:c + 1])[0]
                          for c in range(x.shape[1])], axis=1)
    for threads, device in DEVICES.items():
        y = device.run([op], x)[0]
        assert_same(y, expected, f"{threads} threads")
        assert np.array_equal(np.signbit(y), np.signbit(expected)), f"{threads} threads: zeros"
        assert_same(device.run([op], nans)[0].view(np.uint32), one.view(np.uint32),
                    f"{threads} threads: NaNs")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("padding,include_pad", [(0, False), (1, False), (1, True)])
def test_global_pooling_is_bit_exact(kind, padding, include_pad):
    """Global pooling (one output per plane) runs 8 planes at a time, each in the window's
    scalar order: 1, 2 and 3 threads on 83 planes (a partial block in every item), FP16 bit
    for bit with the reference; fp32 max with NaNs and infinities too, and fp32 (unpadded) bit
    for bit with the same windows pooled as two outputs of one row (the scalar path)."""
    rng = np.random.default_rng(44)
    size = 7 - padding
    kernel = size + 2 * padding
    x = rng.standard_normal((2, 83, size, size), dtype=np.float32) * 3
    if kind == "max":
        x[0, 5, 2, 3] = np.nan
        x[1, 9, 0, 0] = np.inf
        x[1, 17, 5, 5] = -np.inf
    halves = (x * np.exp2(rng.integers(-14, 10, x.shape))).astype(np.float16)
    op = Pool(kind, kernel, 1, padding, include_pad)
    op16 = Pool(kind, kernel, 1, padding, include_pad, precision="fp16")
    pair = Pool(kind, kernel, kernel)  # two windows per row, side by side
    two = np.concatenate([x, x[..., ::-1]], axis=3)
    for threads, device in DEVICES.items():
        assert_same(device.run([op16], halves)[0], ref.run_op(op16, halves),
                    f"fp16 {kind}, {threads} threads")
        y = device.run([op], x)[0]
        if kind == "max":
            assert_same(y, ref.run_op(op, x), f"fp32 max, {threads} threads")
        else:
            assert_close(y, ref.run_op(op, x), rtol=1e-6)
        if padding == 0:
            assert_same(device.run([pair], two)[0][..., :1], y, f"fp32 {kind} scalar path")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape,padding", [((1, 1), 0), ((1, 4), 0), ((1, 5), 0), ((2, 3), 0),
                                           ((7, 7), 0), ((8, 8), 0), ((3, 8), 0), ((1, 8), 0),
                                           ((5, 6), 1), ((6, 1), 1)], ids=str)
def test_global_pooling_in_lanes_is_bit_exact(kind, shape, padding):
    """Global pooling in lanes (pdp.c pool_global_lanes; in an AVX2 build 16 or 8 planes at a
    time, the taps 8 at a time; in an AVX-512 build 32 or 16 planes, the taps 16 at a
    time; a plane per lane, the last taps through a masked load; a window of whole rows as one
    run of taps) keeps the scalar order: bit for bit the reference's, max and average, on plane
    counts that leave whole groups, a rest, or only a rest (1, 7, 9, 23, 37, 53; 1x1 planes, 1,
    4, 5 or 8 taps, 49 and 64 in whole rows; padded windows, row by row from inside a row), -0
    and infinities included; of NaNs, the bits of the one-plane path (the scalar loop): the last
    NaN for a max, the first NaN a sum meets for an average."""
    rng = np.random.default_rng(47)
    h, w = shape
    op = Pool(kind, (h + 2 * padding, w + 2 * padding), 1, padding, False)
    for planes in (1, 7, 9, 23, 37, 53):
        x = rng.standard_normal((1, planes, h, w), dtype=np.float32) * 3
        x[0, planes // 2] = -0.0
        if planes > 2:
            x[0, 1, 0, 0], x[0, 2, -1, -1] = np.inf, -np.inf
        nans = x.copy()
        nans[0, -1, -1, -1] = np.array(0x7FC00001, np.uint32).view(np.float32)
        nans[0, -1, 0, 0] = np.array(0xFFC00002, np.uint32).view(np.float32)
        one = np.concatenate([DEVICE.run([op], nans[:, c:c + 1])[0] for c in range(planes)],
                             axis=1)
        expected = ref.run_op(op, x)
        for threads, device in DEVICES.items():
            where = f"{planes} planes, {threads} threads"
            y = device.run([op], x)[0]
            assert_same(y, expected, where)
            assert np.array_equal(np.signbit(y), np.signbit(expected)), f"{where}: zeros"
            assert_same(device.run([op], nans)[0].view(np.uint32), one.view(np.uint32),
                        f"{where}: NaNs")


# --- INT8 --------------------------------------------------------------------------------------

FP16_POOLS = [
    ("max", 2, 2, 0, False), ("max", 3, 2, 1, False), ("max", (1, 3), (1, 2), (0, 1, 0, 1), False),
    ("avg", 2, 2, 0, False), ("avg", 3, 1, 1, True), ("avg", 3, 2, 1, False),
    ("avg", (2, 4), 3, (1, 0, 0, 2), False), ("avg", (2, 4), 3, (1, 0, 0, 2), True),
    ("avg", 7, 1, 0, False), ("avg", 8, 8, 0, False), ("avg", 5, 3, 2, True),
]
#: INT8 averages divide by the whole window (NVDLA's PDP): no average over the image elements
#: of a padded window.
INT8_POOLS = [p for p in FP16_POOLS if not (p[0] == "avg" and p[3] != 0 and not p[4])] + [
    ("avg", 3, 2, 1, True), ("avg", (3, 6), (1, 4), (2, 0, 1, 5), True)]


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((13, 13), 5, 1, 2),                       # SPP's cascade stage (YOLOX at 416)
    ((7, 9), 3, 1, 1), ((20, 6), (2, 3), (2, 1), (0, 1, 1, 2)),
    ((5, 15), (8, 8), 1, (7, 7, 0, 0)),        # most of the first windows in the padding
    ((1, 22), (1, 8), 1, 0)])
def test_int8_narrow_max_pools_match_reference_exactly(shape, kernel, stride, padding):
    """Max pools of stride 1 across outputs narrower than 16 columns go by rows of window
    maxima (pdp_i8.c, pool_narrow_max): the reference's codes, the image's edges included."""
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    x = rng.integers(-128, 128, (2, 5) + shape).astype(np.int8)
    x[0, 0] = -128  # a plane at the rail: padding must not win
    op = Pool("max", kernel, stride, padding, precision="int8", zero=-3)
    expected = ref.run_op(op, x)
    assert expected.shape[3] < 16
    for threads in (1, 3):
        y, _ = DEVICES[threads].run([op], x)
        assert_same(y, expected, f"max {kernel} on {shape}, {threads} threads")


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((112, 112), 3, 2, 1),                     # ResNet's stem pool
    ((9, 131), 3, 1, 1), ((6, 70), 2, 2, 0), ((5, 97), (2, 5), (1, 2), (1, 0, 0, 4)),
    ((4, 65), (3, 8), 2, (1, 7, 2, 0)),        # the first columns' windows mostly padding
    ((3, 66), (1, 2), (1, 2), 0),              # the last pair ends the plane exactly
    ((2, 2100), (2, 3), 1, (0, 1)),            # outputs past a pass's 1024 columns
    ((5, 40), 2, 2, 0), ((4, 30), 3, 1, 1),    # 16-31 columns inside every tap: 16 a step
    ((3, 33), 3, 2, 1),                        # 15 such columns: tap by tap
    ((7, 50), 3, 3, 1)])                       # stride 3: tap by tap
def test_int8_wide_max_pools_match_reference_exactly(shape, kernel, stride, padding):
    """Max pools over outputs of 16 columns or more go an output row at a time (pdp_i8.c
    pool_rows; on AVX2 builds max_row_avx2: the columns inside every tap 16 or 32 at a time,
    the edges tap by tap): the reference's codes, edges, padding and block tails included."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    x = rng.integers(-128, 128, (1, 3) + shape).astype(np.int8)
    x[0, 0] = -128  # a plane at the rail: padding must not win
    x[0, 1, :, -1] = 127  # the last column wins where a window reaches it
    op = Pool("max", kernel, stride, padding, precision="int8", zero=5)
    expected = ref.run_op(op, x)
    assert expected.shape[3] >= 16
    for threads in (1, 3):
        y, _ = DEVICES[threads].run([op], x)
        assert_same(y, expected, f"max {kernel}/{stride} on {shape}, {threads} threads")


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


@pytest.mark.parametrize("zero", [-128, -5, 0, 77, 127])
@pytest.mark.parametrize("size", [(7, 7), (1, 1), (8, 8), (2, 5), (1, 8), (4, 4), (3, 7),
                                  (6, 6)])
def test_int8_global_average_pool_matches_reference_exactly(size, zero):
    """Global average pooling (pdp_i8.c pool_global: each plane summed with one vpsadbw, 16
    planes finished at once): planes of 1 to 64 codes, 83 planes per image (a partial group of
    16 in every item), 1-3 threads; codes crowded at the rails and sums on halves included."""
    rng = np.random.default_rng(abs(zero) + size[0] * 8 + size[1])
    x = rng.integers(-128, 128, (2, 83) + size).astype(np.int8)
    x[0, :8] = 127  # sums of +-128 * count: the ends of the range
    x[1, :8] = -128
    x[0, 8:16] = np.clip(x[0, 8:16] // 8 + zero, -128, 127)
    op = Pool("avg", size, 1, precision="int8", zero=zero)
    expected = ref.run_op(op, x)
    assert len(np.unique(expected)) > 3
    for threads in (1, 2, 3):
        y, _ = DEVICES[threads].run([op], x)
        assert_same(y, expected, f"global {size} zero {zero}, {threads} threads")


@pytest.mark.parametrize("zero", [-128, 0, 127])
@pytest.mark.parametrize("shape,kernel,padding", [
    ((112, 112), 8, 0), ((28, 30), 7, 0), ((45, 57), (5, 8), (0, 0, 0, 7)),
    ((9, 70), (3, 6), (0, 0, 0, 2)), ((13, 4), (7, 2), (0, 0, 1, 0)),
    ((56, 56), 8, 0), ((14, 14), 7, 0), ((16, 100), (4, 3), (0, 0, 0, 2)),
    ((12, 23), (6, 2), (0, 0, 0, 1)), ((8, 20), (8, 5), 0), ((7, 60), (7, 4), 0),
    ((10, 50), (3, 8), 0), ((9, 100), 3, 0)], ids=str)
def test_int8_tiled_averages_match_reference_exactly(shape, kernel, padding, zero):
    """INT8 averages whose windows tile the plane (a wide or global pool's passes, pdp_i8.c
    pool_blocks: column sums 32 columns a step, windows cut by the plane's edge reading the zero
    point, finish_avg in 16 int32 lanes; on AVX2 whole windows of 2-8 columns summed from the
    codes, 4 and then 2 at a time, the last plane's loads kept inside the input, finish_avg in
    8 lanes with a tail): bit for bit the reference's, sums at both rails."""
    rng = np.random.default_rng(abs(zero) + shape[1])
    x = rng.integers(-128, 128, (2, 5) + shape).astype(np.int8)
    x[0, 0], x[0, 1] = 127, -128
    x[1, 0] = np.clip(x[1, 0] // 8 + zero, -128, 127)
    op = Pool("avg", kernel, kernel, padding, True, precision="int8", zero=zero)
    expected = ref.run_op(op, x)
    assert len(np.unique(expected)) > 3
    for threads in (1, 2):
        assert_same(DEVICES[threads].run([op], x)[0], expected, f"{threads} threads")


@pytest.mark.parametrize("kernel", [(3, 3), (1, 2), (2, 5), (7, 6), (8, 8)])
@pytest.mark.parametrize("zero", [-128, -9, 0, 100])
def test_int8_average_is_nvdlas(kernel, zero):
    """The INT8 average is NVDLA's PDP, computed here with the NVDLA front end's arithmetic
    (sim/nvdla/arith.py, which gives NVDLA's golden CRCs on its 15 PDP trace tests): the
    window's codes summed, each padded position as the zero point, then two roundings by the
    0.16 reciprocals floor(2^16 / k) of the kernel's width and height."""
    from accel_codegen.sim.nvdla import arith

    rng = np.random.default_rng(len(kernel) * 100 + zero)
    kh, kw = kernel
    x = rng.integers(-128, 128, (1, 4, 9, 11)).astype(np.int8)
    x[0, 0] = 127
    x[0, 1] = -128
    pad = (kh // 2, kw // 2, (kh - 1) // 2, (kw - 1) // 2)
    op = Pool("avg", kernel, 1, pad, True, precision="int8", zero=zero)
    y, _ = DEVICE.run([op], x)
    padded = np.pad(x[0].astype(np.int64), ((0, 0), (pad[0], pad[2]), (pad[1], pad[3])),
                    constant_values=zero)
    sums = sum(padded[:, r:r + y.shape[2], s:s + y.shape[3]] for r in range(kh) for s in range(kw))
    expected = arith.div_round(arith.div_round(sums, (1 << 16) // kw), (1 << 16) // kh)
    assert_same(y[0], arith.saturate(expected, 8).astype(np.int8), f"avg {kernel} zero {zero}")
    assert_same(y, ref.run_op(op, x), "the reference")


def test_int8_average_over_image_elements_only_is_refused():
    """NVDLA's PDP divides by the whole window: an INT8 average over a padded window's image
    elements alone (count_include_pad False) is refused by the engine and the reference."""
    x = np.zeros((1, 2, 5, 5), np.int8)
    op = Pool("avg", 3, 1, 1, False, precision="int8", zero=3)
    with pytest.raises(AccelUnsupportedError, match="whole window"):
        DEVICE.run([op], x)
    with pytest.raises(AccelUnsupportedError, match="whole window"):
        ref.run_op(op, x)
    unpadded = Pool("avg", 3, 1, 0, False, precision="int8", zero=3)
    assert_same(DEVICE.run([unpadded], x)[0], ref.run_op(unpadded, x), "no padding")


# --- FP16 --------------------------------------------------------------------------------------

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


# --- wide rows: the vectorised path (output rows of >= 8 columns, strides 1 and 2) ---------

WIDE_POOLS = [
    ("max", 3, 2, 1, False), ("max", 2, 2, 0, False), ("max", 3, 1, 1, False),
    ("max", (2, 5), (1, 2), (1, 2, 0, 2), False), ("avg", 3, 2, 1, False),
    ("avg", 3, 2, 1, True), ("avg", 2, 2, 0, False), ("avg", (3, 4), 1, (1, 2, 1, 1), False),
]


@pytest.mark.parametrize("kind,kernel,stride,padding,include_pad", WIDE_POOLS, ids=str)
def test_wide_rows_are_bit_exact(kind, kernel, stride, padding, include_pad):
    """Rows of 37 and 70 columns (partial last vectors, both borders padded): fp32 max with
    NaNs and infinities equals the reference bit for bit; the average, through FP16 (whose
    reference sums in the engine's order), too, with 1 and 3 threads."""
    rng = np.random.default_rng(43)
    x = rng.standard_normal((2, 3, 21, 70), dtype=np.float32)
    x[0, 1, 4, 9] = np.nan
    x[1, 2, 0, 0] = -np.inf
    x[1, 0, 7, 33] = np.inf
    x[0, 0, 20, 69] = np.nan
    halves = (rng.standard_normal((2, 3, 21, 37)) *
              np.exp2(rng.integers(-14, 12, (2, 3, 21, 37)))).astype(np.float16)
    for threads in (1, 3):
        if kind == "max":
            op = Pool(kind, kernel, stride, padding, include_pad)
            assert_same(DEVICES[threads].run([op], x)[0], ref.run_op(op, x),
                        f"fp32 {kind}, {threads} threads")
        op = Pool(kind, kernel, stride, padding, include_pad, precision="fp16")
        assert_same(DEVICES[threads].run([op], halves)[0], ref.run_op(op, halves),
                    f"fp16 {kind}, {threads} threads")


@pytest.mark.parametrize("kind,include_pad", [("max", False), ("avg", True)])
@pytest.mark.parametrize("width,window", [(197, 8), (25, 5), (40, 8)], ids=str)
def test_tiles_of_an_images_last_planes_are_bit_exact(kind, include_pad, width, window):
    """An image's last planes % 16 (ViT-Ti's softmax rows: 591 = 36 x 16 + 15) run in a tile of
    fewer lanes, not window by window: bit for bit the reference's and the one-plane path's,
    a max's first of +0 and -0 and its last NaN in those planes, rows of 25, 5 and 40 outputs
    (the last outputs of a row stored through the transpose), on 1, 2 and 3 threads."""
    rng = np.random.default_rng(47)
    planes = 47  # two whole tiles and 15 planes
    x = rng.standard_normal((1, planes, 1, width), dtype=np.float32) * 3
    x[0, 40, 0, 0:window] = 0.0
    x[0, 40, 0, 1] = -0.0
    x[0, 41, 0, :2] = -0.0, 0.0
    x[0, 45, 0, width - 1], x[0, 46, 0, 0] = np.inf, -np.inf
    pad = -width % window
    op = Pool(kind, (1, window), (1, window), (0, 0, 0, pad), include_pad)
    expected = ref.run_op(op, x)
    nans = x.copy()
    nans[0, 42, 0, 0:2] = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(np.float32)
    nans[0, 44, 0, width - 2] = nans[0, 42, 0, 1]
    _assert_tiles_match(op, x, expected, nans)
