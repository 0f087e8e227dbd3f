"""Window layouts onto the BDMA's copies (Swin: issue 29): exact rewrites of the layout ops a
shifted-window transformer spells in more axes than the engines' surfaces have.

- A ``permute_dims`` of any rank, once the axes it keeps together are merged into groups
  (and its unit axes dropped), is a sequence of swaps of two neighbouring groups, each
  ``reshape(permute_dims(reshape(x, [N, A, B, L]), [0, 2, 1, 3]), ...)``: the transpose the
  BDMA runs as min(A, B) strided copies (``lowering._transpose``), at most ``MAX_SWAPS`` of
  them. Swin's window partition
  ``view(b, h/ws, ws, w/ws, ws, c).permute(0, 1, 3, 2, 4, 5)`` is [h/ws, ws, w/ws, ws c] with
  its middle pair swapped; its window reverse the same swap back; a head split's
  ``permute(2, 0, 3, 1, 4)`` of [windows, n, 3, heads, d] swaps [windows n] and [3 heads];
  MaxViT's window and grid partitions of NCHW data (``permute(0, 2, 4, 3, 5, 1)``,
  ``permute(0, 3, 5, 2, 4, 1)``) are five. A permute that moves
  unit axes only is the reshape to its shape.
- ``reshape(reshape(x, S), T)`` with S of more than 4 axes (the 6-D views around those
  permutes, which no surface holds) is ``reshape(x, T)``: a reshape only renames dense bytes.
- ``take(x, (arange(n) + s) mod n, axis)`` (torch.roll by -s along an axis of length n, as
  torch.export spells it) becomes ``concat([x[s:n], x[0:s]], axis)``: two slices along the
  axis and their concat, each a BDMA copy of lines (``lowering._slice``, ``_concat``).

These run after the other exact rewrites (``rewrites.EXACT_REWRITES``): the channels-last
sandwiches and the folds of a permute into a dense layer's weight read the permutes as
torch wrote them.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from .attention import evaluate_indices
from .layer import is_constant
from .rewrites import _rewrite, _static, named_as, rewrite_bindings

#: The most axes a feature surface (and so a reshape the BDMA copies) has.
_SURFACE_RANK = 4


def _native_swap(axes: List[int], rank: int) -> bool:
    """Whether the BDMA's transpose reads this permute as it is: [N, R, S] or [N, A, B, L]
    with two adjacent axes after the first swapped."""
    return rank in (3, 4) and any(
        axes == list(range(i)) + [i + 1, i] + list(range(i + 2, rank)) for i in range(1, rank - 1))


#: The most transposes one permute becomes (each a BDMA run of strided copies): a 6-D
#: permute has at most 15 inversions of its groups; the layouts seen need 1 to 5.
MAX_SWAPS = 8


def merged_swaps(shape: List[int], axes: List[int]) -> Optional[List[tuple]]:
    """The transposes ``permute_dims(x, axes)`` of an x of ``shape`` is, in order: each
    (N, A, B, L), x's bytes read as [N, A, B, L] written as [N, B, A, L]. The axes the permute
    keeps together are one group and unit axes are dropped; the groups are put in the
    output's order by swapping neighbours (Swin's window partition of channels-last data:
    one swap; MaxViT's window or grid partition of NCHW data: five). [] when it moves unit
    axes only (a reshape); None beyond MAX_SWAPS."""
    long = [a for a in range(len(shape)) if shape[a] > 1]
    rank_of = {a: i for i, a in enumerate(long)}
    order = [rank_of[a] for a in axes if shape[a] > 1]  # the long axes, in output order
    runs: List[List[int]] = []
    for a in order:
        if runs and runs[-1][-1] + 1 == a:
            runs[-1].append(a)
        else:
            runs.append([a])
    size = {run[0]: int(np.prod([shape[long[a]] for a in run], dtype=np.int64))
            for run in runs}
    target = {run[0]: i for i, run in enumerate(runs)}
    current = sorted(target)  # the groups in memory order
    swaps = []
    moved = True
    while moved:
        moved = False
        for j in range(len(current) - 1):
            if target[current[j]] > target[current[j + 1]]:
                sizes = [size[g] for g in current]
                swaps.append((int(np.prod(sizes[:j], dtype=np.int64)), sizes[j], sizes[j + 1],
                              int(np.prod(sizes[j + 2:], dtype=np.int64))))
                current[j], current[j + 1] = current[j + 1], current[j]
                moved = True
    return swaps if len(swaps) <= MAX_SWAPS else None


def _as_swap(expr: relax.Call) -> relax.Expr:
    x = expr.args[0]
    shape, out = _static(x), _static(expr)
    # a 2-D transpose is a dense layer's weight (or attention's K^T), which its pattern reads
    if shape is None or out is None or is_constant(x) or len(shape) < 3:
        return expr
    axes = list(range(len(shape)))[::-1] if expr.attrs.axes is None \
        else [int(a) % len(shape) for a in expr.attrs.axes]
    # the BDMA's transpose reads it as it is; a channel shuffle's is the shuffle entry's
    if _native_swap(axes, len(shape)) or axes == [0, 2, 1, 3, 4]:
        return expr
    swaps = merged_swaps(shape, axes)
    if swaps is None:
        return expr
    data = x
    for n, a, b, line in swaps:
        grouped = [n, a, b, line] if line > 1 else [n, a, b]
        if _static(data) != grouped:
            data = relax.op.reshape(data, grouped)
        data = named_as(relax.op.permute_dims(data, [0, 2, 1, 3][:len(grouped)]), expr)
    return data if _static(data) == out else named_as(relax.op.reshape(data, out), expr)


def swaps_of_merged_axes(mod: tvm.IRModule) -> tvm.IRModule:
    """permute_dims(x) of groups of x's axes -> reshape(permute_dims(reshape(x, [N, A, B, L]),
    [0, 2, 1, 3]), ...) for each swap of two neighbouring groups (merged_swaps), then the
    reshape to its shape."""
    return rewrite_bindings(mod, ("relax.permute_dims",), lambda call, _: _as_swap(call))


_INNER_X = wildcard()
_INNER = is_op("relax.reshape")(_INNER_X, wildcard())
_OUTER = is_op("relax.reshape")(_INNER, wildcard())


def _through_wide_view(expr: relax.Expr, matches) -> relax.Expr:
    inner, out = _static(matches[_INNER]), _static(expr)
    if inner is None or out is None or len(inner) <= _SURFACE_RANK:
        return expr
    x = matches[_INNER_X]
    return x if _static(x) == out else named_as(relax.op.reshape(x, out), expr)


def reshapes_through_wide_views(mod: tvm.IRModule) -> tvm.IRModule:
    """reshape(reshape(x, S), T) with S of more than 4 axes -> reshape(x, T)."""
    return _rewrite(mod, _OUTER, _through_wide_view)


def _bound_values(mod: tvm.IRModule) -> dict:
    return {b.var: b.value for _, f in mod.functions_items() if isinstance(f, relax.Function)
            for block in f.body.blocks for b in block.bindings}


_ROLLED = wildcard()
_ROLL_INDEX = wildcard()
_ROLL = is_op("relax.take")(_ROLLED, _ROLL_INDEX)


def _rolled(values: dict):
    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        x = matches[_ROLLED]
        shape = _static(x)
        if shape is None or expr.attrs.axis is None or is_constant(x):
            return expr
        axis = int(expr.attrs.axis) % len(shape)
        n = shape[axis]
        index = evaluate_indices(matches[_ROLL_INDEX], values.get)
        if index is None or index.shape != (n,) or n < 2:
            return expr
        s = int(index[0]) % n
        if not np.array_equal(index, (np.arange(n) + s) % n):
            return expr
        if s == 0:
            return x
        parts = [relax.op.strided_slice(x, [axis], [s], [n], [1]),
                 relax.op.strided_slice(x, [axis], [0], [s], [1])]
        return named_as(relax.op.concat(parts, axis), expr)
    return rewrite


def rolls_as_concats(mod: tvm.IRModule) -> tvm.IRModule:
    """take(x, (arange(n) + s) mod n, axis) -> concat([x[s:n], x[0:s]], axis) along it."""
    return _rewrite(mod, _ROLL, _rolled(_bound_values(mod)))


#: In the order the partitioner applies them, after rewrites.EXACT_REWRITES.
WINDOW_REWRITES = (rolls_as_concats, swaps_of_merged_axes, reshapes_through_wide_views)
