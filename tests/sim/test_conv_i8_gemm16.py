"""The AVX2 INT8 GEMMs (csrc/conv/i8_gemm_avx2.c, impls "gemm16_avx2" and "implicit16_avx2"):
forced on every geometry it computes, each gives the NumPy reference's codes bit for bit: 1x1
and kxk, strides 1-3, padding, dilation, groups, odd channel counts, weights of -128, every
in_zero, packed and unpacked weights (each in both packed layouts: stride-1 kxk layers pack
tap by tap), fully connected rows, and sums near the int32 bound. The library reads
ACCEL_CONV_IMPL once per process, so the layers run in a child process. On builds without the
kernels (AVX-512 VNNI builds, or no AVX2) the list's own choices run and must agree as well."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from accel_codegen.sim import reference as ref
from accel_codegen.sim import Conv, Sdp
from accel_codegen.sim.device import host_isa

# (n, c, h, w, k, kh, kw, stride, pad, dilation, groups, in_zero)
LAYERS = [
    (1, 24, 12, 12, 40, 3, 3, 1, 1, 1, 1, 5),      # 3x3, in_zero != 0
    (1, 48, 9, 9, 32, 1, 1, 1, 0, 1, 1, 0),        # 1x1 on a 9x9 plane (81: a 24/24/24/8 tile)
    (1, 64, 14, 14, 36, 1, 1, 2, 0, 1, 1, -7),     # 1x1 stride 2
    (2, 12, 8, 8, 18, 3, 3, 1, 1, 1, 3, 3),        # grouped, a batch of 2
    (1, 33, 15, 13, 17, 3, 3, 2, 1, 1, 1, -128),   # odd channels, stride 2, the lowest zero
    (1, 20, 11, 11, 9, 3, 3, 1, 2, 2, 1, 127),     # dilation 2, the highest zero
    (1, 7, 5, 9, 5, 2, 3, 1, 0, 1, 1, 9),          # odd depth (21: a half pair), 2x3 kernel
    (1, 3, 20, 20, 16, 7, 7, 2, 3, 1, 1, -20),     # an RGB stem
    (1, 16, 11, 11, 16, 3, 3, 1, 1, 1, 16, 2),     # depthwise (supported, not applied)
    (1, 10, 17, 19, 6, 5, 5, 3, 2, 1, 2, -1),      # stride 3, 5x5, 2 groups
    (3, 70, 1, 1, 24, 1, 1, 1, 0, 1, 1, 1),        # fully connected rows: matrix-vector
    (1, 16, 7, 7, 10, 7, 7, 1, 0, 1, 1, 4),        # a kernel as large as its input
    (1, 130, 30, 30, 12, 1, 1, 1, 0, 1, 1, -3),    # 900 positions: several tiles
    (1, 96, 9, 9, 20, 3, 3, 1, 1, 1, 1, -128),     # depth 864: depth chunks, 81 positions
    (1, 300, 7, 7, 44, 3, 3, 1, 1, 1, 1, 77),      # depth 2700 on 7x7: chunks, 6 blocks
    (1, 400, 13, 13, 10, 1, 1, 1, 0, 1, 2, -50),   # 2 groups of depth 200: chunks, 1x1
    (1, 6, 9, 75, 12, 3, 3, 2, 1, 1, 1, 3),        # stride 2 on rows of 75: vector gathers
    (1, 40, 20, 41, 16, 1, 1, 2, 0, 1, 1, 100),    # 1x1 stride 2, rows of 41
    (2, 100, 1, 1, 26, 1, 1, 1, 0, 1, 2, -128),    # fully connected, 2 groups of 13 (8 + 5)
    (1, 5, 1, 1, 8, 3, 3, 1, 1, 1, 1, 7),          # one position that reads padding
    # a last panel of 8 keeping at most 4 positions (g2_tail; 9x9 and 7x7 above keep 1)
    (1, 24, 11, 11, 13, 3, 3, 2, 1, 1, 1, -9),     # 6x6 outputs: 36 = 2 x 16 + 4
    (1, 12, 5, 10, 30, 1, 1, 1, 0, 1, 1, 60),      # 50 = 3 x 16 + 2, 30 channels (an odd block)
    (1, 300, 5, 7, 21, 3, 3, 1, 1, 1, 1, -128),    # 35 = 2 x 16 + 3 in depth chunks
    # the column builder's walk over depth rows and output rows (no divisions per row): an odd
    # depth (1161) in chunks that start inside a tap (packed tap by tap: 65 pairs a tap) and
    # tiles that start inside an output row (25 wide), dilation 2; stride 2 with an odd depth
    (1, 129, 27, 27, 10, 3, 3, 1, 1, 2, 1, 11),
    (1, 171, 9, 11, 14, 3, 3, 2, 1, 1, 1, -5),
]
# Sums at the int32 bound the library allows (depth <= 65536): (in - in_zero) = 255 times -128
# over 65 536 taps is -2 139 095 040; the bias brings the codes back into range. A 1x1 over 9
# positions (the GEMM) and a 3x3 on a 3x3 input (one position: the matrix-vector path).
DEEP = [(1, 65536, 3, 3, 9, 1, 1, 1, 0, 1, 1, -128), (1, 7281, 3, 3, 9, 3, 3, 1, 0, 1, 1, -128)]
# The implicit GEMM's own cases (stride 1): depth chunks, several tiles of output rows, the
# channels split when two rows do not fit, a kxk window on 2x2 outputs at the int32 bound.
IMPLICIT = [
    (1, 96, 20, 20, 40, 3, 3, 1, 1, 1, 1, -128),  # 48 pairs: 2 depth chunks
    (1, 16, 24, 40, 256, 3, 3, 1, 1, 1, 1, 9),    # tiles of a few output rows
    (1, 8, 6, 64, 1024, 3, 3, 1, 1, 1, 1, -3),    # one row's sums exceed the budget: split
    (1, 10, 6, 7, 8, 1, 1, 1, 1, 1, 1, -128),     # 1x1 with padding (forced only)
    (1, 7281, 4, 4, 9, 3, 3, 1, 0, 1, 1, -128),   # depth 65529 at the bound, 4 positions
]

# A child process runs the layers of the test module named in argv[4] (its chain_of): the
# library reads ACCEL_CONV_IMPL once per process.
CHILD = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[2])
chain_of = importlib.import_module(sys.argv[4]).chain_of
from accel_codegen.sim import Device
dev = Device(num_threads=int(sys.argv[3]))
out = {}
for i, layer in enumerate(json.loads(sys.argv[1])):
    for packed in (0, 1):
        x, chain = chain_of(layer, packed)
        out[f"{i}/{packed}"] = dev.run(chain, x)[0].tobytes().hex()
print(json.dumps(out))
"""


