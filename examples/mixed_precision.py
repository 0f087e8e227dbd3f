"""Mixed int8/fp16 precision on one model (issue #13, item 4): the search for a target output
SQNR, its path from all-int8 to all-fp16 (output SQNR against simulated cycles) as a plot, the
chosen assignment, and a check that the chosen build's profile is the estimate.

Besides the points the search measures, ``--points N`` builds N more along the path, spread
evenly, for the plot. A target above what all-fp16 reaches is reported as out of reach.

    python examples/mixed_precision.py [--model resnet50] [--target 40] [--calibration 8]
        [--points 8] [--out docs/mixed_precision_resnet50]
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--target", type=float, default=40.0, help="output SQNR, dB")
    parser.add_argument("--calibration", type=int, default=8, help="calibration inputs")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--config", default="nv_full")
    parser.add_argument("--points", type=int, default=8, help="extra path points to build")
    parser.add_argument("--out", default=None, help="write OUT.json, OUT.txt and OUT.png")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import accel_codegen as ac
    from accel_codegen.compiler.partition import run_main
    from accel_codegen.flows.mixed import search_mixed_precision
    from accel_codegen.tools.model_spec import load_model, random_inputs

    lines = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    model = load_model(args.model)
    examples = random_inputs(model, args.calibration, args.seed)
    say(f"{args.model} on {args.config}, target {args.target:g} dB output SQNR against the fp32 "
        f"build on {args.calibration} random N(0, 1) calibration inputs (seed {args.seed})")
    start = time.perf_counter()
    try:  # what partition_for_accel(precision="mixed", target_sqnr_db=...) runs, kept live
        search = search_mixed_precision(model.mod, model.params, examples, args.target,
                                        config=args.config)
    except ac.AccelInvalidError as error:
        say(f"no assignment: {error}")
        _write(args.out, lines, None)
        return 0
    part = ac.partition_for_accel(model.mod, model.params, config=args.config,
                                  precision="mixed", calibration=search.calibration,
                                  layer_precisions=search.layer_precisions)
    say(f"search: {time.perf_counter() - start:.0f} s wall, {search.builds} builds, peak RSS "
        f"{_peak_rss_mb():,.0f} MB, load average {os.getloadavg()[0]:.1f}")
    say(str(search))
    extra = np.linspace(0, len(search.order), args.points + 2).round().astype(int)[1:-1]
    for k in sorted(set(int(k) for k in extra)):
        search.measure(k)
    say("\npath (layers promoted to fp16 in this order; measured: built and run):")
    say(f"{'fp16 layers':>11} {'cycles':>12} {'x int8':>7} {'predicted':>9} {'measured':>9}"
        "  promoted")
    for point in search.path:
        measured = f"{point.sqnr_db:9.2f}" if point.sqnr_db is not None else f"{'':>9}"
        layer = search.order[point.promoted - 1] if point.promoted else "-"
        mark = " <- chosen" if point is search.point else ""
        say(f"{point.promoted:>11} {point.cycles:>12,} {point.cycles / search.int8.cycles:7.3f} "
            f"{point.predicted_sqnr_db:9.2f} {measured}  {layer}{mark}")
    report = ac.partition_report(part)
    say("\nchosen precision per layer: " + ", ".join(
        f"{k} {p}" for k, p in report.layer_precisions.items()))
    # The chosen build runs as estimated, cycle for cycle (converting runs included).
    estimate = ac.estimate(model.mod, model.params, config=args.config, precision="mixed",
                           layer_precisions=search.layer_precisions)
    vm = ac.virtual_machine(ac.build(part))
    with ac.profile() as prof:
        run_main(vm, examples[0])
    converts = [layer for layer in estimate.layers if "convert" in layer.label]
    say(f"\nestimate {estimate.total_cycles:,} cycles, profiled run {prof.totals['cycles']:,}; "
        f"{len(converts)} converting runs, {sum(c.cycles for c in converts):,} cycles")
    say(f"whole run: {time.perf_counter() - start:.0f} s wall, peak RSS {_peak_rss_mb():,.0f} MB")
    _write(args.out, lines, search, f"{args.model}: output SQNR against cycles, int8 to fp16")
    return 0


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM), MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _write(out, lines, search, title: str = "") -> None:
    if out is None:
        return
    from accel_codegen.tools.plotting import plot_mixed_precision

    with open(f"{out}.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    if search is not None:
        with open(f"{out}.json", "w") as f:
            json.dump(json.loads(search.to_json()), f, indent=1)
        plot_mixed_precision(search, f"{out}.png", title)


if __name__ == "__main__":
    raise SystemExit(main())
