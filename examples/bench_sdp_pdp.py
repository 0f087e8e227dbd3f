"""The SDP and PDP engines alone: nanoseconds per element of one op, the simulator's own time.

Each op runs on a 256x56x56 tensor and on a 256x1x16 one (global pooling: 4096x7x7 and 64x7x7;
ResNet's max pool: 64x112x112 and 64x2x2; the unpadded one whose last column, NaN, no window
reads: 64x112x112 and 64x4x4; the 2x2/2 average: 256x56x56 and 256x2x16);
the difference of their per-call thread CPU times over the difference of their element counts is
the engine's cost per element, without the fixed cost of a call (Python, validation, the cost
model). One thread, medians of 7 batches of 100 calls; thread time is barely moved by other
processes. Independent runs: the SDP reads its input from memory (int8: v = x - in_zero).

    python examples/bench_sdp_pdp.py [--ops int8_add_relu,fp32_bn_add_relu,...]
    python examples/bench_sdp_pdp.py --convs 7      # issue 32's six 3x3 convs per activation

ACCEL_SDP_I8_LUT=scalar in the environment runs the INT8 LUT activations' scalar definition
(the portable build's path).

Results: docs/notebook/whole_network_time_log.md.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from accel_codegen import Conv, Device, Pool, Sdp
from accel_codegen.quantization import TensorQuant, encode_multipliers
from accel_codegen.quantization.lut import layer_lut

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


def _int8_lut(rng, shape, act):
    """A standalone INT8 SDP applying ``act`` through the compiler's tables (quantization/lut.py)
    to codes of scale 0.05: per-channel X converters to the table's input units, a shift out."""
    out = TensorQuant(0.05, -20 if act == "silu" else -10)
    in_scale = rng.uniform(0.03, 0.06, C)
    table = layer_lut(act, out, float(in_scale.max()), "bench")
    mul, rshift = encode_multipliers(in_scale / table.input_step, "bench")
    return Sdp(bias=rng.integers(-20, 20, C).astype(np.int32), mul=mul, rshift=rshift, act=act,
               precision="int8", in_zero=-3, out_mul=1, out_shift=table.out_shift,
               out_zero=out.zero, lut=table.lut)


def _fp32(rng, shape, add, act="relu"):
    return Sdp(scale=rng.uniform(0.5, 2, C).astype(np.float32),
               shift=rng.standard_normal(C).astype(np.float32), act=act,
               ew_op="add" if add else None,
               operand=rng.standard_normal(shape).astype(np.float32) if add else None)


OPS = {
    "int8_bn_relu": lambda rng, shape: (_int8(rng, shape, False), "int8"),
    "int8_add_relu": lambda rng, shape: (_int8(rng, shape, True), "int8"),
    "int8_silu": lambda rng, shape: (_int8_lut(rng, shape, "silu"), "int8"),
    "int8_hardswish": lambda rng, shape: (_int8_lut(rng, shape, "hardswish"), "int8"),
    "int8_sigmoid": lambda rng, shape: (_int8_lut(rng, shape, "sigmoid"), "int8"),
    "fp32_bn_relu": lambda rng, shape: (_fp32(rng, shape, False), "fp32"),
    "fp32_bn_silu": lambda rng, shape: (_fp32(rng, shape, False, "silu"), "fp32"),
    "fp32_bn_sigmoid": lambda rng, shape: (_fp32(rng, shape, False, "sigmoid"), "fp32"),
    "fp32_bn_exp": lambda rng, shape: (_fp32(rng, shape, False, "exp"), "fp32"),
    "fp32_bn_tanh": lambda rng, shape: (_fp32(rng, shape, False, "tanh"), "fp32"),
    "fp32_bn_hardswish": lambda rng, shape: (_fp32(rng, shape, False, "hardswish"), "fp32"),
    "fp32_bn_add_relu": lambda rng, shape: (_fp32(rng, shape, True), "fp32"),
    "fp32_global_avgpool": lambda rng, shape: (Pool("avg", shape[2:], 1), "fp32"),
    "fp32_maxpool_3x3s2": lambda rng, shape: (Pool("max", 3, 2, 1), "fp32"),
    # unpadded on an even width: the last column is read by no window, and holds NaN
    "fp32_maxpool_3x3s2_nan_unread": lambda rng, shape: (Pool("max", 3, 2, 0), "fp32"),
    "fp32_avgpool_3x3s1": lambda rng, shape: (Pool("avg", 3, 1, 1), "fp32"),
    "fp32_avgpool_2x2s2": lambda rng, shape: (Pool("avg", 2, 2), "fp32"),
}
SHAPES = {"fp32_global_avgpool": ((1, 4096, 7, 7), (1, 64, 7, 7)),
          "fp32_maxpool_3x3s2": ((1, 64, 112, 112), (1, 64, 2, 2)),
          "fp32_maxpool_3x3s2_nan_unread": ((1, 64, 112, 112), (1, 64, 4, 4)),
          "fp32_avgpool_2x2s2": ((1, C, 56, 56), (1, C, 2, 16))}