# Layers with the converters the compiler emits (a per-channel int16 mul, shifts of 17 and
# more, an output zero point): ReLU, ReLU6's clip, none and a residual add run the lane forms
# (sdp_i8_lanes.h: 4, 3 and the add's) where the layers above (shift 9) run the direct one.
# 16 -> 96 on 28x28 (MobileNetV2's expansion: tiles of 17, 17 and 15 panels of 16, each run by
# one micro-kernel call per 6 channels), 56 positions (3 panels of 16 and one of 8 keeping 8;
# 20 channels: calls of 6, 6, 6 and 2), 81 (the matrix-vector tail), 7 channels (6 + 1).
CONVERTED = [
    (1, 16, 28, 28, 96, 1, 1, 1, 0, 1, 1, -128, "clip"),
    (1, 24, 7, 8, 20, 1, 1, 1, 0, 1, 1, 5, "none"),
    (1, 32, 9, 9, 13, 1, 1, 1, 0, 1, 1, -128, "relu"),
    (1, 40, 10, 12, 30, 3, 3, 2, 1, 1, 1, 3, "add"),
    (2, 24, 10, 10, 36, 3, 3, 1, 1, 1, 3, -5, "relu"),
    (1, 8, 30, 30, 7, 1, 1, 1, 0, 1, 1, 127, "clip"),
    (1, 64, 12, 12, 40, 1, 1, 1, 0, 1, 1, -128, "add"),
]


