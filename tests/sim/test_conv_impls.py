"""The CONV implementation lists (csrc/conv/): forcing an implementation by name
(ACCEL_CONV_IMPL), the line ACCEL_VERBOSE prints for each CONV call, and the fp32 bits with the
L1d sizes other hosts report (ACCEL_L1D_BYTES). The library reads these variables once per
process, so each setting runs in a child process."""
import functools
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from accel_codegen.sim import reference as ref
from accel_codegen.sim import Conv, Sdp

I8_IMPLS = ["dw_rows_vbmi", "dw_vnni", "im2col_vnni", "stem_vbmi", "amx", "small_vnni",
            "dw_madd_avx2", "stem_madd_avx2", "implicit_vnni", "winograd16_avx2",
            "implicit16_avx2", "gemm16_avx2", "portable"]
F32_IMPLS = ["fc_blas", "narrow_avx512", "dw_c16_avx512", "dw_rows_avx512", "dw_avx512", "implicit_avx512",
             "packed_avx512", "dw_rows_avx2", "dw_avx2", "gemm_avx2", "blas"]
C16_IMPLS = ["c16_pointwise", "c16_depthwise", "c16_dense_3x3", "c16_winograd", "c16_stem",
             "c16_stem_pool"]
LINE = re.compile(r"^accel_verbose,conv,(int8|fp32|fp16),(\w+),mb(\d+)_g(\d+)_ic(\d+)oc(\d+)_"
                  r"ih(\d+)oh(\d+)kh(\d+)sh(\d+)dh(\d+)ph(\d+)_iw(\d+)ow(\d+)kw(\d+)sw(\d+)"
                  r"dw(\d+)pw(\d+),(.*)$")

# (n, c, h, w, k, kernel, stride, pad, groups): a dense 3x3, a 1x1, depthwise 3x3 and 5x5/2, a
# 7x7 depthwise, an RGB stem, a batch of fully connected rows, a grouped conv, a layer norm's
# sum over the channels (a 1x1 to one channel), a 7x7 grid.
LAYERS = [(1, 24, 12, 12, 40, 3, 1, 1, 1), (1, 48, 9, 9, 32, 1, 1, 0, 1),
          (1, 16, 11, 11, 16, 3, 1, 1, 16), (1, 20, 13, 13, 20, 5, 2, 2, 20),
          (1, 8, 9, 9, 8, 7, 1, 3, 8), (1, 3, 20, 20, 16, 7, 2, 3, 1),
          (3, 70, 1, 1, 24, 1, 1, 0, 1), (2, 12, 8, 8, 18, 3, 1, 1, 3),
          (1, 40, 1, 197, 1, 1, 1, 0, 1), (1, 64, 7, 7, 64, 3, 1, 1, 1)]

