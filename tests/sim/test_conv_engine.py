"""The CONV engine, with the SDP that takes its accumulators, against the NumPy reference
(accel_codegen.sim.reference), fixed seeds.

fp32 is within 1e-5 of the output's scale. INT8 is bit-exact by definition: every comparison
is np.array_equal, fused and independent, at 1, 2 and 3 threads and with pre-packed weights. An
FP16 CONV sums in fp32 in the kernel's own order, so CONV + SDP is checked against a derived
error bound (see fp16_conv_bound).
"""
import dataclasses

import numpy as np
import pytest

from accel_codegen import Conv, Device, Pool, Sdp
from accel_codegen import reference as ref
from accel_codegen._accel_ffi import lib
from conftest import FP16_EPILOGUES, assert_close, assert_same, fp16_sdp, run_and_compare

DEFAULT_DEVICE = Device("nv_full")  # as many threads as CPUs
DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]
MAX_SHIFT = lib.ACCEL_MAX_SHIFT  # INT8 converter shifts: 0..MAX_SHIFT


# --- fp32 --------------------------------------------------------------------------------------

def _conv_cases(count=48, seed=7):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        groups = int(rng.choice([1, 1, 2, 0]))  # 0: depthwise
        c_group = int(rng.integers(1, 9))
        c = c_group * (groups or 1) if groups else int(rng.integers(1, 17))
        groups = groups or c
        k = groups * int(rng.integers(1, 5)) if groups > 1 else int(rng.integers(1, 40))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pads = tuple(int(v) for v in rng.integers(0, 4, size=4))
        h = int(rng.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 20))
        w = int(rng.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 20))
        cases.append(dict(n=int(rng.integers(1, 3)), c=c, h=h, w=w, k=k, kernel=(kh, kw),
                          stride=tuple(int(v) for v in rng.integers(1, 4, size=2)),
                          padding=pads, dilation=(dh, dw), groups=groups))
    return cases