def _converter(layer, rng, x, wt, out_shape):
    """The compiler's kind of SDP for CONVERTED's layers: per-channel mul, a shift that leaves
    the codes spread over the range, out_zero, a bias that centres each channel's sums; kind:
    ReLU, clip (ReLU6), none or a residual add (an operand of codes, ReLU)."""
    n, c, h, w, k, kh, kw, s, p, d, g, z, kind = layer
    depth = c // g * kh * kw
    sums = ref.conv2d_int8(x, wt, s, p, d, g, z)
    bias = -np.median(sums, axis=(0, 2, 3)).astype(np.int32)
    mul = rng.integers(8192, 32768, k).astype(np.int16)
    rshift = np.full(k, 21 + int(np.ceil(np.log2(depth) / 2)), np.uint8)
    params = dict(precision="int8", bias=bias, mul=mul, rshift=rshift, out_zero=-20)
    if kind == "relu":
        params.update(act="relu")
    elif kind == "clip":
        params.update(act="clip", clip_lo=-20, clip_hi=90)
    elif kind == "add":
        params.update(ew_op="add", act="relu", ew_zero=7, ew_mul=3 << 12, ew_shift=12,
                      operand=rng.integers(-128, 128, out_shape).astype(np.int8))
    return Sdp(**params)