CHILD = r"""
import hashlib, json, sys, zlib
import numpy as np
from accel_codegen.sim import Device, Conv, Sdp
layers, precisions = json.loads(sys.argv[1]), sys.argv[2].split(",")
act = sys.argv[3] if len(sys.argv) > 3 else "relu"
dev = Device(num_threads=2)
out = {}
for i, (n, c, h, w, k, kh, s, p, g) in enumerate(layers):
    layout = "nchw"
    if isinstance(kh, list):  # [kernel, layout]
        kh, layout = kh
    for prec in precisions:
        if layout == "c16" and prec == "int8":
            continue
        rng = np.random.default_rng(zlib.crc32(json.dumps([layers[i], prec]).encode()))
        shape = (n, c, h, w)
        if prec == "int8":
            x = rng.integers(-128, 128, shape).astype(np.int8)
            wt = rng.integers(-128, 128, (k, c // g, kh, kh)).astype(np.int8)
            chain = [Conv(wt, stride=(s, s), padding=(p,) * 4, groups=g, precision="int8",
                          in_zero=5), Sdp(precision="int8", rshift=np.full(k, 10, np.uint8))]
        else:
            x = rng.standard_normal(shape).astype(np.float32)
            wt = rng.standard_normal((k, c // g, kh, kh)).astype(np.float32)
            sc = rng.uniform(0.5, 1.5, k).astype(np.float32)
            chain = [Conv(wt, stride=(s, s), padding=(p,) * 4, groups=g),
                     Sdp(scale=sc, shift=-sc, act=act)]
        if layout == "c16":
            x16 = np.ascontiguousarray(x.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2))
            y = dev.run(chain, x16, layout="c16", out_layout="c16", label=f"l{i} {prec}")[0]
            y = y.transpose(0, 1, 4, 2, 3).reshape(n, k, *y.shape[2:4])
        else:
            y = dev.run(chain, x, label=f"l{i} {prec}")[0]
        out[f"{i}/{prec}"] = [hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest(),
                              np.ascontiguousarray(y).tobytes().hex()]
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=None)
def _child_cached(layers_json, precisions, env_items, act):
    return _run_child(layers_json, precisions, dict(env_items), act)


def _child(layers, precisions, act="relu", **env):
    """The child's outputs {layer/precision: [sha, hex bytes]} and its ACCEL_VERBOSE lines
    (each setting run once per test session); `act`: the fp32 layers' activation."""
    return _child_cached(json.dumps(layers), ",".join(precisions), tuple(sorted(env.items())),
                         act)