def _case_id(case):
    return "-".join(f"{key}{'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                    for key, v in case.items())


@pytest.mark.parametrize("case", _conv_cases(), ids=_case_id)
def test_conv_matches_reference(case, rng):
    x = rng.standard_normal((case["n"], case["c"], case["h"], case["w"]), dtype=np.float32)
    w = rng.standard_normal((case["k"], case["c"] // case["groups"], *case["kernel"]),
                            dtype=np.float32)
    op = Conv(w, stride=case["stride"], padding=case["padding"], dilation=case["dilation"],
              groups=case["groups"])
    y, stats = DEFAULT_DEVICE.run([op], x)
    assert_close(y, ref.run_op(op, x), rtol=1e-5)
    k_group, c_group = case["k"] // case["groups"], case["c"] // case["groups"]
    assert stats.macs == y.size * c_group * case["kernel"][0] * case["kernel"][1]
    assert k_group * case["groups"] == y.shape[1]


@pytest.mark.parametrize("shape,kernel,stride,pad", [
    ((1, 64, 56, 56), 3, 1, 1), ((1, 3, 32, 32), 7, 2, 3), ((1, 256, 14, 14), 1, 1, 0),
    ((2, 512, 7, 7), 3, 1, 1), ((1, 64, 28, 28), 1, 2, 0), ((3, 100, 1, 1), 1, 1, 0),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_conv_real_layers_with_epilogue(shape, kernel, stride, pad, rng):
    """Layer shapes of the zoo, through the fast paths, with the fused scale/shift + ReLU."""
    x = rng.standard_normal(shape, dtype=np.float32)
    k = 48
    w = rng.standard_normal((k, shape[1], kernel, kernel), dtype=np.float32) / np.sqrt(
        shape[1] * kernel * kernel)
    sdp = Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="relu")
    chain = [Conv(w, stride=stride, padding=pad), sdp]
    y, _ = DEFAULT_DEVICE.run(chain, x)
    expected = ref.sdp(ref.conv2d(x, w, stride, pad).astype(np.float32), sdp.scale, sdp.shift,
                       act="relu")
    assert_close(y, expected, rtol=1e-5)


def test_fully_connected_as_1x1_conv(rng):
    """[N, C] input, dense weights [K, C] as a 1x1 convolution: the output stays [N, K]."""
    x = rng.standard_normal((3, 200), dtype=np.float32)
    w = rng.standard_normal((10, 200), dtype=np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    y, stats = DEFAULT_DEVICE.run([Conv(w.reshape(10, 200, 1, 1)), Sdp(shift=b)], x)
    assert_close(y, (x.astype(np.float64) @ w.T.astype(np.float64) + b), rtol=1e-5)
    assert stats.macs == 3 * 200 * 10


@pytest.mark.parametrize("shape,k", [
    ((1, 17, 3, 5), 13),     # one panel narrower than a vector, no tail columns
    ((2, 33, 7, 7), 9),      # 48 panel columns + 1 dot-product column, two images
    ((1, 300, 14, 14), 77),  # depth >= 256 (the weight prefetch), K % 8 = 5
    ((1, 1030, 6, 6), 21),   # three depth blocks, a 32-wide panel and 4 tail columns
    ((1, 2500, 2, 3), 19),   # tail columns only, five depth blocks
    ((1, 2400, 23, 23), 8),  # 11 panels + 1 tail column, too deep for the implicit GEMM
    ((1, 64, 1, 1), 10),     # a single output position
    ((1, 200, 14, 14), 300),  # 200 deep in blocks of 128 + 72; with a 48 KB L1: panels outer,
                              # the channels in passes of 256 rows + 44
    ((1, 700, 1, 1), 37),    # one position 700 deep: one depth block, the rows fetched ahead
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_pointwise_packed_panels_match_reference(shape, k, rng):
    """1x1 stride-1 convolutions on the packed path, whose panels copy the input's channel
    rows: odd channel counts, K not a multiple of the 8-channel block, tiny images; fused with
    the epilogue, the same bits at 1, 2 and 3 threads and as the unfused chain."""
    x = rng.standard_normal(shape, dtype=np.float32)
    w = (rng.standard_normal((k, shape[1], 1, 1)) / np.sqrt(shape[1])).astype(np.float32)
    sdp = Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="relu")
    chain = [Conv(w), sdp]
    y, _ = DEVICES[1].run(chain, x)
    expected = ref.sdp(ref.conv2d(x, w, 1, 0).astype(np.float32), sdp.scale, sdp.shift,
                       act="relu")
    assert_close(y, expected, rtol=1e-5)
    for threads in (2, 3):
        assert_same(DEVICES[threads].run(chain, x)[0], y, f"{threads} threads vs 1")
    assert_same(DEVICES[2].run(chain, x, mode="independent")[0], y, "independent vs fused")


def _same_at_every_thread_count(chain, x, independent=False):
    """Random values: within 1e-5 of the reference at 1 thread, the same bits at 2 and 3
    (and, ``independent``, in independent mode)."""
    one, _ = DEVICES[1].run(chain, x)
    assert_close(one, ref.run_chain(chain, x), rtol=1e-5)
    for threads in (2, 3):
        assert_same(DEVICES[threads].run(chain, x)[0], one, f"{threads} threads vs 1")
    if independent:
        assert_same(DEVICE.run(chain, x, mode="independent")[0], one, "independent vs fused")


@pytest.mark.parametrize("shape,k,kernel,stride,pad,groups", [
    ((1, 16, 40, 40), 24, 3, 1, 1, 1),    # implicit GEMM
    ((1, 40, 14, 14), 36, 3, 1, 1, 1),    # packed, im2col panels
    ((2, 12, 30, 30), 12, 3, 2, 1, 12),   # depthwise, stride 2
    ((1, 24, 33, 33), 24, 3, 1, 1, 24),   # depthwise, stride 1
    ((3, 50, 1, 1), 70, 1, 1, 0, 1),      # batched fully connected (OpenBLAS)
], ids=["implicit", "packed", "depthwise-s2", "depthwise-s1", "fc-batch"])
def test_fp32_paths_give_the_same_bits_at_any_thread_count(shape, k, kernel, stride, pad, groups,
                                                           rng):
    """The fp32 paths' parallel loops (pool.c) split the work into items that each write their
    own outputs in a fixed order: 1, 2 and 3 threads give the reference's values, bit-identical
    to each other."""
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((k, shape[1] // groups, kernel, kernel), dtype=np.float32)
    chain = [Conv(w, stride=stride, padding=pad, groups=groups),
             Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="relu")]
    _same_at_every_thread_count(chain, x)


def _check_fp32_layer(rng, shape, k, kernel, stride, pad, min_positions=1):
    """Small integers (every sum exact): equal to float64 at 1-3 threads; random values with a
    BN + ReLU epilogue: within 1e-5 of the reference, bit-identical at 1-3 threads and fused
    as independent. min_positions: output positions a plane must have (the path's condition)."""
    x = rng.integers(-3, 4, shape).astype(np.float32)
    w = rng.integers(-3, 4, (k, shape[1], kernel, kernel)).astype(np.float32)
    conv = Conv(w, stride=stride, padding=pad)
    exact = ref.conv2d(x.astype(np.float64), w.astype(np.float64), stride,
                       pad).astype(np.float32)
    assert np.abs(exact).max() > 0 and exact.shape[2] * exact.shape[3] >= min_positions
    for threads in (1, 2, 3):
        assert_same(DEVICES[threads].run([conv], x)[0], exact, f"integers, {threads} threads")
    x = rng.standard_normal(shape, dtype=np.float32)
    w = (rng.standard_normal(w.shape) / np.sqrt(w[0].size)).astype(np.float32)
    chain = [Conv(w, stride=stride, padding=pad),
             Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="relu")]
    _same_at_every_thread_count(chain, x, independent=True)


@pytest.mark.parametrize("shape,k,kernel,stride,pad", [
    ((1, 80, 14, 14), 40, 3, 1, 1),    # depth 720: blocks of a multiple of 32 (was 360 + 360)
    ((1, 64, 30, 30), 24, 3, 2, 1),    # 3x3/2, depth 576 (packed where panels stay in L1)
    ((1, 40, 9, 9), 270, 3, 1, 1),     # 2 panels + 1 dot column, 270 channels: two passes
    ((2, 33, 12, 12), 9, 5, 2, 2),     # 5x5/2 on a 6x6 grid: dot columns only, batch 2
    ((1, 130, 2, 4), 600, 3, 1, 1),    # depth 1170 on 8 positions: dots, one depth block
], ids=["3x3-720", "3x3s2-576", "3x3-270rows", "5x5s2-dots", "3x3-8pos"])
def test_fp32_packed_depth_blocks_match_reference(shape, k, kernel, stride, pad):
    """The packed path's depth blocks (multiples of 32 below the depth, so each output's
    32-deep sums start at the same depths whatever the block; one block where there are no
    panels) and its panel / channel passes: small integers make every sum exact, so the
    outputs equal float64 bit for bit at 1, 2 and 3 threads; random values within 1e-5, fused
    with the epilogue equal to the independent mode and at every thread count."""
    _check_fp32_layer(np.random.default_rng(sum(shape) + k + kernel), shape, k, kernel,
                      stride, pad)


@pytest.mark.parametrize("shape,k", [
    ((1, 3, 58, 66), 20),   # 29x33 out, grid 29 x 36 (implicit: 3 garbage columns of 36):
                            # whole panels, the last one 36 wide (three vectors, one partial)
    ((2, 3, 60, 66), 64),   # grid 30 x 36: the last panel 24 wide (two vectors), batch 2
    ((1, 4, 64, 66), 13),   # 4 channels, grid 32 x 36: whole panels only; K % 8 = 5
], ids=["3ch-tail36", "3ch-tail24-batch2", "4ch-k13"])
def test_fp32_stem_panels_match_reference(shape, k):
    """ResNet's stem shape (few channels, 7x7/2, padding 3) on the implicit GEMM: its kernel
    loads a whole panel's last vector unmasked and a partial panel's under the tail mask; the
    same sums. Small integers: equal to float64 at 1-3 threads; random values: within 1e-5,
    bit-identical at 1-3 threads and fused as independent."""
    _check_fp32_layer(np.random.default_rng(sum(shape) + k), shape, k, 7, 2, 3,
                      min_positions=512)  # the implicit GEMM's


@pytest.mark.parametrize("shape,k,kernel,stride,pad", [
    ((1, 96, 24, 24), 133, 1, 1, 0),   # 1x1 read in place, 17 blocks of channels (one of 5)
    ((2, 12, 30, 30), 130, 3, 1, 1),   # padded copy (depth 108), vectors wrapping rows, batch 2
    ((1, 100, 50, 50), 128, 1, 2, 0),  # 1x1/2: one phase plane, depth 100
    ((1, 170, 23, 23), 136, 1, 1, 0),  # depth 170: the largest packed panel (32 KB)
], ids=["1x1-133", "3x3-108deep", "1x1s2-100", "1x1-170deep"])
@pytest.mark.parametrize("act", ["relu", "prelu"])
def test_fp32_implicit_packed_panels_match_reference(shape, k, kernel, stride, pad, act):
    """Where the packed panels stay in L1, the implicit GEMM copies each panel of a tile with at
    least 16 blocks of channels into a contiguous buffer (96-170 deep) and passes the blocks
    over it; thread counts change the blocks a tile holds, hence whether it copies: the sums
    are the same. Small integers: equal to float64 at 1-3 threads; random values: within
    1e-5, bit-identical at 1-3 threads and fused as independent, with the epilogue in
    registers (BN + ReLU) and as a separate pass (PReLU)."""
    rng = np.random.default_rng(sum(shape) + k + kernel + len(act))
    x = rng.integers(-3, 4, shape).astype(np.float32)
    w = rng.integers(-3, 4, (k, shape[1], kernel, kernel)).astype(np.float32)
    conv = Conv(w, stride=stride, padding=pad)
    exact = ref.conv2d(x.astype(np.float64), w.astype(np.float64), stride,
                       pad).astype(np.float32)
    assert exact.shape[2] * exact.shape[3] >= 512 and np.abs(exact).max() > 0  # implicit
    for threads in (1, 2, 3):
        assert_same(DEVICES[threads].run([conv], x)[0], exact, f"integers, {threads} threads")
    x = rng.standard_normal(shape, dtype=np.float32)
    w = (rng.standard_normal(w.shape) / np.sqrt(w[0].size)).astype(np.float32)
    extra = {"prelu_slope": rng.uniform(0.05, 0.3, k)} if act == "prelu" else {}
    chain = [Conv(w, stride=stride, padding=pad),
             Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act=act, **extra)]
    _same_at_every_thread_count(chain, x, independent=True)


FP32_IMPLICIT_LAYERS = [  # in_shape, k, kernel, stride, pad: the implicit GEMM's cases
    ((1, 24, 40, 40), 20, 1, 1, 0),   # 1x1: the input read in place; K % 8 = 4
    ((2, 16, 30, 30), 24, 3, 1, 1),   # padded copy, 2 garbage columns: vectors wrap rows
    ((1, 8, 50, 50), 9, 3, 2, 1),     # stride 2: phase planes; one channel past a block
    ((1, 40, 57, 57), 24, 1, 2, 0),   # 1x1/2: one phase plane copied of four, odd input
    ((2, 20, 45, 61), 12, 1, 2, 1),   # 1x1/2 with padding: rows and columns of zeros
]
FP32_REGISTER_EPILOGUES = ["bn-relu", "negative-scale-relu", "shift-add-relu", "bn-add-clip",
                           "bn", "add"]


def _register_epilogue(name, k, out_shape, rng):
    scale = rng.uniform(0.5, 2, k).astype(np.float32)
    shift = rng.standard_normal(k).astype(np.float32)
    operand = rng.standard_normal(out_shape, dtype=np.float32)
    operand.flat[::97] = np.nan
    operand.flat[5::89] = -np.inf
    return {"bn-relu": Sdp(scale=scale, shift=shift, act="relu"),
            "negative-scale-relu": Sdp(scale=-scale, act="relu"),  # -0 from +0 sums: kept
            "shift-add-relu": Sdp(shift=shift, ew_op="add", operand=operand, act="relu"),
            "bn-add-clip": Sdp(scale=scale, shift=shift, ew_op="add", operand=operand,
                               act="clip", clip=(-0.5, 1.0)),
            "bn": Sdp(scale=scale, shift=shift),
            "add": Sdp(ew_op="add", operand=operand)}[name]


@pytest.mark.parametrize("layer", FP32_IMPLICIT_LAYERS,
                         ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[2]}s{c[3]}")
@pytest.mark.parametrize("epilogue", FP32_REGISTER_EPILOGUES)
def test_fp32_epilogue_in_registers_matches_the_separate_pass(layer, epilogue):
    """The implicit GEMM applies one-pass epilogues (scale, shift, add, ReLU / clip) in
    registers before its store; the independent mode runs the SDP engine's own pass on the
    finished output. Same bits, signs of zero and NaNs included (a plane of zeros makes +0
    sums, a negative scale -0; NaN and infinity in the input and in the operand), at 1, 2 and
    3 threads, and close to the reference. The 1x1/2 layers copy only the phase they read."""
    in_shape, k, kernel, stride, pad = layer
    rng = np.random.default_rng(sum(in_shape) + k + 3 * kernel)
    x = rng.standard_normal(in_shape, dtype=np.float32)
    x[:, :, 4:9, :] = 0.0  # rows of zero sums
    x[0, 1, 20:22, 8:10] = np.nan  # a 1x1/2 reads one of the four, with or without padding
    x[0, 2, 12:14, 4:6] = np.inf
    w = (rng.standard_normal((k, in_shape[1], kernel, kernel)) /
         np.sqrt(in_shape[1] * kernel * kernel)).astype(np.float32)
    conv = Conv(w, stride=stride, padding=pad)
    out_shape = DEVICE.output_shape([conv], in_shape)
    chain = [conv, _register_epilogue(epilogue, k, out_shape, rng)]
    separate, _ = DEVICES[1].run(chain, x, mode="independent")
    assert np.isnan(separate).any() and (np.signbit(separate) & (separate == 0)).any() == (
        epilogue == "negative-scale-relu")
    for threads in (1, 2, 3):
        fused, _ = DEVICES[threads].run(chain, x)
        assert_same(fused.view(np.uint32), separate.view(np.uint32),
                    f"bits, fused at {threads} threads vs independent")
    with np.errstate(invalid="ignore"):  # inf - inf in the reference: NaN, as in ours
        expected = ref.run_chain(chain, x)
    finite = np.isfinite(expected)
    assert_close(separate[finite], expected[finite], rtol=1e-5)


SINGLE_POSITION_EPILOGUES = ["bn-sigmoid", "bn-silu", "shift-hardswish", "scale-prelu",
                             "bn-add-clip", "shift-mul-relu", "max", "exp"]


@pytest.mark.parametrize("epilogue", SINGLE_POSITION_EPILOGUES)
@pytest.mark.parametrize("n, c, k", [(1, 28, 672), (2, 70, 37)])
def test_fp32_single_position_epilogue_matches_the_separate_pass(epilogue, n, c, k):
    """A convolution of 1x1 images (squeeze-excite's, a dense layer) applies its epilogue to
    all of a block's channels at once (sdp_f32_channels), not one span per channel: the bits
    of the independent mode's spans, signs of zero and NaNs included, at 1, 2 and 3 threads."""
    rng = np.random.default_rng(c + k)
    x = rng.standard_normal((n, c, 1, 1), dtype=np.float32)
    w = (rng.standard_normal((k, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    w[3] = 0.0  # +0 sums
    w[5, 0] = np.inf  # an infinite output
    scale = rng.uniform(0.5, 2, k).astype(np.float32)
    scale[::7] *= -1
    shift = rng.standard_normal(k).astype(np.float32) * 4
    operand = rng.standard_normal((n, k, 1, 1), dtype=np.float32)
    operand.flat[::11] = np.nan
    sdp = {"bn-sigmoid": Sdp(scale=scale, shift=shift, act="sigmoid"),
           "bn-silu": Sdp(scale=scale, shift=shift, act="silu"),
           "shift-hardswish": Sdp(shift=shift, act="hardswish"),
           "scale-prelu": Sdp(scale=scale, act="prelu", prelu_slope=shift),
           "bn-add-clip": Sdp(scale=scale, shift=shift, ew_op="add", operand=operand,
                              act="clip", clip=(-0.5, 1.0)),
           "shift-mul-relu": Sdp(shift=shift, ew_op="mul", operand=operand, act="relu"),
           "max": Sdp(ew_op="max", operand=operand),
           "exp": Sdp(scale=scale, act="exp")}[epilogue]
    chain = [Conv(w), sdp]
    separate, _ = DEVICES[1].run(chain, x, mode="independent")
    assert np.isnan(separate).any() or epilogue in ("bn-sigmoid", "bn-silu", "shift-hardswish",
                                                    "scale-prelu", "exp")
    assert len(np.unique(separate)) > k // 8  # not a constant: the channels' own parameters
    for threads in (1, 2, 3):
        fused, _ = DEVICES[threads].run(chain, x)
        assert_same(fused.view(np.uint32), separate.view(np.uint32),
                    f"bits, fused at {threads} threads vs independent")


FP32_PACKED_SEGMENTS = [  # in_shape, k, kernel, stride, padding, dilation: im2col panels whose
    ((1, 20, 14, 14), 12, 3, 1, 1, 1),  # output rows fit 1-2 vectors (segments in registers)
    ((1, 6, 13, 11), 9, 5, 1, 2, 1),    # 5x5, rows of 11
    ((1, 5, 16, 16), 7, 3, 1, 2, 2),    # dilation 2: shifts up to 4
    ((1, 8, 29, 29), 10, 3, 2, 1, 1),   # stride 2, rows of 15
    ((1, 4, 30, 27), 6, 5, 2, 2, 1),    # 5x5/2: odd columns shifted by one
    ((1, 3, 32, 32), 16, 7, 2, 3, 1),   # 7x7/2, rows of exactly one vector
    ((2, 4, 20, 31), 5, 3, 2, 2, 2),    # stride 2, dilation 2, batch 2
    ((1, 5, 20, 20), 6, 3, 1, 1, 1),    # rows of two vectors (20 outputs)
    ((1, 6, 30, 56), 8, 3, 2, 1, 1),    # stride 2, rows of 28: two vectors
    ((1, 3, 21, 63), 4, 5, 2, 2, 1),    # 5x5/2, rows of 32
]


@pytest.mark.parametrize("case", FP32_PACKED_SEGMENTS,
                         ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[2]}s{c[3]}d{c[5]}")
def test_fp32_packed_im2col_segments_match_reference(case):
    """The packed path's im2col of grids whose output rows fit one or two vectors (a 3x3
    layer on 14x14, a 3x3/2 on 56x56): each row's source vectors stay in registers, shifted
    per tap. Small integers make
    every sum exact in fp32, so the outputs must equal the float64 reference bit for bit (a
    misplaced tap shows), at 1, 2 and 3 threads."""
    in_shape, k, kernel, stride, pad, dil = case
    rng = np.random.default_rng(sum(in_shape) + 5 * kernel + stride)
    x = rng.integers(-4, 5, in_shape).astype(np.float32)
    w = rng.integers(-4, 5, (k, in_shape[1], kernel, kernel)).astype(np.float32)
    conv = Conv(w, stride=stride, padding=pad, dilation=dil)
    exact = ref.conv2d(x.astype(np.float64), w.astype(np.float64), stride, conv.padding,
                       dil).astype(np.float32)
    assert exact.shape[3] <= 32 and exact.shape[2] * exact.shape[3] < 512  # packed
    assert np.abs(exact).max() > 0
    for threads in (1, 2, 3):
        assert_same(DEVICES[threads].run([conv], x)[0], exact, f"{threads} threads")


FP32_DEPTHWISE_ROWS = [  # in_shape, multiplier, kernel, stride, padding: the row-wise kernel
    ((1, 5, 7, 7), 1, 3, 1, 1),                 # a plane narrower than one vector
    ((2, 3, 16, 16), 1, 3, 2, 1),               # exactly one vector of input columns, batch 2
    ((1, 4, 17, 33), 1, 3, 1, 1),               # outputs past one vector, rows not of 4
    ((1, 6, 35, 34), 2, 3, 2, (0, 0, 1, 1)),    # TF-style padding, channel multiplier 2
    ((1, 3, 1, 1), 1, 3, 1, 1),                 # one position, all but one tap padding
    ((1, 3, 2, 9), 1, 5, 1, 4),                 # whole rows and columns of padding
    ((1, 4, 40, 70), 1, 5, 2, 2),               # 5x5 stride 2, inputs past two vectors
    ((1, 2, 23, 21), 3, 5, 1, (2, 1, 2, 3)),    # 5x5 stride 1, asymmetric padding
    ((1, 2, 9, 40), 1, 3, 2, 0),                # stride 2 without padding, odd last column
    # rows of one vector (out_w <= 16) go in blocks of 8 rows:
    ((1, 5, 13, 16), 1, 3, 1, 1),               # 13 rows: a block of 8 and one of 5
    ((1, 3, 30, 31), 1, 3, 2, 1),               # stride 2, 16 outputs a row, 16 rows
    ((2, 4, 7, 7), 2, 5, 1, 2),                 # 5x5 on 7x7 (one block), batch 2, multiplier 2
    ((1, 3, 19, 9), 1, 5, 2, 2),                # 5x5 stride 2, 10 rows of 5 outputs
    ((1, 2, 1, 3), 1, 3, 1, 1),                 # a single row
]


@pytest.mark.parametrize("case", FP32_DEPTHWISE_ROWS,
                         ids=lambda c: "x".join(map(str, c[0])) + f"-m{c[1]}-k{c[2]}s{c[3]}")
def test_fp32_depthwise_rows_match_reference(case):
    """Depthwise 3x3 / 5x5 at stride 1 and 2 run by output rows straight from the input (no
    padded copy). Small-integer values make every sum exact in fp32, so the outputs must equal
    the float64 reference bit for bit (any misplaced tap or padding lane shows); then random
    values within 1e-5, the same bits at 1, 2 and 3 threads and fused as independent."""
    in_shape, mult, kernel, stride, pad = case
    c = in_shape[1]
    rng = np.random.default_rng(sum(in_shape) + 7 * kernel + stride)
    x = rng.integers(-8, 9, in_shape).astype(np.float32)
    w = rng.integers(-8, 9, (c * mult, 1, kernel, kernel)).astype(np.float32)
    conv = Conv(w, stride=stride, padding=pad, groups=c)
    exact = ref.conv2d(x.astype(np.float64), w.astype(np.float64), stride,
                       conv.padding, 1, c).astype(np.float32)
    for threads in (1, 2, 3):
        assert_same(DEVICES[threads].run([conv], x)[0], exact, f"integers, {threads} threads")
    x = rng.standard_normal(in_shape, dtype=np.float32)
    w = rng.standard_normal(w.shape, dtype=np.float32)
    k = c * mult
    chain = [Conv(w, stride=stride, padding=pad, groups=c),
             Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="clip",
                 clip=(-1.0, 1.0))]
    _same_at_every_thread_count(chain, x, independent=True)


@pytest.mark.parametrize("shape,k,kernel,pad,bound", [
    ((1, 672, 14, 14), 112, 1, 0, 2.5e-7),   # implicit GEMM, EfficientNet-B0's projection
    ((1, 1152, 7, 7), 192, 1, 0, 2.5e-7),    # implicit GEMM, its last projection
    ((1, 512, 7, 7), 64, 3, 1, 3.5e-7),      # packed (depth 4608 > 2304), in 512-deep panels
], ids=["1x1-672", "1x1-1152", "3x3-512-packed"])
def test_fp32_deep_sums_stay_close_to_float64(shape, k, kernel, pad, bound):
    """#13, item 8: the fp32 kernels sum the depth in blocks of 32 products, each from zero,
    then add the blocks: the rounding error grows with 32 + depth / 32, not with the depth.
    On inputs of one sign (SiLU / ReLU outputs) whose sums cancel, measured RMS error of the
    output relative to its RMS against the exact float64 convolution: 1.40e-7 and 1.49e-7
    (1x1), 2.45e-7 (3x3 packed); PyTorch's fp32 conv on the same data 1.8e-7, 2.8e-7, 2.2e-7;
    one sequential sum over the depth (the kernels before) 4.8e-7 and 6.0e-7 (1x1)."""
    rng = np.random.default_rng(13)
    x = np.abs(rng.standard_normal(shape)).astype(np.float32)
    depth = shape[1] * kernel * kernel
    w = (rng.standard_normal((k, shape[1], kernel, kernel)) / np.sqrt(depth)).astype(np.float32)
    exact = ref.conv2d(x.astype(np.float64), w.astype(np.float64), 1, pad)
    for device in (DEVICES[1], DEVICES[2]):
        y, _ = device.run([Conv(w, padding=pad)], x)
        error = float(np.sqrt(np.mean((y - exact) ** 2)) / np.sqrt(np.mean(exact ** 2)))
        assert error < bound, (shape, error)


# --- INT8 CONV + SDP over random layers --------------------------------------------------------

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
    """The right shift that brings values of size `spread` to about `target` (0..MAX_SHIFT)."""
    return np.clip(np.rint(np.log2(np.maximum(spread, 1.0) / target)), 0,
                   MAX_SHIFT).astype(np.int64)


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
    mixed in on purpose: a shift 0, a channel raising the layer's shift, mul -32768, an
    int32-saturating bias, negative
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
    # multipliers of 13 to 15 bits, as the compiler's (encode_multipliers): the channels'
    # shifts then differ by the sizes of their sums, not by 2^15 of multiplier (one BN shifter
    # per layer on NVDLA: accel.h)
    mul = _nonzero_int16(rng, k)
    mul = np.sign(mul) * (np.abs(mul) | 4096)
    if case % 7 == 0:
        mul[0] = -32768
    if case % 8 == 5:  # rshift alone: t = rhaz(t, rshift)
        rshift = _shift_for(_channel_spread(t), target)
    else:
        params["mul"] = mul.astype(np.int16)
        rshift = _shift_for(_channel_spread(t) * np.abs(mul), target)
        t = t * per_channel(mul)
    rshift = np.clip(rshift + rng.integers(-1, 2, size=k), 0, MAX_SHIFT)
    if case % 9 == 0:  # the layer's one BN shift raised by a channel (accel.h: every other
        rshift[-1] = min(int(rshift.max()) + 1, MAX_SHIFT)  # channel's BS multiplies by 2)
    if case % 9 == 1:
        rshift[-1] = 0
    params["rshift"] = rshift.astype(np.uint8)
    t = ref.sdp_int8_bs_bn(acc, params.get("bias"), params.get("mul"), params["rshift"])

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
        t = np.where(t < 0, ref.sat32(ref.rhaz(t * per_channel(params["prelu_mul"]),
                                               prelu_shift)), t)

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
        # an INT8 average divides by the whole window, as NVDLA's PDP does (the average over
        # the image elements only is refused: test_pdp_engine)
        chain.append(Pool(kind_pool, 2, int(rng.integers(1, 3)), padding=(0, 0, 1, 1),
                          count_include_pad=kind_pool == "avg" or case % 4 == 0, precision="int8",
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


def _assert_every_path(chain, x, expected, what: str, threads=(1, 2, 3),
                       independent: bool = False) -> None:
    """The chain fused at each thread count, with its conv's weights packed, and (if asked) in
    independent mode: the reference's codes exactly."""
    for t in threads:
        assert_same(DEVICES[t].run(chain, x)[0], expected, f"{what}{t} threads")
    packed = [chain[0].packed_for(DEVICE.config), *chain[1:]]
    assert_same(DEVICE.run(packed, x)[0], expected, f"{what}packed weights")
    if independent:
        assert_same(DEVICE.run(chain, x, mode="independent")[0], expected, f"{what}independent")


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
    _assert_every_path(chain, x, expected, "", threads=(1, 3))


INT8_KERNEL_EDGES = [  # in_shape, weight_shape, conv arguments: the row-wise depthwise kernel
    # and the implicit GEMM's copy at their edges (widths past one 64-column step, tails,
    # channels not a multiple of 4, tiny images, stride 2, padding on every side)
    ((1, 20, 5, 70), (20, 1, 3, 3), dict(padding=1, groups=20)),           # 2 column steps
    ((1, 7, 1, 1), (7, 1, 3, 3), dict(padding=1, groups=7)),               # 1x1 image
    ((1, 3, 2, 2), (3, 1, 3, 3), dict(padding=3, groups=3)),               # rows all padding
    ((2, 13, 9, 131), (13, 1, 3, 3), dict(stride=2, padding=(1, 0, 2, 3), groups=13)),
    ((1, 6, 11, 17), (6, 1, 5, 5), dict(stride=2, padding=2, groups=6)),   # 5x5 stride 2
    ((1, 5, 23, 40), (10, 1, 5, 5), dict(padding=2, groups=5)),            # multiplier 2
    ((1, 4, 12, 50), (4, 1, 7, 7), dict(padding=3, groups=4)),             # two weight words
    ((1, 3, 30, 30), (3, 1, 3, 3), dict(padding=2, dilation=2, groups=3)), # dilated
    ((1, 3, 9, 120), (3, 1, 1, 9), dict(stride=(1, 3), padding=(0, 4, 0, 4), groups=3)),
    ((1, 4, 20, 40), (4, 1, 5, 5), dict(stride=4, padding=2, groups=4)),   # too wide: copy kernel
    ((1, 2, 40, 9), (2, 1, 11, 1), dict(stride=2, padding=(5, 0, 5, 0), groups=2)),  # too tall
    ((1, 13, 3, 130), (21, 13, 1, 1), dict()),                             # 1x1, 3 column steps
    ((2, 6, 70, 65), (9, 6, 1, 1), dict()),                # 1x1 copied flat: 2 segments, batch
    ((1, 40, 7, 7), (40, 1, 3, 3), dict(padding=1, groups=40)),     # small plane: one load
    ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=1, groups=24)),   # small plane: load per row
    ((1, 24, 28, 28), (24, 1, 3, 3), dict(stride=2, padding=1, groups=24)),  # 196 outputs, s2
    ((1, 3, 12, 20), (3, 1, 9, 9), dict(padding=4, groups=3)),      # 81 taps: words one by one
    ((1, 6, 5, 67), (9, 6, 1, 1), dict(stride=2)),                         # 1x1 stride 2
    ((1, 5, 8, 75), (7, 5, 3, 3), dict(stride=2, padding=1)),              # 3x3 stride 2
    ((1, 9, 1, 2), (5, 9, 3, 3), dict(padding=1)),                         # tiny image
]


@pytest.mark.parametrize("layer", range(len(INT8_KERNEL_EDGES)),
                         ids=lambda i: "x".join(map(str, INT8_KERNEL_EDGES[i][0])) + "-" +
                         "x".join(map(str, INT8_KERNEL_EDGES[i][1])))
def test_int8_kernel_edges_match_reference_exactly(layer):
    in_shape, weight_shape, conv_args = INT8_KERNEL_EDGES[layer]
    rng = np.random.default_rng(500 + layer)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    acc = ref.run_op(conv, x)
    chain = [conv, _int8_sdp(rng, acc, 7 * layer)]
    expected = ref.run_chain(chain, x)
    if expected.size >= 64:
        assert len(np.unique(expected)) > 10
    _assert_every_path(chain, x, expected, "")


# Layers whose converters run in int32 lanes inside the kernel (sdp_i8_lanes.h): implicit GEMMs
# without dropped grid columns (1x1 stride 1, 1x1 stride 2, kernel_w 1), the row-wise depthwise
# kernel's bands and its small planes (<= 256 outputs), the kernels that drop grid columns;
# output counts off every step of 16, 48 and 64, channel blocks of MR = 8 not full, a batch of 2
LANE_LAYERS = [
    ((1, 8, 13, 13), (20, 8, 1, 1), dict()),                               # 169 = 3 panels + 25
    ((2, 12, 9, 11), (9, 12, 1, 1), dict(stride=2)),                       # 1x1 stride 2, batch 2
    ((1, 6, 17, 10), (11, 6, 3, 1), dict(padding=(1, 0, 1, 0))),           # kernel_w 1
    ((1, 6, 40, 37), (6, 1, 3, 3), dict(padding=1, groups=6)),             # depthwise bands
    ((1, 5, 15, 15), (5, 1, 3, 3), dict(stride=2, padding=1, groups=5)),   # small plane, 64
    ((1, 9, 7, 7), (9, 1, 3, 3), dict(padding=1, groups=9)),               # small plane, 49
    ((1, 4, 14, 14), (4, 1, 5, 5), dict(padding=2, groups=4)),             # small plane, 196
    # the kernels that drop grid columns convert their channel rows in lanes too
    ((1, 16, 29, 27), (24, 16, 3, 3), dict(padding=1)),     # channels along the vector: chunks
    ((2, 13, 7, 7), (20, 13, 3, 3), dict(padding=1)),       # 49 outputs, blocks not full, batch
    ((1, 6, 9, 100), (10, 6, 1, 2), dict()),                # implicit GEMM, one dropped column
    ((1, 3, 40, 40), (16, 3, 7, 7), dict(stride=2, padding=3)),            # few-channel stem
    ((1, 40, 14, 14), (36, 40, 1, 1), dict()),     # channels along the vector: 1x1 at 14x14
    ((1, 6, 10, 10), (6, 1, 7, 7), dict(padding=3, groups=6)),      # small plane, 7x7 kernel
    ((1, 5, 9, 12), (5, 1, 3, 3), dict(padding=2, dilation=2, groups=5)),  # small, dilated
]


def _lane_sdp(rng, acc, act, out_zero):
    """Converters that qualify for the lanes (mul > 0, shifts <= 40, no operand, NONE / RELU /
    CLIP): shifts 0..40 over the channels and seeds (the direct product below 17, the split one
    above), multipliers that put the codes in range where 2^15 allows (else 1 or 32767: codes
    saturated), and biases that put t = v + bias on both sides of the clamp +-T, of 0 and of
    the int32 ends."""
    k = acc.shape[1]
    spread = _channel_spread(acc)
    shift = (np.arange(k) * 7 + int(rng.integers(0, 41))) % 41  # odd channels: a sweep
    fit = np.clip(np.floor(np.log2(spread * 16384 / 100)), 0, 40)  # even: mid-range multipliers
    shift[::2] = fit[::2]
    mul = np.clip(np.round(100.0 * 2.0 ** shift / spread), 1, 32767).astype(np.int64)
    mul[::5] = rng.choice([1, 2, 16384, 32767], mul[::5].size)
    r = 128 + abs(out_zero)
    t_edge = np.array([min(-(-(r << int(s)) // int(m)), 2**31) for s, m in zip(shift, mul)])
    bias = rng.integers(-1, 2, k) * (spread // 2).astype(np.int64)
    bias[1::4] = rng.choice([-1, 1], bias[1::4].size) * t_edge[1::4] + rng.integers(-50, 50)
    bias[2::9] = rng.choice([-2**31, 2**31 - 1], bias[2::9].size)
    return Sdp(bias=np.clip(bias, -2**31, 2**31 - 1).astype(np.int32),
               mul=mul.astype(np.int16), rshift=shift.astype(np.uint8), act=act,
               out_zero=out_zero, clip_lo=-20 if act == "clip" else None,
               clip_hi=100 if act == "clip" else None, precision="int8")


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("layer", range(len(LANE_LAYERS)),
                         ids=lambda i: "x".join(map(str, LANE_LAYERS[i][0])) + "-" +
                         "x".join(map(str, LANE_LAYERS[i][1])))
def test_int8_epilogue_in_lanes_matches_reference_exactly(layer, act):
    """The converters the kernels apply in registers give the reference's codes, at 1-3
    threads, with packed weights, and in independent mode (sdp_i8_span on stored values)."""
    in_shape, weight_shape, conv_args = LANE_LAYERS[layer]
    for out_zero in (-128, -7, 0, 93, 127):
        rng = np.random.default_rng(700 + 10 * layer + out_zero)
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                    in_zero=int(rng.integers(-128, 128)), **conv_args)
        chain = [conv, _lane_sdp(rng, ref.run_op(conv, x), act, out_zero)]
        expected = ref.run_chain(chain, x)
        if abs(out_zero) < 10:  # (far from 0 most codes sit on a rail or a clip bound)
            assert len(np.unique(expected)) > 5, "codes inside the range, not only saturated"
        _assert_every_path(chain, x, expected, f"out_zero {out_zero}, ", independent=True)


# A conv's converter with v + bias inside int32 (shifts 17..40) takes the lanes' form 3
# (sdp_i8_lanes.h: |t| * mul from vpmaddwd and vpmulhuw, the sign after the rounding): one
# layer per kernel that converts in lanes (1x1 flat VNNI with 4 depth steps, channels along the
# vector, AMX with 16, depthwise bands, a small plane)
CONV_FORM_LAYERS = [
    ((1, 16, 20, 20), (24, 16, 1, 1), dict()),                    # MobileNetV2's expansions
    ((1, 40, 14, 14), (36, 40, 1, 1), dict()),
    ((1, 64, 14, 14), (48, 64, 1, 1), dict()),
    ((1, 6, 40, 37), (6, 1, 3, 3), dict(padding=1, groups=6)),
    ((1, 9, 7, 7), (9, 1, 3, 3), dict(padding=1, groups=9)),
]


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("layer", range(len(CONV_FORM_LAYERS)),
                         ids=lambda i: "x".join(map(str, CONV_FORM_LAYERS[i][0])) + "-" +
                         "x".join(map(str, CONV_FORM_LAYERS[i][1])))
def test_int8_conv_converter_ties_and_extremes_in_lanes(layer, act):
    """Form 3 at its edges: mul a power of two (an eighth of all t are ties at shift 17, of
    both signs), mul 1 and 32767, shifts 17 (a rounding half of 1) to 40, and biases of
    +-(INT32_MAX - the kernel's bound) (|t| up to 2^31 - 1: the high half 2^15 - 1)."""
    in_shape, weight_shape, conv_args = CONV_FORM_LAYERS[layer]
    signs = set()
    for out_zero in (-128, 0, 93):
        rng = np.random.default_rng(900 + 10 * layer + out_zero)
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                    in_zero=int(rng.integers(-128, 128)), **conv_args)
        acc = ref.run_op(conv, x)
        k = weight_shape[0]
        vmax = int(np.prod(weight_shape[1:])) * 255 * 128  # the kernels' bound: depth * 255 * 128
        shift = np.array([17, 18, 17, 20, 24, 17, 19, 40])[np.arange(k) % 8]
        mul = np.array([16384, 16384, 1, 8192, 32767, 32767, 4096, 3])[np.arange(k) % 7]
        spread = _channel_spread(acc)
        bias = rng.integers(-1, 2, k) * (spread // 4).astype(np.int64)
        bias[3::5] = rng.choice([-1, 1], bias[3::5].size) * (2**31 - 1 - vmax)
        chain = [conv, Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16),
                           rshift=shift.astype(np.uint8), act=act, out_zero=out_zero,
                           clip_lo=-20 if act == "clip" else None,
                           clip_hi=100 if act == "clip" else None, precision="int8")]
        expected = ref.run_chain(chain, x)
        t = acc.astype(np.int64) + bias.reshape(1, -1, 1, 1)
        ties = (t * mul.reshape(1, -1, 1, 1)) % (2 ** shift.reshape(1, -1, 1, 1)) == \
            2 ** (shift.reshape(1, -1, 1, 1) - 1)
        signs |= {int(np.sign(v)) for v in t[ties]}
        _assert_every_path(chain, x, expected, f"out_zero {out_zero}, ", independent=True)
    assert {-1, 1} <= signs, "ties of both signs"


def _lane_add_sdp(rng, acc, operand, act, variant):
    """Residual-add converters that qualify for the lanes (mul > 0, shifts 1..40, ADD, NONE /
    RELU / CLIP): channel shifts swept over 1..40 (the low-shift form up to 16, the split one
    above), int32-saturating biases on channels with shifts >= 16 (the clamped form), and the
    call's converters as the compiler makes them (variant 0: operand zero -128, out_mul 1, 8
    extra bits) or at their edges: operand products of both signs, ew_shift 0 and >= 24 (e =
    0), out_mul 0, a large negative out_mul (w clamped to +-T_out), odd zero points, ties."""
    k = acc.shape[1]
    spread = _channel_spread(acc)
    ew_zero, ew_mul, ew_shift, out_mul, out_shift, out_zero, target = [
        (-128, 29000, 7, 1, 8, -128, 30 * 256),
        (0, -1, 0, 0, 0, 5, 30),
        (127, 1234, 30, -20000, 22, -7, 30 * 64),
        (37, 32767, 3, 3, 10, 93, 30 * 256),
        (3, 1, 1, 1, 1, -3, 30 * 2),  # every odd operand product a tie, -1 among them
    ][variant]
    shift = (np.arange(k) * 7 + int(rng.integers(0, 40))) % 40 + 1  # odd channels: a sweep
    fit = np.clip(np.floor(np.log2(spread * 16384 / target)), 1, 40)  # even: mid-range mul
    shift[::2] = fit[::2]
    mul = np.clip(np.round(target * 2.0 ** shift / spread), 1, 32767).astype(np.int64)
    mul[::5] = rng.choice([1, 2, 16384, 32767], mul[::5].size)
    bias = rng.integers(-1, 2, k) * (spread // 2).astype(np.int64)
    edge = np.flatnonzero(shift >= 16)[::3]
    bias[edge] = rng.choice([-2**31, 2**31 - 1], edge.size)
    return Sdp(bias=np.clip(bias, -2**31, 2**31 - 1).astype(np.int32),
               mul=mul.astype(np.int16), rshift=shift.astype(np.uint8), act=act,
               ew_op="add", operand=operand, ew_zero=ew_zero, ew_mul=ew_mul, ew_shift=ew_shift,
               out_mul=out_mul, out_shift=out_shift, out_zero=out_zero,
               clip_lo=-20 if act == "clip" else None, clip_hi=100 if act == "clip" else None,
               precision="int8")


# the layouts whose kernels apply the residual add in lanes (the depthwise ones do not)
ADD_LANE_LAYERS = [layer for layer in LANE_LAYERS if layer[1][1] > 1]


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("layer", range(len(ADD_LANE_LAYERS)),
                         ids=lambda i: "x".join(map(str, ADD_LANE_LAYERS[i][0])) + "-" +
                         "x".join(map(str, ADD_LANE_LAYERS[i][1])))
def test_int8_residual_add_in_lanes_matches_reference_exactly(layer, act):
    """The residual add the kernels apply in registers (sdp_i8_lanes_add) gives the reference's
    codes on every layout, at 1-3 threads, with packed weights, and in independent mode."""
    in_shape, weight_shape, conv_args = ADD_LANE_LAYERS[layer]
    for variant in range(5):
        rng = np.random.default_rng(800 + 10 * layer + variant)
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                    in_zero=int(rng.integers(-128, 128)), **conv_args)
        acc = ref.run_op(conv, x)
        operand = rng.integers(-128, 128, acc.shape).astype(np.int8)
        sdp = _lane_add_sdp(rng, acc, operand, act, variant)
        codes = set()
        # the swept shifts in bands of 4: one BN shifter per layer (accel.h) would otherwise
        # make BS multiply most channels by up to 2^39 and saturate them
        for band in np.unique((sdp.rshift - 1) // 4):
            keep = (sdp.rshift - 1) // 4 == band
            part = dataclasses.replace(
                sdp, bias=sdp.bias[keep], mul=sdp.mul[keep], rshift=sdp.rshift[keep],
                operand=np.ascontiguousarray(sdp.operand[:, keep]))
            chain = [dataclasses.replace(conv, weights=conv.weights[keep]), part]
            expected = ref.run_chain(chain, x)
            codes.update(np.unique(expected).tolist())
            _assert_every_path(chain, x, expected, f"variant {variant} band {band}, ",
                               independent=True)
        assert len(codes) > 5, "codes inside the range, not only saturated"


def test_int8_kept_lane_converters_follow_their_arrays():
    """A device keeps each layer's lane converters from run to run (conv/i8_lanes_cache.c,
    i8_lanes_cached), keyed by the SDP's arrays: the same arrays changed in place between runs
    (biases, multipliers, shifts) give the reference's codes of their new contents, on the
    small-grid, implicit GEMM and depthwise kernels, with and without a residual add."""
    rng = np.random.default_rng(4242)
    device = Device("nv_full", num_threads=1)
    layers = [((1, 32, 7, 7), (48, 32, 3, 3), dict(padding=1), False),
              ((1, 32, 16, 12), (48, 32, 1, 1), dict(), True),
              ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=1, groups=24), False)]
    for in_shape, weight_shape, conv_args, add in layers:
        k = weight_shape[0]
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-127, 128, weight_shape).astype(np.int8), precision="int8",
                    in_zero=-3, **conv_args)
        acc = ref.run_op(conv, x)
        bias = rng.integers(-2**14, 2**14, k).astype(np.int32)
        mul = rng.integers(2**13, 2**15, k).astype(np.int16)
        rshift = np.full(k, 21 if weight_shape[1] > 1 else 17, np.uint8)
        extra = (dict(ew_op="add", operand=rng.integers(-128, 128, acc.shape).astype(np.int8),
                      ew_zero=5, ew_mul=3 << 12, ew_shift=12) if add else {})
        sdp = Sdp(bias=bias, mul=mul, rshift=rshift, act="relu", out_zero=-20,
                  precision="int8", **extra)
        seen = []
        for step in range(4):
            expected = ref.run_chain([conv, sdp], x)
            seen.append(expected)
            assert_same(device.run([conv, sdp], x)[0], expected,
                        f"{weight_shape} add {add}, step {step}")
            bias += rng.integers(-2**13, 2**13, k).astype(np.int32)  # in place
            mul[step::3] = mul[step::3] // 2
            rshift[step::4] += 1
        assert not np.array_equal(seen[0], seen[-1]), "the changes change the codes"


# Small depthwise planes (<= 256 outputs) whose tables differ in one field of the spatial
# geometry each: more of them than the dw_rows_vbmi tables kept (4), so that they replace each
# other, and the same geometry again with other channels, weights and data
SMALL_PLANE_GEOMETRIES = [  # in_shape, weight_shape, conv arguments
    ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=1, groups=24)),
    ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=(0, 1, 2, 1), groups=24)),    # pad_top
    ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=(1, 0, 1, 2), groups=24)),    # pad_left
    ((1, 24, 14, 14), (24, 1, 3, 3), dict(padding=2, dilation=2, groups=24)),   # dilation
    ((1, 24, 14, 15), (24, 1, 3, 3), dict(padding=1, groups=24)),               # width
    ((1, 24, 28, 28), (24, 1, 3, 3), dict(stride=2, padding=1, groups=24)),     # stride
    ((2, 40, 7, 7), (40, 1, 3, 3), dict(padding=1, groups=40)),                 # 7x7, batch 2
    ((1, 8, 14, 14), (8, 1, 5, 5), dict(padding=2, groups=8)),                  # 5x5
    ((1, 8, 14, 14), (16, 1, 3, 3), dict(padding=1, groups=8)),                 # multiplier 2
]


