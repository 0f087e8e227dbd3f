"""The source model's names of a Relax module's operators: PyTorch module paths
(``layer2.0.downsample.0``, from ``torch.export``'s ``nn_module_stack``) and ONNX node names.

The importers name every Relax variable ``lv<N>``; what a user knows is the model's own names.
The frontend records, while TVM's importer converts each source node (an fx node of the
exported program, a node of the ONNX graph), which Relax expression that node's result is;
:func:`attach` then puts the node's name on every call of ``main`` as its span's source name
(``tvm.ir.Span``), the field TVM keeps on an expression through its passes: the
pattern-matched composites and the merged external functions carry the same calls, so the
partition report, the estimate, the profile's labels and the errors can name a layer by its
source (:func:`name_of`, :func:`layer_name`).

A call the importer emits on its own to build a node's result (the transpose of a linear
layer's weight, a convolution's bias reshape) has no node of its own: it takes the name of the
node that first reads it.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import tvm
from tvm import relax

#: The module attribute that says a module carries source names (its value: "torch"/"onnx").
SOURCE_ATTR = "accel_source_names"


def torch_node_name(node) -> str:
    """The PyTorch name of an fx node of an exported program: the path of the innermost
    module whose ``forward`` calls it (``layer1.0.conv1``); for an op written in a
    container's own ``forward`` (a residual add, a flatten), that path and the op
    (``layer1.0.add``, ``flatten`` at the top)."""
    stack = node.meta.get("nn_module_stack") or {}
    path, kind = "", None
    if stack:
        path, kind = list(stack.values())[-1]
    module = getattr(kind, "__module__", None) if not isinstance(kind, str) else \
        kind.rsplit(".", 1)[0]
    leaf = bool(module) and module.startswith("torch.nn.modules") and \
        not module.startswith("torch.nn.modules.container")
    if path and leaf:
        return path
    op = _torch_op_name(node)
    return f"{path}.{op}" if path else op


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


def layer_name(composite: relax.Function) -> str:
    """The source name of an accelerator layer (a composite function): its operators' names
    compressed (:func:`compress`); empty where the module carries none."""
    return compress([name_of(call) or "" for call in function_calls(composite)])


def _bindings(function: relax.Function) -> List[relax.Binding]:
    return [b for block in function.body.blocks for b in block.bindings]


def _key(value, env: Mapping) -> Optional[tuple]:
    """What identifies a binding's value in the main before fusion: its op and the variables it
    reads (through ``env``); None for a value that reads no variable."""
    if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
        return ("getitem", env.get(value.tuple_value, value.tuple_value), value.index)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        reads = tuple(env.get(a, a) for a in value.args if isinstance(a, relax.Var))
        return (value.op.name, *reads) if reads else None
    return None


class _SiteNames:
    """Each composite call's own source names, found by following the merged module's data
    flow through the main before fusion (see :func:`name_call_sites`)."""

    def __init__(self, before: relax.Function):
        self.before: Dict[tuple, tuple] = {}
        for binding in _bindings(before):
            key = _key(binding.value, {})
            if key is not None:
                self.before.setdefault(key, (binding.var, name_of(binding.value)))

    def composite(self, function: relax.Function, args, env: Dict) -> tuple:
        """(the pre-fusion variable of its result, {its body's variable name: source name})."""
        inner = {p: env.get(a, a) for p, a in zip(function.params, args)}
        names = {}
        for binding in _bindings(function):
            key = _key(binding.value, inner)
            found = self.before.get(key) if key is not None else None
            if found is not None:
                inner[binding.var] = found[0]
                if found[1]:
                    names[binding.var.name] = found[1]
        return inner.get(function.body.body), names

    def external(self, function: relax.Function, args, corr: Dict) -> tuple:
        """(the pre-fusion variables of its result, {composite variable: names}) of one
        external function called with ``args``."""
        env = {p: corr.get(a, a) for p, a in zip(function.params, args)}
        composites, renamed = {}, {}
        for binding in _bindings(function):
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                env[binding.var], names = self.composite(composites[value.op], value.args, env)
                current = {b.var.name: name_of(b.value) for b in _bindings(composites[value.op])}
                if any(current.get(var) != name for var, name in names.items()):
                    renamed[value.op] = names
            elif isinstance(value, relax.TupleGetItem):
                inner = env.get(value.tuple_value)
                env[binding.var] = inner[value.index] if isinstance(inner, tuple) else None
        result = function.body.body
        if isinstance(result, relax.Tuple):
            return tuple(env.get(f) for f in result.fields), renamed
        return env.get(result), renamed


def name_call_sites(merged: tvm.IRModule, before: relax.Function) -> tvm.IRModule:
    """``merged`` (the partitioned module) with each composite named by the source operators
    it replaced. FuseOpsByPattern gives structurally equal matches one function (TVM's
    BlockBuilder deduplicates them, spans are not compared), and the merge then copies it
    into each external function with the first match's names: the standalone ReLU after
    every residual add of a ResNet named as the first block's. ``before``: the main before
    fusion, whose calls carry their own names."""
    sites = _SiteNames(before)
    corr: Dict[relax.Var, object] = {}
    updates = {}
    for binding in _bindings(merged["main"]):
        value = binding.value
        function = merged[value.op] if isinstance(value, relax.Call) and \
            isinstance(value.op, tvm.ir.GlobalVar) else None
        if isinstance(function, relax.Function) and function.attrs is not None and \
                "Codegen" in function.attrs:
            corr[binding.var], renamed = sites.external(function, value.args, corr)
            if renamed:
                updates[value.op] = (function, renamed)
            continue
        key = _key(value, corr)
        found = sites.before.get(key) if key is not None else None
        if found is not None:
            corr[binding.var] = found[0]
        elif isinstance(value, relax.TupleGetItem) and \
                isinstance(corr.get(value.tuple_value), tuple):
            corr[binding.var] = corr[value.tuple_value][value.index]
    if not updates:
        return merged
    merged = merged.clone() if hasattr(merged, "clone") else merged
    for gv, (function, renamed) in updates.items():
        merged[gv] = _Renamed(renamed).visit_expr(function)
    return merged


@relax.expr_functor.mutator
class _Renamed(relax.PyExprMutator):
    """An external function with some of its composite functions' calls renamed."""

    def __init__(self, renamed):
        super().__init__()
        self.renamed = renamed

    def visit_var_binding_(self, binding):
        names = self.renamed.get(binding.var)
        if names is not None:
            self.builder_.emit_normalized(relax.VarBinding(
                binding.var, name_bindings(binding.value, names)))
            return
        super().visit_var_binding_(binding)
