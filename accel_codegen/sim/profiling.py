"""``accel_codegen.profile()``: record the simulator's cost of every accelerator op executed.

>>> with accel_codegen.profile() as prof:
...     vm["main"](x)
>>> print(prof.table())
>>> prof.totals["cycles"]
>>> prof.to_chrome_trace("run.json", config="nv_full")  # the timeline, for Perfetto
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Dict, Iterator, List

from . import RunStats, profile_enable, profile_records
from .config import AccelConfig
from .cost_report import (FP32_BYTES_NOTE, cost_table, label_source, layer_rows,
                          source_names, write_csv)
from .costs import CostTotals, energy_line
from .timeline import chrome_trace, write_chrome_trace


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
    def totals(self) -> Dict[str, float]:
        """Sums over every run: macs, mac_cycles, bytes_read, bytes_written, cycles, where the
        bytes went (dram_bytes, burst-rounded, and sram_bytes), energy_pj and its parts (mac_,
        cbuf_, dram_, engine_energy_pj)."""
        return CostTotals.of(self.records).to_dict()

    def table(self, clock_hz: float | None = None, sources=None) -> str:
        """A per-layer table and the energy per frame; with ``clock_hz``, also the simulated
        time; ``sources``: layer key -> its Relax operators, whose ``names`` (layer key ->
        source-model name: ``accel_codegen.library_info(path).names`` of the library that
        ran) fill a column "source"."""
        names = source_names(sources)
        text = cost_table(self.records, modes=True,
                          sources=[label_source(r.label, names) for r in self.records]
                          if names else None)
        totals = CostTotals.of(self.records)
        if clock_hz:
            seconds = totals.seconds(clock_hz)
            text += f"\nsimulated time at {clock_hz / 1e9:g} GHz: {seconds * 1e3:.3f} ms"
        text += "\n" + energy_line(totals)
        if any(op.precision == "fp32" for op in self.ops):
            text += "\n" + FP32_BYTES_NOTE
        return text

    def csv(self, path, config: AccelConfig | str | None = None, sources=None) -> Path:
        """Write the per-layer CSV (docs/report-schema.md); ``config``: the configuration the
        runs ran on, for the utilisation against its array (else each run's own figure);
        ``sources``: layer key -> its Relax operators, and their source-model names as its
        ``names`` (as :meth:`table`'s). Returns the path."""
        peak = None
        if config is not None:
            config = AccelConfig.resolve(config)
            precisions = {op.precision for op in self.ops if op.engine == "CONV"}
            peak = config.macs_per_cycle("int8" if "int8" in precisions else
                                         next(iter(precisions), "fp16"))
        return write_csv(layer_rows(self.records, peak_macs_per_cycle=peak, sources=sources),
                         path)

    def chrome_trace(self, config: AccelConfig | str = "nv_full") -> Dict[str, Any]:
        """The runs' timeline in simulated time as a Chrome trace dict (see
        :mod:`accel_codegen.sim.timeline`). ``config``: the configuration the runs ran on (a
        preset name or an AccelConfig; the records do not carry it): its clock converts cycles
        to microseconds; a configuration with another bandwidth-to-clock ratio is refused."""
        return chrome_trace(self.records, config)

    def to_chrome_trace(self, path, config: AccelConfig | str = "nv_full") -> Path:
        """Write :meth:`chrome_trace` as JSON (open it in ui.perfetto.dev or chrome://tracing);
        returns the path."""
        return write_chrome_trace(self.records, config, path)

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
