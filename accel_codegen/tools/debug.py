"""A layer-by-layer debugger: each accelerator layer's numerical error against the fp32 build's
same tensor, and its simulated cost, in one table; the first layer whose SQNR falls below a
threshold is flagged, so a user finds the layer that breaks accuracy and what keeping it in a
wider precision would cost. The operators the partition leaves on the host (TVM runs them in
fp32: an int8 softmax, say) have a row each where they run, with the partition's reason and
no figures: their error shows in the layers after them.

The error side is :func:`accel_codegen.flows.accuracy.accuracy_report`: the fp32 and
the reduced-precision builds of the same partition run the same inputs while the simulator's
observer (``sim/observer.py``, the hook calibration uses) hands over every tensor of both; a
layer's figures are those of its output (the last tensor its runs make, against the fp32
build's: the report's ``layers``), its shape the source model's (the partition report's).
Errors are cumulative: a layer's includes everything upstream of it.

The cost side is the estimate's cost model on the same partition: each layer's cycles in the
build's precision, and for an int8 build on a configuration with fp16, the cycles of the
network with that layer alone in fp16 (the converting runs it then needs included), given as
the layer's cycles plus the network's difference.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from ..compiler.reasons import coded_reason
from ..sim.config import AccelConfig
from ..sim.labels import label_key, layer_key, split_pass_primitive
from ..tables import Column, render_table, wrap_label
from .report import tagged

DEFAULT_THRESHOLD_DB = 30.0


@dataclasses.dataclass
class LayerDebug:
    """One accelerator layer: its output's error against fp32 and its cost."""

    key: str                      # ``f0.3``
    primitive: str
    source_ops: str               # the Relax operators it computes
    shape: List[int]              # its output's
    sqnr_db: Optional[float]      # None: no tensor of the layer was compared
    max_abs_error: Optional[float]
    saturated: Optional[float]    # int8: the fraction of codes at either end of the range
    cycles: int                   # in the build's precision
    fp16_cycles: Optional[int]    # the layer alone in fp16 (None: the cost model cannot say)
    below: bool = False           # the SQNR is below the threshold
    first_below: bool = False     # the first such layer
    source: str = ""              # its name in the source model (what --keep-float takes)

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("sqnr_db", "max_abs_error"):
            value = data[name]
            if value is not None and value in (float("inf"), float("-inf")):
                data[name] = str(value)
        return data


@dataclasses.dataclass
class HostOp:
    """An operator the partition leaves on the host: TVM runs it in fp32, so it has no
    accelerator tensor to compare; ``after``: the key of the layer it runs after ("" before
    the first)."""

    index: int                    # its place in the partition report
    op: str
    shape: List[int]
    source: str
    code: str
    reason: str
    after: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def why(self) -> str:
        """The partition's reason, its stable code first: what the table and the CSV say."""
        return coded_reason(self.reason, self.code)


#: The columns of ``debug --csv`` (:meth:`DebugReport.csv_rows`).
CSV_COLUMNS = ("key", "primitive", "source", "source_ops", "shape", "sqnr_db", "max_abs_error",
               "saturated", "cycles", "fp16_cycles", "below", "first_below", "host_reason")


@dataclasses.dataclass
class DebugReport:
    config: str
    precision: str
    threshold_db: float
    inputs: int
    output_sqnr_db: float
    layers: List[LayerDebug]
    fp16_note: Optional[str] = None  # why there is no fp16 column
    host: List[HostOp] = dataclasses.field(default_factory=list)

    @property
    def first_below(self) -> Optional[LayerDebug]:
        return next((layer for layer in self.layers if layer.first_below), None)

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_below
        output = self.output_sqnr_db
        return tagged("debug", {
            "config": self.config, "precision": self.precision,
            "threshold_db": self.threshold_db, "inputs": self.inputs,
            "output_sqnr_db": output if abs(output) != float("inf") else str(output),
            "first_below": first.key if first else None, "fp16_note": self.fp16_note,
            "layers": [layer.to_dict() for layer in self.layers],
            "host": [op.to_dict() for op in self.host]})

    def host_after(self, key: str) -> List[HostOp]:
        """The host operators that run after layer ``key`` ("": before the first layer)."""
        return [op for op in self.host if op.after == key]

    def in_order(self) -> List[LayerDebug | HostOp]:
        """The layers and the host operators in the order they run: each host operator after
        the layer before it (the table's rows and the CSV's)."""
        ordered: List[LayerDebug | HostOp] = list(self.host_after(""))
        for layer in self.layers:
            ordered += [layer, *self.host_after(layer.key)]
        return ordered

    def csv_rows(self) -> List[Dict[str, Any]]:
        """``debug --csv``'s rows (:data:`CSV_COLUMNS`), in :meth:`in_order`'s order: a
        host operator's says where it runs, its shape and the partition's reason, with no
        figures (TVM runs it in fp32: nothing is compared)."""
        return [{"key": "", "primitive": "host", "source": item.source, "source_ops": item.op,
                 "shape": "x".join(map(str, item.shape)), "host_reason": item.why}
                if isinstance(item, HostOp) else
                {**item.to_dict(), "shape": "x".join(map(str, item.shape))}
                for item in self.in_order()]

    def __str__(self) -> str:
        width = min(40, max([len("layer"), *(len(f"{r.key} {r.primitive}") for r in self.layers),
                             *(len(f"host {op.op}") for op in self.host)]))
        columns = [Column("", 1), Column("layer", width, "<"), Column("shape", 14, "<"),
                   Column("SQNR dB", 8, spec=".1f"), Column("max err", 9, spec=".3g"),
                   Column("sat", 6, spec=".1%"), Column("cycles", 10, spec=","),
                   Column("if fp16", 10, spec=",")]
        named = any(r.source for r in [*self.layers, *self.host])
        if named:
            columns.append(Column("source", min(48, max(len(r.source) for r in
                                                        [*self.layers, *self.host])),
                                  "<", gap="  "))
        columns.append(Column("source ops", 0, "<", gap="  "))
        rows: List[Any] = []
        for r in self.in_order():
            if isinstance(r, HostOp):
                rows.append(["", f"host {r.op}"[:width], "x".join(map(str, r.shape)), None,
                             None, None, None, None] + ([r.source] if named else [])
                            + [f"on the host (TVM, fp32): {r.why}"])
                continue
            label, *more = wrap_label(f"{r.key} {r.primitive}", width)
            rows.append(["!" if r.first_below else ("<" if r.below else ""), label,
                         "x".join(map(str, r.shape)), r.sqnr_db, r.max_abs_error,
                         r.saturated, r.cycles, r.fp16_cycles]
                        + ([r.source] if named else []) + [r.source_ops])
            rows += ["  " + part for part in more]
        first = self.first_below
        lines = [f"debug: {self.precision} against fp32 on {self.config}, {self.inputs} "
                 f"input(s); output SQNR {self.output_sqnr_db:.1f} dB; threshold "
                 f"{self.threshold_db:g} dB",
                 render_table(columns, rows),
                 ("! first layer below the threshold: " + f"{first.key} {first.primitive} "
                  + (f"[{first.source}] " if first.source else "") +
                  f"({first.sqnr_db:.1f} dB)" if first else
                  f"every layer is at or above {self.threshold_db:g} dB"),
                 "< below the threshold; errors are cumulative (a layer's includes what is "
                 "upstream of it); cycles: the cost model's, of the layer in "
                 f"{self.precision}; if fp16: the layer alone in fp16, its converting runs "
                 "included"]
        if self.host:
            lines.append(f"host: {len(self.host)} operator(s) the partition leaves to TVM, "
                         "run in fp32 and not compared (their error shows in the layers after "
                         "them)")
        if self.fp16_note:
            lines.append(f"if fp16: {self.fp16_note}")
        return "\n".join(lines)


