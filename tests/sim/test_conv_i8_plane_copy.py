"""The stride-1 copy built a plane at a time (csrc/conv/i8_gemm_vnni.c's imp_build_plane and
i8_imp_plane_steps, conv/i8.h's plane_step: 64 copy positions a step, each channel's bytes by
vpermb from one masked load of its plane, the padding blended in; VBMI builds), through both
kernels that read it (implicit_vnni, small_vnni, forced by name), gives the NumPy reference's
codes bit for bit: ResNet's planes (7x7, 14x14, 28x28, 56x56 with 3x3 and padding 1: steps
that end inside a row, a last step of 1 to 63 positions), rows as wide as a step (62 + 2
padding), a plane of one row and of one position, 1x1 with padding, 5x5 with padding 2,
dilation 2, the small-grid kernel's unit-stride copy of 3x3/2, channel counts not a multiple
of 4 (missing channels of the last block), groups, a batch of 2, a plane past the table's 256
steps (the row-by-row copy, compared too), zero points -128 and 127, weights of -128
(test_conv_i8_gemm16's chain_of), packed and unpacked weights, the direct converter and lane
forms (ReLU, none: the bias folded, a residual add), at 1 and 2 threads."""
import pytest

from accel_codegen.sim.device import host_isa
from test_conv_i8_gemm16 import _assert_reference_codes, _run, chain_of  # noqa: F401 (child)

# (n, c, h, w, k, kh, kw, stride, pad, dilation, groups, in_zero[, converter])
LAYERS = [
    (1, 24, 14, 14, 16, 3, 3, 1, 1, 1, 1, 5),        # 16 x 16: 4 full steps
    (1, 13, 7, 7, 24, 3, 3, 1, 1, 1, 1, -128),       # 9 x 9 = 81: a last step of 17, c % 4 = 1
    (2, 16, 28, 28, 8, 3, 3, 1, 1, 1, 1, 127),       # 30 x 30 = 900: last step of 4, batch 2
    (1, 8, 56, 56, 8, 3, 3, 1, 1, 1, 1, -3),         # rows of 58
    (1, 8, 9, 62, 8, 3, 3, 1, 1, 1, 1, 0),           # rows of 64: a step is a row
    (1, 12, 1, 5, 8, 3, 3, 1, 1, 1, 1, 9),           # one input row (3 copy rows of 7)
    (1, 10, 1, 1, 8, 3, 3, 1, 1, 1, 1, -7),          # one position: 3 x 3 of padding around it
    (1, 10, 6, 7, 8, 1, 1, 1, 1, 1, 1, -128),        # 1x1 with padding 1
    (1, 9, 11, 13, 12, 5, 5, 1, 2, 1, 1, 3),         # 5x5, padding 2: rows of 17
    (1, 16, 11, 11, 48, 3, 3, 1, 2, 2, 1, 9),        # dilation 2
    (1, 33, 14, 14, 40, 3, 3, 2, 1, 1, 1, 127),      # 3x3/2: small_vnni's unit-stride copy
    (1, 24, 10, 9, 36, 3, 3, 1, 1, 1, 3, -3),        # 3 groups of 8 channels
    (1, 4, 130, 130, 8, 3, 3, 1, 1, 1, 1, 7),        # 132 x 132: over 256 steps, row by row
]
CONVERTED = [
    (1, 32, 14, 14, 40, 3, 3, 1, 1, 1, 1, -128, "relu"),
    (1, 24, 7, 7, 24, 3, 3, 1, 1, 1, 1, 5, "none"),
    (1, 40, 12, 10, 30, 3, 3, 1, 1, 1, 1, 3, "add"),
]


@pytest.mark.parametrize("impl", ["implicit_vnni", "small_vnni"])
@pytest.mark.parametrize("threads", [1, 2])
def test_plane_copy_gives_the_reference_codes(impl, threads):
    layers = LAYERS + CONVERTED
    got, names = _run(layers, threads, module="test_conv_i8_plane_copy", ACCEL_CONV_IMPL=impl,
                      ACCEL_VERBOSE="1")
    if "avx512_vnni" in host_isa():
        assert names == [impl] * (2 * len(layers)), names
    _assert_reference_codes(got, layers, chain_of)