def test_int8_small_plane_tables_are_kept_per_geometry():
    """The depthwise kernel's small-plane tables, kept by the device from call to call and
    keyed on the spatial geometry: geometries one field apart, in turn and in reverse, twice,
    with fresh channels, weights and data each time, give the reference's codes at 1, 2 and 3
    threads (a table taken for the wrong geometry would read the wrong taps)."""
    rng = np.random.default_rng(1100)
    order = list(range(len(SMALL_PLANE_GEOMETRIES)))
    for i in order + order[::-1] + order:
        in_shape, weight_shape, conv_args = SMALL_PLANE_GEOMETRIES[i]
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                    in_zero=int(rng.integers(-128, 128)), **conv_args)
        acc = ref.run_op(conv, x)
        assert acc.shape[2] * acc.shape[3] <= 256
        chain = [conv, _int8_sdp(rng, acc, int(rng.integers(0, 12)))]
        expected = ref.run_chain(chain, x)
        for threads in (1, 2, 3):
            assert_same(DEVICES[threads].run(chain, x)[0], expected,
                        f"geometry {i}, {threads} threads")


def _int8_conv_matches_reference(conv, x, acc, rng, layer):
    """``conv`` followed by two random converters (one with a residual add) gives the
    reference's codes at 1, 2 and 3 threads, and with packed weights."""
    for case in (12 * layer + 3, 12 * layer + 8):   # case % 6 == 2: a residual add
        chain = [conv, _int8_sdp(rng, acc, case)]
        expected = ref.run_chain(chain, x)
        assert len(np.unique(expected)) > 10
        _assert_every_path(chain, x, expected, "")


