"""The per-layer cost report of run records (a profile's, an estimate's layers, a benchmark's):
the text table with a totals row (:func:`cost_table`) and the rows of the per-layer CSV
(:func:`layer_rows`, :func:`write_csv`; the columns: docs/report-schema.md). The records are
any with the cost fields of :class:`~accel_codegen.RunStats`.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ..tables import LAYER_WIDTH, Column, render_row, render_table, wrap_label
from .costs import CostTotals, engine_names
from .labels import label_key, layer_key

#: Said under a table where an fp32 tensor's bytes are shown: the cost model counts an fp32
#: tensor at 2 bytes an element (csrc/cost_model.c, ``hw_element_bytes``), the width of
#: NVDLA's fp16 datapath, which the simulator's fp32 mode stands for.
FP32_BYTES_NOTE = ("note: the cost model charges fp32 tensors as fp16 (2 bytes an element, "
                   "NVDLA's datapath width): KB and energy figures of fp32 runs are those "
                   "of the fp16 tensors")

#: The per-layer CSV's columns, in order (docs/report-schema.md says what each holds).
CSV_COLUMNS = ("layer", "source", "source_ops", "engines", "precision", "mode", "macs", "cycles",
               "network_share", "utilization", "bytes_read", "bytes_written", "dram_bytes",
               "sram_bytes", "dram_cycles", "sram_cycles", "energy_pj")


def runs_macs(record) -> bool:
    """Whether a record's run uses the MAC array (a CONV, in any mode); else its MAC figures
    do not apply and show "-", not 0."""
    return any(name.startswith("CONV") for name in engine_names(record).split("+"))


def cost_table(records: Sequence, *, engines_width: Optional[int] = None, modes: bool = False,
               utilization_total: Optional[float] = None,
               sources: Optional[Sequence[str]] = None) -> str:
    """The per-layer cost table of a profile or an estimate, with a totals row.

    Parameters
    ----------
    records : sequence
        Per-layer records with ``label``, ``mode``, the cost fields and ``utilization``, and
        their engines (see :func:`~accel_codegen.sim.costs.engine_names`).
    engines_width : int, optional
        Width of the engines column (longer names are cut); by default the longest name's, so
        "CONV(image)+SDP+PDP" is shown whole.
    modes : bool
        Show each run's mode (fused or independent).
    utilization_total : float, optional
        The whole inference's MAC utilisation, shown in the totals row when given.
    sources : sequence of str, optional
        Each record's layer's name in the source model (``layer2.0.{downsample.0,...}``):
        a column "source" after the layer's, wrapped as the labels are, when any is given.

    A layer label wider than :data:`LAYER_WIDTH` continues on the next line(s); runs without
    a CONV (SDP, PDP, CDP, BDMA alone) show "-" for MMACs and util: not applicable.
    """
    names = [engine_names(r) for r in records]
    if engines_width is None:
        engines_width = max([len("engines"), *map(len, names)])
    layer_width = min(LAYER_WIDTH, max([len("layer"), *(len(r.label) for r in records)]))
    columns = [Column("#", 4), Column("layer", layer_width, "<")]
    named = bool(sources) and any(sources)
    if named:
        source_width = min(LAYER_WIDTH, max([len("source"), *(len(s or "") for s in sources)]))
        columns.append(Column("source", source_width, "<"))
    if modes:
        columns.append(Column("mode", 11, "<"))
    columns += [Column("engines", engines_width, "<", clip=True),
                Column("MMACs", 9, spec=".2f"), Column("KB read", 9, spec=".1f"),
                Column("KB written", 10, spec=".1f"), Column("cycles", 11, spec=","),
                Column("uJ", 8, spec=".2f"), Column("util", 6, spec=".1%")]

    def costs(r, macs=True):
        return [r.macs / 1e6 if macs else None, r.bytes_read / 1e3, r.bytes_written / 1e3,
                r.cycles, r.energy_pj / 1e6]

    rows: list = []
    for i, (r, name) in enumerate(zip(records, names)):
        macs = runs_macs(r)
        label, *more = wrap_label(r.label, layer_width)
        source, *more_source = wrap_label(sources[i] or "", source_width) if named else ("",)
        rows.append([i, label] + ([source] if named else []) + ([r.mode] if modes else [])
                    + [name] + costs(r, macs) + [r.utilization if macs else None])
        for part in range(max(len(more), len(more_source))):
            cells = ["", more[part] if part < len(more) else ""]
            if named:
                cells.append(more_source[part] if part < len(more_source) else "")
            rows.append(render_row(columns[:len(cells)], cells).rstrip())
    total = ["", "total"] + ([""] if named else []) + ([""] if modes else []) + [""] + \
        costs(CostTotals.of(records))
    if utilization_total is not None:
        total.append(utilization_total)
    return render_table(columns, rows, footer=[total])


def record_precision(record) -> Optional[str]:
    """The precision of a run: its record's, else its first op's (None when unknown)."""
    precision = getattr(record, "precision", None)
    if precision:
        return precision
    ops = getattr(record, "ops", ())
    return ops[0].precision if ops else None


class LayerSources(dict):
    """Layer key (``f0.3``) -> the Relax operators the layer computes, in order; ``names``:
    layer key -> the layer's name in the source model (``layer2.0.{downsample.0,...}``,
    :func:`accel_codegen.compiler.source_names.layer_names`), for the layers that have one.
    What the partition (``tools/report.py``: ``source_ops``) and a library's record of its
    build (``compiler/library.py``: ``LibraryInfo.sources``) give the reports."""

    def __init__(self, *args, names: Optional[Mapping[str, str]] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.names: Dict[str, str] = dict(names or {})


def source_names(sources: Optional[Mapping[str, Sequence[str]]]) -> Dict[str, str]:
    """Layer key -> source-model name of a :func:`source_ops` result ({} for another map)."""
    return dict(getattr(sources, "names", None) or {})


def label_source(label: str, names: Mapping[str, str]) -> str:
    """The source-model name of a run label's layer (``f0.6a ...`` -> ``names["f0.6"]``);
    empty for a label of no layer of ``names``."""
    try:
        return names.get(layer_key(label_key(label)), "")
    except AttributeError:  # not a run label of ours
        return ""


def _source_of(label: str, sources: Mapping[str, Sequence[str]]) -> str:
    try:
        return " ".join(sources.get(layer_key(label_key(label)), ()))
    except AttributeError:  # not a run label of ours
        return ""


def layer_rows(records: Sequence, *, peak_macs_per_cycle: Optional[int] = None,
               sources: Optional[Mapping[str, Sequence[str]]] = None,
               precision: Optional[str] = None) -> List[Dict[str, Any]]:
    """One dict per record, with the keys of :data:`CSV_COLUMNS`. ``peak_macs_per_cycle``:
    the array's, for the utilisation (else the record's own figure); ``sources``: layer key
    -> its Relax operators (:func:`accel_codegen.tools.report.source_ops`, whose source-model
    names fill ``source``); ``precision``: of records that carry none. MAC figures of runs
    without a CONV are None (not applicable)."""
    sources = sources or {}
    names = source_names(sources)
    total = sum(r.cycles for r in records) or 1
    rows = []
    for r in records:
        macs = runs_macs(r)
        if not macs:
            utilization = None
        elif peak_macs_per_cycle:
            utilization = r.macs / (r.cycles * peak_macs_per_cycle) if r.cycles else 0.0
        else:
            utilization = r.utilization
        rows.append({
            "layer": r.label, "source": label_source(r.label, names) or None,
            "source_ops": _source_of(r.label, sources),
            "engines": engine_names(r), "precision": record_precision(r) or precision,
            "mode": r.mode, "macs": r.macs if macs else None, "cycles": r.cycles,
            "network_share": r.cycles / total, "utilization": utilization,
            "bytes_read": r.bytes_read, "bytes_written": r.bytes_written,
            "dram_bytes": getattr(r, "dram_bytes", 0), "sram_bytes": getattr(r, "sram_bytes", 0),
            "dram_cycles": getattr(r, "memory_cycles", 0),
            "sram_cycles": getattr(r, "sram_cycles", 0), "energy_pj": r.energy_pj})
    return rows


def csv_text(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] = CSV_COLUMNS) -> str:
    """The rows as CSV with a header line (``columns``; not applicable: empty)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return out.getvalue()


def write_csv(rows: Iterable[Mapping[str, Any]], path,
              columns: Sequence[str] = CSV_COLUMNS) -> Path:
    """Write :func:`csv_text` of the rows to ``path``; returns the path."""
    path = Path(path)
    path.write_text(csv_text(rows, columns))
    return path
