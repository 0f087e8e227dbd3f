"""The 1x1 stride-2 copy built a plane at a time (csrc/conv/i8_gemm_vnni.c's
imp_build_s2_plane, conv/i8.h's imp_flat_s2: ResNet's downsampling branches), through both
kernels that read it (implicit_vnni, small_vnni, forced by name), gives the NumPy reference's
codes bit for bit: output rows of 1 to 32 positions (odd and even input widths, 32 the most
two rows to a vector hold), odd and even row counts (a last row alone), one-row and
one-position planes, channel counts not a multiple of 4 (missing channels of the last block),
groups, a batch of 2, zero points -128 and 127, weights of -128 (test_conv_i8_gemm16's
chain_of), packed and unpacked weights, the direct converter and lane forms (ReLU, a residual
add), at 1 and 2 threads. Padded 1x1/2 layers keep the row-by-row copy (compared too)."""
import pytest

from accel_codegen.sim.device import host_isa
from test_conv_i8_gemm16 import _assert_reference_codes, _run, chain_of  # noqa: F401 (child)

# (n, c, h, w, k, kh, kw, stride, pad, dilation, groups, in_zero[, converter])
LAYERS = [
    (1, 24, 56, 56, 16, 1, 1, 2, 0, 1, 1, 5),        # ResNet's 56 -> 28: rows of 28, pairs
    (1, 13, 13, 13, 24, 1, 1, 2, 0, 1, 1, -128),     # 7 x 7: a last row alone, c % 4 = 1
    (2, 16, 14, 14, 8, 1, 1, 2, 0, 1, 1, 127),       # 14 -> 7, a batch of 2
    (1, 8, 64, 63, 8, 1, 1, 2, 0, 1, 1, -3),         # rows of 32 (the most), 63 wide
    (1, 10, 9, 64, 12, 1, 1, 2, 0, 1, 1, 0),         # rows of 32 from an even width, 5 rows
    (1, 12, 2, 2, 8, 1, 1, 2, 0, 1, 1, 9),           # one position
    (1, 8, 1, 17, 8, 1, 1, 2, 0, 1, 1, -7),          # one row of 9
    (1, 24, 28, 27, 30, 1, 1, 2, 0, 1, 2, 3),        # 2 groups of 12 channels, rows of 14
    (1, 8, 66, 66, 8, 1, 1, 2, 0, 1, 1, 1),          # rows of 33: the row-by-row copy
    (1, 8, 12, 12, 8, 1, 1, 2, 1, 1, 1, -128),       # padded: the row-by-row copy
]
CONVERTED = [
    (1, 20, 28, 28, 24, 1, 1, 2, 0, 1, 1, -128, "relu"),
    (1, 16, 15, 15, 16, 1, 1, 2, 0, 1, 1, 127, "add"),
]


@pytest.mark.parametrize("impl", ["implicit_vnni", "small_vnni"])
@pytest.mark.parametrize("threads", [1, 2])
def test_s2_plane_copy_gives_the_reference_codes(impl, threads):
    layers = LAYERS + CONVERTED
    got, names = _run(layers, threads, module="test_conv_i8_s2_copy", ACCEL_CONV_IMPL=impl,
                      ACCEL_VERBOSE="1")
    if "avx512_vnni" in host_isa():
        assert names == [impl] * (2 * len(layers)), names
    _assert_reference_codes(got, layers, chain_of)
