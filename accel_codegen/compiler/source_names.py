"""The source model's names of a Relax module's operators: PyTorch module paths
(``layer2.0.downsample.0``, from ``torch.export``'s ``nn_module_stack``) and ONNX node names.

The importers name every Relax variable ``lv<N>``; what a user knows is the model's own names.
The frontend records, while TVM's importer converts each source node (an fx node of the
exported program, a node of the ONNX graph), which Relax expression that node's result is;
:func:`attach` then puts the node's name on every call of ``main`` as its span's source name
(``tvm.ir.Span``), the field TVM keeps on an expression through its passes: the
pattern-matched composites and the merged external functions carry the same calls, so the
partition report, the estimate, the profile's labels and the errors can name a layer by its
source (:func:`name_of`, :func:`layer_names`).

A call the importer emits on its own to build a node's result (the transpose of a linear
layer's weight, a convolution's bias reshape) has no node of its own: it takes the name of the
node that first reads it.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import tvm
import tvm_ffi
from tvm import relax

#: The module attribute that says a module carries source names (its value: "torch"/"onnx").
SOURCE_ATTR = "accel_source_names"


def torch_node_name(node, parameters: Optional[Mapping[str, str]] = None) -> str:
    """The PyTorch name of an fx node of an exported program: the path of the innermost
    module whose ``forward`` calls it (``layer1.0.conv1``); for an op written in a
    container's own ``forward`` (a residual add, a flatten), that path and the op
    (``layer1.0.add``, ``flatten`` at the top). An op of a torch module's ``forward`` that
    reads a submodule's parameters without calling it is named by that submodule
    (MultiheadAttention's output projection, ``self_attn.out_proj``, whose ``forward`` never
    runs): ``parameters`` maps the program's parameter placeholders to their names
    (``graph_signature.inputs_to_parameters``; None: no parameters)."""
    stack = node.meta.get("nn_module_stack") or {}
    path, kind = "", None
    if stack:
        path, kind = list(stack.values())[-1]
    module = getattr(kind, "__module__", None) if not isinstance(kind, str) else \
        kind.rsplit(".", 1)[0]
    leaf = bool(module) and module.startswith("torch.nn.modules") and \
        not module.startswith("torch.nn.modules.container")
    if path and leaf:
        return _submodule_read(node, path, parameters or {}) or path
    op = _torch_op_name(node)
    return f"{path}.{op}" if path else op


def _submodule_read(node, path: str, parameters: Mapping[str, str]) -> Optional[str]:
    """The path of the first submodule of ``path`` whose parameter ``node`` reads (None:
    it reads none)."""
    pending = list(node.args) + list(node.kwargs.values())
    while pending:
        arg = pending.pop(0)
        if isinstance(arg, (list, tuple)):
            pending[:0] = list(arg)
            continue
        owner = parameters.get(getattr(arg, "name", None), "").rpartition(".")[0]
        if owner.startswith(path + "."):
            return owner
    return None


def _torch_op_name(node) -> str:
    """The op of an fx node without its overload and counter (``add`` of ``aten.add.Tensor``)."""
    source = node.meta.get("source_fn_stack")
    if source:  # the torch function the user wrote, before decomposition
        fn = source[-1][1]
        name = getattr(fn, "__name__", None) or str(fn)
        return name.rsplit(".", 1)[-1].strip("_")
    target = getattr(node.target, "__name__", str(node.target))
    return target.split(".")[0].strip("_")


class Recorder:
    """Relax expression -> source name, filled while an importer converts the graph."""

    def __init__(self):
        self.names: Dict[relax.Expr, str] = {}

    def record(self, result, name: str) -> None:
        if not name:
            return
        items = list(result) if isinstance(result, (list, tuple)) else [result]
        for item in items:
            if isinstance(item, relax.Tuple):  # a node of several outputs (batch norm's)
                self.record(list(item.fields), name)
            if isinstance(item, relax.Expr) and item not in self.names:
                self.names[item] = name


def span_of(name: str) -> tvm.ir.Span:
    return tvm.ir.Span(tvm.ir.SourceName(name), 0, 0, 0, 0)


def named(call: relax.Expr, name: Optional[str]) -> relax.Expr:
    """``call`` carrying the source name ``name`` (its span); ``call`` itself for no name or
    for an expression that is no call (only calls carry names here)."""
    if not name or not isinstance(call, relax.Call):
        return call
    return relax.Call(call.op, call.args, call.attrs, call.ty_args, span_of(name))


def name_of(expr) -> Optional[str]:
    """The source name an expression carries (None without one). Only a span of
    :func:`span_of`'s, which has no line: TVMScript's parser gives each call the span of its
    text, the script's file and line, which names no layer."""
    span = getattr(expr, "span", None)
    if span is None or span.line != 0 or span.column != 0:
        return None
    name = span.source_name.name if span.source_name is not None else ""
    return str(name) or None


