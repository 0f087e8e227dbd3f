"""A design-space sweep of ResNet-50 over 1,000 accelerator configurations, timed, with the
energy per inference on the presets and where it goes.

    python examples/sweep_resnet50.py [--precision int8] [--json sweep.json]

The grid is 10 MAC-array sizes x 10 CBUF sizes x 10 DRAM bandwidths from nv_full. The sweep
partitions the model once and costs each configuration in one call to the C cost model
(``accel_estimate_chains``); the time printed is that of ``sweep()`` alone (the model's import
is timed apart). The presets' energies are Horowitz's 45 nm figures (docs/energy.md).
"""
import argparse
import json
import time

from accel_codegen import frontend
from accel_codegen.estimation import estimate, sweep, sweep_configs
from accel_codegen.tools import models

MACS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
CBUF_KIB = [64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
DRAM_GBPS = [1, 2, 3, 5, 8, 10, 15, 20, 30, 50]


def energy_breakdown(report) -> str:
    totals = report.cost_totals
    parts = [("DRAM", totals.dram_energy_pj), ("MAC", totals.mac_energy_pj),
             ("CBUF", totals.cbuf_energy_pj), ("SDP/PDP/CDP", totals.engine_energy_pj)]
    shares = ", ".join(f"{name} {part / 1e9:.3f} mJ ({part / totals.energy_pj:.1%})"
                       for name, part in parts)
    return (f"{report.config.name:>9} {report.precision}: {totals.energy_pj / 1e9:.3f} mJ per "
            f"inference = {report.frames_per_joule:,.1f} frames/J at "
            f"{report.frames_per_s:,.1f} frames/s; {report.bytes / 1e6:.2f} MB moved; {shares}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="int8", choices=["int8", "fp16", "fp32"])
    parser.add_argument("--json", help="write the sweep's result here")
    args = parser.parse_args()

    start = time.perf_counter()
    model, inputs = models.get_model("resnet50")
    mod, params = frontend.from_pytorch(model, inputs)
    print(f"ResNet-50 built and imported in {time.perf_counter() - start:.1f} s")

    for preset in ("nv_full", "nv_small"):
        print(energy_breakdown(estimate(mod, params, config=preset, precision=args.precision)))

    points = sweep_configs("nv_full", MACS, DRAM_GBPS, CBUF_KIB)
    start = time.perf_counter()
    result = sweep(mod, params, points, precision=args.precision, model_name="resnet50",
                   progress=False)
    elapsed = time.perf_counter() - start
    print(f"sweep of {len(points):,} configurations ({args.precision}): {elapsed:.2f} s "
          f"({elapsed / len(points) * 1e3:.2f} ms per configuration)")

    rows = result["points"]
    for key, what in (("frames_per_s", "frames/s"), ("frames_per_joule", "frames/J")):
        best = max(rows, key=lambda r: r[key])
        print(f"best {what}: {best['config']} ({best['atomic_c']}x{best['atomic_k']}) "
              f"{best['frames_per_s']:,.1f} frames/s, {best['frames_per_joule']:,.1f} frames/J")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
