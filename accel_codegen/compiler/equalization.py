"""Cross-layer equalisation (Nagel et al., "Data-Free Quantization Through Weight Equalization
and Bias Correction", ICCV 2019), applied to a Relax module's constant weights before an int8
build quantises them.

A convolution P whose output reaches other convolutions C only through positive-homogeneous
ops (ReLU, max and average pooling, per-channel adds, batch norm right after P) computes the
same function when its output channel i is divided by s_i > 0 and every consumer's input
channel i is multiplied by s_i: relu(y / s) = relu(y) / s. The int8 build quantises the
tensor between them per tensor, so channels of small range waste most of its codes; each
consumer's weights are quantised per output channel, so an input channel of small weights
wastes codes of every row. Equalising trades one against the other:

- the range of P's output channel i, a_i: from P's batch norm when it has one (the channel is
  N(beta_i, gamma_i^2) when the statistics match the data: a_i = |beta_i| + 3 |gamma_i|),
  else the largest |weight| of P's row i (the paper's choice);
- the consumers' relative range of input channel i, r_i: the largest |w[k, i]| / max_j
  |w[k, j]| over their rows k (per-channel weight scales make a row's own size irrelevant);
- s_i = sqrt(a_i / r_i) (the paper's balance: after it a_i / s_i = r_i s_i), and s_i = a_i when
  every consumer is depthwise, whose per-channel scales absorb any s_i exactly: all channels
  then share the tensor's range.

The scale goes where it is exact: into batch norm's gamma and beta when P has one (eps keeps
batch norm from commuting with a scale of its input), else into P's rows and the bias adds
after it. ReLU6 (a clip at 6) is not positive-homogeneous: clip(y / s, 0, 6) differs from
clip(y, 0, 6) / s, so chains through it are left alone (MobileNet-v2's, EfficientNet's SiLU
too); the module's fp32 function is unchanged up to float32 rounding.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import numpy as np
import tvm
from tvm import relax

from .layer import constant_value, is_constant

#: Ops that commute with a positive per-channel scale of their (first) input.
HOMOGENEOUS = ("relax.nn.relu", "relax.nn.max_pool2d", "relax.nn.avg_pool2d",
               "relax.nn.adaptive_avg_pool2d", "relax.nn.leakyrelu")
#: How far apart the smallest and largest channel range may be moved: a channel that calibration
#: would see near zero (a_i tiny) is not blown up past this.
MAX_SCALE_RATIO = 1e3
SWEEPS = 8  # pairs sharing a depthwise layer interact: a few sweeps settle the scales


@dataclasses.dataclass
class _Pair:
    """One producer convolution, where its scale goes, and its consuming convolutions."""

    producer: relax.Var                 # the conv2d binding
    batch_norm: Optional[relax.Var]     # the batch_norm binding right after it, if any
    biases: list                        # the constants of the bias adds after it
    consumers: List[relax.Var]          # conv2d bindings reading the chain's end


@dataclasses.dataclass
class EqualizationReport:
    """What :func:`equalize` did: the pairs it equalised and the largest scale ratio."""

    pairs: int
    channels: int
    max_ratio: float    # max_i s_i / min_i s_i over the pairs (1: nothing moved)


def _is_op(value, name: str) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
        value.op.name == name


def _vars_in(expr) -> List[relax.Var]:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Call):
        return [v for a in expr.args for v in _vars_in(a)]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in _vars_in(f)]
    if isinstance(expr, relax.TupleGetItem):
        return _vars_in(expr.tuple_value)
    return []


def constants_in(expr) -> list:
    if is_constant(expr):
        return [expr]
    if isinstance(expr, relax.Call):
        return [c for a in expr.args for c in constants_in(a)]
    if isinstance(expr, relax.Tuple):
        return [c for f in expr.fields for c in constants_in(f)]
    return []


def _array(constant) -> np.ndarray:
    return constant_value(constant)


class Graph:
    """main's bindings: value of each variable, its users, how often each constant is used."""

    def __init__(self, function: relax.Function) -> None:
        self.value: Dict[relax.Var, relax.Expr] = {}
        self.users: Dict[relax.Var, List[relax.Var]] = {}
        self.order: List[relax.Var] = []
        constant_uses: Dict[int, int] = {}
        for block in function.body.blocks:
            for binding in block.bindings:
                if not isinstance(binding, relax.VarBinding):
                    continue
                self.value[binding.var] = binding.value
                self.order.append(binding.var)
                for used in _vars_in(binding.value):
                    self.users.setdefault(used, []).append(binding.var)
                for c in constants_in(binding.value):
                    key = c.__chandle__()
                    constant_uses[key] = constant_uses.get(key, 0) + 1
        for used in _vars_in(function.body.body):  # the function's result: a user outside
            self.users.setdefault(used, []).append(None)
        self.constant_uses = constant_uses

    def private(self, constant) -> bool:
        """A constant this graph uses once (scaling it changes nothing else)."""
        return is_constant(constant) and \
            self.constant_uses.get(constant.__chandle__(), 0) == 1

    def only_user(self, var: relax.Var) -> Optional[relax.Var]:
        users = self.users.get(var, [])
        return users[0] if len(users) == 1 else None


