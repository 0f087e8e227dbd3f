"""Computations over constants only, folded to their values before matching (issue 29).

Swin-V2 computes its relative position bias with a small MLP over a constant table of
coordinates (``16 sigmoid(MLP(table))`` gathered by a constant index), its logit scale per
head as ``clamp(log_scale, max=log 100).exp()`` of a parameter, and its key's zero bias as a
``slice_scatter`` of the qkv bias: after the parameters are bound, every input of these ops is
a constant, so each is one value, the same at every run. Left as ops they are host ops (no
engine runs a matmul of two constants), and they hide from ``attention.py`` that the scores
are scaled and biased by constants.

What is folded: the largest computations whose every input is a constant and which contain
at least one op that computes (not only moves) values, where a tensor that is not such a
computation reads them. Layout ops alone over a constant (a weight's transpose, a bias's
reshape, a table's gather) are left as they are: the patterns read them as a weight's or a
bias's form, and ``rewrites.constant_broadcasts_and_takes`` folds what they do not. The
values are TVM's own ``FoldConstant`` of those bindings alone (the ops legalised and run on
the host CPU, in the ops' precision), so the fold computes what the host build would.

A tensor's shape is a constant too where it is static: ``shape_to_tensor(shape_of(x))`` of an
``x`` whose shape the module states is that shape as an int64 constant. TVM's ONNX importer
normalises a Gather's index at run time so (``where(i < 0, i + shape[axis], i)``, ViT's head
``x[:, 0]``), and the index then folds to the constant the take's rewrites read. So is an
integer ``arange`` of constant bounds, which TVM's FoldConstant leaves: torch's ``triu`` of
``generate_square_subsequent_mask`` (a decoder's causal mask) compares two of them."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import tvm
from tvm import relax

from .relax_exprs import is_constant, prim_int

#: Ops that only move a constant's elements: left for the patterns (module docstring).
MOVES = ("relax.reshape", "relax.permute_dims", "relax.squeeze", "relax.expand_dims",
         "relax.broadcast_to", "relax.take", "relax.strided_slice", "relax.astype")


def _is_leaf(expr: relax.Expr, constant: Dict[relax.Var, bool]) -> bool:
    """A constant, a var computed from constants only, or a value that is not a tensor (a
    shape, a PrimValue, an attribute-like argument)."""
    if is_constant(expr):
        return True
    if isinstance(expr, relax.Var):
        return expr in constant
    if isinstance(expr, relax.Tuple):
        return all(_is_leaf(f, constant) for f in expr.fields)
    return not isinstance(expr, (relax.Call, relax.GlobalVar, relax.Function,
                                 relax.TupleGetItem, relax.SeqExpr, relax.If))


def _uses(expr: relax.Expr) -> List[relax.Var]:
    found: List[relax.Var] = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e)
                                    if isinstance(e, relax.Var) else None)
    return found


def _static_shape(expr: relax.Expr, shapes: Dict[relax.Var, List[int]]
                  ) -> Optional[List[int]]:
    """The values of a shape expression: a static ``R.shape``, a ``shape_of`` of a tensor of
    static shape, or a var bound to one (``shapes``), else None."""
    if isinstance(expr, relax.Var):
        return shapes.get(expr)
    if isinstance(expr, relax.ShapeExpr):
        try:
            return [int(v) for v in expr.values]
        except TypeError:  # a symbolic dimension
            return None
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
            expr.op.name == "relax.shape_of":
        try:
            return [int(v) for v in expr.args[0].ty.shape.values]
        except (AttributeError, TypeError):
            return None
    return None


def _shape_tensors(function: relax.Function) -> Dict[relax.Var, relax.Expr]:
    """The vars bound to ``shape_to_tensor`` of a static shape, and that shape as an int64
    constant (module docstring); and those bound to an integer ``arange`` of constant bounds,
    and its values."""
    shapes: Dict[relax.Var, List[int]] = {}
    folded: Dict[relax.Var, relax.Expr] = {}
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding):
                continue
            if isinstance(binding.var.ty, relax.ShapeType):
                shape = _static_shape(value, shapes)
                if shape is not None:
                    shapes[binding.var] = shape
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                    value.op.name == "relax.shape_to_tensor":
                shape = _static_shape(value.args[0], shapes)
                if shape is not None:
                    folded[binding.var] = relax.const(np.array(shape, np.int64), "int64")
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                    value.op.name == "relax.arange":
                # TVM's FoldConstant leaves arange (its bounds are no constant tensors):
                # triu's and tril's index comparisons (a causal mask) then stay host ops
                bounds = [prim_int(a) for a in value.args]
                dtype = str(binding.var.ty.dtype)
                if None not in bounds and dtype.startswith("int"):
                    folded[binding.var] = relax.const(np.arange(*bounds).astype(dtype), dtype)
    return folded


def _folded(function: relax.Function) -> Dict[relax.Var, relax.Expr]:
    """The vars of ``function`` to fold (module docstring) and their values."""
    # var -> whether its computation contains an op that computes
    constant: Dict[relax.Var, bool] = {}
    bindings: List[relax.VarBinding] = []
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(binding, relax.VarBinding) or not isinstance(
                    value, relax.Call) or not isinstance(value.op, tvm.ir.Op) or not all(
                    _is_leaf(a, constant) for a in value.args) or not isinstance(
                    binding.var.ty, relax.TensorType):
                continue
            computes = value.op.name not in MOVES or any(
                constant.get(v, False) for v in _uses(value))
            constant[binding.var] = computes
            bindings.append(binding)
    if not any(constant.values()):
        return {}
    # the computing constants that something else reads (or the function returns)
    readers_outside = set(_uses(function.body.body))
    for block in function.body.blocks:
        for binding in block.bindings:
            if binding.var not in constant:
                readers_outside.update(_uses(binding.value))
    targets = [b.var for b in bindings if constant[b.var] and b.var in readers_outside]
    if not targets:
        return {}
    # the bindings alone, in a function returning the targets, folded by TVM
    out = relax.Var("folded", relax.TupleType([t.ty for t in targets]))
    body = relax.SeqExpr([relax.DataflowBlock(bindings + [relax.VarBinding(
        out, relax.Tuple(targets))])], out)
    helper = relax.Function([], body, out.ty, is_pure=True)
    module = tvm.IRModule({"fold": helper})
    module = tvm.transform.Sequential([relax.transform.FoldConstant(),
                                       relax.transform.CanonicalizeBindings()])(module)
    result = module["fold"].body
    values = {}
    for block in result.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value
    output = result.body
    while isinstance(output, relax.Var) and output in values:
        output = values[output]
    if not isinstance(output, relax.Tuple):
        return {}
    folded = {}
    for var, field in zip(targets, output.fields):
        while isinstance(field, relax.Var) and field in values:
            field = values[field]
        if is_constant(field):
            folded[var] = field
    return folded


@relax.expr_functor.mutator
class _Inliner(relax.PyExprMutator):
    """The folded vars' readers read their constants; their bindings go."""

    def __init__(self, mod: tvm.IRModule, folded: Dict[relax.Var, relax.Expr]):
        super().__init__(mod)
        self.folded = folded

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var not in self.folded:
            super().visit_var_binding_(binding)

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.folded.get(var, var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.folded.get(var, var)


def constant_computations(mod: tvm.IRModule) -> tvm.IRModule:
    """Every computation over constants only of ``mod``'s functions (module docstring) as its
    value, read where it was read; the bindings that computed it are dead code after
    (DeadCodeElimination removes them)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if not isinstance(function, relax.Function) or (
                function.attrs is not None and "Composite" in function.attrs):
            continue
        shapes = _shape_tensors(function)
        if shapes:  # the shapes first: what is computed from them folds below
            function = _Inliner(result, shapes).visit_expr(function)
            result[gv] = function
        folded = _folded(function)
        if folded:
            result[gv] = _Inliner(result, folded).visit_expr(function)
    return result
