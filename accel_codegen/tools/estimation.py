"""``accel_codegen.estimate`` (defined here, in ``estimation``, so that the function does not
clash with a submodule of the same name): what a model would cost on a configuration, without running it.

The module is partitioned as :func:`accel_codegen.partition_for_accel` partitions it (the same
pattern table and checks, see :func:`accel_codegen.partition.match_composites`), but no code is
generated: every composite is lowered to its engine ops and costed by the C library's cost
model (``accel_estimate_chains``), which is also what a real run records in
:func:`accel_codegen.profile`. Costs (cycles, traffic, energy) depend on shapes, precision and
configuration only, so no data and no calibration are needed. A design-space sweep partitions
and lowers the model once per partition (the configurations' :data:`COST_FIELDS` never change
it) and costs each configuration in one library call: 1,000 configurations of ResNet-50 take
seconds.

>>> report = estimate(mod, config="nv_small")
>>> report.total_cycles, report.frames_per_s
>>> print(report)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tvm
from tvm import relax

from ..compiler.codegen.planning import plan_program
from ..compiler.costing import ProgramCosts
from ..compiler.layer import Layer
from ..compiler.program import lower_module
from ..compiler.target import Target
from ..errors import AccelInvalidError
from ..compiler.partition import check_layer_precisions, match_composites
from ..sim import OpStats, RunStats
from ..sim.config import ENERGY_FIELDS, AccelConfig, Precision, check_precision
from ..sim.costs import CostTotals, energy_line, engine_names
from ..sim.timeline import chrome_trace, write_chrome_trace
from ..sim.cost_report import FP32_BYTES_NOTE, cost_table
from ..tables import Column, render_table
from .report import label_source, layer_rows, source_names, source_ops, tagged, write_csv
from .progress import ProgressCallback, progress_callback, steps

#: Precisions the code generator emits today; the others are issue 5.


@dataclasses.dataclass(frozen=True)
class LayerEstimate:
    """The cost of one accelerator run (a layer), as the profile of a real run records it."""

    label: str          # "f<function>.<layer> <primitive>", as the generated code labels it
    primitive: str      # the composite's pattern name, e.g. accel.conv2d_bn_relu
    engines: str        # the engine ops of the run, e.g. "CONV+SDP+PDP"
    mode: str           # "fused" or "independent"
    macs: int
    mac_cycles: int
    bytes_read: int
    bytes_written: int
    cycles: int
    utilization: float
    energy_pj: float    # picojoules, and its parts (accel_run_stats in accel.h)
    mac_energy_pj: float
    cbuf_energy_pj: float
    dram_energy_pj: float
    engine_energy_pj: float
    #: the per-op records, as a profiled run's (for the timeline; not in ``to_dict``)
    ops: Tuple[OpStats, ...] = dataclasses.field(default=(), repr=False)
    memory_cycles: int = 0  # DRAM cycles of the run
    sram_cycles: int = 0    # secondary-memory cycles of the run
    dram_bytes: int = 0     # DRAM bytes read + written (burst-rounded)
    sram_bytes: int = 0     # SRAM bytes read + written

    @classmethod
    def from_stats(cls, label: str, primitive: str, stats: RunStats) -> "LayerEstimate":
        return cls(label, primitive, engine_names(stats), stats.mode,
                   stats.macs, stats.mac_cycles, stats.bytes_read, stats.bytes_written,
                   stats.cycles, stats.utilization, stats.energy_pj, stats.mac_energy_pj,
                   stats.cbuf_energy_pj, stats.dram_energy_pj, stats.engine_energy_pj,
                   stats.ops, stats.memory_cycles, stats.sram_cycles, stats.dram_bytes,
                   stats.sram_bytes)


def memory_bound_cycles(records, config: AccelConfig) -> int:
    """Cycles of the records (layers) whose memory (DRAM or SRAM, as the cost model charged
    it) is their long pole."""
    return sum(r.cycles for r in records
               if max(r.memory_cycles, r.sram_cycles) >= r.cycles * 0.999)


def _total(field: str, doc: str) -> property:
    """A read-only attribute of a report: one of the sums of its layers' costs."""
    return property(lambda report: getattr(report.cost_totals, field), doc=doc)


