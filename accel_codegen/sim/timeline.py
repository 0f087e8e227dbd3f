"""The timeline of a model's accelerator runs as a Chrome trace: the Trace Event Format JSON that
Perfetto (ui.perfetto.dev) and chrome://tracing open.

>>> with accel_codegen.profile() as prof:
...     vm["main"](x)
>>> prof.to_chrome_trace("run.json", config="nv_full")   # the configuration the runs ran on
>>> accel_codegen.estimate(mod, params).to_chrome_trace("estimate.json")  # the same, unrun

Time is *simulated* time: cycles of the cost model (``csrc/cost_model.c``) converted to
microseconds with the configuration's clock. The trace has one process (the accelerator) and
one track (a "thread") per unit: ``runs`` (one slice per run, named by its label, so that
layer ``f0.12`` can be searched for), ``memory (DRAM)``, and one track per engine of
:data:`~accel_codegen.sim.vocabulary.ENGINES` (CONV, SDP, PDP, CDP, BDMA, RUBIK).

Layout model
------------
Every figure is a field of the run and op records (``accel_run_stats``, ``accel_op_stats``):
the layout only places them in time, as the cost model says the hardware spends them.

- **Runs** are laid end to end in execution order (the profile's order; the estimate's is the
  same): the layers of one inference run one after another, so the trace lasts the sum of the
  runs' ``cycles`` (``CostTotals.cycles``).
- **A fused run** pipelines its engines (the cost model charges it "the long pole of every
  engine's compute and all of its memory traffic"): every op's engine is busy from the run's
  start, after the first read's latency, for the op's ``compute_cycles``, and the memory track
  is busy from the run's start for the run's DRAM cycles (the run record's ``memory_cycles``,
  the chain's whole traffic). The run lasts its ``cycles``: the longest of these plus its
  engines' fixed pipeline cycles (the configuration's ``*_pipeline_cycles``). When the memory
  is the long pole (a *memory-bound* run), each engine's track shows a ``waits on memory``
  slice from the end of its compute to the end of the transfers;
  when an engine is the long pole, the others simply finish early (they wait on it, not on
  memory).
- **An independent run** executes its ops one after another, each for its own ``cycles``
  (its pipeline cycles plus ``max(compute_cycles + latency, memory_cycles)``; the run's
  cycles are their sum): the engine is busy for the op's ``compute_cycles`` from the op's
  start (after its first read's latency), the memory track for the op's ``memory_cycles``,
  and an op whose memory cycles exceed that shows ``waits on memory`` until they end.
- **BDMA** is pure data movement (``compute_cycles`` 0): its slice on the BDMA track lasts the
  transfer, the op's ``cycles``, with the same traffic on the memory track. **RUBIK** moves
  data too, at its data path's rate (``compute_cycles``), usually waiting on memory.

The records carry cycles and bytes, not the configuration; the configuration gives the clock
(cycles -> microseconds). Memory cycles are the records' own (``memory_cycles``: DRAM with its
bursts, turnaround and latency; ``sram_cycles``: the secondary memory; a fused run's are the
run record's), and every run's ``cycles`` is checked against its ops' and memory's.

Every slice carries ``args``: the run's label, the op, its precision, MACs, bytes read and
written, compute and memory cycles, start and length in cycles, and the run's MAC-array
utilisation. A run's slice also says whether it waits on memory (``memory_bound``) and for how
many of its cycles the memory is the long pole (``memory_bound_cycles``: the whole of a
memory-bound fused run; the cycles of an independent run's memory-bound ops).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..errors import AccelInvalidError
from .config import AccelConfig
from .costs import CostTotals, engine_names
from .labels import label_key
from .vocabulary import ENGINES

RUNS_TRACK = "runs"
MEMORY_TRACK = "memory (DRAM)"
WAIT = "waits on memory"
#: Every track, top to bottom: the runs, the memory, then the engines in the ISA's order.
TRACKS = (RUNS_TRACK, MEMORY_TRACK, *(engine.name for engine in ENGINES))
PID = 1


@dataclasses.dataclass(frozen=True)
class Slice:
    """One busy (or waiting) interval of one track, in cycles from the first run's start."""

    track: str
    name: str
    category: str  # "run", "memory", "compute", "wait"
    start: int
    cycles: int
    args: Dict[str, Any]