def _used_vars(expr) -> List[relax.Var]:
    if isinstance(expr, relax.Call):
        found = []
        for arg in expr.args:
            found += _used_vars(arg)
        return found
    if isinstance(expr, relax.Tuple):
        found = []
        for field in expr.fields:
            found += _used_vars(field)
        return found
    if isinstance(expr, relax.TupleGetItem):
        return _used_vars(expr.tuple_value)
    if isinstance(expr, relax.Var):
        return [expr]
    return []


def attach(mod: tvm.IRModule, recorder: Recorder, source: str) -> tvm.IRModule:
    """``mod`` with every call of ``main`` carrying its node's name as its span (see the
    module's docstring); ``source`` ("torch", "onnx") is noted in :data:`SOURCE_ATTR`."""
    main = mod["main"]
    names = recorder.names
    bindings = [b for block in main.body.blocks for b in block.bindings]
    named: Dict[relax.Var, str] = {}
    for binding in bindings:
        name = names.get(binding.var) or names.get(binding.value)
        if name:
            named[binding.var] = name
    # A helper call takes the name of its first reader: walk backwards, earlier readers last.
    inherited: Dict[relax.Var, str] = {}
    for binding in reversed(bindings):
        name = named.get(binding.var) or inherited.get(binding.var)
        if not name:
            continue
        for var in _used_vars(binding.value):
            if var not in named:
                inherited[var] = name
    spans = {var: span_of(name) for var, name in {**inherited, **named}.items()}
    if not spans:
        return mod
    mutated = _Spans(spans.get).visit_expr(main)
    mod = mod.clone() if hasattr(mod, "clone") else mod
    mod["main"] = mutated
    return mod.with_attr(SOURCE_ATTR, source)


@relax.expr_functor.mutator
class _Spans(relax.PyExprMutator):
    """Each call bound to a variable for which ``span_for`` gives a span, with that span."""

    def __init__(self, span_for):
        super().__init__()
        self.span_for = span_for

    def visit_var_binding_(self, binding):
        value = binding.value
        span = self.span_for(binding.var)
        if span is not None and isinstance(value, relax.Call):
            value = relax.Call(value.op, value.args, value.attrs, value.ty_args, span)
            # the variable keeps its type: the same one stays bound, nothing to remap
            self.builder_.emit_normalized(relax.VarBinding(binding.var,
                                                           self.visit_expr(value)))
            return
        super().visit_var_binding_(binding)


def name_bindings(function: relax.Function, names: Mapping[str, str]) -> relax.Function:
    """``function`` with the call bound to each variable named in ``names`` (by the variable's
    name) carrying that source name: for a rewrite, whose new calls TVM makes without a
    span."""
    def span_for(var):
        name = names.get(var.name)
        return span_of(name) if name else None

    return _Spans(span_for).visit_expr(function)


def binding_names(function: relax.Function) -> List[Optional[str]]:
    """The source name of each binding's value of ``function``, in binding order (None where
    it carries none): what :func:`with_binding_names` puts back on a copy of the function."""
    return [name_of(b.value) for b in _bindings(function)]


def with_binding_names(function: relax.Function,
                       names: Sequence[Optional[str]]) -> relax.Function:
    """``function`` with the call of its i-th binding carrying ``names[i]`` (see
    :func:`binding_names`): for a copy of a function made without spans, such as one parsed
    from TVMScript, whose bindings are the original's in the same order."""
    bindings = _bindings(function)
    if len(bindings) != len(names):
        raise ValueError(f"{len(names)} names for {len(bindings)} bindings")
    spans = {b.var: span_of(name) for b, name in zip(bindings, names) if name}
    return _Spans(spans.get).visit_expr(function)