INT8_SMALL_GRIDS = [  # in_shape, weight_shape, conv arguments: the kernel with channels along
    # the vector (conv/i8_small_vnni.c, impl small_vnni) at its edges
    ((1, 64, 7, 7), (64, 64, 3, 3), dict(padding=1)),                 # ResNet's 7x7 3x3
    ((1, 13, 7, 7), (20, 13, 3, 3), dict(padding=1)),       # channels not a multiple of 4 / 8
    ((1, 40, 14, 14), (24, 40, 3, 3), dict(stride=2, padding=1)),     # stride 2: 7x7 out
    ((1, 96, 7, 7), (40, 96, 1, 1), dict()),                          # 1x1 copied flat
    ((1, 24, 16, 16), (17, 24, 3, 3), dict(padding=1)),               # 256 outputs
    ((1, 16, 29, 27), (24, 16, 3, 3), dict(padding=1)),     # 783 outputs: 4 chunks of tiles
    ((1, 8, 3, 3), (9, 8, 3, 3), dict(padding=1)),     # 9 outputs: the fewest (8: gemv path)
    ((1, 12, 5, 3), (8, 12, 3, 3), dict(padding=1)),   # rows narrower than a tile of positions
    ((2, 32, 9, 11), (48, 32, 3, 3), dict(padding=(2, 0, 1, 3))),     # batch, uneven padding
    ((1, 16, 11, 11), (30, 16, 3, 3), dict(padding=2, dilation=2)),   # dilated
    ((1, 32, 7, 7), (64, 16, 3, 3), dict(padding=1, groups=2)),       # grouped
    ((1, 20, 20, 20), (26, 20, 3, 3), dict(stride=3, padding=1)),     # stride 3: gathered rows
    ((1, 512, 7, 7), (8, 512, 3, 3), dict(padding=1)),   # one channel block: position chunks
]


