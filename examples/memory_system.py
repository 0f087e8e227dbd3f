"""The memory system's effect on estimates (#12 items 3-4): ResNet-50 and AlexNet (with LRN)
in int8 on nv_full with each memory feature turned off in turn, and AlexNet at the NVDLA
performance spreadsheet's point (2048 MACs, 512 KiB CBUF, 1 GHz, DRAM 10 GB/s) without and
with 4 MiB of SRAM.

    python examples/memory_system.py [--models resnet50,alexnet_lrn] [--precision int8]
                                     [--prune 0.5]

``--prune F`` first zeroes the fraction F of smallest-magnitude weights of every conv and
dense layer (magnitude pruning, per layer), so weight compression has zeros to drop.

Each row is one estimate() (the cost model, no kernels run). A variant whose fields the
installed library does not have (an older build) is skipped.
"""
from __future__ import annotations

import argparse

import torch

import accel_codegen as ac
from accel_codegen import AccelConfig, frontend, models


def variants(base: AccelConfig):
    """(name, config) of each variant of ``base`` the installed library knows."""
    rows = [("preset", base)]
    fields = set(base.to_dict())
    if "dram_latency_cycles" in fields:
        rows.append(("ideal DRAM (no bursts, turnaround, latency)",
                     base.replace(dram_burst_bytes=1, dram_turnaround_cycles=0.0,
                                  dram_latency_cycles=0)))
    if "weight_compression" in base.features:
        rows.append(("no weight compression",
                     base.replace(features=[f for f in base.features
                                            if f != "weight_compression"])))
    if "sram_bytes" in fields:
        rows.append(("4 MiB SRAM", base.replace(sram_bytes=4 << 20)))
    return rows


def prune(model: torch.nn.Module, fraction: float) -> None:
    """Zero the ``fraction`` smallest-magnitude weights of every conv and dense layer."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                w = module.weight
                cut = w.abs().flatten().kthvalue(max(1, int(fraction * w.numel()))).values
                w.mul_(w.abs() > cut)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,alexnet_lrn")
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--prune", type=float, default=0.0)
    args = parser.parse_args()
    spreadsheet = AccelConfig.preset("nv_full").replace(
        name="spreadsheet", atomic_c=64, atomic_k=32, cbuf_bytes=512 * 1024, clock_hz=1e9,
        dram_bytes_per_s=10e9)
    print(f"{'model':<18} {'config':<10} {'variant':<46} {'cycles':>12} {'ms':>8} "
          f"{'DRAM MB':>9} {'SRAM MB':>9} {'host ops':>8}")
    for name in args.models.split(","):
        model, inputs = models.get_model(name)
        if args.prune > 0:
            prune(model, args.prune)
            name = f"{name} pruned {args.prune:g}"
        mod, params = frontend.from_pytorch(model, inputs)
        points = [("nv_full", v) for v in variants(AccelConfig.preset("nv_full"))]
        if name.startswith("alexnet"):
            points += [("10 GB/s", v) for v in variants(spreadsheet)
                       if v[0] in ("preset", "4 MiB SRAM")]
        for config_name, (variant, config) in points:
            report = ac.estimate(mod, params, config=config, precision=args.precision)
            totals = report.cost_totals
            dram = getattr(totals, "dram_bytes", totals.bytes)
            sram = getattr(totals, "sram_bytes", 0)
            print(f"{name:<18} {config_name:<10} {variant:<46} {report.total_cycles:>12,} "
                  f"{report.seconds * 1e3:>8.3f} {dram / 1e6:>9.2f} {sram / 1e6:>9.2f} "
                  f"{report.host_ops:>8}")


if __name__ == "__main__":
    main()
