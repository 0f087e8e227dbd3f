"""Fixed-width text tables: one renderer for every table the tools print (the per-layer cost
table of a profile and of an estimate, :mod:`accel_codegen.sim.cost_report`; the benchmark's,
the sweep's, the accuracy report's). Below every layer: it imports nothing of the project but
its errors.

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
