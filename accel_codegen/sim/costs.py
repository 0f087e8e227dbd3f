"""Totals of a model's accelerator runs, computed in one place: the profile of a real run, the
estimate and the benchmark all sum their per-layer records here.

A record is anything with the cost fields of :class:`~accel_codegen.RunStats` (``macs``,
``mac_cycles``, ``bytes_read``, ``bytes_written``, ``cycles`` and the energies, ``energy_pj``
and its parts): a profiled run, an estimated layer
(:class:`~accel_codegen.estimation.LayerEstimate`). The layers of one inference run one after
another, so their cycles and energies add up.

>>> totals = CostTotals.of(prof.records)
>>> totals.cycles, totals.frames_per_s(config.clock_hz), totals.utilization(peak)
>>> totals.energy_pj, totals.frames_per_joule()
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
    #: picojoules: the whole inference's and where it goes (accel_run_stats in accel.h)
    energy_pj: float = 0.0
    mac_energy_pj: float = 0.0
    cbuf_energy_pj: float = 0.0
    dram_energy_pj: float = 0.0
    engine_energy_pj: float = 0.0
    dram_bytes: int = 0
    sram_bytes: int = 0

    @classmethod
    def of(cls, records: Iterable) -> "CostTotals":
        """The sums of every cost field over ``records``."""
        names = [f.name for f in dataclasses.fields(cls)]
        sums = dict.fromkeys(names, 0)
        for record in records:
            for name in names:
                sums[name] += getattr(record, name, 0)
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

    def frames_per_joule(self) -> Optional[float]:
        """Inferences per joule of energy (None when nothing was charged)."""
        return 1e12 / self.energy_pj if self.energy_pj else None

    def utilization(self, peak_macs_per_cycle: int) -> float:
        """MAC-array utilisation: MACs / (cycles x peak MACs per cycle); 0 without cycles."""
        return self.macs / (self.cycles * peak_macs_per_cycle) if self.cycles else 0.0

    def to_dict(self) -> Dict[str, float]:
        return dataclasses.asdict(self)


#: CONV modes a run's engines name (the op names of accel_op_stats that mark them).
CONV_MODES = {"conv2d_image": "image", "conv2d_batch": "batch", "conv2d_winograd": "wg"}


def engine_names(record) -> str:
    """The engines of a run, e.g. "CONV+SDP+PDP" or "CONV(image)+SDP" (a CONV in a mode of
    :data:`CONV_MODES`): a record's ``engines`` text, else the engines of its per-op records
    (``ops``, as in :class:`~accel_codegen.RunStats`)."""
    engines = getattr(record, "engines", None)
    if isinstance(engines, str):
        return engines
    return "+".join(op.engine + (f"({CONV_MODES[name]})" if name in CONV_MODES else "")
                    for op in record.ops for name in [getattr(op, "op", "")])


def energy_line(totals: CostTotals) -> str:
    """One line: the energy of an inference and where it goes (DRAM, MAC, CBUF, engines)."""
    energy = totals.energy_pj
    parts = [("DRAM", totals.dram_energy_pj), ("MAC", totals.mac_energy_pj),
             ("CBUF", totals.cbuf_energy_pj), ("SDP/PDP/CDP", totals.engine_energy_pj)]
    shares = ", ".join(f"{name} {part / energy:.1%}" for name, part in parts) if energy else "-"
    fpj = totals.frames_per_joule()
    return (f"energy {energy / 1e6:,.1f} uJ per frame ({shares})"
            + (f" = {fpj:,.1f} frames/J" if fpj else ""))
