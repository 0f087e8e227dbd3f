"""Fused conv + batch norm + ReLU: the simulator's fp32 kernel against PyTorch eager (oneDNN).

Both run the same NCHW batch-1 layers with the same thread count, side by side in one process:
warm-up, then interleaved rounds (ours, PyTorch, ours, ...), median and spread of each. The
simulator call is the public one (Device.run with a preallocated output), so its Python
overhead is included. Prints GFLOP/s and the ratio ours / PyTorch per layer.

    python examples/bench_conv_layers.py [--threads 2] [--rounds 30] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from accel_codegen import Conv, Device, Sdp
from accel_codegen.tables import Column, render_row, render_table

# (name, C, H, W, K, kernel, stride, pad): the layers of the ratio target.
LAYERS = [
    ("3x224x224->64 7x7/2", 3, 224, 224, 64, 7, 2, 3),
    ("64x56x56->64 3x3", 64, 56, 56, 64, 3, 1, 1),
    ("128x28x28->128 3x3", 128, 28, 28, 128, 3, 1, 1),
    ("256x14x14->256 3x3", 256, 14, 14, 256, 3, 1, 1),
    ("512x7x7->512 3x3", 512, 7, 7, 512, 3, 1, 1),
    ("64x56x56->256 1x1", 64, 56, 56, 256, 1, 1, 0),
]
TARGET = 0.8


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(first, second, rounds: int, warmup: int = 3):
    """Times of two callables over `rounds` alternating rounds (after `warmup` of each), so
    that load on a shared machine hits both alike."""
    for _ in range(warmup):
        first()
        second()
    times = ([], [])
    for _ in range(rounds):
        times[0].append(_time(first))
        times[1].append(_time(second))
    return times


def summary_ms(times) -> dict:
    return {"median": statistics.median(times) * 1e3, "min": min(times) * 1e3,
            "max": max(times) * 1e3}


def bench_layer(layer, device, torch, rounds, rng):
    name, c, h, w, k, kernel, stride, pad = layer
    x = rng.standard_normal((1, c, h, w), dtype=np.float32)
    weight = (rng.standard_normal((k, c, kernel, kernel)) / np.sqrt(c * kernel * kernel)).astype(
        np.float32)
    bias, gamma, beta = (rng.standard_normal(k).astype(np.float32) for _ in range(3))
    mean = rng.standard_normal(k).astype(np.float32)
    var = rng.uniform(0.5, 2.0, k).astype(np.float32)
    eps = 1e-5
    # Inference batch norm folded with the conv bias into one scale and one shift.
    scale = (gamma / np.sqrt(var + eps)).astype(np.float32)
    shift = ((bias - mean) * scale + beta).astype(np.float32)
    chain = [Conv(weight, stride=stride, padding=pad), Sdp(scale=scale, shift=shift, act="relu")]
    out_hw = (h + 2 * pad - kernel) // stride + 1
    out = np.empty((1, k, out_hw, out_hw), np.float32)

    tx, tw, tb = (torch.from_numpy(a) for a in (x, weight, bias))
    tmean, tvar, tgamma, tbeta = (torch.from_numpy(a) for a in (mean, var, gamma, beta))

    def ours():
        device.run(chain, x, out=out)

    def theirs():
        with torch.no_grad():
            y = torch.nn.functional.conv2d(tx, tw, tb, stride, pad)
            y = torch.nn.functional.batch_norm(y, tmean, tvar, tgamma, tbeta, False, 0.0, eps)
            return torch.relu(y)

    ours_t, theirs_t = interleaved(ours, theirs, rounds)
    expected = theirs().numpy()
    ours()
    error = float(np.max(np.abs(out - expected)) / max(np.max(np.abs(expected)), 1e-30))
    flops = 2.0 * k * c * kernel * kernel * out_hw * out_hw
    ours_gflops = flops / statistics.median(ours_t) / 1e9
    theirs_gflops = flops / statistics.median(theirs_t) / 1e9
    return {
        "layer": name, "gflop": flops / 1e9, "rel_error": error,
        "ours_ms": summary_ms(ours_t), "pytorch_ms": summary_ms(theirs_t),
        "ours_gflops": ours_gflops, "pytorch_gflops": theirs_gflops,
        "ratio": ours_gflops / theirs_gflops,
    }


def parse_args(description: str) -> argparse.Namespace:
    """The options of the kernel benchmarks: --threads, --rounds, --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    return parser.parse_args()


def write_json(args: argparse.Namespace, results: list) -> None:
    """The results (with the threads and rounds) to --json, when given."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rounds": args.rounds, "layers": results}, f,
                      indent=2)


def run_layers(layers, measure, columns, cells, target: float) -> list:
    """``measure(layer)`` of every layer, each printed as a row of ``columns`` as it comes:
    ``cells(result)``, then "ok" or "BELOW" the target ratio. Returns the results."""
    print(render_table(columns, []))
    results = []
    for layer in layers:
        r = measure(layer)
        results.append(r)
        print(render_row(columns, cells(r) + ["ok" if r["ratio"] >= target else "BELOW"]))
    return results


COLUMNS = (Column("layer", 22, "<"), Column("ours GFLOP/s", 14, spec=".1f", gap=""),
           Column("PyTorch GFLOP/s", 17, spec=".1f", gap=""),
           Column("ratio", 8, spec=".2f", gap=""), Column("max rel err", 11, spec=".1e", gap="  "),
           Column("", 0, "<", gap="  "))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    import torch

    torch.set_num_threads(args.threads)
    device = Device("nv_full", num_threads=args.threads)
    rng = np.random.default_rng(0)
    print(f"fused fp32 conv + BN + ReLU, NCHW batch 1, {args.threads} threads, "
          f"median of {args.rounds} interleaved rounds; torch {torch.__version__}")
    results = run_layers(
        LAYERS, lambda layer: bench_layer(layer, device, torch, args.rounds, rng), COLUMNS,
        lambda r: [r["layer"], r["ours_gflops"], r["pytorch_gflops"], r["ratio"], r["rel_error"]],
        TARGET)
    met = sum(r["ratio"] >= TARGET for r in results)
    print(f"ratio >= {TARGET} on {met} of {len(results)} layers")
    write_json(args, results)


if __name__ == "__main__":
    main()