def function_calls(function: relax.Function) -> Iterable[relax.Call]:
    """Every operator call in a (composite) function's body, in order."""
    for block in function.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                yield binding.value


def _grouped(paths: List[List[str]], sep: str = ".") -> List[str]:
    """Paths, those sharing a first component written once: ``a.{b,c}``."""
    groups: Dict[str, List[List[str]]] = {}
    for path in paths:
        groups.setdefault(path[0], []).append(path)
    items = []
    for head, members in groups.items():
        tails = [m[1:] for m in members]
        if len(members) == 1 or not all(tails):
            items += [sep.join(m) for m in members]
        else:
            inner = _grouped(tails, sep)
            items.append(f"{head}{sep}" + (inner[0] if len(inner) == 1 else
                                       "{" + ",".join(inner) + "}"))
    return items


def compress(names: Sequence[str]) -> str:
    """Several source names as one, module paths written once: ``layer1.0.{conv1,bn1,relu}``,
    ``layer2.0.{downsample.{0,1},conv2}``; names of no common first component joined with
    ``+``; each name once, in order of first appearance. ONNX node names that are paths
    (``/layer1/layer1.0/conv1/Conv``, as torch's exporter names them) are grouped on ``/``."""
    distinct: List[str] = []
    for name in names:
        if name and name not in distinct:
            distinct.append(name)
    sep = "/" if distinct and all("/" in name for name in distinct) else "."
    return "+".join(_grouped([name.split(sep) for name in distinct], sep))


# --- per call site: the layers that fusion shares -------------------------------------------------

#: The external function attribute that holds each of its layers' own source names: per
#: composite call, in order, its operators' names (:func:`function_calls` order; "" for none).
LAYERS_ATTR = "accel_layer_sources"


def _bindings(function: relax.Function) -> List[relax.Binding]:
    return [b for block in function.body.blocks for b in block.bindings]


def _layer_bindings(function: relax.Function):
    """(binding, the composite it calls or None) for each binding of an external function
    but the local definitions of its composites, in order: a layer is a call of a locally
    bound function."""
    local: Dict[relax.Var, relax.Function] = {}
    for binding in _bindings(function):
        value = binding.value
        if isinstance(value, relax.Function):
            local[binding.var] = value
        else:
            called = value.op if isinstance(value, relax.Call) else None
            yield binding, (local.get(called) if isinstance(called, relax.Var) else None)


def _composites(function: relax.Function) -> List[relax.Function]:
    """The composite function of each layer of an external function, in order."""
    return [composite for _, composite in _layer_bindings(function) if composite is not None]


def layer_op_names(function: relax.Function) -> List[List[Optional[str]]]:
    """Per layer of an external function, in order, its operators' source names (None where
    an operator has none): the names of the call site (:data:`LAYERS_ATTR`, which
    :func:`name_call_sites` sets) where the function has them, else its composites' own."""
    composites = _composites(function)
    sites = function.attrs.get(LAYERS_ATTR) if function.attrs is not None else None
    if sites is not None and len(sites) == len(composites) and all(
            len(names) == len(list(function_calls(c))) for names, c in zip(sites, composites)):
        return [[str(name) or None for name in names] for names in sites]
    return [[name_of(call) for call in function_calls(c)] for c in composites]


def layer_names(function: relax.Function) -> List[str]:
    """Per layer of an external function, in order, its source name (:func:`compress`)."""
    return [compress([n or "" for n in names]) for names in layer_op_names(function)]


class _Keys:
    """What identifies a binding's value across fusion: its kind (the op, a tuple item), the
    pre-fusion variables it reads and its other arguments and attributes by structure (so
    ``reshape(x, A)`` and ``reshape(x, B)``, or two convolutions of ``x`` with different
    weights, are told apart). A constant's structural hash is computed once."""

    def __init__(self):
        self.hashes: Dict[object, int] = {}

    def _hash(self, obj) -> int:
        if isinstance(obj, tvm.ir.expr.GenericConst):  # relax.const's
            if obj not in self.hashes:
                self.hashes[obj] = tvm_ffi.structural_hash(obj)
            return self.hashes[obj]
        return tvm_ffi.structural_hash(obj, map_free_vars=True)

    def arg(self, arg, env: Mapping):
        if isinstance(arg, relax.Var):
            return ("var", env.get(arg, arg))
        if isinstance(arg, relax.Tuple):
            return ("tuple", *(self.arg(f, env) for f in arg.fields))
        return ("value", self._hash(arg))

    def __call__(self, value, env: Mapping) -> Optional[tuple]:
        if isinstance(value, relax.TupleGetItem):
            return ("getitem", self.arg(value.tuple_value, env), value.index)
        if isinstance(value, relax.Tuple):
            return self.arg(value, env)
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            attrs = self._hash(value.attrs) if value.attrs is not None else None
            return (value.op.name, attrs, *(self.arg(a, env) for a in value.args))
        return None


