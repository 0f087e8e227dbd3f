"""A recurrent network's time steps onto the engines (issue 33: captcha-whisperer's CRNN, an
LSTM unrolled by the exporter into plain ops): exact rewrites of the time-major sequence a
CRNN reads from its feature map, and of the stack of its outputs.

A CRNN reads its map x [N, C, H, W] as W steps of C H features: ``seq = reshape(permute_dims(
x, [3, 0, 1, 2]), [W, N, C H])``, then each step ``take(seq, t, axis=0)`` (its backward
direction the same of ``seq`` reversed along axis 0), and each step's input ``Gemm`` with
the direction's one ``W_ih``. The step is the map's column t: ``seq[t][n, c H + h] =
x[n, c, h, t]``, so

- ``take(seq, t, axis=0)`` is ``reshape(x[:, :, :, t], [N, C H])``: a slice of the map's last
  axis and a reshape that keeps the batch, each a BDMA copy (``lowering._slice``,
  ``_reshape``), where a gather along the batch axis has no engine; a take of the reversed
  sequence is the column ``W - 1 - t``;
- the steps' dense layers of one constant weight (+ one constant bias), ``seq[t] W' + b`` for
  each t, are the columns of one 1x1 convolution of the map read as ``[N, C H, 1, W]`` (the
  same bytes: a reshape): ``conv2d(x, W'^T) + b`` gives ``[N, K, 1, W]`` and step t its
  column t, reshaped to ``[N, K]``. The same products and sums as the dense layers (one
  output's dot product over the same C H inputs), in one run that loads the weight once
  instead of once a step (CRNN's layer 1: 97.6 % of its multiply-adds, 20 loads of 6.5 MB).

The outputs are stacked along axis 0 (``concat`` of ``[1, N, K]`` steps, the backward
direction's reversed by a ``strided_slice`` with stride -1) and joined along the features:

- a full reversal along an axis of a concat of pieces one long on it is the concat of the
  pieces in reverse order;
- a concat along axis 0 (the batch, which the BDMA's ranges do not cover) of pieces ``[1, ...]``
  is the concat of the pieces read as ``[1, 1, size]`` along their last axis, reshaped to the
  result: the same bytes in the same order (one copy each, ``lowering._concat`` along a later
  axis).

Each rewrite keeps the module's values: the copies move the same elements, and the
convolution computes each output as the dense layer did, one dot product over the same C H
inputs plus the same bias (in the simulator's summation order for either, the fp32
contract of docs/kernels.md). They run before ``rewrites.EXACT_REWRITES`` (which would read
the permute as a transpose of its own first).
"""
from __future__ import annotations

import hashlib
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from .layer import constant_value, is_constant
from .relax_exprs import read_counts
from .rewrites import _bindings_table, _graph_functions, _static, named_as


def _op(value) -> Optional[str]:
    return getattr(getattr(value, "op", None), "name", None) if isinstance(
        value, relax.Call) else None


def _value(expr: relax.Expr, values: Dict[relax.Var, relax.Expr]) -> Optional[relax.Expr]:
    """The call ``expr`` is, or the value bound to it."""
    if isinstance(expr, relax.Call):
        return expr
    return values.get(expr) if isinstance(expr, relax.Var) else None


def _ints(arg) -> Optional[List[int]]:
    try:
        return [int(getattr(v, "value", v)) for v in (arg.fields if isinstance(
            arg, relax.Tuple) else arg)]
    except (AttributeError, TypeError):
        return None


def _reverses(value: relax.Call, axis: int) -> bool:
    """Whether ``value`` (a strided_slice) reads its input's ``axis`` whole, last to first."""
    shape = _static(value.args[0])
    if _op(value) != "relax.strided_slice" or shape is None or len(value.args) < 5:
        return False
    axes, begin, end, strides = (_ints(a) for a in value.args[1:5])
    if None in (axes, begin, end, strides) or len(axes) != 1 or \
            axes[0] % len(shape) != axis or strides != [-1]:
        return False
    n = shape[axis]
    first = begin[0] + n if begin[0] < 0 else begin[0]
    return first >= n - 1 and end[0] < -n and _static(value) == shape


def _time_major(value, values) -> Optional[relax.Expr]:
    """x when ``value`` is reshape(permute_dims(x, [3, 0, 1, 2]), [W, N, C H]) of a map x
    [N, C, H, W] of static shape."""
    if _op(value) != "relax.reshape":
        return None
    permuted = _value(value.args[0], values)
    if _op(permuted) != "relax.permute_dims" or permuted.attrs.axes is None or \
            _ints(permuted.attrs.axes) != [3, 0, 1, 2]:
        return None
    x = permuted.args[0]
    shape, out = _static(x), _static(value)
    if shape is None or out is None or is_constant(x) or len(shape) != 4 or \
            out != [shape[3], shape[0], shape[1] * shape[2]]:
        return None
    return x


