"""Reading Relax expressions, as every consumer of layers needs: static shapes, constants, a
chain's bindings and last op; and :class:`Unsupported`, what a chain the accelerator cannot run
raises (its message says why, in words)."""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tvm
from tvm import relax


class Unsupported(Exception):
    """A chain the accelerator cannot run; the message says why, in words."""


Lookup = Callable[[relax.Expr], Optional[relax.Expr]]


def static_shape(expr: relax.Expr) -> Tuple[int, ...]:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise Unsupported(f"{describe(expr)} has no static tensor shape")
    try:
        return tuple(int(v) for v in ty.shape.values)
    except (TypeError, AttributeError):
        raise Unsupported(f"{describe(expr)} has a symbolic shape {ty.shape}") from None


def feature_surface(shape: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    """The feature surface a channels-first tensor is read as: NCHW itself, [N, C, L] (a 1-D
    signal, or a detection head's flattened positions) as [N, C, 1, L], [N, C] as
    [N, C, 1, 1]. The same bytes either way, so nothing moves. Which surface a 3-D tensor is
    depends on its reader: a layer norm, softmax or dense layer over the last axis reads
    channels-last tokens ([B, T, C]: :func:`token_surface`); a batch norm or a per-channel
    operand over axis 1 reads [N, C, L] so; element-wise ops, activations and copies are the
    same on either (they read the bytes as they lie), so they take this one."""
    if len(shape) == 4:
        return tuple(shape)
    if len(shape) == 3:
        return (shape[0], shape[1], 1, shape[2])
    if len(shape) == 2:
        return (shape[0], shape[1], 1, 1)
    raise Unsupported(f"a {len(shape)}-D tensor {list(shape)}: the engines read NCHW, "
                      "[N, C, L] or [N, C]")


def dtype_of(expr: relax.Expr) -> str:
    ty = expr.ty
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else "?"


def describe(expr: relax.Expr) -> str:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return type(expr).__name__


def op_name(expr: Optional[relax.Expr]) -> Optional[str]:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def is_constant(expr: relax.Expr) -> bool:
    return isinstance(expr, tvm.ir.expr.GenericConst)


def constant_value(expr: relax.Expr) -> np.ndarray:
    return expr.value.numpy()


class Bindings(dict):
    """Var -> bound value of a chain's bindings, callable as a :data:`Lookup`; a dict, so that
    a pattern can be matched against it again (``extract_matched_expr(expr, var2val)``)."""

    def __call__(self, var: relax.Expr) -> Optional[relax.Expr]:
        return self.get(var)

    @classmethod
    def of(cls, function: relax.Function) -> "Bindings":
        table = cls()
        for block in function.body.blocks:
            for binding in block.bindings:
                table[binding.var] = binding.value
        return table


def bound_values(function: relax.Function) -> Bindings:
    """A lookup of the Var -> value bindings of a function body (for the code generator)."""
    return Bindings.of(function)


def chain_root(function: relax.Function) -> relax.Expr:
    """The last op of a composite function."""
    body = function.body
    result = body.body
    if isinstance(result, relax.Var):
        value = bound_values(function)(result)
        if value is not None:
            return value
    return result


def prim_int(value) -> Optional[int]:
    """The integer of a PrimValue or IntImm argument (arange's bounds), or None."""
    while hasattr(value, "value") and not isinstance(value, (int, np.integer)):
        value = value.value
    return int(value) if isinstance(value, (int, np.integer)) else None


def keepdims_axes(call: relax.Call, rank: int) -> Optional[list]:
    """A keepdims reduction's axes (sum, mean, max), sorted and non-negative; None where it
    reduces every axis or drops them."""
    a = call.attrs
    if a.axis is None or not bool(a.keepdims):
        return None
    return sorted(int(v) % rank for v in a.axis)


def read_counts(function: relax.Function) -> Dict[relax.Var, int]:
    """How many times each variable is read in ``function``: in its bindings' values (at any
    depth: a call's arguments, a tuple's fields) and in its result. A variable read by no one
    is absent. The rewrites and the int8 plan ask it whether one op alone reads a value."""
    counts: Dict[relax.Var, int] = {}

    def count(expr) -> None:
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1

    for block in function.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, count)
    relax.analysis.post_order_visit(function.body.body, count)
    return counts


def strided_sliced(call: relax.Call, value: np.ndarray) -> Optional[np.ndarray]:
    """``value`` sliced as the strided_slice ``call`` slices its input (its axes, begins, ends
    and strides, tuples of constants), or None where they are not static."""
    fields = []
    for arg in call.args[1:]:
        if not isinstance(arg, relax.Tuple):
            return None
        fields.append([int(getattr(v, "value", v)) for v in arg.fields])
    axes, begin, end = fields[:3]
    strides = fields[3] if len(fields) > 3 else [1] * len(axes)
    slices = [slice(None)] * value.ndim
    for axis, first, last, step in zip(axes, begin, end, strides):
        slices[axis % value.ndim] = slice(first, last, step)
    return value[tuple(slices)]


def resize_coordinates(in_size: int, out_size: int, mode: str) -> Optional[np.ndarray]:
    """The input coordinate of each output index along one axis of TVM's resize2d (topi's
    get_inx, in float32 as it computes them), or None for a coordinate transformation mode
    it has no such form of here: the one definition the nearest resize's lowering and the
    linear resize's rewrite read."""
    x = np.arange(out_size, dtype=np.float32)
    scale = np.float32(in_size) / np.float32(out_size)
    if mode == "half_pixel":
        return (x + np.float32(0.5)) * scale - np.float32(0.5)
    if mode == "align_corners":
        return np.float32(in_size - 1) / np.float32(max(out_size - 1, 1)) * x
    if mode == "asymmetric":
        return scale * x
    if mode == "pytorch_half_pixel":
        return (x + np.float32(0.5)) * scale - np.float32(0.5) if out_size > 1 else x * 0
    if mode == "tf_half_pixel_for_nn":
        return (x + np.float32(0.5)) * scale
    return None
