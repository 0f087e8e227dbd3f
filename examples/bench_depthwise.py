"""The fp32 depthwise kernels side by side: each depthwise layer of EfficientNet-B0 and
MobileNetV3-small (conv + scale/shift + SiLU, batch 1) through `Device.run` with each CONV
implementation forced (ACCEL_CONV_IMPL, read once per process: one child process per
implementation and round, rounds alternating), thread CPU time with 1 thread, wall time with
more; medians. The first row (16 channels of 2x2) is the call's own cost, which every row
includes.

    python examples/bench_depthwise.py [--threads 1] [--rounds 4] [--impls dw_rows_avx512,dw_c16_avx512]
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

CHILD = r"""
import json, sys, time
import numpy as np
from accel_codegen.sim import Device, Conv, Sdp
layers, nth, rep = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dev = Device(num_threads=nth)
clock = time.thread_time if nth == 1 else time.perf_counter
res = []
for c, h, k, s in layers:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    sc = rng.uniform(0.5, 1.5, c).astype(np.float32)
    chain = [Conv(w, stride=(s, s), padding=(k // 2,) * 4, groups=c),
             Sdp(scale=sc, shift=-sc, act="silu")]
    oh = (h + 2 * (k // 2) - k) // s + 1
    out = np.empty((1, c, oh, oh), np.float32)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--impls", default="dw_rows_avx512,dw_c16_avx512")
    args = ap.parse_args()
    impls = args.impls.split(",")
    times = {i: [[] for _ in LAYERS] for i in impls}
    for rnd in range(args.rounds):
        for impl in impls if rnd % 2 == 0 else impls[::-1]:
            env = dict(os.environ, ACCEL_CONV_IMPL=impl)
            r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(LAYERS),
                                str(args.threads), "15"], capture_output=True, text=True,
                               env=env, cwd=os.path.expanduser("~"), check=True)
            for j, ts in enumerate(json.loads(r.stdout)):
                times[impl][j] += ts
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f}, medians in ms")
    print(f"{'channels, plane, kernel, stride':34}" + "".join(f"{i:>16}" for i in impls) +
          "   first / last")
    for j, layer in enumerate(LAYERS):
        med = [statistics.median(times[i][j]) * 1e3 for i in impls]
        print(f"{str(layer):34}" + "".join(f"{m:16.4f}" for m in med) +
              f"   {med[0] / med[-1]:.2f}")


if __name__ == "__main__":
    main()
