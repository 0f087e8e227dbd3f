"""Shape arithmetic of an ONNX graph folded to constants before TVM imports it.

Exporters compute reshape targets, ranges and flatten sizes from the input's shape at run time
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` from torch's TorchScript exporter, Paddle's
``Concat(Cast(Slice(Cast(Shape(x)))), [-1])``, a ``Range`` up to a dimension). With the static
input shapes the project requires, every such value is a constant; left to TVM's importer it is
not: a computed ``Range`` becomes ``match_cast`` bindings and symbolic dimensions in ``main``
(which ``MergeCompositeFunctions`` cannot take), and a Paddle flatten fails inside the importer.

:func:`fold_shape_arithmetic` evaluates those nodes once, with ONNX's reference evaluator, and
replaces them by ``Constant`` nodes. It folds a node when all its inputs are known constants and

* it is a ``Shape`` or ``Size`` of a tensor whose shape ONNX's shape inference gives statically, or
* an input derives from such a shape (directly or through other folded nodes), or
* its inputs and outputs are all integers or booleans, its inputs small (index arithmetic on
  constants).

Float arithmetic on weights is left alone (batch norm stays batch norm, a ``DequantizeLinear`` of
a constant stays one), as are nodes with subgraphs, nodes of other domains and random ops. The
folded values become ``Constant`` nodes, not initializers, so ``keep_params_in_input`` returns
the same parameters; initializers only the folded nodes read are dropped.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import numpy as np

__all__ = ["fold_shape_arithmetic"]

# A folded value larger than this stays computed at run time: a constant of it would bloat the
# model (a ConstantOfShape of a feature map), and shape arithmetic is never this large.
_MAX_ELEMENTS = 1 << 20
# Index arithmetic on constants is folded only on tensors this small: an integer weight (of an
# int8 or QDQ model) is not index arithmetic, and stays where the model put it.
_MAX_INDEX_ELEMENTS = 1024
_MAX_ROUNDS = 16  # each round folds what the previous one made static; real graphs need 2-3


def _static_shapes(model) -> Dict[str, Tuple[int, ...]]:
    """Tensor name -> its shape, for every tensor whose shape shape inference makes static."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an op shape inference does not know: use what the graph states
        inferred = model
    graph = inferred.graph
    shapes: Dict[str, Tuple[int, ...]] = {}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        ttype = info.type.tensor_type
        if not ttype.HasField("shape"):
            continue
        dims = ttype.shape.dim
        if all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
            shapes[info.name] = tuple(int(d.dim_value) for d in dims)
    for init in graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def _integral(array: np.ndarray) -> bool:
    return array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer)


def _has_subgraph(node) -> bool:
    import onnx

    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)


def _shape_value(node, shape: Tuple[int, ...]) -> np.ndarray:
    """Shape (with its opset-15 start / end) or Size of a tensor of static ``shape``."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    # ONNX's start / end clamp like Python's slice bounds, negative ones counting from the end.
    return np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], dtype=np.int64)


def _evaluate(node, values: List[np.ndarray], opsets) -> Optional[List[np.ndarray]]:
    """The node's outputs on constant inputs, by ONNX's reference evaluator; None if it fails."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
    single = helper.make_node(node.op_type, names, [f"out{i}" for i in range(len(node.output))],
                              domain=node.domain)
    single.attribute.extend(node.attribute)
    feeds = {name: value for name, value in zip(names, values) if name}
    graph = helper.make_graph(
        [single], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [helper.make_value_info(o, onnx.TypeProto()) for o in single.output])
    try:
        outputs = ReferenceEvaluator(helper.make_model(graph, opset_imports=opsets)).run(
            None, feeds)
    except Exception:  # the importer will see the node as it is, and report it if it fails
        return None
    if not all(isinstance(o, (np.ndarray, np.generic)) for o in outputs):
        return None  # a sequence or an optional is not a tensor constant
    return [np.asarray(o) for o in outputs]