@dataclasses.dataclass
class EstimateReport:
    """Per-layer costs and totals of a model on one configuration (see :func:`estimate`)."""

    config: AccelConfig
    precision: str
    fuse: bool
    layers: List[LayerEstimate]
    host_ops: int  # operators left on TVM's host path (not costed)
    #: layer key (``f0.3``) -> the Relax operators the layer computes (the CSV's source_ops)
    source_ops: Dict[str, List[str]] = dataclasses.field(default_factory=dict)

    @property
    def cost_totals(self) -> CostTotals:
        """The sums over the layers (see :class:`~accel_codegen.costs.CostTotals`)."""
        return CostTotals.of(self.layers)

    total_cycles = _total("cycles", "Cycles of one inference: the layers run one after another.")
    macs = _total("macs", "MACs of one inference.")
    bytes_read = _total("bytes_read", "Bytes read from memory in one inference.")
    bytes_written = _total("bytes_written", "Bytes written to memory in one inference.")
    bytes = _total("bytes", "Memory traffic of one inference, read plus written.")
    total_energy_pj = _total("energy_pj", "Energy of one inference, picojoules.")

    @property
    def frames_per_joule(self) -> float:
        """Inferences per joule (inf when nothing was charged)."""
        fpj = self.cost_totals.frames_per_joule()
        return float("inf") if fpj is None else fpj

    @property
    def seconds(self) -> float:
        """Simulated time of one inference at the configuration's clock."""
        return self.cost_totals.seconds(self.config.clock_hz)

    @property
    def frames_per_s(self) -> float:
        fps = self.cost_totals.frames_per_s(self.config.clock_hz)
        return float("inf") if fps is None else fps

    @property
    def utilization(self) -> float:
        """MAC-array utilisation over the whole inference: MACs / (cycles x peak MACs/cycle)."""
        return self.cost_totals.utilization(self.config.macs_per_cycle(
            _peak_precision(self.precision)))

    @property
    def memory_bound_cycles(self) -> int:
        """Cycles of the layers whose memory traffic, at the DRAM bandwidth, is their long pole."""
        return memory_bound_cycles(self.layers, self.config)

    def totals(self) -> Dict[str, float]:
        totals = self.cost_totals
        return {"total_cycles": self.total_cycles, "macs": self.macs,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "bytes": self.bytes, "dram_bytes": self.cost_totals.dram_bytes,
                "sram_bytes": self.cost_totals.sram_bytes, "seconds": self.seconds,
                "frames_per_s": self.frames_per_s, "utilization": self.utilization,
                "memory_bound_cycles": self.memory_bound_cycles,
                "total_energy_pj": self.total_energy_pj,
                "frames_per_joule": self.frames_per_joule,
                "mac_energy_pj": totals.mac_energy_pj, "cbuf_energy_pj": totals.cbuf_energy_pj,
                "dram_energy_pj": totals.dram_energy_pj,
                "engine_energy_pj": totals.engine_energy_pj}

    def to_dict(self) -> dict:
        """The report's JSON form (``schema`` accel-codegen/estimate/1: docs/report-schema.md);
        each layer with its own fields and the per-layer CSV's others (:meth:`layer_rows`)."""
        rows = self.layer_rows()
        return tagged("estimate", {
            "config": self.config.to_dict(), "precision": self.precision, "fuse": self.fuse,
            "host_ops": self.host_ops, **self.totals(),
            "layers": [{**row, **{field.name: getattr(layer, field.name)
                                  for field in dataclasses.fields(layer) if field.name != "ops"}}
                       for layer, row in zip(self.layers, rows)]})

    def layer_rows(self) -> List[Dict[str, Any]]:
        """The per-layer rows of the CSV (:data:`~accel_codegen.tools.report.CSV_COLUMNS`)."""
        return layer_rows(self.layers, peak_macs_per_cycle=self.config.macs_per_cycle(
            _peak_precision(self.precision)), sources=self.source_ops,
            precision=None if self.precision == "mixed" else self.precision)

    def to_csv(self, path) -> Path:
        """Write the per-layer CSV (one row per accelerator run); returns the path."""
        return write_csv(self.layer_rows(), path)

    def chrome_trace(self) -> Dict[str, Any]:
        """The layers' timeline in simulated time as a Chrome trace dict, the one a profiled
        run of the same build gives (see :mod:`accel_codegen.sim.timeline`)."""
        return chrome_trace(self.layers, self.config)

    def to_chrome_trace(self, path) -> Path:
        """Write :meth:`chrome_trace` as JSON (open it in ui.perfetto.dev or chrome://tracing);
        returns the path."""
        return write_chrome_trace(self.layers, self.config, path)

    def __str__(self) -> str:
        cfg = self.config
        title = (f"estimate: {cfg.name} ({cfg.atomic_c}x{cfg.atomic_k} MACs, "
                 f"{cfg.cbuf_bytes // 1024} KiB CBUF, {cfg.dram_bytes_per_s / 1e9:g} GB/s, "
                 f"{cfg.clock_hz / 1e9:g} GHz), {self.precision}, "
                 f"{'fused' if self.fuse else 'decomposed'}: {len(self.layers)} accelerator "
                 f"layers, {self.host_ops} host operators")
        names = source_names(self.source_ops)
        table = cost_table(self.layers, utilization_total=self.utilization,
                           sources=[label_source(layer.label, names) for layer in self.layers])
        return "\n".join([title, table,
                          f"{self.seconds * 1e3:.3f} ms per frame at {cfg.clock_hz / 1e9:g} GHz = "
                          f"{self.frames_per_s:,.1f} frames/s; "
                          f"{self.bytes / 1e6:.2f} MB moved per frame (DRAM "
                          f"{self.cost_totals.dram_bytes / 1e6:.2f} MB in bursts, SRAM "
                          f"{self.cost_totals.sram_bytes / 1e6:.2f} MB)",
                          energy_line(self.cost_totals)]
                         + ([FP32_BYTES_NOTE] if self.precision == "fp32" else []))


