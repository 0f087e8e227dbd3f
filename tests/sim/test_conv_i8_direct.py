"""The INT8 direct kernels of few input channels per group (csrc/conv/i8_dw_avx2.c: depthwise
``dw_madd_avx2``, stems ``stem_madd_avx2``), forced by name (ACCEL_CONV_IMPL) on geometries
at their edges, against the NumPy reference bit for bit. The library reads ACCEL_CONV_IMPL once
per process, so the runs are in a child process; the reference is computed here from the same
seeds."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from accel_codegen.sim import reference as ref
from accel_codegen.sim.device import host_isa

# Layers (n, c, h, w, k, (kh, kw), (sh, sw), (top, left, bottom, right), (dh, dw), groups):
# depthwise 3x3 and 5x5 at strides 1 and 2 on planes from 1x1 to 112x112, odd widths (7, 13,
# 57, 113: a row's last vector partial), channels not a multiple of 8, a channel multiplier of
# 2, stride 3, dilation 2 (lone taps), a 7x1 and a 1x9 kernel, padding larger than the kernel
# needs and none, a batch of two, bands of rows (planes of more than 2048 outputs); stems on 2, 3
# and 4 channels (3x3/2, 7x7/2, 5x5/1); a one-channel input with 6 outputs; rows of more than
# 2048 outputs; small planes (eight channels in the lanes) at their edges. The converters:
# ReLU, CLIP, none, a residual add and a LUT in turn.
LAYERS = [
    (1, 32, 112, 112, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 32),
    (1, 19, 113, 57, 19, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 19),
    (2, 13, 14, 14, 13, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 13),
    (1, 21, 28, 27, 21, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 21),
    (1, 37, 7, 7, 37, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 37),
    (1, 11, 7, 7, 11, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 11),
    (1, 9, 1, 1, 9, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9),
    (1, 5, 2, 3, 5, (3, 3), (2, 2), (3, 3, 3, 3), (1, 1), 5),
    (1, 6, 20, 23, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),
    (1, 7, 25, 31, 7, (3, 3), (3, 3), (1, 2, 0, 1), (1, 1), 7),
    (1, 5, 19, 21, 5, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 5),
    (1, 4, 16, 33, 4, (5, 5), (2, 1), (4, 4, 4, 4), (2, 2), 4),
    (1, 3, 30, 10, 3, (7, 1), (2, 1), (3, 0, 3, 0), (1, 1), 3),
    (1, 3, 9, 64, 3, (1, 9), (1, 2), (0, 4, 0, 4), (1, 1), 3),
    (1, 8, 12, 12, 8, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 8),
    (1, 3, 64, 64, 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    (1, 3, 45, 47, 20, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),
    (2, 2, 17, 19, 5, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    (1, 4, 24, 24, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (1, 6, 10, 10, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # grouped, 3 channels a group
    (1, 1, 28, 28, 6, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    # small planes, eight channels in the lanes (at most 256 outputs, 8 channels or more):
    # asymmetric pads with a row dilation, stride 3 from a 20-wide row (16-column blocks, the
    # last overlapping), a column dilation (pairs 2 apart), a 7x7 kernel on a 7x7 plane with
    # a group of 2 channels, an even kernel width (no lone tap), 16 channels (the last group's
    # weights gathered from a padded copy) and 255 outputs
    (1, 24, 9, 11, 24, (3, 3), (1, 1), (0, 2, 1, 0), (2, 1), 24),
    (1, 16, 20, 20, 16, (3, 3), (3, 3), (1, 1, 1, 1), (1, 1), 16),
    (1, 8, 14, 14, 8, (3, 3), (1, 1), (1, 2, 1, 2), (1, 2), 8),
    (1, 10, 7, 7, 10, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1), 10),
    (1, 12, 10, 10, 12, (2, 4), (1, 1), (0, 1, 1, 2), (1, 1), 12),
    (2, 16, 15, 17, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16),
    # rows wider than a band's 2048 outputs (one row a band: its size was 0, then a divisor)
    (1, 3, 3, 2100, 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),
    (1, 2, 2, 2060, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    # small planes at an even column stride (X holds the even columns only): stride 2 on an
    # odd width, a column stride of 2 with a column dilation of 2 and asymmetric pads, 5x5/2
    # with a plane of 15 outputs, a residual add (converted after the sums)
    (1, 12, 15, 13, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 12),
    (1, 9, 11, 14, 9, (3, 3), (1, 2), (1, 0, 1, 2), (1, 2), 9),
    (1, 8, 5, 9, 8, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 8),
    (1, 17, 14, 14, 17, (3, 3), (2, 2), (0, 0, 1, 1), (1, 1), 17),
]

GEN = r"""
import numpy as np
from accel_codegen.sim import Conv, Sdp
from accel_codegen.sim.ops import LutInt8

