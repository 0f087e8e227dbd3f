"""Issue 32, item 1: an INT8 LUT activation's cost per element over the int8 ReLU converter's,
side by side in one process (one thread, thread time, medians of interleaved rounds).

Standalone SDP (bench_sdp_pdp.py's ops: 256x56x56 against 256x1x16, the difference per
element) and the six 32-channel 3x3 convs at 160x160 (bench_sdp_pdp.py --convs), each LUT op
twice: as the library runs it (the per-layer plan of codes by input ranges, sdp_i8_lut.c's
sdp_i8_lut_plan) and with ACCEL_SDP_I8_LUT=gather (no plan: the table arithmetic in lanes with
a gather per 16 values, the previous path). The variable is read per run, so both alternate
within one process. A standalone LUT run converts each plane's 256 input codes once and looks
the plane up in them (sdp_i8.c's run_table) either way, so its two rows differ only in those
256 conversions per chunk; the conv stack's epilogue (int32 accumulators) has no such table.

The conv epilogue per element (--epilogues, issue 32's goal: an int8 LUT activation no slower
per element than twice ReLU's epilogue): layers whose convolution is small beside their
epilogue, a 1x1 conv from 4 channels (the VNNI GEMM's panels, sdp_i8_lanes.h) and a 3x3
depthwise conv (the depthwise rows, then sdp_i8_span per plane), 64 channels at 112x112 against
the same at 8x8 (the difference per output: the call's fixed costs drop out). Each layer's ns
per output includes its convolution, so the LUT / ReLU ratio of the epilogues alone is larger
than the ratio printed; the difference is the LUT's extra cost per element.

    python examples/lut_vs_relu.py [--rounds 7] [--no-convs] [--epilogues]
    python examples/lut_vs_relu.py --dump-epilogues /tmp/layers.txt  (lut_epilogue_time.c's input)
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from pathlib import Path

import numpy as np

from accel_codegen import Device

_spec = importlib.util.spec_from_file_location(
    "bench_sdp_pdp", Path(__file__).with_name("bench_sdp_pdp.py"))
sdp_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sdp_bench)

LUT_OPS = ("int8_silu", "int8_hardswish", "int8_sigmoid")
PATHS = ("plan", "gather")


def _path(path: str) -> None:
    if path in ("gather", "bins"):
        os.environ["ACCEL_SDP_I8_LUT"] = path
    else:
        os.environ.pop("ACCEL_SDP_I8_LUT", None)


def _timed(fn, calls: int) -> float:
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls


def standalone(rounds: int, calls: int) -> None:
    device = Device("nv_full", num_threads=1)
    cases = {}
    for name in ("int8_bn_relu",) + LUT_OPS:
        made = []
        for shape in ((1, sdp_bench.C, 56, 56), (1, sdp_bench.C, 1, 16)):
            rng = np.random.default_rng(0)
            op, _ = sdp_bench.OPS[name](rng, shape)
            made.append((op, rng.integers(-128, 128, shape).astype(np.int8)))
        for path in (PATHS if name in LUT_OPS else ("plan",)):
            cases[(name, path)] = made
    elements = 56 * 56 * sdp_bench.C - 16 * sdp_bench.C
    ns = {c: [] for c in cases}
    for r in range(rounds + 1):  # round 0 warms up
        for (name, path), made in cases.items():
            _path(path)
            big, small = [_timed(lambda m=m: device.run([m[0]], m[1]), calls) for m in made]
            if r:
                ns[(name, path)].append((big - small) / elements)
    _path("plan")
    relu = statistics.median(ns[("int8_bn_relu", "plan")])
    print(f"standalone SDP, 256x56x56, ns per element (1 thread, medians of {rounds} rounds)")
    for (name, path), values in ns.items():
        m = statistics.median(values)
        print(f"  {name:16s} {path:7s} {m:6.3f} ns  {m / relu:5.2f}x relu")


def convs(rounds: int) -> None:
    device = Device("nv_full", num_threads=1)
    cases = [("relu", "plan")] + [(a, p) for a in ("silu", "hardswish") for p in PATHS]
    built = {c: sdp_bench.conv_stack(c[0], "int8", np.random.default_rng(0)) for c in cases}
    ms = {c: [] for c in cases}
    for r in range(rounds + 1):
        for c in cases:
            layers, x = built[c]
            _path(c[1])
            start = time.thread_time_ns()
            for layer in layers:
                x = device.run(layer, x)[0]
            if r:
                ms[c].append((time.thread_time_ns() - start) / 1e6)
    _path("plan")
    relu = statistics.median(ms[("relu", "plan")])
    print(f"six int8 32-channel 3x3 convs at 160x160, ms (1 thread, medians of {rounds} rounds)")
    for (act, path), values in ms.items():
        m = statistics.median(values)
        print(f"  {act:10s} {path:7s} {m:7.2f} ms  {m / relu:5.2f}x relu  "
              f"(+{m - relu:5.2f} ms over relu)")


def epilogue_layer(kind: str, act: str, size: int, rng):
    """One int8 conv + SDP layer (kind "1x1": 4 -> 64 channels; "dw": 64 channels, 3x3
    depthwise) with ReLU's converter (act "relu"; "none": the same converter without the
    clamp) or the compiler's tables for ``act``, and its input."""
    from accel_codegen import Conv, Sdp
    from accel_codegen.quantization import TensorQuant, encode_multipliers
    from accel_codegen.quantization.lut import layer_lut

    channels, cin = 64, (4 if kind == "1x1" else 64)
    if kind == "1x1":
        w = rng.integers(-127, 128, (channels, cin, 1, 1)).astype(np.int8)
        conv = dict(padding=0)
    else:
        w = rng.integers(-127, 128, (channels, 1, 3, 3)).astype(np.int8)
        conv = dict(padding=1, groups=channels)
    acc_scale = 0.05 * 0.002
    out = TensorQuant(0.05, -20 if act == "silu" else 0 if act in ("relu", "none") else -10)
    bias = rng.integers(-2000, 2000, channels).astype(np.int32)
    if act in ("relu", "none"):
        mul, rshift = encode_multipliers(np.full(channels, acc_scale / out.scale), "bench")
        sdp = Sdp(bias=bias, mul=mul, rshift=rshift, act=None if act == "none" else act,
                  precision="int8", out_zero=out.zero)
    else:
        table = layer_lut(act, out, acc_scale, "bench")
        mul, rshift = encode_multipliers(np.full(channels, acc_scale / table.input_step), "bench")
        sdp = Sdp(bias=bias, mul=mul, rshift=rshift, act=act, precision="int8", out_mul=1,
                  out_shift=table.out_shift, out_zero=out.zero, lut=table.lut)
    layer = [Conv(w, precision="int8", in_zero=out.zero, **conv), sdp]
    return layer, rng.integers(-128, 128, (1, cin, size, size)).astype(np.int8)