def _run_child(layers_json, precisions, env, act="relu"):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE", "ACCEL_L1D_BYTES")}
    environ.update(env)
    result = subprocess.run([sys.executable, "-c", CHILD, layers_json, precisions, act],
                            capture_output=True, text=True, env=environ, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [l for l in result.stderr.splitlines() if l.startswith("accel_verbose")]
    return json.loads(result.stdout), lines


def _reference(layer, precision, act="relu"):
    """What the child computes for `layer`, by the NumPy reference."""
    n, c, h, w, k, kh, s, p, g = layer
    rng = np.random.default_rng(zlib.crc32(json.dumps([list(layer), precision]).encode()))
    if precision == "int8":
        x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
        wt = rng.integers(-128, 128, (k, c // g, kh, kh)).astype(np.int8)
        chain = [Conv(wt, stride=(s, s), padding=(p,) * 4, groups=g, precision="int8",
                      in_zero=5), Sdp(precision="int8", rshift=np.full(k, 10, np.uint8))]
    else:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((k, c // g, kh, kh)).astype(np.float32)
        sc = rng.uniform(0.5, 1.5, k).astype(np.float32)
        chain = [Conv(wt, stride=(s, s), padding=(p,) * 4, groups=g),
                 Sdp(scale=sc, shift=-sc, act=act)]
    return ref.run_chain(chain, x)


def _values(hexbytes, like):
    return np.frombuffer(bytes.fromhex(hexbytes), dtype=like.dtype).reshape(like.shape)


def _parse(line):
    m = LINE.match(line)
    assert m, f"not an ACCEL_VERBOSE conv line: {line!r}"
    return m.group(1), m.group(2), tuple(int(v) for v in m.groups()[2:-1])


def _default_run():
    """LAYERS (fp32 and int8) and L1_LAYERS (fp32) as the lists choose, L1d 32 KiB, verbose."""
    return _child(LAYERS + L1_LAYERS, ["fp32", "int8"], ACCEL_VERBOSE="1", ACCEL_L1D_BYTES="32K")


def test_verbose_prints_one_line_per_conv_with_its_implementation():
    """ACCEL_VERBOSE=1: one line per CONV call, its precision, implementation, geometry and
    the run's label (the C16 kernels' too); without it, none. The lists' choices compute the
    reference."""
    outputs, lines = _default_run()
    calls = [(index, layer, precision) for index, layer in enumerate(LAYERS + L1_LAYERS)
             for precision in ("fp32", "int8")
             if not (isinstance(layer[5], list) and precision == "int8")]  # C16: fp32 only
    assert len(lines) == len(calls), lines
    for line, (index, (n, c, h, w, k, kh, s, p, g), expected_precision) in zip(lines, calls):
        precision, impl, dims = _parse(line)
        assert line.endswith(f",l{index} {expected_precision}"), line  # the run's label
        kh = kh[0] if isinstance(kh, list) else kh
        assert precision == expected_precision, line
        assert impl in (F32_IMPLS + C16_IMPLS if precision == "fp32" else I8_IMPLS), line
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kh) // s + 1
        assert dims == (n, g, c, k, h, oh, kh, s, 1, p, w, ow, kh, s, 1, p), line
    assert _parse(lines[-1])[1] == "c16_dense_3x3" or " avx512f" not in _cpu_flags()
    for layer in LAYERS:
        _assert_reference(outputs, layer)
    assert _child(L1_LAYERS, ["fp32"], ACCEL_L1D_BYTES="65536")[1] == []


def _cpu_flags():
    path = Path("/proc/cpuinfo")
    return path.read_text() if path.exists() else ""


def _openblas(layer):
    """A batch of fully connected rows: fc_blas, in OpenBLAS's order (conv/f32_order.h)."""
    n, c, h, w, k, kh, s, p, g = layer
    return n > 1 and c // g > 1 and (h + 2 * p - kh) // s + 1 == 1 and \
        (w + 2 * p - kh) // s + 1 == 1


def _assert_reference(outputs, layer, what="", blas=False):
    """INT8 exactly; FP32 bit for bit (the reference sums in conv/f32_order.h's order) but on
    the OpenBLAS paths (``blas`` forced, or fc_blas's layers), within rounding."""
    i = LAYERS.index(layer)
    expected = _reference(layer, "int8")
    got = _values(outputs[f"{i}/int8"][1], expected)
    assert np.array_equal(got, expected), (what, layer)
    expected = _reference(layer, "fp32")
    got = _values(outputs[f"{i}/fp32"][1], expected)
    if blas or _openblas(layer):
        np.testing.assert_allclose(got, expected, rtol=1e-4,
                                   atol=1e-4 * np.abs(expected).max(), err_msg=f"{what} {layer}")
    else:
        assert np.array_equal(got, expected), (what, layer)


# Forced sets: one process each, the first named implementation that supports a layer runs it.
FORCED = [("dw_vnni,im2col_vnni", "dw_avx512,implicit_avx512"), ("portable", "blas"),
          ("implicit_vnni,amx", "packed_avx512")]


def test_forced_implementations_compute_the_reference():
    """ACCEL_CONV_IMPL=name runs that implementation wherever it supports the geometry (the
    verbose line says so; the others keep the list's choice), and every one computes the
    reference: INT8 exactly, FP32 too but on the OpenBLAS paths (within rounding)."""
    ran = {_parse(line)[1] for line in _default_run()[1]}
    for i8, f32 in FORCED:
        outputs, lines = _child(LAYERS, ["fp32", "int8"], ACCEL_VERBOSE="1",
                                ACCEL_CONV_IMPL=f"{i8},{f32}")
        names = [_parse(line)[1] for line in lines]
        ran.update(names)
        if i8 == "portable":
            assert set(names) == {"portable", "blas"}, names
        for layer in LAYERS:
            _assert_reference(outputs, layer, f"{i8},{f32}", blas=f32 == "blas")
    # every implementation this build has ran somewhere (the ISA-specific ones where compiled)
    assert {"portable", "blas", "fc_blas"} <= ran
    flags = _cpu_flags()
    if " avx512f" in flags:
        assert {"narrow_avx512", "dw_c16_avx512", "dw_rows_avx512", "dw_avx512",
                "implicit_avx512", "packed_avx512"} <= ran
    if " avx512_vnni" in flags:
        assert {"dw_vnni", "im2col_vnni", "small_vnni", "implicit_vnni"} <= ran
    if " avx512_vnni" in flags and " avx512vbmi" in flags:
        assert {"dw_rows_vbmi", "stem_vbmi"} <= ran


# fp32 layers whose implementation or depth blocking depends on the L1d size: a stride-2 3x3
# 576 deep (the implicit GEMM up to 1024 deep with a 32 KiB L1d, 512 with 48 KiB) with an
# output of 23x23 (529 positions: the packed path's dot-product tail of 1) and of 28x28 (no
# tail), deep 1x1 and 3x3 layers (128- or 512-deep cache blocks), depthwise 3x3 on a 7x7 and a
# 12x12 plane (the row kernel's rows of 8 or 4 on the second), and the same stride-2 conv on
# C16 tensors (conv3x3_c16.c follows conv_f32_dot_tail).
L1_LAYERS = [(1, 64, 46, 46, 32, 3, 2, 1, 1), (1, 64, 56, 56, 16, 3, 2, 1, 1),
             (1, 640, 7, 7, 32, 1, 1, 0, 1), (1, 160, 9, 9, 16, 3, 1, 1, 1),
             (1, 96, 7, 7, 96, 3, 1, 1, 96), (1, 96, 12, 12, 96, 3, 1, 1, 96),
             (1, 64, 46, 46, 32, [3, "c16"], 2, 1, 1)]


def test_fp32_bits_do_not_depend_on_the_l1d_size():
    """The fp32 paths with the L1d sizes other hosts report (32, 48 and 64 KiB) give the same
    bits (conv/f32_order.h)."""
    base, base_lines = _default_run()
    offset = len(LAYERS)
    runs = {l1: _child(L1_LAYERS, ["fp32"], ACCEL_L1D_BYTES=l1, ACCEL_VERBOSE="1")
            for l1 in ("48K", "65536")}
    for l1, (outputs, _) in runs.items():
        for i in range(len(L1_LAYERS)):
            assert outputs[f"{i}/fp32"][0] == base[f"{i + offset}/fp32"][0], (
                f"{L1_LAYERS[i]}: L1d {l1} gives other bits than 32 KiB")
    # the settings reach the kernels: on AVX-512 builds the stride-2 conv with no tail takes the
    # implicit GEMM with 32 KiB and the packed panels with 48 KiB (the same bits)
    first = _parse([l for l in base_lines if "fp32" in l][offset + 1])[1]
    if first == "implicit_avx512":
        assert _parse(runs["48K"][1][1])[1] == "packed_avx512"


SETTING = r"""
import numpy as np
from accel_codegen.sim import Device, Conv
x = np.ones((1, 8, 6, 6), np.float32)
print(Device(num_threads=1).run([Conv(np.ones((4, 8, 3, 3), np.float32), padding=(1,) * 4)], x)[0].sum())
"""


@pytest.mark.parametrize("value, read", [
    ("1M", "read as 1048576 bytes"), ("48k", "read as 49152 bytes"), ("65536", "read as 65536 bytes"),
    ("3m", "read as 3145728 bytes"), ("99999999999999999999999K", "read as 1073741824 bytes (clamped)"),
    ("4096M", "read as 1073741824 bytes (clamped)"), ("12X", "ignored"), ("48KB", "ignored"),
    ("-32K", "ignored"), (" 32K", "ignored"), ("K", "ignored")])
def test_l1d_setting_is_read_with_its_suffix_or_ignored(value, read):
    """ACCEL_L1D_BYTES takes bytes, KiB (K) or MiB (M), clamps what overflows and ignores anything
    else (with ACCEL_VERBOSE, a line says how it was read); the conv runs either way."""
    _check_cache_setting("ACCEL_L1D_BYTES", value, read)


@pytest.mark.parametrize("value, read", [
    ("16K", "read as 16384 bytes"), ("2m", "read as 2097152 bytes"), ("512KiB", "ignored")])
def test_l2_setting_is_read_like_the_l1d_one(value, read):
    """ACCEL_L2_BYTES (the fp32 plans' L2 size: gemm_avx2's channel chunks) is read as
    ACCEL_L1D_BYTES is, by the same parser."""
    _check_cache_setting("ACCEL_L2_BYTES", value, read)


def _check_cache_setting(name, value, read):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("ACCEL_CONV_IMPL", "ACCEL_L1D_BYTES", "ACCEL_L2_BYTES")}
    environ.update({"ACCEL_VERBOSE": "1", name: value})
    result = subprocess.run([sys.executable, "-c", SETTING], capture_output=True, text=True,
                            env=environ, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout) == 4 * (16 * 72 + 16 * 48 + 4 * 32), result.stdout
    said = [l for l in result.stderr.splitlines() if l.startswith(f"accel: {name}=")]
    assert said == [f"accel: {name}={value} {read}"] if read != "ignored" else \
        len(said) == 1 and said[0].startswith(f"accel: {name}={value} ignored"), said


# Depthwise layers both fp32 depthwise kernels compute (3x3 and 5x5, strides 1 and 2): a batch
# of two with a plane wider than high, channels not a multiple of 16 (a partial block), a 5x5
# kernel with padding 1, a strided row of 8, one 16-channel plane large enough to be split into
# bands of rows between the two threads.
DW_LAYERS = [(2, 40, 9, 13, 40, 5, 1, 2, 40), (1, 24, 14, 14, 24, 5, 2, 2, 24),
             (1, 17, 7, 5, 17, 3, 1, 1, 17), (1, 32, 6, 6, 32, 5, 1, 1, 32),
             (1, 48, 15, 15, 48, 3, 2, 1, 48), (1, 16, 64, 64, 16, 5, 1, 2, 16)]


def test_depthwise_kernels_give_the_same_bits():
    """The channel-blocked depthwise kernel (dw_c16_avx512) sums as the row kernel
    (dw_rows_avx512): every output the same bits (conv/f32_order.h), whichever the list picks."""
    runs = {impl: _child(DW_LAYERS, ["fp32"], ACCEL_CONV_IMPL=impl, ACCEL_VERBOSE="1")
            for impl in ("dw_rows_avx512", "dw_c16_avx512")}
    if " avx512f" in _cpu_flags():  # elsewhere neither is built: the list's choice ran twice
        for impl, (_, lines) in runs.items():
            assert {_parse(line)[1] for line in lines} == {impl}, lines
    for i, layer in enumerate(DW_LAYERS):
        assert runs["dw_c16_avx512"][0][f"{i}/fp32"][0] == \
            runs["dw_rows_avx512"][0][f"{i}/fp32"][0], layer
        expected = _reference(layer, "fp32")
        got = _values(runs["dw_c16_avx512"][0][f"{i}/fp32"][1], expected)
        assert np.array_equal(got, expected), layer  # taps in order (conv/f32_order.h)


@pytest.mark.parametrize("act", ["silu", "sigmoid", "hardswish", "hardsigmoid"])
def test_depthwise_lut_epilogues_give_the_same_bits(act):
    """dw_c16_avx512 applies a scale / shift and these activations to its channel-blocked
    outputs (activation_affine_c16, lanes past a partial block's channels discarded), the row
    kernel per channel on the NCHW planes: the same bits, and the reference's."""
    runs = {impl: _child(DW_LAYERS, ["fp32"], act, ACCEL_CONV_IMPL=impl)
            for impl in ("dw_rows_avx512", "dw_c16_avx512")}
    for i, layer in enumerate(DW_LAYERS):
        assert runs["dw_c16_avx512"][0][f"{i}/fp32"][0] == \
            runs["dw_rows_avx512"][0][f"{i}/fp32"][0], layer
        expected = _reference(layer, "fp32", act)
        got = _values(runs["dw_c16_avx512"][0][f"{i}/fp32"][1], expected)
        assert np.array_equal(got, expected), layer


# fp32 layers for the AVX2 kernels beside those above: dot-product tails of 4 (14x14) and 1
# (7x7, 5x5 600 deep: depth blocks), a classifier row (all tail), a 1x1 on 56x56 and a
# 5x5 on 30x30 (the implicit GEMM: no tail), a stride-2 3x3 with a tail of 1 (packed), an RGB
# stride-2 stem, a batch of two 10x10 images (tails of 4), a depthwise 3x3/2 on 28x28, a
# one-channel input with 6 outputs, a depthwise 9x9 (dw_avx2's copy), and for dw_rows_avx2
# (3x3 and 5x5 by rows: in-place steps, steps across an edge, padding rows): MobileNetV2's
# 3x3 on 14x14 and 7x7 (rows of 8), 5x5 and 5x5/2 with odd planes, a plane narrower than a
# step, asymmetric and wide padding, a depth multiplier of 2 on a batch of two; rows whose last
# step overlaps the step before and, at stride 2, reads no padding column (3x3/2 on 112x112
# and 48x48, 5x5/2 on 40x40 with a padding of 1).
AVX2_LAYERS = [(1, 64, 14, 14, 64, 3, 1, 1, 1), (1, 256, 7, 7, 100, 1, 1, 0, 1),
               (1, 1024, 1, 1, 1000, 1, 1, 0, 1), (1, 32, 56, 56, 64, 1, 1, 0, 1),
               (1, 8, 30, 30, 12, 5, 1, 2, 1), (1, 16, 23, 23, 24, 3, 2, 1, 1),
               (1, 3, 32, 32, 16, 3, 2, 1, 1), (2, 40, 10, 10, 24, 1, 1, 0, 1),
               (1, 600, 5, 5, 70, 3, 1, 1, 1), (1, 96, 28, 28, 96, 3, 2, 1, 96),
               (1, 1, 28, 28, 6, 5, 1, 0, 1), (1, 48, 15, 15, 48, 9, 1, 4, 48),
               (1, 24, 14, 14, 24, 3, 1, 1, 24), (1, 24, 7, 7, 24, 3, 1, 1, 24),
               (1, 16, 37, 37, 16, 5, 1, 2, 16), (1, 16, 41, 41, 16, 5, 2, 2, 16),
               (1, 8, 3, 5, 8, 3, 2, 0, 8), (1, 8, 20, 27, 8, 3, 1, 2, 8),
               (2, 8, 19, 45, 16, 5, 2, 1, 8), (1, 8, 112, 112, 8, 3, 2, 1, 8),
               (1, 8, 48, 48, 8, 3, 2, 1, 8), (1, 8, 40, 40, 8, 5, 2, 1, 8)]


def test_avx2_kernels_give_the_avx512_kernels_bits():
    """The x86-64-v3 build's fp32 kernels (gemm_avx2, dw_rows_avx2, dw_avx2: 8-lane FMAs) sum
    in conv/f32_order.h's order: forced on this build, they give the bits the list's own
    choices give (the AVX-512 kernels on an AVX-512 host), dot-product tails and depthwise taps
    included, so a result does not depend on which host path ran. dw_avx2 is forced alone too:
    the list puts dw_rows_avx2 before it for 3x3 and 5x5 kernels."""
    layers = LAYERS + [l for l in L1_LAYERS if not isinstance(l[5], list)] + AVX2_LAYERS
    base, base_lines = _child(layers, ["fp32"], ACCEL_VERBOSE="1")
    if " avx512f" in _cpu_flags():
        assert {_parse(line)[1] for line in base_lines} >= {
            "packed_avx512", "implicit_avx512", "dw_rows_avx512", "dw_avx512"}
    avx2 = " avx2" in _cpu_flags() and " fma" in _cpu_flags()
    for forcing, expected in (("gemm_avx2,dw_rows_avx2,dw_avx2",
                               {"gemm_avx2", "dw_rows_avx2", "dw_avx2", "fc_blas"}),
                              ("gemm_avx2,dw_avx2", {"gemm_avx2", "dw_avx2", "fc_blas"})):
        forced, lines = _child(layers, ["fp32"], ACCEL_VERBOSE="1", ACCEL_CONV_IMPL=forcing)
        names = [_parse(line)[1] for line in lines]
        if avx2:
            assert set(names) == expected, names
        for i, layer in enumerate(layers):
            assert forced[f"{i}/fp32"][0] == base[f"{i}/fp32"][0], (forcing, layer, names[i])


@pytest.mark.parametrize("epilogue", ["center", "normalise", "bn-add-clip", "shift-mul-relu",
                                      "scale", "bn-sigmoid"])
def test_broadcasts_from_one_channel_apply_the_epilogue_in_registers(epilogue):
    """A CONV from one channel (a layer norm's centre and normalise passes: w x + 0 per output
    channel) on an AVX-512 host applies its SDP in registers before the one store when the SDP
    is a scale / shift, an add or multiply by the operand and none, ReLU or a clip
    (narrow_avx512's from_one_row): the bits of the independent mode's separate spans, NaNs and
    signs of zero included, at 1, 2 and 3 threads; an SDP it does not take (a sigmoid) keeps the
    span after the CONV."""
    from accel_codegen import Device

    rng = np.random.default_rng(91)
    k, t = 48, 197
    x = rng.standard_normal((1, 1, 1, t), dtype=np.float32)
    x[0, 0, 0, 3], x[0, 0, 0, 4], x[0, 0, 0, 5] = -0.0, np.nan, np.inf
    w = rng.standard_normal((k, 1, 1, 1)).astype(np.float32)
    w[2] = 0.0
    w[7] = -1.0
    scale = rng.uniform(0.5, 2, k).astype(np.float32)
    scale[::5] *= -1
    shift = rng.standard_normal(k).astype(np.float32) * 4
    operand = rng.standard_normal((1, k, 1, t), dtype=np.float32)
    operand.flat[::13] = np.nan
    operand.flat[1::17] = -0.0
    sdp = {"center": Sdp(scale=np.full(k, -1 / k, np.float32), ew_op="add", operand=operand),
           "normalise": Sdp(scale=scale, ew_op="mul", operand=operand),
           "bn-add-clip": Sdp(scale=scale, shift=shift, ew_op="add", operand=operand,
                              act="clip", clip=(-0.5, 1.0)),
           "shift-mul-relu": Sdp(shift=shift, ew_op="mul", operand=operand, act="relu"),
           "scale": Sdp(scale=scale),
           "bn-sigmoid": Sdp(scale=scale, shift=shift, act="sigmoid")}[epilogue]
    chain = [Conv(w), sdp]
    separate, _ = Device("nv_full", num_threads=1).run(chain, x, mode="independent")
    assert len(np.unique(separate)) > k  # not a constant: the channels' own parameters
    for threads in (1, 2, 3):
        fused, _ = Device("nv_full", num_threads=threads).run(chain, x)
        assert np.array_equal(fused.view(np.uint32), separate.view(np.uint32)), \
            (epilogue, threads, int((fused.view(np.uint32) != separate.view(np.uint32)).sum()))


@pytest.mark.parametrize("c,size,k,kernel,pad", [(12, 48, 24, 8, 0), (3, 40, 16, 4, 0),
                                                 (3, 160, 8, 4, 0), (5, 30, 16, 4, 1),
                                                 (7, 27, 8, 8, 3)], ids=str)
def test_patch_embeddings_pack_by_permutes(c, size, k, kernel, pad):
    """A patch embedding (a kernel x kernel CONV at stride kernel, 4 or 8: ViT's 8x8/8 after
    its 2x2/2, Swin's and ConvNeXt's 4x4/4) packs its panels 16 columns at a time by permutes
    (f32_packed_avx512.c's pack_strided): the reference's bits, with padding (its zeros) and
    planes whose columns end inside a window and rows of 40 outputs (segments of three
    vectors), at 1 and 2 threads."""
    from accel_codegen import Device

    rng = np.random.default_rng(c * size + kernel)
    x = rng.standard_normal((1, c, size, size), dtype=np.float32)
    w = (rng.standard_normal((k, c, kernel, kernel)) / kernel).astype(np.float32)
    op = Conv(w, stride=(kernel, kernel), padding=(pad,) * 4)
    expected = ref.run_op(op, x)
    for threads in (1, 2):
        got, _ = Device("nv_full", num_threads=threads).run([op], x)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), threads
