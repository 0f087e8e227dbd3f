"""Issue 31's goals measured on NVDLA's own nv_small trace tests (docs/nvdla_rtl.md): how many of
the tests NVDLA's RTL passes give the golden CRC on the simulator's front end, and the cost
model's cycles against the RTL's (to the last output write), per test and per class.

    python examples/nvdla_rtl_goals.py [--traces ../shared/nvdla-traces] [NAME_PART ...]

Prints one line per test (CRC verdict, RTL cycles, estimate, error), then the summary: golden
CRCs, the median and mean absolute error, the tests over 15 %, the tests of 500 cycles or fewer
off by more than 64, and per class (cdp, dc, pdp, sdp) the mean, mean absolute, worst and
median absolute error.
"""
from __future__ import annotations

import argparse
import csv
import pathlib
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(pathlib.Path(__file__).resolve().parents[2]
                                                / "shared" / "nvdla-traces"))
    parser.add_argument("only", nargs="*", help="run the tests whose names contain one of these")
    args = parser.parse_args()

    from accel_codegen.sim.nvdla import play
    from accel_codegen.sim.nvdla.cycles import estimate_cycles

    root = pathlib.Path(args.traces)
    with open(root / "rtl_results.tsv") as f:
        rtl = {row["test"]: row for row in csv.DictReader(f, delimiter="\t")}
    tests = sorted(t for t, row in rtl.items() if row["rtl_verdict"] == "pass"
                   and (not args.only or any(part in t for part in args.only)))
    matched, errors, small = 0, {}, []
    for test in tests:
        run = play(str(next((root / "tests" / "nv_small" / test).glob("*.cfg"))))
        ok = bool(run.expected) and run.crcs == run.expected
        matched += ok
        cycles = int(rtl[test]["rtl_cycles_last_write"])
        estimate = estimate_cycles(run.layers)
        errors[test] = (estimate - cycles) / cycles
        if cycles <= 500 and abs(estimate - cycles) > 64:
            small.append(test)
        print(f"{test:40s} {'crc ok' if ok else 'CRC DIFFERS':11s} {cycles:>9,} {estimate:>9,} "
              f"{errors[test]:+7.1%}")
    if not errors:
        return
    print(f"golden CRC: {matched} of {len(tests)}")
    print(f"median |error| {statistics.median(map(abs, errors.values())):.2%}, "
          f"mean |error| {statistics.mean(map(abs, errors.values())):.2%}")
    over = {t: f"{e:+.1%}" for t, e in errors.items() if abs(e) > 0.15}
    print(f"over 15 %: {len(over)} {over}")
    print(f"500 cycles or fewer and off by more than 64: {small}")
    for cls in ("cdp", "dc", "pdp", "sdp"):
        e = [v for t, v in errors.items() if t.split("_")[0] == cls]
        if e:
            print(f"{cls:4s} {len(e):2d} tests: mean {statistics.mean(e):+.1%}, mean |.| "
                  f"{statistics.mean(map(abs, e)):.1%}, worst {max(e, key=abs):+.1%}, "
                  f"median |.| {statistics.median(map(abs, e)):.1%}")


if __name__ == "__main__":
    main()