def _conv(value, graph: Graph) -> bool:
    """A 2-D NCHW/OIHW convolution with a private constant weight."""
    return _is_op(value, "relax.nn.conv2d") and graph.private(value.args[1]) and \
        str(value.attrs.data_layout) == "NCHW" and str(value.attrs.kernel_layout) == "OIHW"


def _bias_constant(expr, graph: Graph, channels: int):
    """The private constant of a per-channel bias operand (as given, or reshaped to
    [1, C, 1, 1] as torch's import gives a conv's bias), else None."""
    if isinstance(expr, relax.Var) and _is_op(graph.value.get(expr), "relax.reshape") and \
            len(graph.users.get(expr, [])) == 1:
        shape = tuple(int(d) for d in expr.ty.shape.values)
        expr = graph.value[expr].args[0]
    elif is_constant(expr):
        shape = tuple(int(d) for d in _array(expr).shape)
    else:
        return None
    if not graph.private(expr) or _array(expr).size != channels or len(shape) < 3 or \
            shape[-2:] != (1, 1):
        return None
    return expr


def _pair_of(var: relax.Var, graph: Graph) -> Optional[_Pair]:
    """The chain from a convolution to the convolutions it feeds, if it can be equalised."""
    value = graph.value[var]
    if not _conv(value, graph):
        return None
    channels = int(_array(value.args[1]).shape[0])
    pair = _Pair(var, None, [], [])
    cur, scaled_anything_homogeneous = var, False
    while True:
        user = graph.only_user(cur)
        if user is None:
            break
        uv = graph.value[user]
        if _is_op(uv, "relax.nn.batch_norm") and pair.batch_norm is None and \
                not scaled_anything_homogeneous and uv.args[0].same_as(cur) and \
                int(uv.attrs.axis) == 1 and all(graph.private(a) for a in uv.args[1:3]):
            item = graph.only_user(user)
            got = graph.value.get(item) if item is not None else None
            if not (isinstance(got, relax.TupleGetItem) and got.index == 0):
                return None
            # the scale goes into gamma and beta: a bias added before them stays as it is
            pair.batch_norm, pair.biases, cur = user, [], item
            continue
        if _is_op(uv, "relax.add") and uv.args[0].same_as(cur) and \
                _bias_constant(uv.args[1], graph, channels) is not None and \
                not scaled_anything_homogeneous:
            pair.biases.append(_bias_constant(uv.args[1], graph, channels))
            cur = user
            continue
        if isinstance(uv, relax.Call) and isinstance(uv.op, tvm.ir.Op) and \
                uv.op.name in HOMOGENEOUS and uv.args[0].same_as(cur):
            scaled_anything_homogeneous = True
            cur = user
            continue
        break
    users = graph.users.get(cur, [])
    if not users or any(u is None for u in users):
        return None
    for user in users:
        uv = graph.value[user]
        if not (_conv(uv, graph) and uv.args[0].same_as(cur)) or user in pair.consumers:
            return None
        weight = _array(uv.args[1])
        if weight.shape[1] * int(uv.attrs.groups) != channels:
            return None
        pair.consumers.append(user)
    return pair