def chain_of(layer, packed):
    """The input and the conv + SDP chain of a layer (the same in the child and here)."""
    n, c, h, w, k, kh, kw, s, p, d, g, z = layer[:12]
    rng = np.random.default_rng(sum(layer[:12]) + 1000 * len(LAYERS))
    deep = c >= 4096
    if deep:  # every product at its most negative in channels 0..3, random elsewhere
        x = np.full((n, c, h, w), 127, np.int8)
        wt = np.full((k, c // g, kh, kw), -128, np.int8)
        wt[4:] = rng.integers(-128, 128, wt[4:].shape)
        bias = np.full(k, 255 * 128 * (c // g) * kh * kw, np.int32)
        bias[4:] = 0
        rshift = np.full(k, 16, np.uint8)
    else:
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
        wt = rng.integers(-128, 128, (k, c // g, kh, kw)).astype(np.int8)
        wt.flat[:: 7] = -128
        bias = rng.integers(-3000, 3000, k).astype(np.int32)
        rshift = np.full(k, 9, np.uint8)
    conv = Conv(wt, stride=(s, s), padding=(p,) * 4, dilation=(d, d), groups=g, precision="int8",
                in_zero=z)
    if packed:
        conv = conv.packed_for("nv_full", in_c=c)
    if len(layer) > 12:
        oh, ow = ((e + 2 * p - d * (kk - 1) - 1) // s + 1 for e, kk in ((h, kh), (w, kw)))
        return x, [conv, _converter(layer, rng, x, wt, (n, k, oh, ow))]
    return x, [conv, Sdp(precision="int8", bias=bias, rshift=rshift)]


def _run(layers, threads, module="test_conv_i8_gemm16", **env):
    """The layers (``module``'s chain_of) run in a child with ``env``: the outputs, and the
    kernels' names that ACCEL_VERBOSE printed."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE")}
    environ.update(env)
    here = str(Path(__file__).parent)
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(layers), here, str(threads),
                             module], capture_output=True, text=True, env=environ, cwd=here)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [l for l in result.stderr.splitlines() if l.startswith("accel_verbose")]
    return json.loads(result.stdout), [l.split(",")[3] for l in lines]


def _has_kernel():
    """Whether this build has gemm16_avx2: AVX2 without AVX-512 VNNI, by what the library was
    compiled for (host_isa), not the CPU (a build without -march=native on an AVX2 CPU has
    none)."""
    isa = host_isa()
    return "avx2" in isa and "avx512_vnni" not in isa


def _implicit_computes(layer):
    """Whether implicit16_avx2 computes a layer when forced: grouped or dense, stride 1, more
    than one output position."""
    n, c, h, w, k, kh, kw, s, p, d, g, z = layer[:12]
    return c // g > 1 and s == 1 and (h + 2 * p - d * (kh - 1)) * (w + 2 * p - d * (kw - 1)) > 1


def _assert_reference_codes(got, layers, chain_of):
    """Each layer's child output (``_run``'s, packed and unpacked) equal to the reference's
    codes of ``chain_of``'s chain."""
    for i, layer in enumerate(layers):
        for packed in (0, 1):
            x, chain = chain_of(layer, packed)
            expected = ref.run_chain(chain, x)
            y = np.frombuffer(bytes.fromhex(got[f"{i}/{packed}"]), np.int8).reshape(expected.shape)
            assert np.array_equal(y, expected), (layer, packed, int(np.sum(y != expected)))


def _check(layers, threads, impl="gemm16_avx2"):
    got, names = _run(layers, threads, ACCEL_CONV_IMPL=impl, ACCEL_VERBOSE="1")
    if _has_kernel():
        computes = [impl == "gemm16_avx2" or _implicit_computes(layer) for layer in layers]
        assert [name == impl for name in names] == [c for c in computes for _ in (0, 1)], names
    else:  # not built: forcing it leaves the list's choices
        assert len(names) == 2 * len(layers) and impl not in names, names
    _assert_reference_codes(got, layers, chain_of)


def test_gemm16_gives_the_reference_codes():
    _check(LAYERS, 2)


def test_gemm16_one_thread_and_sums_near_the_int32_bound():
    _check(LAYERS[:3] + DEEP, 1)
    # the bound is reached: channel 0's sum is -2 139 095 040, its code (sum + bias) >> 16 = 0
    x, chain = chain_of(DEEP[0], 0)
    assert ref.run_chain(chain, x)[0, 0].max() == 0


def test_gemm16_with_the_compilers_converters():
    """The lane converters' forms in the GEMMs' epilogues (ReLU, clip, none, residual add),
    with 2 threads and 1, forced and as the list chooses, against the reference's codes."""
    _check(CONVERTED, 2)
    _check(CONVERTED, 1)
    _check(CONVERTED, 2, "implicit16_avx2")
    # the converters span the codes: the test would see a wrong sum
    for layer in CONVERTED:
        x, chain = chain_of(layer, 0)
        assert len(np.unique(ref.run_chain(chain, x))) > 40, layer


def test_implicit16_gives_the_reference_codes():
    """Forced on every layer above (those it does not compute run the list's choice) and its
    own, with 2 threads and 1: the sums of the pair copy equal the reference's."""
    _check(LAYERS + IMPLICIT, 2, "implicit16_avx2")
    _check(IMPLICIT + LAYERS[:1] + LAYERS[5:6], 1, "implicit16_avx2")


def test_gemm16_reads_the_tap_by_tap_layout():
    """Stride-1 kxk layers pack tap by tap; the column GEMM runs them from that layout where
    the implicit one is not chosen (7x7 planes, one position)."""
    _check(IMPLICIT[:2] + LAYERS[14:15], 2)


def test_gemm16_runs_where_the_list_chooses_it():
    """Dense and grouped layers take gemm16_avx2 in an AVX2 build without VNNI, but stride-1
    kxk layers on planes whose rows drop at most a fifteenth of their columns take
    implicit16_avx2 (a 40-wide plane: 2 of 42; a 20-wide one: 2 of 22 is too many; grouped
    here: packed stride-1 3x3 layers of one group and 32 channels or more take winograd16_avx2,
    test_conv_i8_winograd.py); depthwise layers take none of them."""
    grouped = [(1, 96, 20, 20, 40, 3, 3, 1, 1, 1, 2, -128),
               (1, 16, 24, 40, 256, 3, 3, 1, 1, 1, 2, 9)]
    _, names = _run(LAYERS[:2] + LAYERS[8:9] + grouped, 2, ACCEL_VERBOSE="1")
    if _has_kernel():
        assert names[:4] == ["gemm16_avx2"] * 4, names
        assert not {"gemm16_avx2", "implicit16_avx2"} & set(names[4:6]), names
        assert names[6:] == ["gemm16_avx2"] * 2 + ["implicit16_avx2"] * 2, names
    else:
        assert len(names) == 10 and not {"gemm16_avx2", "implicit16_avx2"} & set(names), names