def epilogues(rounds: int, calls: int) -> None:
    device = Device("nv_full", num_threads=1)
    acts = ("relu", "none") + tuple(name.removeprefix("int8_") for name in LUT_OPS)
    cases = {(kind, act, path): [epilogue_layer(kind, act, size, np.random.default_rng(0))
                                 for size in (112, 8)]
             for kind in ("1x1", "dw") for act in acts
             for path in (("plan",) if act in ("relu", "none") else ("plan", "bins"))}
    outputs = 64 * (112 * 112 - 8 * 8)
    ns = {c: [] for c in cases}
    for r in range(rounds + 1):  # round 0 warms up (and plans the LUTs)
        for c, made in cases.items():
            _path(c[2])
            big, small = [_timed(lambda m=m: device.run(m[0], m[1]), calls) for m in made]
            if r:
                ns[c].append((big - small) / outputs)
    _path("plan")
    print(f"int8 conv + SDP layers, 64 channels at 112x112, ns per output (1 thread, medians of "
          f"{rounds} rounds; plan: the library's path, bins: ACCEL_SDP_I8_LUT=bins, the plan "
          f"without its byte tables: a gather per 16 values)")
    for kind, act, path in cases:
        relu = statistics.median(ns[(kind, "relu", "plan")])
        none = statistics.median(ns[(kind, "none", "plan")])
        m = statistics.median(ns[(kind, act, path)])
        print(f"  {kind:4s} {act:10s} {path:5s} {m:6.3f} ns  {m / relu:5.2f}x relu  "
              f"(+{m - relu:6.3f} ns over relu, +{m - none:6.3f} over none)")
    print("  (none: ReLU's converter without its clamp, so \"over none\" is each epilogue's cost "
          "beyond the common converter's; the epilogues alone, without the convolution: "
          "examples/lut_epilogue_time.c)")


def dump_epilogues(path: str) -> None:
    """The 1x1 layers of --epilogues (acts relu, none, silu, hardswish, sigmoid) for
    examples/lut_epilogue_time.c: per layer a line of act code, out_mul, out_shift, out_zero and
    the table's word count, the table's words (accel_lut_int8's memory; zeros without a LUT),
    then the 64 channels' bias, mul and rshift, then the first 384 accumulators of each channel
    (sum over the 4 input channels of w (x - in_zero): the GEMM's int32 values)."""
    codes = {"none": 0, "relu": 1, "sigmoid": 4, "silu": 6, "hardswish": 7}
    with open(path, "w") as f:
        for act in ("relu", "none", "silu", "hardswish", "sigmoid"):
            (conv, sdp), x = epilogue_layer("1x1", act, 112, np.random.default_rng(0))
            v = conv.weights.reshape(64, 4).astype(np.int64) @ (
                x.reshape(4, -1).astype(np.int64) - conv.in_zero)
            words = sdp.lut.words() if sdp.lut is not None else np.zeros(169, np.int32)
            head = [codes[act], int(sdp.out_mul or 0), int(sdp.out_shift or 0),
                    int(sdp.out_zero or 0), len(words)]
            for row in (head, words, sdp.bias, sdp.mul, sdp.rshift, v[:, :384].reshape(-1)):
                f.write(" ".join(str(int(a)) for a in np.asarray(row).reshape(-1)) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--no-convs", action="store_true")
    ap.add_argument("--epilogues", action="store_true",
                    help="only the conv epilogue per element (1x1 and depthwise layers)")
    ap.add_argument("--dump-epilogues", metavar="FILE",
                    help="write the 1x1 layers for examples/lut_epilogue_time.c and stop")
    args = ap.parse_args()
    if args.dump_epilogues:
        dump_epilogues(args.dump_epilogues)
        return
    print(f"load average {os.getloadavg()[0]:.2f} at the start")
    if args.epilogues:
        epilogues(args.rounds, args.calls)
    else:
        standalone(args.rounds, args.calls)
        if not args.no_convs:
            convs(args.rounds)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
