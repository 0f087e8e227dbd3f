"""A picture of a partitioned model: ``accel-codegen partition --graph out.svg`` (or ``.html``).

One box per accelerator layer and per operator left on the host, in execution order from top
to bottom, each arrow a tensor from the box that makes it to a box that reads it (an arrow
between neighbours is straight; a longer one bends out to the right, further the further it
goes). The layers of one external function share a colour (the legend names the functions:
``f0``, ``f1``, ... as the run labels do); host operators are white with a red border and say
why they stay there (the reason code in the box, the sentence in its tooltip). Each box names
its source-model layer (:mod:`accel_codegen.compiler.source_names`) where the model has names.

The SVG is written here, laid out by that rule, with no graph-layout program: it needs
nothing installed and any browser shows it (the HTML page is the same SVG in a page with the
partition's summary line).
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

import tvm
from tvm import relax

from ..compiler.source_names import layer_names, name_of
from ..compiler.walk import composite_calls
from ..errors import AccelInvalidError
from ..sim.labels import run_key

#: The colours of external functions f0, f1, ... (cycled).
PALETTE = ("#9ecae1", "#a1d99b", "#fdd0a2", "#dadaeb", "#fcbba1", "#c7e9c0", "#bcbddc",
           "#fdae6b")
ROW, BOX_H, BOX_W, LEFT, TOP = 34, 26, 420, 20, 60


class _Node:
    def __init__(self, kind: str, title: str, source: str = "", function: Optional[int] = None,
                 key: str = "", reason: str = "", code: str = ""):
        self.kind, self.title, self.source, self.function = kind, title, source, function
        self.key, self.reason, self.code = key, reason, code
        self.inputs: Set[int] = set()


def _op_name(call: relax.Call) -> Optional[str]:
    if isinstance(call.op, tvm.ir.Op):
        return call.op.name
    return None


def graph_nodes(matched: tvm.IRModule, report=None) -> List[_Node]:
    """The boxes of a pattern-matched module (``match_composites``) in execution order, each
    with the indices of the boxes it reads; ``report`` (its PartitionReport) gives the host
    operators' reasons."""
    external = {gv: f for gv, f in matched.functions_items()
                if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}
    host_reasons = [op for op in report.host] if report is not None else []
    nodes: List[_Node] = []
    made: Dict[relax.Var, object] = {}  # var -> node index, or a list per tuple field

    def resolve(expr, scope) -> Set[int]:
        if isinstance(expr, relax.Var):
            found = scope.get(expr, made.get(expr))
            if isinstance(found, list):
                return set().union(*[f for f in found if isinstance(f, set)]) if found else set()
            return found if isinstance(found, set) else set()
        if isinstance(expr, relax.TupleGetItem):
            value = expr.tuple_value
            found = scope.get(value, made.get(value)) if isinstance(value, relax.Var) else None
            if isinstance(found, list) and expr.index < len(found):
                return found[expr.index]
            return resolve(value, scope)
        if isinstance(expr, relax.Tuple):
            return set().union(*[resolve(f, scope) for f in expr.fields]) if expr.fields \
                else set()
        if isinstance(expr, relax.Call):
            return set().union(*[resolve(a, scope) for a in expr.args]) if expr.args else set()
        return set()

    functions = 0
    hosts = 0
    for block in matched["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and \
                    value.op in external:
                function = external[value.op]
                scope: Dict[relax.Var, object] = {
                    param: resolve(arg, {}) for param, arg in zip(function.params, value.args)}
                sources = layer_names(function)
                for index, (cb, composite) in enumerate(composite_calls(function)):
                    node = _Node("layer", str(composite.attrs["Composite"]),
                                 sources[index], functions, run_key(functions, index))
                    node.inputs = resolve(cb.value, scope)
                    scope[cb.var] = {len(nodes)}
                    nodes.append(node)
                for inner in function.body.blocks:
                    for other in inner.bindings:
                        if other.var not in scope:
                            scope[other.var] = resolve(other.value, scope)
                out = function.body.body
                if isinstance(out, relax.Tuple):
                    made[binding.var] = [resolve(f, scope) for f in out.fields]
                else:
                    made[binding.var] = resolve(out, scope)
                functions += 1
                continue
            name = _op_name(value) if isinstance(value, relax.Call) else None
            if isinstance(binding, relax.MatchCast):
                name = "relax.match_cast"
            if name is None:
                made[binding.var] = resolve(value, {})
                continue
            record = host_reasons[hosts] if hosts < len(host_reasons) and \
                host_reasons[hosts].op.startswith(name) else None
            hosts += 1
            node = _Node("host", name, name_of(value) or "",
                         reason=record.reason if record else "",
                         code=(record.code or "") if record else "")
            node.inputs = resolve(value, {})
            made[binding.var] = {len(nodes)}
            nodes.append(node)
    return nodes


def _text(x: float, y: float, text: str, size: int = 12, weight: str = "normal",
          anchor: str = "start") -> str:
    return (f'<text x="{x:.0f}" y="{y:.0f}" font-size="{size}" font-weight="{weight}" '
            f'text-anchor="{anchor}" font-family="sans-serif">{html.escape(text)}</text>')


def render_svg(nodes: Sequence[_Node], title: str = "") -> str:
    """The boxes and arrows as an SVG document (see the module's docstring)."""
    spans = [i - j for i, node in enumerate(nodes) for j in node.inputs if i - j > 1]
    reach = min(240, 12 + 6 * max(spans, default=0))
    functions = sorted({n.function for n in nodes if n.function is not None})
    width = max(LEFT + BOX_W + reach + 220, LEFT + 130 * len(functions) + 120)
    height = TOP + ROW * len(nodes) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
           '</marker></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    if title:
        out.append(_text(LEFT, 22, title, 14, "bold"))
    legend_x = LEFT
    for function in functions:
        out.append(f'<rect x="{legend_x}" y="34" width="14" height="14" '
                   f'fill="{PALETTE[function % len(PALETTE)]}" stroke="#333"/>')
        out.append(_text(legend_x + 18, 46, f"f{function} (accelerator)", 11))
        legend_x += 130
    out.append(f'<rect x="{legend_x}" y="34" width="14" height="14" fill="white" '
               f'stroke="#d62728" stroke-width="2"/>')
    out.append(_text(legend_x + 18, 46, "host (TVM)", 11))

    def middle(i: int) -> float:
        return TOP + ROW * i + BOX_H / 2

    for i, node in enumerate(nodes):  # arrows under the boxes
        for j in sorted(node.inputs):
            if j >= i:
                continue
            if i - j == 1:
                x = LEFT + BOX_W / 2
                out.append(f'<line x1="{x}" y1="{TOP + ROW * j + BOX_H}" x2="{x}" '
                           f'y2="{TOP + ROW * i}" stroke="#555" marker-end="url(#arrow)"/>')
            else:
                bend = LEFT + BOX_W + min(reach - 4, 12 + 6 * (i - j))
                out.append(f'<path d="M{LEFT + BOX_W},{middle(j)} C{bend},{middle(j)} '
                           f'{bend},{middle(i)} {LEFT + BOX_W},{middle(i)}" fill="none" '
                           f'stroke="#888" marker-end="url(#arrow)"/>')
    for i, node in enumerate(nodes):
        y = TOP + ROW * i
        if node.kind == "layer":
            fill, stroke, width_ = PALETTE[node.function % len(PALETTE)], "#333", 1
            head = f"{node.key} {node.title.removeprefix('accel.')}"
            tip = f"{node.key} {node.title} (external function f{node.function})"
        else:
            fill, stroke, width_ = "white", "#d62728", 2
            head = f"host {node.title.removeprefix('relax.')}" + \
                (f" [{node.code}]" if node.code else "")
            tip = f"{node.title} stays on the host: {node.reason}" if node.reason else \
                f"{node.title} stays on the host"
        if node.source:
            tip += f"\nsource: {node.source}"
        out.append(f'<g><title>{html.escape(tip)}</title>'
                   f'<rect x="{LEFT}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="{width_}"/>')
        out.append(_text(LEFT + 6, y + 17, head[:58], 12))
        out.append("</g>")
        if node.source:
            out.append(_text(LEFT + BOX_W + reach + 8, y + 17, node.source[:60], 11))
    out.append("</svg>")
    return "\n".join(out)


def write_graph(matched: tvm.IRModule, report, path, title: str = "") -> Path:
    """Write the picture of a partition to ``path``: ``.svg`` (the drawing) or ``.html`` (a
    page holding it)."""
    path = Path(path)
    if path.suffix not in (".svg", ".html"):
        raise AccelInvalidError(f"graph path '{path}' must end in .svg or .html")
    svg = render_svg(graph_nodes(matched, report), title)
    if path.suffix == ".html":
        summary = html.escape(str(report).splitlines()[0]) if report is not None else ""
        svg = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
               f"{html.escape(title or 'partition')}</title></head>\n<body>\n<p>{summary}</p>\n"
               f"{svg}\n</body></html>\n")
    path.write_text(svg)
    return path
