"""The depthwise kernels side by side: each depthwise layer of EfficientNet-B0 and
MobileNetV3-small (conv + scale/shift + SiLU, batch 1) through `Device.run` with each CONV
implementation forced (ACCEL_CONV_IMPL, read once per process: one child process per
implementation and round, rounds alternating), thread CPU time with 1 thread, wall time with
more; medians. The first row (16 channels of 2x2) is the call's own cost, which every row
includes. ``--precision int8``: the same layers in int8 (conv + bias + mul / rshift + ReLU, the
converters a real int8 layer has, weights pre-packed), then MobileNetV2's and ResNet's RGB
stems (3x3/2 -> 32 and 7x7/2 -> 64 on 3x224x224, rows ``stem``).

    python examples/bench_depthwise.py [--threads 1] [--rounds 4] [--impls dw_rows_avx512,dw_c16_avx512]
    python examples/bench_depthwise.py --precision int8 --impls dw_madd_avx2,stem_madd_avx2:portable
    python examples/bench_depthwise.py --precision int8 --impls dw_madd_avx2 --libs old/libaccel.so,

``--libs`` compares builds of the library instead: each path is preloaded in place of the
installed one (an empty entry: the installed one), with the first implementation of
``--impls`` forced in every child; columns are the builds, in the given order.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# (channels, plane, kernel, stride)
LAYERS = [(16, 2, 3, 1),
          (32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 5, 2), (240, 28, 5, 1),
          (240, 28, 3, 2), (480, 14, 3, 1), (480, 14, 5, 1), (672, 14, 5, 1), (672, 14, 5, 2),
          (1152, 7, 5, 1), (1152, 7, 3, 1),
          (16, 112, 3, 2), (72, 56, 3, 2), (88, 28, 3, 1), (96, 28, 5, 2), (240, 14, 5, 1),
          (120, 14, 5, 1), (576, 7, 5, 1)]
# int8 only: (input channels, plane, kernel, stride, output channels) of dense stems
STEMS = [(3, 224, 3, 2, 32), (3, 224, 7, 2, 64)]

CHILD = r"""
import json, sys, time
import numpy as np
from accel_codegen.sim import Device, Conv, Sdp
layers, nth, rep = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
precision, act = sys.argv[4], sys.argv[5]
dev = Device(num_threads=nth)
clock = time.thread_time if nth == 1 else time.perf_counter
res = []
for c, h, k, s, *dense in layers:
    rng = np.random.default_rng(0)
    m, g = (dense[0], 1) if dense else (c, c)
    oh = (h + 2 * (k // 2) - k) // s + 1
    if precision == "int8":
        x = rng.integers(-128, 128, (1, c, h, h), dtype=np.int8)
        w = rng.integers(-128, 128, (m, c // g, k, k), dtype=np.int8)
        conv = Conv(w, stride=(s, s), padding=(k // 2,) * 4, groups=g, precision="int8",
                    in_zero=-128)
        if act == "silu":  # the compiler's tables (EfficientNet's depthwise layers)
            from accel_codegen.quantization.lut import layer_lut
            from accel_codegen.quantization import encode_multipliers
            from accel_codegen.quantization.calibration import TensorQuant
            # a sum's spread (about 74^2 sqrt(depth)) onto about +-8 of SiLU's input
            step = 8.0 / (74 * 74 * k * (c // g))
            table = layer_lut("silu", TensorQuant(0.05, -20), step, "bench")
            mul, rshift = encode_multipliers(np.full(m, step / table.input_step), "bench")
            sdp = Sdp(bias=rng.integers(-2 ** 10, 2 ** 10, m, dtype=np.int32), mul=mul,
                      rshift=rshift, act="silu", out_mul=1, out_shift=table.out_shift,
                      out_zero=-20, lut=table.lut, precision="int8")
        else:
            sdp = Sdp(bias=rng.integers(-2 ** 20, 2 ** 20, m, dtype=np.int32),
                      mul=rng.integers(1 << 13, 1 << 14, m, dtype=np.int16),
                      rshift=np.full(m, 24, np.uint8), act="relu", out_zero=-128,
                      precision="int8")
        chain = [conv.packed_for("nv_full", c), sdp]
        out = np.empty((1, m, oh, oh), np.int8)
    else:
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        sc = rng.uniform(0.5, 1.5, m).astype(np.float32)
        chain = [Conv(w, stride=(s, s), padding=(k // 2,) * 4, groups=g),
                 Sdp(scale=sc, shift=-sc, act="silu")]
        out = np.empty((1, m, oh, oh), np.float32)
    for _ in range(3):
        dev.run(chain, x, out=out)
    ts = []
    for _ in range(rep):
        t = clock()
        dev.run(chain, x, out=out)
        ts.append(clock() - t)
    res.append(ts)
print(json.dumps(res))
"""


def blas_dir() -> str:
    """The directory of the OpenBLAS that the installed libaccel links (a scratch build's
    run path may name a build environment that is gone)."""
    try:
        import scipy_openblas32
    except ImportError:
        return ""
    return os.path.join(os.path.dirname(scipy_openblas32.__file__), "lib")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--impls", default="dw_rows_avx512,dw_c16_avx512",
                    help="implementations compared, comma-separated (each may be a "
                         "ACCEL_CONV_IMPL list of its own, its names joined by ':')")
    ap.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    ap.add_argument("--act", choices=("relu", "silu"), default="relu",
                    help="int8: the converter's activation (silu: the compiler's LUT, as in "
                         "EfficientNet's depthwise layers)")
    ap.add_argument("--libs", default=None,
                    help="builds compared, comma-separated libaccel.so paths (empty: the "
                         "installed one)")
    args = ap.parse_args()
    impls = args.impls.split(",")
    libs = args.libs.split(",") if args.libs is not None else None
    columns = libs if libs is not None else impls
    layers = LAYERS + (STEMS if args.precision == "int8" else [])
    times = {i: [[] for _ in layers] for i in columns}
    for rnd in range(args.rounds):
        for col in columns if rnd % 2 == 0 else columns[::-1]:
            impl = impls[0] if libs is not None else col
            env = dict(os.environ, ACCEL_CONV_IMPL=impl.replace(":", ","))
            if libs is not None and col:
                # the build's own dependencies (OpenBLAS) resolve from the installed package's
                env["LD_PRELOAD"] = os.path.abspath(col)
                env["LD_LIBRARY_PATH"] = ":".join(filter(None, [blas_dir(),
                                                                env.get("LD_LIBRARY_PATH")]))
            r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(layers),
                                str(args.threads), "15", args.precision, args.act], capture_output=True,
                               text=True,
                               env=env, cwd=os.path.expanduser("~"), check=True)
            for j, ts in enumerate(json.loads(r.stdout)):
                times[col][j] += ts
    print(f"{args.precision} ({args.act}), threads {args.threads}, load average {os.getloadavg()[0]:.1f}, "
          "medians in ms")
    if libs is not None:
        print(f"{impls[0]} forced; builds: " + ", ".join(lib or "installed" for lib in libs))
    print(f"{'channels, plane, kernel, stride':34}" +
          "".join(f"{(i or 'installed')[-15:]:>16}" for i in columns) +
          "   first / last")
    for j, layer in enumerate(layers):
        med = [statistics.median(times[i][j]) * 1e3 for i in columns]
        print(f"{str(layer):34}" + "".join(f"{m:16.4f}" for m in med) +
              f"   {med[0] / med[-1]:.2f}")


if __name__ == "__main__":
    main()
