"""``accel_codegen.profile()``: record the simulator's cost of every accelerator op executed.

>>> with accel_codegen.profile() as prof:
...     vm["main"](x)
>>> print(prof.table())
>>> prof.totals["cycles"]
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List

from .sim import RunStats, profile_enable, profile_records

_TOTAL_FIELDS = ("macs", "mac_cycles", "bytes_read", "bytes_written", "cycles")


class Profile:
    """The runs recorded inside a ``profile()`` block: one record per layer (accelerator run),
    each with its per-engine op records."""

    def __init__(self) -> None:
        self.records: List[RunStats] = []

    @property
    def ops(self):
        """Every engine op executed, in order."""
        return [op for run in self.records for op in run.ops]

    @property
    def totals(self) -> Dict[str, int]:
        """Sums over every run: macs, mac_cycles, bytes_read, bytes_written, cycles."""
        return {field: sum(getattr(r, field) for r in self.records) for field in _TOTAL_FIELDS}

    def table(self, clock_hz: float | None = None) -> str:
        """A per-layer table; with ``clock_hz``, also the simulated time."""
        header = (f"{'#':>4} {'layer':<44} {'mode':<11} {'engines':<15} {'MMACs':>9} "
                  f"{'KB read':>9} {'KB written':>10} {'cycles':>11} {'util':>6}")
        lines = [header, "-" * len(header)]
        for i, r in enumerate(self.records):
            engines = "+".join(op.engine for op in r.ops)
            lines.append(f"{i:>4} {r.label[:44]:<44} {r.mode:<11} {engines[:15]:<15} "
                         f"{r.macs / 1e6:>9.2f} {r.bytes_read / 1e3:>9.1f} "
                         f"{r.bytes_written / 1e3:>10.1f} {r.cycles:>11,} {r.utilization:>6.1%}")
        t = self.totals
        lines.append("-" * len(header))
        lines.append(f"{'':>4} {'total':<44} {'':<11} {'':<15} {t['macs'] / 1e6:>9.2f} "
                     f"{t['bytes_read'] / 1e3:>9.1f} {t['bytes_written'] / 1e3:>10.1f} "
                     f"{t['cycles']:>11,}")
        if clock_hz:
            lines.append(f"simulated time at {clock_hz / 1e9:g} GHz: "
                         f"{t['cycles'] / clock_hz * 1e3:.3f} ms")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Record every accelerator run in the process while the block runs (not re-entrant)."""
    result = Profile()
    profile_enable(True)
    try:
        yield result
    finally:
        result.records = profile_records()
        profile_enable(False)