def debug_report(mod, params=None, inputs=(), *, config: AccelConfig | str = "nv_full",
                 precision: str = "int8", fuse: bool = True,
                 threshold_db: float = DEFAULT_THRESHOLD_DB, **options) -> DebugReport:
    """The per-layer table of a ``precision`` build against fp32 on ``inputs``.

    ``options``: the calibration keywords of :func:`accel_codegen.partition_for_accel`
    (calibration, calibration_method, equalize, bias_correction, weight_rounding). Raises
    what :func:`~accel_codegen.flows.accuracy.accuracy_report` raises (fp32 is refused:
    there is nothing to compare)."""
    from ..compiler.partition import layer_keys, match_composites
    from ..flows.accuracy import accuracy_report
    from .estimation import lower, report_of
    from .report import source_names, source_ops

    config = AccelConfig.resolve(config)
    accuracy = accuracy_report(mod, params, inputs, config=config, precision=precision,
                               fuse=fuse, **options)
    # a layer's output against the fp32 build's (its last tensor in either build)
    outputs = {tensor.key: tensor for tensor in accuracy.layers}
    # each layer's output shape as the source model has it (its last operator's), and the
    # host operators, each after the layer before it
    shapes: Dict[str, List[int]] = {}
    host: List[HostOp] = []
    last = ""
    for op in accuracy.partition.ops if accuracy.partition is not None else ():
        if op.offloaded and op.key:
            shapes[op.key], last = list(op.shape or []), op.key
        elif not op.offloaded:
            host.append(HostOp(op.index, op.op, list(op.shape or []), op.source or "",
                               op.code or "", op.reason or "", last))
    matched = match_composites(mod, params, config=config, fuse=fuse, precision=precision)
    sources = source_ops(matched)
    estimate = report_of(lower(matched, config, precision, fuse), config, matched, sources)
    cycles: Dict[str, int] = {}
    primitives: Dict[str, str] = {}
    for layer in estimate.layers:
        key = layer_key(label_key(layer.label))
        cycles[key] = cycles.get(key, 0) + layer.cycles
        primitives.setdefault(key, split_pass_primitive(layer.primitive)[0])  # not a role
    keys = layer_keys(matched)
    fp16: Dict[str, int] = {}
    note = None
    if precision != "int8":
        note = f"the build is {precision}: no int8 layer to widen"
    elif not config.supports("fp16"):
        note = f"{config.name} has no fp16"
    else:
        for key in keys:
            assignment = {k: ("fp16" if k == key else "int8") for k in keys}
            mixed = report_of(lower(matched, config, "mixed", fuse,
                                    layer_precisions=assignment), config, matched, sources)
            fp16[key] = cycles.get(key, 0) + mixed.total_cycles - estimate.total_cycles
    rows = []
    for key in keys:
        tensor = outputs.get(key)
        rows.append(LayerDebug(
            key, primitives.get(key, ""), " ".join(sources.get(key, ())),
            shapes.get(key) or (list(tensor.shape) if tensor else []),
            tensor.sqnr_db if tensor else None,
            tensor.max_abs_error if tensor else None, tensor.saturated if tensor else None,
            cycles.get(key, 0), fp16.get(key), source=source_names(sources).get(key, "")))
    first = True
    for row in rows:
        row.below = row.sqnr_db is not None and row.sqnr_db < threshold_db
        if row.below and first:
            row.first_below, first = True, False
    return DebugReport(config.name, precision, threshold_db, accuracy.inputs,
                       accuracy.output_sqnr_db, rows, note, host)
