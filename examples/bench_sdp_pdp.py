"""The SDP and PDP engines alone: nanoseconds per element of one op, the simulator's own time.

Each op runs on a 256x56x56 tensor and on a 256x1x16 one (global pooling: 4096x7x7 and 64x7x7;
ResNet's max pool: 64x112x112 and 64x2x2);
the difference of their per-call thread CPU times over the difference of their element counts is
the engine's cost per element, without the fixed cost of a call (Python, validation, the cost
model). One thread, medians of 7 batches of 100 calls; thread time is barely moved by other
processes. Independent runs: the SDP reads its input from memory (int8: v = x - in_zero).

    python examples/bench_sdp_pdp.py [--ops int8_add_relu,fp32_bn_add_relu,...]

Results: docs/notebook/whole_network_time_log.md.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from accel_codegen import Device, Pool, Sdp

C = 256


def _int8(rng, shape, add):
    # a conv's converter: the accumulator's unit about 2^-10 of the output step (shifts 24-25),
    # v spread over the accumulator's range
    common = dict(bias=rng.integers(-300000, 300000, C).astype(np.int32),
                  mul=rng.integers(16384, 32768, C).astype(np.int16),
                  rshift=rng.integers(24, 26, C).astype(np.uint8), in_zero=-3, act="relu",
                  precision="int8")
    if not add:  # the common converter (a conv's BN + ReLU), out_mul 0
        return Sdp(**common, out_zero=-128)
    # the compiler's residual add: the operand 2^-8 of the output step, out_mul 1, out_shift 8
    return Sdp(**{**common, "rshift": common["rshift"] - 8}, ew_op="add",
               operand=rng.integers(-128, 128, shape).astype(np.int8), ew_zero=-128,
               ew_mul=23170, ew_shift=7, out_mul=1, out_shift=8, out_zero=-128)


def _fp32(rng, shape, add):
    return Sdp(scale=rng.uniform(0.5, 2, C).astype(np.float32),
               shift=rng.standard_normal(C).astype(np.float32), act="relu",
               ew_op="add" if add else None,
               operand=rng.standard_normal(shape).astype(np.float32) if add else None)


OPS = {
    "int8_bn_relu": lambda rng, shape: (_int8(rng, shape, False), "int8"),
    "int8_add_relu": lambda rng, shape: (_int8(rng, shape, True), "int8"),
    "fp32_bn_relu": lambda rng, shape: (_fp32(rng, shape, False), "fp32"),
    "fp32_bn_add_relu": lambda rng, shape: (_fp32(rng, shape, True), "fp32"),
    "fp32_global_avgpool": lambda rng, shape: (Pool("avg", shape[2:], 1), "fp32"),
    "fp32_maxpool_3x3s2": lambda rng, shape: (Pool("max", 3, 2, 1), "fp32"),
}
SHAPES = {"fp32_global_avgpool": ((1, 4096, 7, 7), (1, 64, 7, 7)),
          "fp32_maxpool_3x3s2": ((1, 64, 112, 112), (1, 64, 2, 2))}


def per_call_us(device, op, x, calls=100, batches=7):
    for _ in range(10):
        device.run([op], x)
    times = []
    for _ in range(batches):
        start = time.thread_time_ns()
        for _ in range(calls):
            device.run([op], x)
        times.append((time.thread_time_ns() - start) / calls / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS))
    args = ap.parse_args()
    device = Device("nv_full", num_threads=1)
    for name in args.ops.split(","):
        big, small = SHAPES.get(name, ((1, C, 56, 56), (1, C, 1, 16)))
        times = []
        for shape in (big, small):
            rng = np.random.default_rng(0)
            op, precision = OPS[name](rng, shape)
            x = (rng.integers(-128, 128, shape).astype(np.int8) if precision == "int8"
                 else rng.standard_normal(shape).astype(np.float32))
            times.append(per_call_us(device, op, x))
        elements = np.prod(big) - np.prod(small)
        print(f"{name:22s} {1e3 * (times[0] - times[1]) / elements:6.3f} ns per element "
              f"({times[0]:.1f} us per call on {'x'.join(map(str, big[1:]))}, "
              f"{times[1]:.1f} on {'x'.join(map(str, small[1:]))})")


if __name__ == "__main__":
    main()
