"""Reports in the forms the field uses: a per-layer CSV (as Arm's Vela writes one), one JSON
schema tag shared by every report the tools write, and a per-op-type delegation summary of a
partition (as ExecuTorch's ``get_delegation_info`` prints one).

The per-layer rows are made from any records with the cost fields of
:class:`~accel_codegen.RunStats`: a profiled run's, an estimate's layers, a benchmark's
per-layer records. ``docs/report-schema.md`` describes the columns and the JSON keys.
"""
from __future__ import annotations

import collections
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..compiler.reasons import reason_code
from ..errors import AccelInvalidError
# The per-layer rows and the CSV are the simulator's (a profile writes them without TVM).
from ..sim.cost_report import (CSV_COLUMNS, LayerSources, csv_text, label_source,  # noqa: F401
                               layer_rows, record_precision, source_names, write_csv)
from ..tables import Column, render_table

#: The version of the report layout; a key renamed or removed raises it.
SCHEMA_VERSION = 1

#: The kinds of report that carry a ``schema`` tag.
KINDS = ("partition", "estimate", "bench", "accuracy", "debug", "program")

def schema(kind: str) -> str:
    """The ``schema`` value of a report of ``kind``: ``accel-codegen/<kind>/<version>``."""
    if kind not in KINDS:
        raise AccelInvalidError(f"unknown report kind {kind!r}: one of {', '.join(KINDS)}")
    return f"accel-codegen/{kind}/{SCHEMA_VERSION}"


def tagged(kind: str, data: Mapping[str, Any]) -> Dict[str, Any]:
    """``data`` with its ``schema`` tag first (a report's JSON form)."""
    return {"schema": schema(kind), **{k: v for k, v in data.items() if k != "schema"}}


def source_ops(matched) -> LayerSources:
    """Layer key (``f0.3``) -> the Relax operators the layer computes, in order, of a
    partitioned or pattern-matched module (what the partition report lists per layer), with
    each layer's source-model name (:class:`LayerSources`)."""
    from ..compiler.source_names import function_calls, layer_names
    from ..compiler.walk import composite_calls, external_calls
    from ..sim.labels import run_key

    result = LayerSources()
    for function, (_, external) in enumerate(external_calls(matched)):
        names = layer_names(external)
        for index, (_, composite) in enumerate(composite_calls(external)):
            key = run_key(function, index)
            result[key] = [call.op.name for call in function_calls(composite)]
            name = names[index]
            if name:
                result.names[key] = name
    return result


def name_trace(trace: Dict[str, Any], names: Mapping[str, str]) -> Dict[str, Any]:
    """A Chrome trace (:mod:`accel_codegen.sim.timeline`) with each run's source-model name in
    its events' ``args`` (``source``), where ``names`` (layer key -> name) has one."""
    if not names:
        return trace
    for event in trace.get("traceEvents", []):
        args = event.get("args") or {}
        source = label_source(str(args.get("label") or event.get("name", "")), names) \
            if event.get("ph") == "X" else ""
        if source:
            event.setdefault("args", {})["source"] = source
    return trace


# --- the partition's per-op-type summary --------------------------------------------------------

def op_type_summary(report) -> List[Dict[str, Any]]:
    """Per operator type of a partition report (a PartitionReport or its dict form): how many
    are offloaded and how many stay on the host, and the host reasons with their counts, most
    frequent first; types in the order they first appear."""
    ops = report["ops"] if isinstance(report, Mapping) else [vars(op) for op in report.ops]
    by_type: Dict[str, Dict[str, Any]] = {}
    for op in ops:
        entry = by_type.setdefault(op["op"], {"op": op["op"], "offloaded": 0, "host": 0,
                                              "reasons": collections.Counter()})
        if op["offloaded"]:
            entry["offloaded"] += 1
        else:
            entry["host"] += 1
            entry["reasons"][op["reason"]] += 1
    return [{**entry, "reasons": [{"reason": reason, "code": reason_code(reason), "count": count}
                                  for reason, count in entry["reasons"].most_common()]}
            for entry in by_type.values()]


def format_op_type_summary(summary: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a table: op type, offloaded, host, and why (each reason with its count
    when the type has several)."""
    width = max([len("op type"), *(len(e["op"]) for e in summary)])
    columns = [Column("op type", width, "<"), Column("offloaded", 9), Column("host", 5),
               Column("why on the host", 0, "<", gap="  ")]
    rows: List[Any] = []
    for entry in summary:
        reasons = entry["reasons"]
        said = [f"[{r['code']}] {r['reason']}" for r in reasons]
        first = ("" if not reasons else said[0] if len(reasons) == 1
                 else f"{reasons[0]['count']} x {said[0]}")
        rows.append([entry["op"], entry["offloaded"], entry["host"], first])
        for more, text in zip(reasons[1:], said[1:]):
            rows.append(["", "", "", f"{more['count']} x {text}"])
    totals = ["total", sum(e["offloaded"] for e in summary), sum(e["host"] for e in summary)]
    return "delegation by operator type:\n" + render_table(columns, rows, footer=[totals])