def _mismatch(what: str, recorded: int, derived: int) -> AccelInvalidError:
    return AccelInvalidError(
        f"{what} records {recorded:,} cycles, its ops and memory give {derived:,}: not a "
        "record of the cost model")


def _op_args(label: str, op, utilization: float) -> Dict[str, Any]:
    return {"label": label, "op": op.op, "engine": op.engine, "precision": op.precision,
            "macs": op.macs, "bytes_read": op.bytes_read, "bytes_written": op.bytes_written,
            "compute_cycles": op.compute_cycles, "memory_cycles": op.memory_cycles,
            "run_utilization": utilization}


def _run_slices(index: int, record, start: int, config: AccelConfig) -> List[Slice]:
    """The slices of one run starting at cycle ``start`` (see the layout model above)."""
    label = record.label or f"run {index}"
    key = label_key(label)
    ops = tuple(record.ops)
    if not ops:
        raise AccelInvalidError(f"run {label!r} has no op records: a timeline needs them "
                                "(a profile's runs, or an estimate's layers)")
    fused = record.mode == "fused"
    # The run's DRAM cycles as the cost model charged them (burst rounding, turnaround and
    # latency included; FUSED: one latency for the whole chain), and its SRAM cycles.
    run_memory = record.memory_cycles if fused else sum(op.memory_cycles for op in ops)
    run_sram = record.sram_cycles if fused else sum(op.sram_cycles for op in ops)
    # The MAC array the run was costed on shows in its utilisation (checked first: the cycles
    # check below uses the configuration's pipeline cycles and latency).
    peak = config.macs_per_cycle(ops[-1].precision)
    if record.macs and not math.isclose(record.utilization,
                                        record.macs / (record.cycles * peak), rel_tol=1e-9):
        raise AccelInvalidError(
            f"the runs were not costed on config {config.name!r} ({config.atomic_c}x"
            f"{config.atomic_k} MACs): run {label!r} records a utilisation of "
            f"{record.utilization:.6g}, that array gives {record.macs / (record.cycles * peak):.6g};"
            " give the configuration the runs ran on")
    longest = max(op.compute_cycles for op in ops)
    # A fused run: its engines' fixed pipeline cycles, then the long pole of the compute (after
    # the first read's latency) and the memory (cost_model.c's layer_cycles).
    pipeline = sum(getattr(config, f"{op.engine.lower()}_pipeline_cycles", 0) for op in ops)
    wait = config.dram_latency_cycles if any(op.dram_read_bytes for op in ops) else 0
    expected = (pipeline + max(longest + wait, run_memory, run_sram) if fused
                else sum(op.cycles for op in ops))
    if record.cycles != expected:
        raise _mismatch(f"run {label!r}", record.cycles, expected)
    memory_pole = max(run_memory, run_sram)

    def lead(reads_dram) -> int:  # the compute starts when the first read returns
        return config.dram_latency_cycles if reads_dram else 0

    def memory_bound(op) -> bool:
        return max(op.memory_cycles, op.sram_cycles) > op.compute_cycles + lead(op.dram_read_bytes)

    # Cycles whose long pole is the memory: the whole fused run, or the independent ops'.
    bound_cycles = (record.cycles if memory_pole > longest + wait else 0) if fused else \
        sum(op.cycles for op in ops if memory_bound(op))
    run_args = {"label": label, "mode": record.mode, "engines": engine_names(record),
                "precision": ops[0].precision, "macs": record.macs,
                "bytes_read": record.bytes_read, "bytes_written": record.bytes_written,
                "compute_cycles": longest if fused else sum(op.compute_cycles for op in ops),
                "memory_cycles": run_memory, "sram_cycles": run_sram,
                "memory_bound": bound_cycles > 0, "memory_bound_cycles": bound_cycles,
                "utilization": record.utilization,
                "start_cycle": start, "cycles": record.cycles}
    slices = [Slice(RUNS_TRACK, label, "run", start, record.cycles, run_args)]

    def add(track, name, category, at, cycles, args):
        if cycles > 0:
            slices.append(Slice(track, name, category, at, cycles,
                                {**args, "start_cycle": at, "cycles": cycles}))

    if fused:
        add(MEMORY_TRACK, f"{key} memory", "memory", start, run_memory,
            {"label": label, "bytes_read": record.bytes_read,
             "bytes_written": record.bytes_written, "memory_cycles": run_memory})
    at = start
    for op in ops:
        first = wait if fused else lead(op.dram_read_bytes)
        pole = memory_pole if fused else max(op.memory_cycles, op.sram_cycles)
        busy = op.compute_cycles if op.compute_cycles > 0 else op.cycles  # BDMA: the transfer
        begin = at + first if op.compute_cycles > 0 else at
        args = _op_args(label, op, record.utilization)
        add(op.engine, f"{key} {op.op}", "compute", begin, busy, args)
        waits = memory_pole > longest + wait if fused else memory_bound(op)
        if waits and op.compute_cycles > 0:  # until the memory's transfers end
            add(op.engine, WAIT, "wait", begin + busy, at + pole - begin - busy,
                {"label": label, "op": op.op})
        if not fused:
            add(MEMORY_TRACK, f"{key} {op.op} memory", "memory", at, op.memory_cycles,
                {"label": label, "op": op.op, "bytes_read": op.bytes_read,
                 "bytes_written": op.bytes_written, "memory_cycles": op.memory_cycles})
            at += op.cycles
    return slices