def layer_chain(layer, index):
    n, c, h, w, k, kernel, stride, pad, dil, g = layer
    rng = np.random.default_rng(9000 + index)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (k, c // g, *kernel)).astype(np.int8)
    wt.reshape(-1)[::5] = -128  # trained models have -128
    conv = Conv(wt, stride=stride, padding=pad, dilation=dil, groups=g, precision="int8",
                in_zero=int(rng.integers(-128, 128)))
    # converters that spread the codes over about +-50: a sum's spread is about 5500 sqrt(depth)
    depth = c // g * kernel[0] * kernel[1]
    shift = int(np.round(np.log2(5500 * np.sqrt(depth) * 12000 / 50)))
    # the activations a conv's converter has (each its own form in the kernels' lanes), a
    # residual add and a LUT (converted by sdp_i8_span after the sums)
    n_out = ((h + pad[0] + pad[2] - dil[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
             (w + pad[1] + pad[3] - dil[1] * (kernel[1] - 1) - 1) // stride[1] + 1)
    act = ({}, {"act": "relu"}, {"act": "clip", "clip_lo": -30, "clip_hi": 40},
           {"act": "relu", "ew_op": "add", "ew_zero": 5, "ew_mul": 3 << 12, "ew_shift": 12,
            "operand": rng.integers(-128, 128, (n, k) + n_out).astype(np.int8)},
           {"act": "silu", "out_mul": 1, "out_shift": 7,
            # t = the scaled sum, about +-50: LO's 256 steps of 1 from -128, LE's of 8 beyond
            "lut": LutInt8(np.sort(rng.integers(-16000, 16000, 257)).astype(np.int16),
                           np.sort(rng.integers(-16000, 16000, 65)).astype(np.int16),
                           -128, -256, 0, 3)})[(index + 1) % 5]
    sdp = Sdp(precision="int8", bias=rng.integers(-2 ** 12, 2 ** 12, k).astype(np.int32),
              mul=rng.integers(1 << 13, 1 << 14, k).astype(np.int16),
              rshift=np.full(k, shift, np.uint8), out_zero=int(rng.integers(-20, 20)), **act)
    return x, [conv, sdp]
"""

CHILD = GEN + r"""
import json, sys
from accel_codegen.sim import Device
layers = json.loads(sys.argv[1])
out = {}
for threads in (1, 2, 3):
    dev = Device(num_threads=threads)
    for i, layer in enumerate(layers):
        x, chain = layer_chain(layer, i)
        out[f"{i}/{threads}"] = dev.run(chain, x, label=f"l{i}")[0].tobytes().hex()
print(json.dumps(out))
"""


def _run(impl):
    env = {k: v for k, v in os.environ.items() if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE")}
    env.update(ACCEL_CONV_IMPL=impl, ACCEL_VERBOSE="1")
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(LAYERS)], capture_output=True,
                            text=True, env=env, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    names = [line.split(",")[3] for line in result.stderr.splitlines()
             if line.startswith("accel_verbose,conv")]
    return json.loads(result.stdout), names


def _avx2():
    """Whether this build has the kernels (compiled for AVX2: host_isa), not whether the CPU
    has AVX2 (a build without -march=native on an AVX2 CPU has none)."""
    return "avx2" in host_isa()


def test_direct_kernels_compute_the_reference_exactly():
    """dw_madd_avx2 on every depthwise layer (one input channel per group), stem_madd_avx2 on
    the others (2 to 4 per group), at 1, 2 and 3 threads: the reference's codes bit for bit."""
    outputs, names = _run("dw_madd_avx2,stem_madd_avx2")
    scope = {}
    exec(GEN, scope)
    if _avx2():  # built (x86-64-v3 and AVX-512 builds): forced, it runs every layer
        want = ["dw_madd_avx2" if c // g == 1 else "stem_madd_avx2"
                for (_, c, *_, g) in LAYERS]
        assert names == want * 3, names
    for i, layer in enumerate(LAYERS):
        x, chain = scope["layer_chain"](layer, i)
        expected = ref.run_chain(chain, x)
        assert len(np.unique(expected)) > (10 if expected.size >= 200 else 1), layer
        for threads in (1, 2, 3):
            got = np.frombuffer(bytes.fromhex(outputs[f"{i}/{threads}"]), np.int8)
            assert np.array_equal(got.reshape(expected.shape), expected), (layer, threads)


# A LUT activation (the compiler's SiLU and hardswish tables, as EfficientNet's and
# MobileNetV3's depthwise layers have) converted in registers by dw_madd_avx2 in the AVX2
# build (sdp_i8_lanes8_lut on the accumulators, the plan's constants once per call): the bands
# at stride 1 and 2, odd widths, and the small planes (eight channels in the lanes; a last group
# of 5 channels, a batch of two, stride 2). Per-channel factors over a wide range give the t
# converter's direct form (2) and its split forms (0, 1) in one layer. The first layer has
# enough outputs for the table's plan (sdp_i8_lut.c plans a table once its runs reach
# LUT_PLAN_MIN_ELEMENTS values); every layer runs twice and both runs must be the reference's.
LUT_LAYERS = [
    (1, 24, 56, 56, (3, 3), (1, 1), "silu"),
    (1, 20, 57, 41, (5, 5), (2, 2), "silu"),
    (1, 11, 31, 33, (3, 3), (1, 1), "hardswish"),
    (2, 16, 7, 7, (5, 5), (1, 1), "silu"),
    (1, 13, 14, 14, (3, 3), (1, 1), "silu"),
    (1, 8, 28, 28, (3, 3), (2, 2), "hardswish"),
]

LUT_GEN = r"""
import numpy as np
from accel_codegen.sim import Conv, Sdp
from accel_codegen.quantization import encode_multipliers
from accel_codegen.quantization.calibration import TensorQuant
from accel_codegen.quantization.lut import layer_lut

def lut_chain(layer, index):
    n, c, h, w, kernel, stride, act = layer
    rng = np.random.default_rng(7000 + index)
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (c, 1, *kernel)).astype(np.int8)
    wt.reshape(-1)[::7] = -128
    pad = (kernel[0] // 2, kernel[1] // 2) * 2
    conv = Conv(wt, stride=stride, padding=pad, groups=c, precision="int8",
                in_zero=int(rng.integers(-128, 128)))
    # a sum's spread (about 74^2 sqrt(depth)) onto a few units of the activation's input,
    # each channel's factor 2^-5 .. 2^2 of that
    step = 4.0 / (74 * 74 * kernel[0] * kernel[1]) * np.exp2(rng.uniform(-5, 2, c))
    out = TensorQuant(0.05, -20)
    table = layer_lut(act, out, float(step.max()), "test")
    mul, rshift = encode_multipliers(step / table.input_step, "test")
    sdp = Sdp(precision="int8", bias=rng.integers(-2 ** 12, 2 ** 12, c).astype(np.int32),
              mul=mul, rshift=rshift, act=act, out_mul=1, out_shift=table.out_shift,
              out_zero=out.zero, lut=table.lut)
    return x, [conv, sdp]
"""

LUT_CHILD = LUT_GEN + r"""
import json, sys
from accel_codegen.sim import Device
layers = json.loads(sys.argv[1])
out = {}
for threads in (1, 2):
    dev = Device(num_threads=threads)
    for i, layer in enumerate(layers):
        x, chain = lut_chain(layer, i)
        for run in range(2):
            out[f"{i}/{threads}/{run}"] = dev.run(chain, x)[0].tobytes().hex()
print(json.dumps(out))
"""


def test_depthwise_lut_epilogue_computes_the_reference_exactly():
    """dw_madd_avx2 with a LUT activation (converted in registers in the AVX2 build, through
    sdp_i8_span in the others) on the bands and the small planes, at 1 and 2 threads: the
    reference's codes bit for bit."""
    env = {k: v for k, v in os.environ.items() if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE")}
    env.update(ACCEL_CONV_IMPL="dw_madd_avx2")
    result = subprocess.run([sys.executable, "-c", LUT_CHILD, json.dumps(LUT_LAYERS)],
                            capture_output=True, text=True, env=env, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout)
    scope = {}
    exec(LUT_GEN, scope)
    for i, layer in enumerate(LUT_LAYERS):
        x, chain = scope["lut_chain"](layer, i)
        expected = ref.run_chain(chain, x)
        assert len(np.unique(expected)) > 20, layer
        for key in (f"{i}/{t}/{r}" for t in (1, 2) for r in (0, 1)):
            got = np.frombuffer(bytes.fromhex(outputs[key]), np.int8)
            assert np.array_equal(got.reshape(expected.shape), expected), (layer, key)