def _step(value, values) -> Optional[Tuple[relax.Expr, int]]:
    """(x, the map's column) when ``value`` is take(seq, t, axis=0) of a time-major sequence
    of x (:func:`_time_major`) or of its reversal along axis 0, at a constant scalar t."""
    if _op(value) != "relax.take" or value.attrs.axis is None or \
            int(value.attrs.axis) != 0 or not is_constant(value.args[1]):
        return None
    index = np.asarray(constant_value(value.args[1]))
    source = _value(value.args[0], values)
    reversed_ = source is not None and _reverses(source, 0)
    x = _time_major(_value(source.args[0], values) if reversed_ else source, values)
    if x is None or index.ndim != 0:
        return None
    width = _static(x)[3]
    t, mode = int(index), str(value.attrs.mode)
    if mode not in ("clip", "wrap") and not 0 <= t < width:
        return None  # "fast" reads in bounds only
    t = t % width if mode == "wrap" else min(max(t, 0), width - 1)
    return x, (width - 1 - t if reversed_ else t)


def _dense_weight(value, values) -> Optional[np.ndarray]:
    """W [K, D] of matmul(s, permute_dims(W)) with a constant W, or of matmul(s, W') with a
    constant W' [D, K] (as W'^T); else None."""
    if _op(value) != "relax.matmul":
        return None
    weight = value.args[1]
    moved = _value(weight, values)
    if _op(moved) == "relax.permute_dims" and is_constant(moved.args[0]) and \
            (moved.attrs.axes is None or _ints(moved.attrs.axes) == [1, 0]):
        matrix = np.asarray(constant_value(moved.args[0]))
        return matrix if matrix.ndim == 2 else None
    if is_constant(weight):
        matrix = np.asarray(constant_value(weight))
        return matrix.T if matrix.ndim == 2 else None
    return None


def _bias(value) -> Optional[np.ndarray]:
    """The K values of the constant operand of add(y, b) (either order), b of K values along
    the last axis of y [N, K]."""
    if _op(value) != "relax.add":
        return None
    for a, b in ((0, 1), (1, 0)):
        shape = _static(value.args[a])
        if is_constant(value.args[b]) and not is_constant(value.args[a]) and shape is not None:
            bias = np.asarray(constant_value(value.args[b]))
            if bias.size == shape[-1] and (bias.ndim <= 1 or list(bias.shape) == [1, shape[-1]]):
                return bias.reshape(-1)
    return None


def _digest(array: Optional[np.ndarray]) -> Optional[str]:
    if array is None:
        return None
    array = np.ascontiguousarray(array)
    return hashlib.sha1(f"{array.dtype}{array.shape}".encode() + array.tobytes()).hexdigest()


#: A binding's replacement: make(share) -> the new expression; ``share(key, make)`` emits an
#: expression once (the convolution every step's column reads) and gives its Var.
Replacement = Callable[[Callable[[object, Callable[[], relax.Expr]], relax.Var]], relax.Expr]


@relax.expr_functor.mutator
class _Replaced(relax.PyExprMutator):
    """The planned bindings replaced (their nested calls emitted as bindings of their own);
    the others kept."""

    def __init__(self, mod: tvm.IRModule, plan: Dict[relax.Var, Replacement]):
        super().__init__(mod)
        self.plan = plan
        self.shared: Dict[object, relax.Var] = {}

    def _emitted(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._emitted(f) for f in expr.fields])
        if isinstance(expr, relax.Var):
            return self.visit_expr(expr)  # its new Var where it was replaced
        if not isinstance(expr, relax.Call):
            return expr
        args = [self._emitted(a) for a in expr.args]
        args = [self.builder_.emit(a) if isinstance(a, relax.Call) else a for a in args]
        return relax.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)

    def _share(self, key, make: Callable[[], relax.Expr]) -> relax.Var:
        if key not in self.shared:
            self.shared[key] = self.builder_.emit(self._emitted(make()))
        return self.shared[key]

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        make = self.plan.get(binding.var)
        if make is None:
            super().visit_var_binding_(binding)
            return
        new = named_as(self._emitted(make(self._share)), binding.value)
        emit = self.builder_.emit_output if self.builder_.current_block_is_dataflow() and \
            not isinstance(binding.var, relax.DataflowVar) else self.builder_.emit
        self.set_var_remap(binding.var, emit(new, name_hint=binding.var.name))


def _column(source: relax.Expr, t: int, out: List[int]) -> relax.Expr:
    """reshape(source[:, :, :, t], out)."""
    return relax.op.reshape(relax.op.strided_slice(source, [3], [t], [t + 1]), out)


def _readers_of(values: Dict[relax.Var, relax.Expr]) -> Dict[relax.Var, List[relax.Var]]:
    """var -> the vars whose values read it (as an argument)."""
    readers: Dict[relax.Var, List[relax.Var]] = {}
    for var, value in values.items():
        for arg in getattr(value, "args", []):
            if isinstance(arg, relax.Var):
                readers.setdefault(arg, []).append(var)
    return readers


