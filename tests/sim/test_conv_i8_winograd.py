"""The exact integer Winograd F(2x2, 3x3) of AVX2 builds (csrc/conv/i8_winograd_avx2.c, impl
"winograd16_avx2"): forced on stride-1 3x3 layers of one group, each gives the NumPy reference's
codes bit for bit: paddings 0, 1 and 2, odd and even output sizes (a last tile of one row or
column, a band's last tiles past 8), bands of several tile rows, every in_zero, weights of -128,
several passes of 24 channels and odd channel counts, the compiler's converters (ReLU, clip,
none, a residual add), 1 and 2 threads, packed and unpacked weights; sums at its depth bound
(4 x depth x 255 x 128 within int32) and one channel past it, where it does not run and the
direct kernels do. The library reads ACCEL_CONV_IMPL once per process, so the layers run in a
child process (test_conv_i8_gemm16's `_run`). On builds without the kernel (AVX-512 VNNI builds,
or no AVX2) the list's own choices run and must agree as well."""
import numpy as np

from accel_codegen.sim import reference as ref
from accel_codegen.sim import Conv, Sdp
from test_conv_i8_gemm16 import (_assert_reference_codes, _has_kernel, _run,
                                 chain_of as gemm16_chain)

IMPL = "winograd16_avx2"
# (n, c, h, w, k, 3, 3, 1, pad, 1, 1, in_zero)
LAYERS = [
    (1, 24, 12, 12, 40, 3, 3, 1, 1, 1, 1, 5),      # even sizes, 2 passes of channels (24 + 16)
    (1, 16, 13, 11, 20, 3, 3, 1, 1, 1, 1, -128),   # odd sizes: the last tile's row and column
    (1, 7, 9, 21, 9, 3, 3, 1, 0, 1, 1, 127),       # padding 0, an odd channel count (a half pair)
    (1, 33, 7, 7, 44, 3, 3, 1, 1, 1, 1, 77),       # ResNet's 7x7 plane: 16 tiles
    (2, 64, 30, 30, 30, 3, 3, 1, 2, 1, 1, -3),     # padding 2 (32x32 outputs), 2 images
    (1, 300, 7, 7, 44, 3, 3, 1, 1, 1, 1, 77),      # 300 deep
    (1, 2, 4, 4, 3, 3, 3, 1, 0, 1, 1, -1),         # 2x2 outputs: one tile
    (1, 5, 3, 3, 8, 3, 3, 1, 1, 1, 1, 9),          # 3x3 outputs: a tile of 4 kept outputs
    (1, 8, 40, 58, 14, 3, 3, 1, 1, 1, 1, -60),     # 29 tiles a row: a group of 8 across rows
    (1, 96, 57, 57, 8, 3, 3, 1, 1, 1, 1, 100),     # bands of tile rows (V over the L2 budget)
    (1, 12, 6, 90, 26, 3, 3, 1, 2, 1, 1, 0),       # padding 2 on a wide short plane
]
# The bound: 1827 channels x 9 taps keep 4 x depth x 255 x 128 within int32, 1828 do not (the
# direct kernels run it). (in - in_zero) = 255 times -128 on channels 0..3's taps.
BOUND = [(1, 1827, 6, 6, 9, 3, 3, 1, 0, 1, 1, -128), (1, 1828, 5, 5, 9, 3, 3, 1, 1, 1, 1, -128)]

def chain_of(layer, packed):
    """test_conv_i8_gemm16's layer, but at the bound: every product of channels 0..3 at its most
    negative (the bias brings the codes back into range)."""
    n, c, h, w, k, kh, kw, s, p, d, g, z = layer[:12]
    if c < 1827:
        return gemm16_chain(layer, packed)
    rng = np.random.default_rng(c)
    x = np.full((n, c, h, w), 127, np.int8)
    wt = np.full((k, c, kh, kw), -128, np.int8)
    wt[4:] = rng.integers(-128, 128, wt[4:].shape)
    bias = np.full(k, 255 * 128 * c * kh * kw, np.int32)
    bias[4:] = 0
    conv = Conv(wt, stride=(s, s), padding=(p,) * 4, precision="int8", in_zero=z)
    if packed:
        conv = conv.packed_for("nv_full", in_c=c)
    return x, [conv, Sdp(precision="int8", bias=bias, rshift=np.full(k, 16, np.uint8))]