class _Sites:
    """The main before fusion, searchable by :class:`_Keys`: each binding's variable and
    source name; a key several bindings share (the same computation twice) is handed out in
    order."""

    def __init__(self, before: relax.Function):
        self.keys = _Keys()
        self.found: Dict[tuple, List[tuple]] = {}
        for binding in _bindings(before):
            key = self.keys(binding.value, {})
            if key is not None:
                self.found.setdefault(key, []).append((binding.var, name_of(binding.value)))

    def take(self, value, env: Mapping) -> Optional[tuple]:
        key = self.keys(value, env)
        candidates = self.found.get(key) if key is not None else None
        if not candidates:
            return None
        return candidates.pop(0) if len(candidates) > 1 else candidates[0]

    def composite(self, function: relax.Function, args, env: Mapping):
        """(the pre-fusion value of its result, its operators' source names in
        :func:`function_calls` order) of a composite called with ``args``."""
        inner = {p: env.get(a, a) for p, a in zip(function.params, args)}
        names = []
        for binding in _bindings(function):
            found = self.take(binding.value, inner)
            if found is not None:
                inner[binding.var] = found[0]
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                names.append((found[1] if found is not None else None)
                             or name_of(binding.value) or "")
        result = function.body.body
        if isinstance(result, relax.Tuple):
            return tuple(inner.get(f) for f in result.fields), names
        return inner.get(result), names

    def external(self, function: relax.Function, args, env: Mapping):
        """(the pre-fusion values of its results, per layer its operators' names) of an
        external function called with ``args``."""
        inner = {p: env.get(a, a) for p, a in zip(function.params, args)}
        layers = []
        for binding, composite in _layer_bindings(function):
            value = binding.value
            if composite is not None:
                inner[binding.var], names = self.composite(composite, value.args, inner)
                layers.append(names)
            elif isinstance(value, relax.TupleGetItem):
                made = inner.get(value.tuple_value)
                inner[binding.var] = made[value.index] if isinstance(made, tuple) else None
        result = function.body.body
        if isinstance(result, relax.Tuple):
            return tuple(inner.get(f) for f in result.fields), layers
        return inner.get(result), layers


def name_call_sites(merged: tvm.IRModule, before: relax.Function) -> tvm.IRModule:
    """``merged`` (the partitioned module) with each external function's layers named by the
    source operators each call site replaced (:data:`LAYERS_ATTR`). FuseOpsByPattern gives
    structurally equal matches one composite function (spans are not compared), which the
    merge copies into each external function with the first match's spans: a ResNet's
    standalone ReLU after every residual add would be named as the first block's. The
    composites and the calls stay as they are (the layer keys, ``f1.1``, are the same);
    ``before``: the main before fusion, whose calls carry their own names, which the merged
    main's data flow is followed through."""
    if not any(name_of(b.value) for b in _bindings(before)):
        return merged
    sites = _Sites(before)
    env: Dict[relax.Var, object] = {}
    updates = {}
    for binding in _bindings(merged["main"]):
        value = binding.value
        function = merged[value.op] if isinstance(value, relax.Call) and \
            isinstance(value.op, tvm.ir.GlobalVar) else None
        if isinstance(function, relax.Function) and function.attrs is not None and \
                "Codegen" in function.attrs:
            env[binding.var], layers = sites.external(function, value.args, env)
            if value.op not in updates:  # a function called twice keeps its first call's
                updates[value.op] = function.with_attr(LAYERS_ATTR, layers)
            continue
        found = sites.take(value, env)
        if found is not None:
            env[binding.var] = found[0]
        elif isinstance(value, relax.TupleGetItem) and \
                isinstance(env.get(value.tuple_value), tuple):
            env[binding.var] = env[value.tuple_value][value.index]
    for gv, function in updates.items():
        merged[gv] = function
    return merged