def model_runs(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
               config: AccelConfig | str = "nv_full", winograd: bool = True
               ) -> List[Tuple[str, str, Layer, Dict[str, dict]]]:
    """(label, primitive, layer, modes) of every accelerator run of the fused fp32 partition, in
    execution order, for the per-layer benchmark: ``modes`` gives the CONV's modes as emitted
    (input modes, and Winograd where the memory plan chose it) by the planned Program of the
    fused code (``"fused"``) and by the same layers' Program decomposed (``"decomposed"``, each
    op its own run): the code generator's decision, not a second one per layer."""
    config = AccelConfig.resolve(config)
    matched = match_composites(mod, params, config=config, fuse=True)
    planned = {name: plan_program(lower_module(matched, "fp32"),
                                  Target(config, fuse, Precision.FP32, winograd)).runs
               for name, fuse in (("fused", True), ("decomposed", False))}
    return [(run.label, run.primitive, run.layer,
             {name: runs[i].modes for name, runs in planned.items()})
            for i, run in enumerate(planned["fused"])]


def _host_ops(mod: tvm.IRModule) -> int:
    """Operator calls of main that stay on the host (external calls excluded)."""
    count = 0
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                count += 1
    return count


def _peak_precision(precision: str) -> str:
    """The precision whose MAC rate utilisation is measured against (mixed: int8's, the
    array's peak)."""
    return "int8" if precision == "mixed" else precision