def _check(layers, threads, **env):
    """Each layer packed and unpacked against the reference; the names of the kernels that ran:
    forced, IMPL wherever it fits (in a build that has it)."""
    got, names = _run(layers, threads, "test_conv_i8_winograd", ACCEL_VERBOSE="1", **env)
    assert len(names) == 2 * len(layers), names
    _assert_reference_codes(got, layers, chain_of)
    return names


def test_winograd16_gives_the_reference_codes():
    for threads in (2, 1):
        names = _check(LAYERS, threads, ACCEL_CONV_IMPL=IMPL)
        assert names == [IMPL] * len(names) if _has_kernel() else IMPL not in names, names


def test_winograd16_at_its_depth_bound_and_past_it():
    names = _check(BOUND, 2, ACCEL_CONV_IMPL=IMPL)
    assert names[:2] == [IMPL] * 2 if _has_kernel() else IMPL not in names[:2], names
    assert IMPL not in names[2:], names  # past the bound: the direct kernels
    # the bound is reached: channel 0's sum is -255 x 128 x 16 443, its code (sum + bias) >> 16 0
    x, chain = chain_of(BOUND[0], 0)
    sums = ref.conv2d_int8(x, chain[0].weights, 1, 0, 1, 1, -128)
    assert sums[0, 0].min() == -255 * 128 * 1827 * 9 and 4 * sums[0, 0].min() >= -2**31


def test_winograd16_with_the_compilers_converters():
    """The lane converters' forms (ReLU, clip, none, a residual add) on its rows."""
    layers = [
        (1, 40, 10, 12, 30, 3, 3, 1, 1, 1, 1, 3, "add"),
        (1, 24, 15, 9, 36, 3, 3, 1, 1, 1, 1, -5, "relu"),
        (1, 16, 20, 20, 50, 3, 3, 1, 1, 1, 1, -128, "clip"),
        (1, 32, 8, 8, 13, 3, 3, 1, 1, 1, 1, 127, "none"),
    ]
    for threads in (2, 1):
        names = _check(layers, threads, ACCEL_CONV_IMPL=IMPL)
        assert set(names) == {IMPL} if _has_kernel() else IMPL not in names, names
    for layer in layers:  # the converters span the codes: the test would see a wrong sum
        x, chain = chain_of(layer, 0)
        assert len(np.unique(ref.run_chain(chain, x))) > 40, layer


def test_winograd16_runs_where_the_list_chooses_it():
    """Packed stride-1 3x3 layers of one group and 32 channels or more take it in an AVX2 build
    without VNNI; unpacked ones (its words would be made on every call), shallower ones,
    grouped, dilated and strided ones, and 1x1 layers do not."""
    others = [
        (1, 24, 12, 12, 40, 3, 3, 1, 1, 1, 1, 5),   # 24 channels
        (1, 64, 12, 12, 40, 3, 3, 1, 1, 2, 1, 5),   # dilation 2
        (1, 64, 12, 12, 40, 3, 3, 1, 1, 1, 2, 5),   # 2 groups of 32
        (1, 64, 12, 12, 40, 3, 3, 2, 1, 1, 1, 5),   # stride 2
        (1, 64, 12, 12, 40, 1, 1, 1, 0, 1, 1, 5),   # 1x1
    ]
    names = _check(LAYERS[3:5] + others, 2)
    assert [n == IMPL for n in names[:4]] == [False, _has_kernel()] * 2, names
    assert IMPL not in names[4:], names