def _fold_round(model) -> int:
    """One pass over the graph in order; returns how many nodes it folded."""
    from onnx import helper, numpy_helper

    graph = model.graph
    shapes = _static_shapes(model)
    constants: Dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i)
                                        for i in graph.initializer}
    derived: Set[str] = set()  # values computed from a static shape
    folded: List[int] = []
    graph_outputs = {o.name for o in graph.output}
    for index, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or _has_subgraph(node):
            continue
        if node.op_type == "Constant":
            value = _evaluate(node, [], model.opset_import)
            if value is not None:
                constants[node.output[0]] = value[0]
            continue
        if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
            outputs = [_shape_value(node, shapes[node.input[0]])]
            from_shape = True
        else:
            inputs = [name for name in node.input if name]
            if node.op_type.startswith("Random") or not all(n in constants for n in inputs):
                continue
            from_shape = any(n in derived for n in inputs)
            if not from_shape and not all(_integral(constants[n]) and
                                          constants[n].size <= _MAX_INDEX_ELEMENTS
                                          for n in inputs):
                continue
            outputs = _evaluate(node, [constants[n] if n else None for n in node.input],
                                model.opset_import)
            if outputs is None or len(outputs) != len(node.output) or \
                    any(o.size > _MAX_ELEMENTS for o in outputs):
                continue
            if not from_shape and not all(_integral(o) for o in outputs):
                continue
        for name, value in zip(node.output, outputs):
            if name:
                constants[name] = value
                derived.add(name)
        if not graph_outputs.intersection(node.output):
            folded.append(index)
    if not folded:
        return 0
    _replace(model, set(folded), constants)
    return len(folded)


def _replace(model, folded: Set[int], constants: Dict[str, np.ndarray]) -> None:
    """Drop the folded nodes; what the rest of the graph reads of them becomes Constant nodes,
    placed where the first folded node was so the graph stays in topological order."""
    from onnx import helper, numpy_helper

    graph = model.graph
    nodes = list(graph.node)
    kept = [n for i, n in enumerate(nodes) if i not in folded]
    read = {name for n in kept for name in _reads(n)} | {o.name for o in graph.output}
    produced = [name for i in sorted(folded) for name in nodes[i].output if name in read]
    new = [helper.make_node("Constant", [], [name], name=f"{name}_folded",
                            value=numpy_helper.from_array(constants[name], name))
           for name in produced]
    # Initializers that only folded nodes read are dead now (and would otherwise become
    # parameters of main with keep_params_in_input).
    before = {name for n in nodes for name in _reads(n)}
    dead = [init for init in graph.initializer if init.name in before and init.name not in read]
    for init in dead:
        graph.initializer.remove(init)
    first = min(folded)
    ordered = [n for i, n in enumerate(nodes) if i < first and i not in folded] + new + \
        [n for i, n in enumerate(nodes) if i > first and i not in folded]
    del graph.node[:]
    graph.node.extend(_live(ordered, {o.name for o in graph.output}))


def _reads(node) -> Set[str]:
    """The names a node reads: its inputs, and the outer names its subgraphs (If, Loop) use."""
    names = set(node.input)
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
        for graph in graphs:
            for inner in graph.node:
                names |= _reads(inner)
    return names


def _live(nodes, graph_outputs: Set[str]):
    """The nodes some other node or a graph output reads (ONNX ops have no side effects)."""
    live: List = []
    needed = set(graph_outputs)
    for node in reversed(nodes):
        if needed.intersection(node.output):
            live.append(node)
            needed.update(_reads(node))
    return list(reversed(live))


def fold_shape_arithmetic(model):
    """Fold the shape arithmetic of ``model`` (an ``onnx.ModelProto``, not modified).

    Returns
    -------
    tuple[onnx.ModelProto, int]
        The folded copy and how many nodes were folded (0: the copy is unchanged).
    """
    import onnx

    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    total = 0
    for _ in range(_MAX_ROUNDS):
        count = _fold_round(folded)
        if not count:
            break
        total += count
    return folded, total