def _implicit_lanes(out_h, out_w, kernel_w, stride_w, dilation_w):
    """The vector lanes the implicit GEMM computes for one image and block of channels: grid
    columns in panels of 48, 16 per started vector (conv/i8_small_vnni.c small_grid_pays)."""
    wq = out_w + (kernel_w - 1) * dilation_w // stride_w
    ncols = (out_h - 1) * wq + out_w
    return ncols // 48 * 48 + -(-(ncols % 48) // 16) * 16


@pytest.mark.parametrize("layer", range(len(INT8_SMALL_GRIDS)),
                         ids=lambda i: "x".join(map(str, INT8_SMALL_GRIDS[i][0])) + "-" +
                         "x".join(map(str, INT8_SMALL_GRIDS[i][1])))
def test_int8_small_grids_match_reference_exactly(layer):
    """Every listed geometry is one the kernel takes (over 8 outputs, over 3 % fewer lanes
    than the implicit GEMM, over 15 % for a 1x1 kernel), and gives the reference's codes at 1,
    2 and 3 threads, with and without packed weights, with a residual operand."""
    in_shape, weight_shape, conv_args = INT8_SMALL_GRIDS[layer]
    rng = np.random.default_rng(700 + layer)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    acc = ref.run_op(conv, x)
    out_h, out_w = acc.shape[2:]
    stride = conv_args.get("stride", 1)
    dilation = conv_args.get("dilation", 1)
    assert out_h * out_w > 8
    pointwise = weight_shape[2:] == (1, 1)
    assert 100 * _implicit_lanes(out_h, out_w, weight_shape[3], stride, dilation) > \
        (115 if pointwise else 103) * out_h * out_w
    _int8_conv_matches_reference(conv, x, acc, rng, layer)