def estimate(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
             config: AccelConfig | str = "nv_full", precision: str = "fp32",
             fuse: bool = True, winograd: bool = True,
             layer_precisions: Optional[Dict[str, str]] = None,
             target: Optional[Target] = None) -> EstimateReport:
    """The cost model's figures for a model on a configuration, without running the kernels.

    Parameters
    ----------
    mod : tvm.IRModule
        An unpartitioned Relax module with a ``main`` function (as for
        :func:`accel_codegen.partition_for_accel`).
    params : dict of str to numpy.ndarray, optional
        Values of ``main`` parameters to bind as constants (their values do not change the
        cost; binding them can change what is offloaded, as it does for a build).
    config : AccelConfig or str
        The hardware configuration, or a preset name.
    precision : str
        One of "fp32", "fp16", "int8" (int16 is not generated, so not estimated). Costs need
        no calibration: they depend on shapes only. "mixed": each layer in the precision
        ``layer_precisions`` gives it (layer key -> "int8" / "fp16", as
        ``mixed_precision_of(mod).layer_precisions`` or a mixed build's partition report
        has it), with the converting runs between int8 and fp16 layers.
    fuse : bool
        Fused chains (True) or one independent op per source op (False), as for a build.
    winograd : bool
        Convolutions the configuration runs in Winograd mode use it (True), as for a build;
        False keeps every convolution direct. The layers' ``engines`` say "CONV(wg)" for it.
    target : Target, optional
        The build's options as one :class:`~accel_codegen.compiler.target.Target` (its
        configuration, fusion, precision or per-layer plan, conv-mode policy), in place of
        the keywords above, which otherwise make it.

    Returns
    -------
    EstimateReport
        Per-layer figures (in execution order, the labels of a real run's profile) and totals:
        ``total_cycles``, ``macs``, ``bytes_read`` / ``bytes_written``, ``frames_per_s``.

    Raises
    ------
    AccelInvalidError
        An unknown precision, or not a module with a ``main`` function.
    AccelUnsupportedError
        A precision the configuration lacks, or one the code generator does not emit yet.
    """
    if target is None:
        target = estimate_target(config, precision, fuse, winograd, layer_precisions)
    if target.mixed and not target.precision.assigned:
        raise AccelInvalidError("precision='mixed' is estimated for an assignment: give "
                                "layer_precisions (layer key -> 'int8' or 'fp16'), or a Target "
                                "of one (Target.of(..., layer_precisions=...))")
    matched = match_composites(mod, params, config=target.config, fuse=target.fuse,
                               precision=target.chains.value)
    layer_precisions = check_layer_precisions(matched, target.layer_precisions) \
        if target.mixed else None
    return report_of(lower(matched, target.config, target.code, target.fuse, target.winograd,
                           layer_precisions), target.config, matched)


def estimate_target(config: AccelConfig | str, precision: str, fuse: bool, winograd: bool,
                    layer_precisions: Optional[Dict[str, str]]) -> Target:
    """The Target :func:`estimate`'s keywords describe (``Target.of``, without the checks of
    what is generated: decomposed int8 and mixed chains are costed too)."""
    if precision != "mixed" and layer_precisions is not None:
        raise AccelInvalidError(f"layer_precisions is for precision='mixed', not {precision!r}")
    return Target.of(config, fuse=fuse, precision=precision, winograd=winograd,
                     layer_precisions=layer_precisions, generated=False)


def lower(matched: tvm.IRModule, config: AccelConfig, precision: str, fuse: bool,
          winograd: bool = True, layer_precisions: Optional[Dict[str, str]] = None
          ) -> ProgramCosts:
    """The program of a matched module (:func:`~accel_codegen.compiler.program.lower_module`)
    lowered for costing on ``config`` and on any configuration with the same partition.
    ``precision`` "mixed": each layer's from ``layer_precisions``, and a converting run after
    each layer that a layer of the other precision reads (as the code generator writes them)."""
    program = lower_module(matched, precision,
                           layer_precisions if precision == "mixed" else None)
    return ProgramCosts(program, config, fuse, winograd)


