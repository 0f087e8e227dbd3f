"""Totals of a model's accelerator runs, computed in one place: the profile of a real run, the
estimate and the benchmark all sum their per-layer records here.

A record is anything with the cost fields of :class:`~accel_codegen.RunStats` (``macs``,
``mac_cycles``, ``bytes_read``, ``bytes_written``, ``cycles``): a profiled run, an estimated
layer (:class:`~accel_codegen.estimation.LayerEstimate`). The layers of one inference run one
after another, so their cycles add up.

>>> totals = CostTotals.of(prof.records)
>>> totals.cycles, totals.frames_per_s(config.clock_hz), totals.utilization(peak)
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, Optional


@dataclasses.dataclass(frozen=True)
class CostTotals:
    """Sums over the runs of one inference."""

    macs: int = 0
    mac_cycles: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    cycles: int = 0

    @classmethod
    def of(cls, records: Iterable) -> "CostTotals":
        """The sums of every cost field over ``records``."""
        names = [f.name for f in dataclasses.fields(cls)]
        sums = dict.fromkeys(names, 0)
        for record in records:
            for name in names:
                sums[name] += getattr(record, name)
        return cls(**sums)

    @property
    def bytes(self) -> int:
        """Memory traffic, read plus written."""
        return self.bytes_read + self.bytes_written

    def seconds(self, clock_hz: float) -> float:
        """Simulated time at a clock."""
        return self.cycles / clock_hz

    def frames_per_s(self, clock_hz: float) -> Optional[float]:
        """Inferences per second at a clock (None when nothing ran: no cycles)."""
        return clock_hz / self.cycles if self.cycles else None

    def utilization(self, peak_macs_per_cycle: int) -> float:
        """MAC-array utilisation: MACs / (cycles x peak MACs per cycle); 0 without cycles."""
        return self.macs / (self.cycles * peak_macs_per_cycle) if self.cycles else 0.0

    def to_dict(self) -> Dict[str, int]:
        return dataclasses.asdict(self)


#: The cost model's name of a CONV op in Winograd mode (accel_op_stats.op).
WINOGRAD_OP = "conv2d_winograd"


def engine_names(record) -> str:
    """The engines of a run, e.g. "CONV+SDP+PDP", a CONV in Winograd mode as "CONV(wg)": a
    record's ``engines`` text, else the engines of its per-op records (``ops``, as in
    :class:`~accel_codegen.RunStats`)."""
    engines = getattr(record, "engines", None)
    if isinstance(engines, str):
        return engines
    return "+".join(op.engine + ("(wg)" if getattr(op, "op", None) == WINOGRAD_OP else "")
                    for op in record.ops)
