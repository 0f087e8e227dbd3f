"""The simulator's int8 conv kernel against its fp32 one, on the ResNet layers of the kernel
benchmark: fused conv + bias/BN + ReLU, batch 1, side by side in one process.

Each round times int8 then fp32 (interleaved, so load on this shared machine hits both
alike); medians and spread per layer. int8 runs with weights pre-packed once, as the generated
code does (``Conv.packed_for``), and with the integer converters a real int8 layer has. The
issue's goal: int8 at least as fast as fp32 (ratio >= 1).

    python examples/bench_int8_conv.py [--threads 2] [--rounds 30] [--json out.json]
"""
from __future__ import annotations

import os
import statistics

import numpy as np

from accel_codegen import Conv, Device, Sdp
from accel_codegen.tables import Column

# The same layers, timing, options and output as the fp32 benchmark.
from bench_conv_layers import (LAYERS, interleaved, parse_args, run_layers, summary_ms,
                               write_json)

TARGET = 1.0
# MobileNet's depthwise layers run another kernel in each precision: (name, C, H, W, K, kernel,
# stride, pad, groups).
DEPTHWISE = [
    ("dw 32x112x112 3x3", 32, 112, 112, 32, 3, 1, 1, 32),
    ("dw 128x56x56 3x3/2", 128, 56, 56, 128, 3, 2, 1, 128),
    ("dw 512x14x14 3x3", 512, 14, 14, 512, 3, 1, 1, 512),
]


def bench_layer(layer, device, rounds, rng):
    name, c, h, w, k, kernel, stride, pad, *rest = layer
    groups = rest[0] if rest else 1
    out_hw = (h + 2 * pad - kernel) // stride + 1
    x = rng.standard_normal((1, c, h, w), dtype=np.float32)
    depth = c // groups * kernel * kernel
    weight = (rng.standard_normal((k, c // groups, kernel, kernel)) / np.sqrt(depth)
              ).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, k).astype(np.float32)
    shift = rng.standard_normal(k).astype(np.float32)
    fp32 = [Conv(weight, stride=stride, padding=pad, groups=groups),
            Sdp(scale=scale, shift=shift, act="relu")]
    out32 = np.empty((1, k, out_hw, out_hw), np.float32)

    xq = rng.integers(-128, 128, x.shape, dtype=np.int8)
    wq = rng.integers(-127, 128, weight.shape, dtype=np.int8)
    conv = Conv(wq, stride=stride, padding=pad, groups=groups, precision="int8", in_zero=-128)
    int8 = [conv.packed_for("nv_full", c),
            Sdp(bias=rng.integers(-2 ** 20, 2 ** 20, k, dtype=np.int32),
                mul=rng.integers(1 << 13, 1 << 14, k, dtype=np.int16),
                rshift=np.full(k, 24, np.uint8), act="relu", out_zero=-128, precision="int8")]
    out8 = np.empty((1, k, out_hw, out_hw), np.int8)

    def run8():
        device.run(int8, xq, out=out8)

    def run32():
        device.run(fp32, x, out=out32)

    t8, t32 = interleaved(run8, run32, rounds)
    ops = 2.0 * k * depth * out_hw * out_hw
    return {"layer": name, "gop": ops / 1e9,
            "int8_ms": summary_ms(t8), "fp32_ms": summary_ms(t32),
            "int8_gops": ops / statistics.median(t8) / 1e9,
            "fp32_gops": ops / statistics.median(t32) / 1e9,
            "ratio": statistics.median(t32) / statistics.median(t8)}


COLUMNS = (Column("layer", 22, "<"), Column("int8 GOP/s", 12, spec=".1f", gap=""),
           Column("fp32 GFLOP/s", 14, spec=".1f", gap=""),
           Column("int8/fp32", 11, spec=".2f", gap=""), Column("", 0, "<", gap="  "))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    device = Device("nv_full", num_threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"fused conv + converters + ReLU, batch 1, {args.threads} threads, median of "
          f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.2f}")
    results = run_layers(
        LAYERS + DEPTHWISE, lambda layer: bench_layer(layer, device, args.rounds, rng), COLUMNS,
        lambda r: [r["layer"], r["int8_gops"], r["fp32_gops"], r["ratio"]], TARGET)
    met = sum(r["ratio"] >= TARGET for r in results)
    print(f"int8 at least as fast as fp32 on {met} of {len(results)} layers; "
          f"load average {os.getloadavg()[0]:.2f}")
    write_json(args, results)


if __name__ == "__main__":
    main()