def _nan_last_column(x):
    x[..., -1] = np.nan
    return x


#: what an op's input holds besides its random values
INPUTS = {"fp32_maxpool_3x3s2_nan_unread": _nan_last_column}


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


def conv_stack(act, precision, rng, layers=6, channels=32, size=160):
    """Six 32-channel 3x3 convs at 160x160 (issue 32's figure), each with its SDP: fp32 BN +
    ``act``, or int8 with a conv's converter (ReLU) or the compiler's tables (LUT)."""
    shape = (1, channels, size, size)
    chain = []
    for _ in range(layers):
        if precision == "fp32":
            w = (rng.standard_normal((channels, channels, 3, 3)) * 0.06).astype(np.float32)
            chain.append([Conv(w, padding=1),
                          Sdp(scale=rng.uniform(0.5, 2, channels).astype(np.float32),
                              shift=(rng.standard_normal(channels) * 0.1).astype(np.float32),
                              act=act)])
            continue
        w = rng.integers(-127, 128, (channels, channels, 3, 3)).astype(np.int8)
        acc_scale = 0.05 * 0.002  # input step x weight step
        out = TensorQuant(0.05, -20 if act == "silu" else 0 if act == "relu" else -10)
        if act == "relu":
            mul, rshift = encode_multipliers(np.full(channels, acc_scale / out.scale), "bench")
            sdp = Sdp(bias=rng.integers(-2000, 2000, channels).astype(np.int32), mul=mul,
                      rshift=rshift, act="relu", precision="int8", out_zero=out.zero)
        else:
            table = layer_lut(act, out, acc_scale, "bench")
            mul, rshift = encode_multipliers(np.full(channels, acc_scale / table.input_step),
                                             "bench")
            sdp = Sdp(bias=rng.integers(-2000, 2000, channels).astype(np.int32), mul=mul,
                      rshift=rshift, act=act, precision="int8", out_mul=1,
                      out_shift=table.out_shift, out_zero=out.zero, lut=table.lut)
        chain.append([Conv(w, padding=1, precision="int8", in_zero=out.zero), sdp])
    x = (rng.integers(-128, 128, shape).astype(np.int8) if precision == "int8"
         else rng.standard_normal(shape).astype(np.float32))
    return chain, x


def convs(rounds):
    """Milliseconds (thread time, 1 thread) of the stack per activation and precision, medians
    of interleaved rounds, and each over ReLU's in the same precision."""
    device = Device("nv_full", num_threads=1)
    cases = [(a, p) for p in ("fp32", "int8") for a in ("relu", "silu", "hardswish")]
    built = {c: conv_stack(*c, np.random.default_rng(0)) for c in cases}
    times = {c: [] for c in cases}

    def run(layers, x):
        for layer in layers:  # a chain per layer (conv + SDP), as the compiler fuses them
            x = device.run(layer, x)[0]

    for c in cases:
        run(*built[c])
    for _ in range(rounds):
        for c in cases:
            start = time.thread_time_ns()
            run(*built[c])
            times[c].append((time.thread_time_ns() - start) / 1e6)
    for act, precision in cases:
        ms = statistics.median(times[(act, precision)])
        relu = statistics.median(times[("relu", precision)])
        print(f"convs {precision} {act:10s} {ms:7.2f} ms  ({ms / relu:.2f} x relu)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--convs", type=int, default=0, metavar="ROUNDS",
                    help="instead: six 32-channel 3x3 convs at 160x160 per activation, "
                         "ROUNDS interleaved rounds")
    args = ap.parse_args()
    if args.convs:
        convs(args.convs)
        return
    device = Device("nv_full", num_threads=1)
    for name in args.ops.split(","):
        big, small = SHAPES.get(name, ((1, C, 56, 56), (1, C, 1, 16)))
        times = []
        for shape in (big, small):
            rng = np.random.default_rng(0)
            op, precision = OPS[name](rng, shape)
            x = (rng.integers(-128, 128, shape).astype(np.int8) if precision == "int8"
                 else rng.standard_normal(shape).astype(np.float32))
            times.append(per_call_us(device, op, INPUTS.get(name, lambda v: v)(x)))
        elements = np.prod(big) - np.prod(small)
        print(f"{name:22s} {1e3 * (times[0] - times[1]) / elements:6.3f} ns per element "
              f"({times[0]:.1f} us per call on {'x'.join(map(str, big[1:]))}, "
              f"{times[1]:.1f} on {'x'.join(map(str, small[1:]))})")


if __name__ == "__main__":
    main()
