"""Fixed-width text tables: one renderer for every table the tools print (the per-layer cost
table of a profile and of an estimate, the benchmark's, the sweep's, the accuracy report's).

A table is a list of :class:`Column` and rows of cells; a title line over the columns, a rule
of dashes as long as it, the rows, and optionally a second rule and footer rows (totals).

>>> print(render_table([Column("name", 6, "<"), Column("MB", 7, spec=".2f")],
...                    [["conv", 1.5], ["pool", 0.25]]))
name        MB
--------------
conv      1.50
pool      0.25
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

from .errors import AccelInvalidError
from .sim.costs import CostTotals, engine_names

#: A row: its cells, one per column from the first (fewer cells end the line early), or a line
#: of text printed as it is.
Row = Union[Sequence[Any], str]


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its title, width and alignment ("<" left, ">" right), the format spec of
    its values (e.g. ".2f", ",", ".1%"), whether text is cut to the width, and the text
    before it (one space; none before the first column)."""

    title: str
    width: int
    align: str = ">"
    spec: str = ""
    clip: bool = False
    gap: str = " "

    def cell(self, value: Any) -> str:
        """A value as this column shows it: text as it is, None as "-", numbers by ``spec``."""
        if value is None:
            value = "-"
        text = value if isinstance(value, str) else format(value, self.spec)
        if self.clip:
            text = text[:self.width]
        return f"{text:{self.align}{self.width}}"


def render_row(columns: Sequence[Column], row: Row) -> str:
    """One line of a table."""
    if isinstance(row, str):
        return row
    if len(row) > len(columns):
        raise AccelInvalidError(f"a row of {len(row)} cells for {len(columns)} columns")
    return "".join((column.gap if i else "") + column.cell(value)
                   for i, (column, value) in enumerate(zip(columns, row)))


def render_table(columns: Sequence[Column], rows: Sequence[Row],
                 footer: Optional[Sequence[Row]] = None) -> str:
    """The header line, a rule, the rows and, when given, a rule and the footer rows."""
    header = "".join((column.gap if i else "") + f"{column.title:{column.align}{column.width}}"
                     for i, column in enumerate(columns)).rstrip()
    rule = "-" * len(header)
    lines = [header, rule] + [render_row(columns, row) for row in rows]
    if footer is not None:
        lines += [rule] + [render_row(columns, row) for row in footer]
    return "\n".join(lines)


#: The widest the layer column of a cost table grows to; longer labels wrap onto more lines.
LAYER_WIDTH = 56

#: Said under a table where an fp32 tensor's bytes are shown: the cost model counts an fp32
#: tensor at 2 bytes an element (csrc/cost_model.c, ``hw_element_bytes``), the width of
#: NVDLA's fp16 datapath, which the simulator's fp32 mode stands for.
FP32_BYTES_NOTE = ("note: the cost model charges fp32 tensors as fp16 (2 bytes an element, "
                   "NVDLA's datapath width): KB and energy figures of fp32 runs are those "
                   "of the fp16 tensors")


def runs_macs(record) -> bool:
    """Whether a record's run uses the MAC array (a CONV, in any mode); else its MAC figures
    do not apply and show "-", not 0."""
    return any(name.startswith("CONV") for name in engine_names(record).split("+"))


def wrap_label(text: str, width: int) -> list:
    """``text`` in lines of at most ``width``, broken after a space, "_" or "." where it can
    be (a word is cut only when it alone is wider)."""
    lines = []
    while len(text) > width:
        cut = max(text.rfind(sep, 0, width) for sep in (" ", "_", ".")) + 1
        if cut <= 0:
            cut = width
        lines.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return lines + [text]


def cost_table(records: Sequence, *, engines_width: Optional[int] = None, modes: bool = False,
               utilization_total: Optional[float] = None,
               sources: Optional[Sequence[str]] = None) -> str:
    """The per-layer cost table of a profile or an estimate, with a totals row.

    Parameters
    ----------
    records : sequence
        Per-layer records with ``label``, ``mode``, the cost fields and ``utilization``, and
        their engines (see :func:`~accel_codegen.costs.engine_names`).
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
