"""The FP32 CONV's summation order (csrc/conv/f32_order.h) as the NumPy reference mirrors it
(reference.conv2d_f32, conv_dot_tail): on random small geometries every fp32 and fp16 CONV
gives the reference's bits, whichever implementation ACCEL_CONV_IMPL forces (each forced name
runs where it computes the geometry in that order; the list's choice elsewhere), with the
L1d sizes other hosts report, and on C16 tensors (the channel-blocked kernels). The
OpenBLAS paths (fc_blas, blas) sum in OpenBLAS's order and are not among them. Each setting
runs in a child process (the library reads the variables once per process)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from accel_codegen.sim import reference as ref

#: the fp32 implementations that keep f32_order.h's order (AVX-512 and x86-64-v3 builds)
ORDERED = ["implicit_avx512", "packed_avx512", "gemm_avx2", "dw_c16_avx512", "dw_rows_avx512",
           "dw_avx512", "dw_rows_avx2", "dw_avx2", "narrow_avx512"]

CHILD = r"""
import hashlib, json, sys
import numpy as np
from accel_codegen.sim import Device, Conv, Sdp
cases = json.loads(sys.argv[1])
dev = Device(num_threads=2)
out = []
for seed, (n, c, h, w, k, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, g), prec in cases:
    rng = np.random.default_rng(seed)
    dt = np.float16 if prec == "fp16" else np.float32
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    wt = rng.standard_normal((k, c // g, kh, kw)).astype(dt)
    conv = Conv(wt, stride=(sh, sw), padding=(pt, pl, pb, pr), dilation=(dh, dw), groups=g,
                precision=prec)
    # fp16: an SDP scale of 2^-8 keeps the accumulators' bits in the half output
    chain = [conv] if prec == "fp32" else [conv, Sdp(scale=np.full(k, 2**-8, dt),
                                                     precision=prec)]
    out.append(dev.run(chain, x)[0].tobytes().hex())
print(json.dumps(out))
"""


def _geometries(count, seed):
    """Small random geometries: 1x1 to 5x5 kernels, strides 1-2, dilation, padding, groups
    and depthwise, planes from 1 position to past the implicit GEMM's 512 columns (its
    choice and the dot-product tails of 1-8), depths across 32-deep blocks."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        kh, kw = (int(v) for v in rng.choice([1, 1, 2, 3, 3, 5], 2))
        sh, sw = (int(v) for v in rng.choice([1, 1, 2], 2))
        dh, dw = (int(v) for v in rng.choice([1, 1, 1, 2], 2))
        groups = int(rng.choice([1, 1, 1, 2, 0]))  # 0: depthwise
        c = int(rng.integers(1, 80))
        if groups == 0:
            groups = c
            k = c * int(rng.choice([1, 1, 2]))
        else:
            c = max(groups, c - c % groups)
            k = groups * int(rng.integers(1, 24))
        h, w = int(rng.integers(1, 30)), int(rng.integers(1, 40))
        pt, pl, pb, pr = (int(v) for v in rng.integers(0, 3, 4))
        n = int(rng.choice([1, 1, 2]))
        if (pt >= kh or pl >= kw or pb >= kh or pr >= kw or
                h + pt + pb < dh * (kh - 1) + 1 or w + pl + pr < dw * (kw - 1) + 1):
            continue
        geometry = ref.conv_geometry((n, c, h, w), (k, c // groups, kh, kw), (sh, sw),
                                     (pt, pl, pb, pr), (dh, dw), groups)
        if geometry.out_h * geometry.out_w == 1 and n > 1 and c // groups > 1:
            continue  # fc_blas: OpenBLAS's order
        cases.append((n, c, h, w, k, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, groups))
    return cases


#: geometries the tail rule turns on: ViT's 197 tokens (a tail of 5) and 50, a 1x1 whose
#: plane the implicit GEMM takes (28x28, no tail), a 7x7 and a classifier row (tails of 1),
#: a stride-2 3x3 576 deep (the L1d picks implicit or packed, equal sums), odd channels;
#: strided 1x1s (gemm_avx2 runs them over the phase they read): ResNet's downsampling on an odd
#: plane with a tail of 1 (13x13 /2 -> 7x7), batch 2 with the last column and row read, strides
#: (2, 1) and (3, 3), two groups; depthwise rows whose last step overlaps the one before
#: (dw_rows_avx2): 3x3/2 and 5x5/2 where it reads no padding column (the last even tap's
#: loads of 15 columns), a 60-wide 3x3 at stride 1
FIXED = [(1, 8, 48, 48, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 8),
         (1, 8, 40, 40, 8, 5, 5, 2, 2, 1, 1, 1, 1, 1, 1, 8),
         (1, 4, 9, 60, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4),
         (1, 40, 13, 13, 24, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1),
         (2, 24, 14, 11, 20, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1),
         (1, 16, 9, 30, 12, 1, 1, 2, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 9, 10, 11, 8, 1, 1, 3, 3, 0, 0, 0, 0, 1, 1, 1),
         (1, 32, 10, 10, 16, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 2),
         (1, 192, 1, 197, 192, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 37, 1, 50, 37, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 40, 28, 28, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 70, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),
         (1, 300, 1, 1, 30, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 64, 46, 46, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1),
         # pointwise to or from one channel (narrow_avx512): a layer norm's sum over ViT-Ti's
         # 192 channels (a tail of 5) and its broadcast back, a plane past one item's 1024
         # positions (1600: no tail), batch 2 with the implicit GEMM's plane (600: no tail),
         # a depth of 33 on 7 positions (all tail: the dot's last 16-lane step 1 deep), one channel
         # to 3
         (1, 192, 1, 197, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 1, 1, 197, 192, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 70, 40, 40, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (2, 40, 20, 30, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 33, 1, 7, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (2, 1, 5, 9, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         # the same to one channel where a block's last vectors end 1-15 positions short of
         # 128 (250 = 128 + 122, no tail; 625 = 25x25, the implicit GEMM's plane: no tail):
         # under the sanitizers' preload a load past the input fails it
         (1, 40, 1, 250, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 40, 25, 25, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         # a last panel of one vector under 8 channels at once (packed_avx512's ukr_8_1):
         # attention's values CONV (197 deep over a head's 64 positions: 48 + 16), 21 channels
         # (8 + 8 + 5), and 300 deep (several depth blocks: running totals read back)
         (1, 197, 1, 64, 21, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1),
         (1, 300, 1, 60, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1)]


def _run(cases, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE", "ACCEL_L1D_BYTES",
                            "ACCEL_L2_BYTES")}
    environ.update(env)
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases)],
                            capture_output=True, text=True, env=environ, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _expected(seed, geometry, precision):
    n, c, h, w, k, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, g = geometry
    rng = np.random.default_rng(seed)
    dt = np.float16 if precision == "fp16" else np.float32
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    wt = rng.standard_normal((k, c // g, kh, kw)).astype(dt)
    args = ((sh, sw), (pt, pl, pb, pr), (dh, dw), g)
    if precision == "fp32":
        return ref.conv2d_f32(x, wt, *args)
    acc = ref.conv2d_fp16(x, wt, *args)
    return ref.sdp_fp16(acc, scale=np.full(k, 2**-8, dt))


def test_every_ordered_implementation_gives_the_references_bits():
    geometries = FIXED + _geometries(24, seed=29)
    cases = [(i, geometry, precision) for i, geometry in enumerate(geometries)
             for precision in ("fp32", "fp16")]
    expected = [_expected(*case) for case in cases]
    # a 16 KB L2: gemm_avx2 splits the channels into chunks of a few blocks (and where the
    # outputs exceed a quarter of it, chunks outside the depth blocks: the FIXED tokens)
    settings = [{}, {"ACCEL_L1D_BYTES": "48K"},
                {"ACCEL_L2_BYTES": "16K", "ACCEL_CONV_IMPL": "gemm_avx2"}] + \
        [{"ACCEL_CONV_IMPL": name} for name in ORDERED]
    for env in settings:
        got = _run(cases, **env)
        for case, value, want in zip(cases, got, expected):
            y = np.frombuffer(bytes.fromhex(value), want.dtype).reshape(want.shape)
            differ = int((y != want).sum())
            assert differ == 0, (env, case, f"{differ} of {y.size} differ")


def test_the_tail_rule():
    """conv_dot_tail: an image's last ohw % 16 positions where that is 1-8 and the implicit
    GEMM is not chosen; depthwise and batched fully connected rows have no tail (-1)."""
    def tail(x_shape, w_shape, stride=1, padding=0, groups=1):
        return ref.conv_dot_tail(ref.conv_geometry(x_shape, w_shape, stride, padding, 1,
                                                   groups))
    assert tail((1, 192, 1, 197), (192, 192, 1, 1)) == 5  # ViT-Ti's tokens
    assert tail((1, 1024, 1, 1), (1000, 1024, 1, 1)) == 1  # a classifier row
    assert tail((1, 64, 7, 7), (64, 64, 3, 3), padding=1) == 1
    assert tail((1, 64, 14, 14), (64, 64, 3, 3), padding=1) == 4
    assert tail((1, 40, 28, 28), (24, 40, 1, 1)) == 0  # 784 = 49 x 16
    assert tail((1, 32, 23, 23), (8, 32, 1, 1)) == 0  # 529 % 16 = 1, the implicit GEMM's
    assert tail((1, 16, 46, 46), (8, 16, 3, 3), 2, 1) == 0  # 23x23 through implicit
    assert tail((1, 16, 9, 9), (16, 1, 3, 3), padding=1, groups=16) == -1
    assert tail((3, 70, 1, 1), (24, 70, 1, 1)) == -1


def test_the_c16_kernels_give_the_references_bits():
    """The channel-blocked kernels (c16_pointwise, c16_dense_3x3: runtime/src/device.c) sum
    as conv_f32 does, the dot-product tails included: the reference's bits. ViT-Ti's tokens
    (a tail of 5), a 3x3 on 14x14 (4) and on 7x7 (1), a stride-2 3x3 and 1x1."""
    from accel_codegen.sim import Conv, Device, Sdp
    device = Device(num_threads=2)
    rng = np.random.default_rng(16)
    for n, c, h, w, k, kernel, stride, pad in [(1, 192, 1, 197, 48, 1, 1, 0),
                                               (1, 64, 14, 14, 32, 3, 1, 1),
                                               (1, 32, 7, 7, 48, 3, 1, 1),
                                               (1, 32, 46, 46, 16, 3, 2, 1),
                                               (1, 32, 14, 14, 16, 1, 2, 0)]:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weights = rng.standard_normal((k, c, kernel, kernel)).astype(np.float32)
        scale = rng.uniform(0.5, 1.5, k).astype(np.float32)
        chain = [Conv(weights, stride=(stride, stride), padding=(pad,) * 4),
                 Sdp(scale=scale, shift=-scale, act="relu")]
        x16 = np.ascontiguousarray(x.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2))
        y = device.run(chain, x16, layout="c16", out_layout="c16")[0]
        y = y.transpose(0, 1, 4, 2, 3).reshape(n, k, *y.shape[2:4])
        assert np.array_equal(y, ref.run_chain(chain, x)), (n, c, h, w, k, kernel, stride)


WIDE = r"""
import sys
import numpy as np
from accel_codegen.sim import Device, Conv
rng = np.random.default_rng(32)
x = rng.standard_normal((1, 544, 1, 197)).astype(np.float32)
w = rng.standard_normal((2800, 544, 1, 1)).astype(np.float32)
out = [Device(num_threads=t).run([Conv(w)], x)[0] for t in (1, 2)]
sys.stdout.write(out[0].tobytes().hex() + " " + out[1].tobytes().hex())
"""


def test_a_wide_dense_layer_over_tokens_sums_alike_in_every_loop_order():
    """A dense layer too wide for its outputs to stay in L2 (2800 channels over 197 tokens,
    544 deep: two depth blocks): the packed path runs it in one block of the whole depth
    with a 32 KB L1d and a 1 MB L2 (conv/f32_packed_avx512.c's whole_depth_block), in two
    depth blocks outermost with a 32 KB L1d and a 256 KB L2, in passes of 16 channels over
    the whole depth (wide_outputs) with a 48 KB (panels outermost) L1d and a 1 MB L2, and
    block by block where the L2 holds the outputs (64 MB); forced onto gemm_avx2, another
    loop order again. The bits are the same at 1 and 2 threads. (The
    NumPy reference takes minutes on 300 M MACs: the order itself is held to it on the small
    geometries above.)"""
    results = []
    for env in [{"ACCEL_L1D_BYTES": "32K", "ACCEL_L2_BYTES": "1M"},
                {"ACCEL_L1D_BYTES": "32K", "ACCEL_L2_BYTES": "256K"},
                {"ACCEL_L1D_BYTES": "48K", "ACCEL_L2_BYTES": "1M"},
                {"ACCEL_L1D_BYTES": "48K", "ACCEL_L2_BYTES": "64M"},
                {"ACCEL_CONV_IMPL": "gemm_avx2"}]:
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE", "ACCEL_L1D_BYTES",
                                "ACCEL_L2_BYTES")}
        environ.update(env)
        result = subprocess.run([sys.executable, "-c", WIDE], capture_output=True, text=True,
                                env=environ, cwd=Path(__file__).parent)
        assert result.returncode == 0, result.stderr[-3000:]
        results.extend(result.stdout.split())
    values = np.frombuffer(bytes.fromhex(results[0]), np.float32)
    assert values.size == 2800 * 197 and np.isfinite(values).all() and values.std() > 1.0
    assert all(r == results[0] for r in results[1:])


EPILOGUES = r"""
import json, sys
import numpy as np
from accel_codegen.sim import Device, Conv, Sdp
cases = json.loads(sys.argv[1])
dev = Device(num_threads=2)
out = []
for seed, (n, c, h, w, k, kh, s, p, g), epi in cases:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    x[:, :, 1, :] = 0.0  # a row of zero outputs: a negative scale makes them -0
    x[0, 0, 2, 1] = np.nan
    wt = rng.standard_normal((k, c // g, kh, kh)).astype(np.float32)
    conv = Conv(wt, stride=(s, s), padding=(p,) * 4, groups=g)
    y0 = dev.run([conv], x)[0]
    sdp = {"act": epi.get("act"), "clip": epi.get("clip")}
    if "scale" in epi:
        sdp["scale"] = rng.uniform(-1.5, 1.5, k).astype(np.float32)
    if "shift" in epi:
        sdp["shift"] = rng.standard_normal(k).astype(np.float32)
    if epi.get("add"):
        sdp.update(ew_op="add", operand=rng.standard_normal(y0.shape).astype(np.float32))
    chain = [conv, Sdp(**sdp)]
    fused = dev.run(chain, x)[0]
    independent = dev.run(chain, x, mode="independent")[0]
    out.append([fused.tobytes().hex(), independent.tobytes().hex(), y0.tobytes().hex(),
                list(y0.shape), {k: v.tolist() if hasattr(v, "tolist") else v
                                 for k, v in sdp.items()}])
print(json.dumps(out))
"""

#: (n, c, h, w, k, kernel, stride, pad, groups) up to 32 deep, where conv/f32_gemm_avx2.c applies
#: a one-pass epilogue in the micro-kernel's store: MobileNetV2's 16 -> 96 1x1 on a plane with
#: a partial panel (667 positions, no tail), a 1x1 with a tail of 1 (9x9) and of 4 (batch 2,
#: 10x10), an RGB 3x3/2 stem (27 deep) with padding, two groups of 16 deep, 32 deep on 7x13;
#: and one 48 deep (two 32-deep blocks: the epilogue after the last)
SHALLOW = [(1, 16, 23, 29, 24, 1, 1, 0, 1), (1, 24, 9, 9, 20, 1, 1, 0, 1),
           (2, 8, 10, 10, 12, 1, 1, 0, 1), (1, 3, 33, 35, 16, 3, 2, 1, 1),
           (1, 32, 11, 12, 16, 1, 1, 0, 2), (1, 32, 7, 13, 9, 1, 1, 0, 1),
           (1, 48, 9, 11, 14, 1, 1, 0, 1)]
#: every one-pass epilogue's parts (sdp_f32_one_pass): scale and / or shift, ADD, NONE / RELU /
#: CLIP
SDP_FORMS = [{"scale": 1, "shift": 1, "act": "clip", "clip": [0.0, 6.0]},
             {"shift": 1, "act": "relu"}, {"scale": 1}, {"scale": 1, "act": "relu"},
             {"shift": 1, "add": 1}, {"scale": 1, "shift": 1, "add": 1, "act": "relu"},
             {"add": 1, "act": "clip", "clip": [-0.25, 0.5]}, {"act": "clip", "clip": [-1.0, 0.0]}]


def test_one_pass_epilogues_in_registers_give_the_passes_bits():
    """Shallow convolutions whose one-pass epilogue (scale / shift, ADD, RELU / CLIP) the AVX2
    GEMM applies in registers before its store: the same bits as the SDP engine's pass over
    the conv's output (an independent run), NaN and -0 included, and the reference's values,
    with the list's choice and gemm_avx2 forced (with a 16 KB L2: channels in chunks)."""
    cases = [(i * len(SDP_FORMS) + j, layer, epi) for i, layer in enumerate(SHALLOW)
             for j, epi in enumerate(SDP_FORMS)]
    for env in [{}, {"ACCEL_CONV_IMPL": "gemm_avx2"},
                {"ACCEL_CONV_IMPL": "gemm_avx2", "ACCEL_L2_BYTES": "16K"}]:
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE", "ACCEL_L1D_BYTES",
                                "ACCEL_L2_BYTES")}
        environ.update(env)
        result = subprocess.run([sys.executable, "-c", EPILOGUES, json.dumps(cases)],
                                capture_output=True, text=True, env=environ,
                                cwd=Path(__file__).parent)
        assert result.returncode == 0, result.stderr[-3000:]
        negative_zeros = 0
        for (seed, layer, epi), (fused, independent, conv, shape, sdp) in zip(
                cases, json.loads(result.stdout)):
            assert fused == independent, (env, layer, epi)
            y0 = np.frombuffer(bytes.fromhex(conv), np.float32).reshape(shape)
            y = np.frombuffer(bytes.fromhex(fused), np.float32).reshape(shape)
            args = {key: np.asarray(v, np.float32) for key, v in sdp.items()
                    if key in ("scale", "shift", "operand")}
            want = ref.sdp(y0, act=sdp["act"], clip=sdp["clip"], ew_op=sdp.get("ew_op"), **args)
            assert np.array_equal(y, want, equal_nan=True), (env, layer, epi)
            assert np.isnan(y).any() and (y != 0).sum() > y.size // 4, (layer, epi)
            negative_zeros += int(((y == 0) & np.signbit(y)).sum())
        assert negative_zeros > 0