def _input_columns(weight: np.ndarray, groups: int) -> np.ndarray:
    """[K, C/g, R, S] -> per input channel c, the |weight| of every row reading it, as a
    [C, K/g * R * S] array (rows of other groups read other channels)."""
    k, c_group = weight.shape[:2]
    w = np.abs(weight).reshape(groups, k // groups, c_group, -1)
    return w.transpose(0, 2, 1, 3).reshape(groups * c_group, -1)


def _relative_range(weight: np.ndarray, groups: int) -> np.ndarray:
    """Per input channel, its largest |weight| relative to the largest of the row it is in."""
    k = weight.shape[0]
    row_max = np.abs(weight).reshape(k, -1).max(axis=1)
    relative = np.abs(weight) / np.where(row_max > 0, row_max, 1.0).reshape(-1, 1, 1, 1)
    return _input_columns(relative, groups).max(axis=1)


def equalize(mod: tvm.IRModule):
    """Cross-layer equalisation of ``main``'s constant convolution weights: returns the
    equalised module (the same fp32 function) and an :class:`EqualizationReport`."""
    function = mod["main"]
    graph = Graph(function)
    pairs = [p for p in (_pair_of(v, graph) for v in graph.order) if p is not None]
    arrays: Dict[int, np.ndarray] = {}  # constant handle -> its new value

    def current(constant) -> np.ndarray:
        key = constant.__chandle__()
        if key not in arrays:
            arrays[key] = _array(constant).astype(np.float64)
        return arrays[key]

    total = [np.ones(1) for _ in pairs]  # each pair's scales, over all sweeps
    for _ in range(SWEEPS):
        largest_change = 0.0
        for index, pair in enumerate(pairs):
            p = graph.value[pair.producer]
            if pair.batch_norm is not None:
                bn = graph.value[pair.batch_norm]
                gamma, beta = current(bn.args[1]), current(bn.args[2])
                a = np.abs(beta) + 3 * np.abs(gamma)
            else:
                w = current(p.args[1])
                a = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
            consumers = [graph.value[c] for c in pair.consumers]
            depthwise = all(int(c.attrs.groups) == current(c.args[1]).shape[0] ==
                            len(a) for c in consumers)
            if depthwise:
                s = a.copy()
            else:
                r = np.max([_relative_range(current(c.args[1]), int(c.attrs.groups))
                            for c in consumers], axis=0)
                s = np.sqrt(a / np.where(r > 0, r, 1.0))
            good = (a > 0) & np.isfinite(s)
            if not good.any():
                continue
            top = s[good].max()
            s = np.where(good, np.clip(s, top / MAX_SCALE_RATIO, top), 1.0)
            s = s / np.exp(np.mean(np.log(s[good])))  # geometric mean 1: values stay in range
            s = np.where(good, s, 1.0)
            largest_change = max(largest_change, float(np.max(np.abs(np.log(s)))))
            if pair.batch_norm is not None:
                bn = graph.value[pair.batch_norm]
                for c in bn.args[1:3]:
                    current(c)[:] /= s
            else:
                w = current(p.args[1])
                w /= s.reshape(-1, 1, 1, 1)
            for constant in pair.biases:
                bias = current(constant)
                bias[:] = (bias.reshape(-1) / s).reshape(bias.shape)
            for c in consumers:
                w = current(c.args[1])
                groups = int(c.attrs.groups)
                k, c_group = w.shape[:2]
                view = w.reshape(groups, k // groups, c_group, -1)
                view *= s.reshape(groups, 1, c_group, 1)
            total[index] = total[index] * s
        if largest_change < 1e-3:
            break
    if not pairs:
        return mod, EqualizationReport(0, 0, 1.0)
    originals = {c.__chandle__(): c for v in graph.order for c in constants_in(graph.value[v])}
    report = EqualizationReport(len(pairs), sum(len(s) for s in total),
                                max(float(s.max() / s.min()) for s in total))
    return with_constants(mod, function, originals, arrays), report


def with_constants(mod, function, originals, arrays) -> tvm.IRModule:
    """``mod`` with main's constants replaced by the new values (same dtype and shape)."""
    replaced = {}
    for key, value in arrays.items():
        old = originals[key]
        dtype = _array(old).dtype
        replaced[key] = relax.const(value.astype(dtype).reshape(_array(old).shape), str(dtype))

    def rebuild(expr):
        if is_constant(expr):
            return replaced.get(expr.__chandle__(), expr)
        if isinstance(expr, relax.Call):
            args = [rebuild(a) for a in expr.args]
            if all(a.same_as(b) for a, b in zip(args, expr.args)):
                return expr
            return relax.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)
        if isinstance(expr, relax.Tuple):
            fields = [rebuild(f) for f in expr.fields]
            return relax.Tuple(fields) if any(not a.same_as(b) for a, b in
                                              zip(fields, expr.fields)) else expr
        return expr

    blocks = []
    for block in function.body.blocks:
        bindings = [relax.VarBinding(b.var, rebuild(b.value)) if isinstance(b, relax.VarBinding)
                    else b for b in block.bindings]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(bindings))
    body = relax.SeqExpr(blocks, function.body.body)
    new = relax.Function(function.params, body, function.ret_ty, function.is_pure,
                         function.attrs, function.span)
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    result[mod.get_global_var("main")] = new
    return result
