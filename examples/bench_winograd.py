"""Simulator time of ResNet-50's stride-1 3x3 layers, direct against Winograd mode, side by side.

Each layer (CONV + the SDP that takes its accumulators) runs on nv_full in both modes, with
its weights packed once as generated code packs them, interleaved, and the medians of the
process CPU time and of the wall time per run are printed (on a shared machine the CPU time is
the steadier figure). Run from the repository:

    python examples/bench_winograd.py [--threads 1] [--rounds 15]
"""
import argparse
import time

import numpy as np

from accel_codegen import Conv, Device, Sdp

LAYERS = ((64, 56), (128, 28), (256, 14), (512, 7))  # channels in and out, height = width


def packed(conv):
    """The conv with its weights packed once, as generated code does (int8 in the kernel's
    layout, fp16 widened, Winograd pre-transformed; direct fp32 weights are read as they are)."""
    return conv if conv.precision == "fp32" and conv.mode == "direct" else \
        conv.packed_for("nv_full")


def chains(precision, weights, mode):
    if precision == "fp32":
        return [packed(Conv(weights, padding=1, mode=mode))]
    if precision == "fp16":
        return [packed(Conv(weights.astype(np.float16), padding=1, precision="fp16", mode=mode)),
                Sdp(precision="fp16")]
    codes = np.clip(np.round(weights * 600), -127, 127).astype(np.int8)
    return [packed(Conv(codes, padding=1, precision="int8", mode=mode)),
            Sdp(precision="int8", out_mul=1, out_shift=12)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    device = Device("nv_full", num_threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"{args.threads} thread(s), medians of {args.rounds} interleaved rounds, ms per run")
    print(f"{'layer':>12} {'precision':>9} {'direct cpu':>10} {'wino cpu':>9} {'ratio':>6} "
          f"{'direct wall':>11} {'wino wall':>9}")
    for channels, size in LAYERS:
        x32 = rng.standard_normal((1, channels, size, size)).astype(np.float32)
        w32 = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
        inputs = {"fp32": x32, "fp16": x32.astype(np.float16),
                  "int8": rng.integers(-128, 128, x32.shape).astype(np.int8)}
        for precision, x in inputs.items():
            runs = {mode: chains(precision, w32, mode) for mode in ("direct", "winograd")}
            cpu = {mode: [] for mode in runs}
            wall = {mode: [] for mode in runs}
            for mode, chain in runs.items():
                device.run(chain, x)  # warm the device's scratch memory
            for _ in range(args.rounds):
                for mode, chain in runs.items():
                    c0, w0 = time.process_time(), time.perf_counter()
                    device.run(chain, x)
                    cpu[mode].append(time.process_time() - c0)
                    wall[mode].append(time.perf_counter() - w0)
            med = {key: {m: np.median(v[m]) * 1e3 for m in runs}
                   for key, v in (("cpu", cpu), ("wall", wall))}
            print(f"{channels:>4}x{size}x{size:<3} {precision:>9} {med['cpu']['direct']:>10.2f} "
                  f"{med['cpu']['winograd']:>9.2f} "
                  f"{med['cpu']['winograd'] / med['cpu']['direct']:>6.2f} "
                  f"{med['wall']['direct']:>11.2f} {med['wall']['winograd']:>9.2f}")


if __name__ == "__main__":
    main()