INT8_FEW_CHANNELS = [  # in_shape, weight_shape, conv arguments: the few-channel kernel (taps
    # packed densely into words: impl stem_vbmi) at its edges; all over 256 outputs (fewer
    # could go to the matrix-vector or im2col paths first)
    ((1, 3, 64, 64), (64, 3, 7, 7), dict(stride=2, padding=3)),       # ResNet's stem
    ((2, 3, 41, 47), (20, 3, 7, 7), dict(stride=2, padding=(3, 2, 1, 3))),  # odd, uneven, batch
    ((1, 1, 30, 40), (8, 1, 5, 5), dict(padding=2)),                  # one channel: 2 words
    ((1, 2, 33, 35), (12, 2, 3, 3), dict(padding=1)),                 # two channels 3x3
    ((1, 3, 70, 230), (9, 3, 7, 7), dict(stride=3, padding=3)),       # wide rows, stride 3
    ((1, 3, 80, 80), (16, 3, 4, 4), dict(stride=4)),     # the widest load: 15 * 4 + 4 = 64
    ((1, 3, 40, 40), (16, 3, 7, 7), dict(padding=(6, 3, 6, 3), dilation=(2, 1))),  # dilated rows
    ((1, 3, 20, 60), (24, 3, 1, 7), dict(padding=(0, 3, 0, 3))),      # one kernel row
]