def report_of(costs: ProgramCosts, config: AccelConfig, matched: tvm.IRModule,
              sources: Optional[Dict[str, List[str]]] = None) -> EstimateReport:
    """The estimate of a costed program on ``config`` (``matched``: its module, whose host
    operators and source operators the report names)."""
    layers = [LayerEstimate.from_stats(label, primitive, stats) for (label, primitive), stats
              in zip(costs.labels, costs.records(config, "estimate"))]
    return EstimateReport(config, costs.precision, costs.fuse, layers, _host_ops(matched),
                          source_ops(matched) if sources is None else sources)


def _sweep_row(costs: ProgramCosts, config: AccelConfig, host_ops: int) -> dict:
    """The sweep's figures of one configuration, from one library call (no per-layer Python
    records: the same sums as :func:`estimate`'s report)."""
    records = costs.records(config, "run_stats")
    totals = CostTotals.of(records)
    fps, fpj = totals.frames_per_s(config.clock_hz), totals.frames_per_joule()
    return {"frames_per_s": float("inf") if fps is None else fps,
            "total_cycles": totals.cycles,
            "utilization": totals.utilization(config.macs_per_cycle(
                _peak_precision(costs.precision))),
            "bytes_read": totals.bytes_read, "bytes_written": totals.bytes_written,
            "bytes": totals.bytes, "dram_bytes": totals.dram_bytes,
            "sram_bytes": totals.sram_bytes, "total_energy_pj": totals.energy_pj,
            "frames_per_joule": float("inf") if fpj is None else fpj,
            "mac_energy_pj": totals.mac_energy_pj, "cbuf_energy_pj": totals.cbuf_energy_pj,
            "dram_energy_pj": totals.dram_energy_pj,
            "engine_energy_pj": totals.engine_energy_pj,
            "layers": len(costs.runs), "host_ops": host_ops,
            "memory_bound_share": memory_bound_cycles(records, config) / totals.cycles
            if totals.cycles else 0.0}


# --- design-space exploration -----------------------------------------------------------------