def layout(records: Sequence, config: AccelConfig | str) -> List[Slice]:
    """Every slice of the runs ``records`` (a profile's :class:`~accel_codegen.RunStats`, or
    an estimate's layers: anything with the run fields and per-op ``ops``), in cycles."""
    config = AccelConfig.resolve(config)
    slices: List[Slice] = []
    start = 0
    for index, record in enumerate(records):
        slices += _run_slices(index, record, start, config)
        start += record.cycles
    return slices


def chrome_trace(records: Sequence, config: AccelConfig | str) -> Dict[str, Any]:
    """The runs as a Chrome trace (a dict; ``json.dump`` it, or use :func:`write_chrome_trace`):
    complete events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds of simulated time) on
    one track per unit, named by metadata events (``"ph": "M"``)."""
    config = AccelConfig.resolve(config)
    records = list(records)
    to_us = 1e6 / config.clock_hz
    tids = {track: tid for tid, track in enumerate(TRACKS, start=1)}
    events: List[Dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "ts": 0, "dur": 0,
         "args": {"name": f"accelerator {config.name} ({config.clock_hz / 1e9:g} GHz, "
                          f"{config.dram_bytes_per_s / 1e9:g} GB/s), simulated time"}}]
    for track, tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "ts": 0,
                       "dur": 0, "args": {"name": track}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                       "ts": 0, "dur": 0, "args": {"sort_index": tid}})
    for s in layout(records, config):
        begin, end = s.start * to_us, (s.start + s.cycles) * to_us
        events.append({"name": s.name, "cat": s.category, "ph": "X", "ts": begin,
                       "dur": end - begin, "pid": PID, "tid": tids[s.track], "args": s.args})
    totals = CostTotals.of(records)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"config": config.name, "clock_hz": config.clock_hz,
                          "dram_bytes_per_s": config.dram_bytes_per_s, "runs": len(records),
                          "total_cycles": totals.cycles,
                          "total_us": totals.cycles * to_us,
                          "time": "simulated (cost model cycles at the clock)",
                          "layout": "see accel_codegen.sim.timeline"}}


def save_trace(trace: Dict[str, Any], path) -> Path:
    """Write a trace dict to ``path`` as compact JSON; returns the path."""
    path = Path(path)
    path.write_text(json.dumps(trace, separators=(",", ":")))
    return path


def write_chrome_trace(records: Sequence, config: AccelConfig | str, path) -> Path:
    """Write :func:`chrome_trace` to ``path`` (JSON); returns the path."""
    return save_trace(chrome_trace(records, config), path)