def _step_plan(function: relax.Function) -> Dict[relax.Var, Replacement]:
    """The takes of time steps as columns of the map, and the dense layers of one weight
    over two or more of them as the columns of one 1x1 convolution."""
    values = _bindings_table(function)
    counts = read_counts(function)
    readers = _readers_of(values)
    steps = {var: _step(value, values) for var, value in values.items()}
    steps = {var: found for var, found in steps.items() if found is not None}
    plan: Dict[relax.Var, Replacement] = {}
    for var, (x, t) in steps.items():
        n, c, h, _ = _static(x)
        plan[var] = lambda share, x=x, t=t, out=[n, c * h]: _column(x, t, out)
    # (x, the weight's digest, the bias's) -> [(the binding replaced, the column)], weight, bias
    groups: Dict[tuple, list] = {}
    for var, (x, t) in steps.items():
        for reader in readers.get(var, []):
            value = values[reader]
            weight = _dense_weight(value, values)
            if weight is None or not value.args[0].same_as(var) or \
                    weight.shape[1] != _static(var)[-1]:
                continue
            bias, last = None, reader
            adds = readers.get(reader, [])
            if counts.get(reader, 0) == 1 and len(adds) == 1 and \
                    _bias(values[adds[0]]) is not None:
                bias, last = _bias(values[adds[0]]), adds[0]
            key = (x, _digest(weight), _digest(bias))
            groups.setdefault(key, [[], weight, bias, str(value.ty.dtype)])[0].append((last, t))
    for (x, _, _), (members, weight, bias, dtype) in groups.items():
        if len(members) < 2:
            continue  # one step's dense layer reads its column
        n, c, h, w = _static(x)
        k = weight.shape[0]
        kernel = relax.const(np.ascontiguousarray(weight.reshape(k, c * h, 1, 1)), dtype)
        shift = None if bias is None else relax.const(bias.reshape(1, k, 1, 1), dtype)

        def conv(x=x, kernel=kernel, shift=shift, shape=[n, c * h, 1, w]):
            out = relax.op.nn.conv2d(relax.op.reshape(x, shape), kernel)
            return out if shift is None else relax.op.add(out, shift)

        for last, t in members:
            plan[last] = (lambda share, key=id(kernel), conv=conv, t=t, out=[n, k]:
                          _column(share(key, conv), t, out))
    return plan


def _pieces(value, values) -> Optional[list]:
    """The fields of a concat's tuple (a tuple or a var bound to one)."""
    fields = value.args[0]
    fields = values.get(fields, fields) if isinstance(fields, relax.Var) else fields
    return list(fields.fields) if isinstance(fields, relax.Tuple) else None


def _reversal_plan(function: relax.Function) -> Dict[relax.Var, Replacement]:
    """A full reversal along an axis of a concat, along that axis, of pieces one long on it
    -> the concat of the pieces in reverse order."""
    values = _bindings_table(function)
    plan: Dict[relax.Var, Replacement] = {}
    for var, value in values.items():
        if _op(value) != "relax.strided_slice":
            continue
        source = _value(value.args[0], values)
        if _op(source) != "relax.concat":
            continue
        shape = _static(source)
        axis = int(source.attrs.axis) % len(shape) if shape else None
        pieces = _pieces(source, values)
        if axis is None or pieces is None or not _reverses(value, axis) or any(
                (_static(p) or [0] * len(shape))[axis] != 1 for p in pieces):
            continue
        plan[var] = lambda share, pieces=pieces[::-1], axis=axis: relax.op.concat(pieces, axis)
    return plan


_SAME_BYTES = ("relax.reshape", "relax.expand_dims", "relax.squeeze")


def _stack_plan(function: relax.Function) -> Dict[relax.Var, Replacement]:
    """A concat along axis 0 of pieces one long on it (a stack of steps) -> the concat of the
    pieces read as [1, 1, size] along their last axis, reshaped to the result."""
    values = _bindings_table(function)
    plan: Dict[relax.Var, Replacement] = {}
    for var, value in values.items():
        shape = _static(value)
        if _op(value) != "relax.concat" or shape is None or len(shape) < 2 or \
                int(value.attrs.axis) % len(shape) != 0:
            continue
        pieces = _pieces(value, values)
        if pieces is None or any(_static(p) is None or _static(p)[0] != 1 for p in pieces):
            continue
        flat = []
        for piece in pieces:
            size = int(np.prod(_static(piece)))
            # a piece that is a reshape of another tensor: the same bytes, read from it
            moved = _value(piece, values)
            source = moved.args[0] if _op(moved) in _SAME_BYTES and \
                _static(moved.args[0]) is not None and not is_constant(moved.args[0]) else piece
            flat.append((source, size))
        plan[var] = (lambda share, flat=flat, shape=shape: relax.op.reshape(relax.op.concat(
            [relax.op.reshape(p, [1, 1, size]) for p, size in flat], 2), shape))
    return plan


def recurrent_steps(mod: tvm.IRModule) -> tvm.IRModule:
    """The time-major steps of a map as its columns (a shared weight's dense layers as one
    1x1 convolution), reversed stacks as stacks in reverse order, stacks along axis 0 as
    concats along the last axis (module docstring)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for make_plan in (_step_plan, _reversal_plan, _stack_plan):
        for gv, function in _graph_functions(result):
            plan = make_plan(function)
            if plan:
                result[gv] = _Replaced(result, plan).visit_expr(function)
    return result