@pytest.mark.parametrize("layer", range(len(INT8_FEW_CHANNELS)),
                         ids=lambda i: "x".join(map(str, INT8_FEW_CHANNELS[i][0])) + "-" +
                         "x".join(map(str, INT8_FEW_CHANNELS[i][1])))
def test_int8_few_channels_match_reference_exactly(layer):
    """1 to 3 input channels whose kernel rows fill fewer words packed densely than one word
    per column (the few-channel kernel's rule): the reference's codes at 1, 2 and 3 threads,
    with and without packed weights, with a residual operand."""
    in_shape, weight_shape, conv_args = INT8_FEW_CHANNELS[layer]
    k, c, _, kw = weight_shape
    assert c <= 3 and -(-c * kw // 4) < kw
    rng = np.random.default_rng(900 + layer)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    acc = ref.run_op(conv, x)
    assert acc.shape[2] * acc.shape[3] > 256
    _int8_conv_matches_reference(conv, x, acc, rng, layer)


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
            edges.update(["shift0"] if 0 in sdp.rshift else [])
            if sdp.rshift.size > 1 and sdp.rshift[-1] > sdp.rshift[:-1].max():
                edges.add("shift_raised")  # BS multiplies the other channels (accel.h)
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
                 "act_clip", "act_None", "shift0", "shift_raised", "mul_min", "mul_negative",
                 "bias_sat32", "in_zero_-128", "in_zero_127", "pool"):
        assert edge in edges, f"no case covers {edge}"


