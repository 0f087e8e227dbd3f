"""The small-grid INT8 kernel (csrc/conv/i8_small_vnni.c, impl "small_vnni": 16 output channels
per zmm vector, two MR blocks of the packed weights joined in the register), forced by name on
geometries at its edges, gives the NumPy reference's codes bit for bit: channel counts whose
blocks do not pair (8, 24, 40, 56 and 104 channels: a last vector of one block, zero weights in
its upper lanes), sets of 1 to 3 vectors, position tiles of 1 to 8 (outputs not a multiple of
8), strides 1 and 2 (the unit-stride copy of 3x3/2), 1x1 at stride 2 (one phase), groups,
dilation, zero points -128 and 127, weights of -128 (test_conv_i8_gemm16's chain_of), packed
and unpacked weights, the direct converter and the compiler's lane forms (ReLU, clip, none:
the bias folded into the accumulators, a residual add), at 1 and 2 threads. The library reads
ACCEL_CONV_IMPL once per process, so the layers run in a child process."""
import pytest

from accel_codegen.sim.device import host_isa
from test_conv_i8_gemm16 import _assert_reference_codes, _run, chain_of  # noqa: F401 (child)

# (n, c, h, w, k, kh, kw, stride, pad, dilation, groups, in_zero[, converter])
LAYERS = [
    (1, 24, 7, 7, 8, 3, 3, 1, 1, 1, 1, 5),          # one block: a half vector, 49 = 6 x 8 + 1
    (1, 40, 9, 9, 24, 3, 3, 1, 1, 1, 1, -128),      # 3 blocks (a pair and a half), 81 positions
    (1, 33, 14, 14, 40, 3, 3, 2, 1, 1, 1, 127),     # 5 blocks, stride 2 (unit-stride copy)
    (1, 64, 10, 11, 56, 1, 1, 1, 0, 1, 1, -7),      # 7 blocks: sets of 2 and 2 pairs, 110 pos.
    (1, 20, 6, 5, 104, 3, 3, 1, 1, 1, 1, 0),        # 13 blocks: 7 pairs in 3 sets, 30 pos.
    (1, 48, 13, 13, 96, 1, 1, 2, 0, 1, 1, 3),       # 1x1 stride 2: 12 blocks, 49 positions
    (2, 24, 7, 9, 36, 3, 3, 1, 1, 1, 3, -3),        # 3 groups of 12 channels, a batch of 2
    (1, 16, 11, 11, 48, 3, 3, 1, 2, 2, 1, 9),       # dilation 2, 6 blocks: one full set
    (1, 300, 5, 7, 21, 3, 3, 1, 1, 1, 1, -128),     # deep (2700): 35 = 4 x 8 + 3
]
CONVERTED = [
    (1, 32, 7, 7, 40, 3, 3, 1, 1, 1, 1, -128, "relu"),
    (1, 24, 14, 14, 24, 1, 1, 1, 0, 1, 1, 5, "none"),   # form 3: the bias in the accumulators
    (1, 40, 12, 10, 30, 3, 3, 2, 1, 1, 1, 3, "add"),
    (1, 16, 9, 9, 56, 3, 3, 1, 1, 1, 1, 127, "clip"),
]


def _vnni():
    return "avx512_vnni" in host_isa()


@pytest.mark.parametrize("threads", [1, 2])
def test_small_vnni_gives_the_reference_codes(threads):
    layers = LAYERS + CONVERTED
    got, names = _run(layers, threads, module="test_conv_i8_small_vnni",
                      ACCEL_CONV_IMPL="small_vnni", ACCEL_VERBOSE="1")
    if _vnni():
        assert names == ["small_vnni"] * (2 * len(layers)), names
    _assert_reference_codes(got, layers, chain_of)