def mac_array(macs: int) -> Tuple[int, int]:
    """int8 MACs per cycle (NVDLA's count) -> (atomic_c, atomic_k): atomic_c = min(64, MACs/8),
    atomic_k = MACs / atomic_c; 64 -> 8x8 (nv_small), 2048 -> 64x32 (nv_full). fp16 and fp32
    (charged as fp16) run at half the count."""
    if macs < 16 or macs & (macs - 1):
        raise AccelInvalidError(f"MACs = {macs}: give powers of two >= 16 (64, 256, 1024, 2048, ...)")
    atomic_c = min(64, macs // 8)
    return atomic_c, macs // atomic_c


def sweep_configs(base: AccelConfig | str, macs: List[int], dram_gbps: List[float],
                  cbuf_kib: Optional[List[int]] = None) -> List[Tuple[dict, AccelConfig]]:
    """The grid of configurations of a sweep: ``base`` with the MAC array, DRAM bandwidth and
    CBUF size of each point replaced. Raises ValueError (or AccelInvalidError from the C
    library's validation) for a point that is not a configuration."""
    base = AccelConfig.resolve(base)
    cbufs = cbuf_kib or [base.cbuf_bytes // 1024]
    points = []
    for m in macs:
        atomic_c, atomic_k = mac_array(m)
        for cbuf in cbufs:
            for gbps in dram_gbps:
                name = f"m{m}-c{cbuf}k-d{gbps:g}"[:31]
                config = base.replace(name=name, atomic_c=atomic_c, atomic_k=atomic_k,
                                      cbuf_bytes=int(cbuf) * 1024,
                                      dram_bytes_per_s=float(gbps) * 1e9)
                points.append(({"macs": m, "atomic_c": atomic_c, "atomic_k": atomic_k,
                                "cbuf_kib": int(cbuf), "dram_gbps": float(gbps)}, config))
    return points


#: Configuration fields that change what a model costs but never how it is partitioned or
#: lowered: the pattern checks ask the C library whether a chain runs, which reads the
#: precisions and features only, and lowering reads no configuration. A sweep partitions once
#: per distinct value of every other field.
COST_FIELDS = frozenset({
    "name", "atomic_c", "atomic_k", "cbuf_bytes", "memory_atom_bytes", "sdp_throughput",
    "sdp_ew_throughput", "pdp_throughput", "cdp_throughput", "clock_hz", "dram_bytes_per_s",
    *ENERGY_FIELDS})


def _partition_key(config: AccelConfig) -> tuple:
    return tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
                 if f.name not in COST_FIELDS)


def sweep(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]],
          points: List[Tuple[dict, AccelConfig]], *, precision: str = "fp32", fuse: bool = True,
          winograd: bool = True, model_name: str = "model",
          progress: Union[None, bool, ProgressCallback] = None) -> dict:
    """Estimate a model at every point of a sweep (see :func:`sweep_configs`).

    ``winograd=False`` keeps every convolution direct (as :func:`estimate`'s); by default a
    convolution runs in Winograd mode at the points where the cost model finds it faster.

    ``progress(done, total)`` is called after every point (``done`` from 1 to the number of
    points); ``None`` draws a bar on stderr when it is a terminal, ``False`` nothing (see
    :mod:`accel_codegen.progress`).

    Returns
    -------
    dict
        ``model``, ``precision``, ``fuse``, ``winograd``, ``base`` (the first point's configuration) and
        ``points``: per configuration its parameters, ``frames_per_s``, ``total_cycles``,
        ``utilization``, ``bytes`` (read + written per frame), ``total_energy_pj`` and its
        parts (``mac_``, ``cbuf_``, ``dram_``, ``engine_energy_pj``), ``frames_per_joule``,
        ``memory_bound_share`` (the fraction of cycles spent in layers whose memory traffic is
        their long pole) and ``host_ops``; each equals :func:`estimate`'s at that point.
    """
    step = steps(progress_callback(progress, "sweep"), len(points))
    lowered: Dict[tuple, Tuple[ProgramCosts, int]] = {}
    rows = []
    for point, config in points:
        key = _partition_key(config)
        if key not in lowered:
            check_precision(config, precision)
            matched = match_composites(mod, params, config=config, fuse=fuse,
                                       precision=precision)
            lowered[key] = lower(matched, config, precision, fuse, winograd), _host_ops(matched)
        costs, host_ops = lowered[key]
        rows.append({**point, "config": config.name, **_sweep_row(costs, config, host_ops)})
        step()
    base = points[0][1].to_dict() if points else None
    return {"model": model_name, "precision": precision, "fuse": fuse, "winograd": winograd,
            "base": base, "points": rows}


_SWEEP_COLUMNS = (Column("MACs", 6), Column("array", 7), Column("CBUF KiB", 8),
                  Column("DRAM GB/s", 9, spec="g"), Column("frames/s", 10, spec=",.1f"),
                  Column("cycles", 12, spec=","), Column("MAC util", 8, spec=".1%"),
                  Column("MB/frame", 9, spec=".2f"), Column("mem-bound", 9, spec=".0%"),
                  Column("mJ/frame", 8, spec=".3f"), Column("frames/J", 9, spec=",.1f"),
                  Column("host ops", 8))


def format_sweep(result: dict) -> str:
    """The sweep as a table, one row per configuration."""
    title = (f"sweep of {result['model']} ({result['precision']}, "
             f"{'fused' if result['fuse'] else 'decomposed'}"
             f"{'' if result.get('winograd', True) else ', every convolution direct'}); mem-bound: share of cycles in "
             "layers whose memory traffic is their long pole")
    rows = [[r["macs"], f"{r['atomic_c']:>3}x{r['atomic_k']:<3}", r["cbuf_kib"], r["dram_gbps"],
             r["frames_per_s"], r["total_cycles"], r["utilization"], r["bytes"] / 1e6,
             r["memory_bound_share"], r["total_energy_pj"] / 1e9, r["frames_per_joule"],
             r["host_ops"]] for r in result["points"]]
    return title + "\n" + render_table(_SWEEP_COLUMNS, rows)