# --- INT8 CONV + SDP edges, one at a time ------------------------------------------------------

def test_int8_padding_reads_as_the_zero_point():
    """A constant image equal to in_zero convolves to exactly 0 everywhere, borders included:
    out = sat8(bias + out_zero)."""
    for in_zero in (-128, -7, 0, 127):
        x = np.full((1, 3, 5, 5), in_zero, np.int8)
        w = np.full((4, 3, 3, 3), -128, np.int8)
        sdp = Sdp(bias=np.array([0, 1, -1, 100], np.int32), precision="int8", out_zero=3)
        conv = Conv(w, padding=(2, 1, 0, 3), precision="int8", in_zero=in_zero)
        y = run_and_compare(DEVICE, [conv, sdp], x, f"in_zero {in_zero}")
        np.testing.assert_array_equal(np.unique(y[0, 1]), [4])
        np.testing.assert_array_equal(np.unique(y[0, 3]), [103])


def test_int8_rounding_is_half_away_from_zero():
    """Accumulators +-(2k+1) * 2^(s-1) are exact halves: each rounds away from zero."""
    s = 3
    # a 1x1 conv of weight 4: accumulators (1, 3, 5, ...) * 2^(s-1), i.e. +-0.5, 1.5, ... * 2^s
    x = np.array([1, 3, 5, -1, -3, -5, 7, -7], np.int8).reshape(1, 1, 1, 8)
    conv = Conv(np.full((1, 1, 1, 1), 4, np.int8), precision="int8")
    sdp = Sdp(mul=np.array([1], np.int16), rshift=np.array([s], np.uint8), precision="int8")
    y = run_and_compare(DEVICE, [conv, sdp], x, "halves")
    np.testing.assert_array_equal(y.ravel(), [1, 2, 3, -1, -2, -3, 4, -4])


def test_int8_saturation_at_each_step():
    """sat32 after the bias and after the multiplier, then sat8 at the output."""
    x = np.array([[127, -128, 127, -128]], np.int8).reshape(1, 1, 1, 4)
    w = np.full((1, 1, 1, 1), 127, np.int8)
    bias, mul, rshift = [2**31 - 1, -2**31, 5], [-32768, 32767, 2], [62, 0, 1]
    # one layer per channel: each its own shift, so that BS multiplies by 1 (accel.h)
    y = np.concatenate([run_and_compare(
        DEVICE, [Conv(w, precision="int8", in_zero=-128),   # v = 255*127, 0, 255*127, 0
                 Sdp(bias=np.array([b], np.int32), mul=np.array([m], np.int16),
                     rshift=np.array([r], np.uint8), precision="int8")], x, "saturation")
        for b, m, r in zip(bias, mul, rshift)], axis=1)
    # channel 0: sat32(v + 2^31-1) = 2^31-1, * -32768 / 2^62 = -0.0000152.. -> rounds to 0
    # channel 1: sat32(v - 2^31) = -2^31 + v or -2^31, * 32767 -> sat32 -> -2^31 -> sat8 -128
    # channel 2: (v + 5) * 2 / 2 = v + 5 -> sat8 127 for v = 32385, 5 for v = 0
    np.testing.assert_array_equal(y[0, :, 0], [[0, 0, 0, 0], [-128] * 4, [127, 5, 127, 5]])


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


# --- FP16 CONV + SDP within the summation bound ------------------------------------------------

U32 = 2.0 ** -24  # unit roundoff of fp32


def ulp16(values: np.ndarray) -> np.ndarray:
    """The spacing of halves at each value (2^-24 at zero and for subnormals)."""
    return np.spacing(np.abs(np.asarray(values, np.float16))).astype(np.float64)


def fp16_conv_bound(x, w, conv, reference, lipschitz):
    """How far an FP16 CONV + SDP output may be from the reference, element-wise:

        |sim - ref| <= ulp16(ref) + L * gamma(kd) * sum|x * w| * |scale|,  gamma(n) = n u / (1 - n u)

    Derivation. Products of halves are exact in fp32 (11 + 11 significand bits). The kernel
    adds the kd = C/groups * R * S products in fp32: kd - 1 roundings, each at most u = 2^-24
    of a partial sum, and every partial sum is at most S = sum|x * w|, so its accumulator is
    within (kd - 1) u S of the exact sum (Higham's bound, to first order; gamma covers the
    higher orders). The reference (reference.conv2d_fp16) sums in the FP32 CONV's own order,
    so the accumulators are equal, except where the library sums in another order (batched
    1x1 rows through OpenBLAS, fc_blas). There both sums are within gamma(kd) S of the exact
    one, so at worst 2 gamma(kd) S apart; the test asks for gamma(kd) S, tighter than the
    proof, which random-signed roundings meet with a wide margin (first-order error grows
    like sqrt(kd), not kd). The SDP applies the same float32
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


def _fp16_case(case):
    rng = np.random.default_rng(2000 + case)
    kind = KINDS[case % len(KINDS)]
    g = _int8_geometry(rng, kind)
    x = rng.standard_normal(g["in_shape"]).astype(np.float16)
    w = (rng.standard_normal(g["weight_shape"]) / np.sqrt(g["depth"])).astype(np.float16)
    conv = Conv(w, precision="fp16", **g["conv"])
    out_shape = ref.run_op(conv, x.reshape(*x.shape, 1, 1) if x.ndim == 2 else x).shape
    sdp = fp16_sdp(rng, FP16_EPILOGUES[case % len(FP16_EPILOGUES)], out_shape)
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
