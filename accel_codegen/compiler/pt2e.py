"""Models that arrive quantised from PyTorch: a PT2E model (what ``convert_pt2e`` of
torchao's ``torchao.quantization.pt2e``, formerly ``torch.ao.quantization``, returns: a
``torch.fx.GraphModule`` whose tensors pass through ``quantized_decomposed``
quantize / dequantize pairs) keeps its own scales, as a QDQ ONNX model does
(:mod:`accel_codegen.compiler.qdq`, whose scheme this follows).

TVM's PyTorch importer has no converter for the ``quantized_decomposed`` ops, so
:func:`strip_pt2e` (called by :func:`accel_codegen.frontend.from_pytorch` before
``torch.export``) takes the pairs out of the GraphModule and leaves a float graph that
computes what the quantised graph computes before its roundings:

* a dequantize of a constant (a weight's int8 codes, folded by ``convert_pt2e``; a bias'
  int32 codes) becomes the float constant torch's own dequantize gives (a buffer);
  a quantize of a constant (``fold_quantize=False``) is evaluated first;
* an activation's ``quantize_per_tensor`` and the ``dequantize_per_tensor`` nodes reading
  it become nothing (the float tensor itself), a ReLU where the quantisation's lowest code
  is its zero point and the tensor can be negative, or a clamp to the codes' range where a
  conv's (or an element-wise op's) output is quantised before an element-wise op that the
  accelerator's chain would fuse without that rounding; the tensor's (scale, zero point) is
  recorded in a :class:`~accel_codegen.compiler.qdq.QdqAnnotations` under the fx node's
  name (uint8 zero points shifted by -128 into the accelerator's int8 codes).

The annotations are then keyed to the accelerator's runs exactly as a QDQ ONNX model's
are: the stripped GraphModule runs once in torch on the seeded matching input
(:func:`accel_codegen.compiler.qdq.matching_inputs`) and each annotated tensor keeps its
fingerprint; an int8 ``partition_for_accel`` without calibration matches them
(:func:`accel_codegen.flows.qdq.qdq_calibration`).

What has no accelerator form raises AccelUnsupportedError naming the fx node: an activation
quantised per channel, to 16 bits or to a narrower range than its type's (the accelerator's
int8 tensors saturate at -128 and 127), with a scale computed at run time (dynamic
quantisation: ``choose_qparams``), a quantised tensor read by anything but a dequantize,
torchao's affine quantize ops (``quantize_affine``: block granularity), a dequantize of a
graph input.

``torch`` is imported inside the functions that need it.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from ..errors import AccelUnsupportedError
from .qdq import QdqAnnotations, fingerprint_positions, matching_inputs

#: The torch library of PT2E's quantize / dequantize ops.
NAMESPACE = "quantized_decomposed"
#: Ops of other namespaces that quantise (torchao's affine quantisation): named, refused.
_AFFINE = ("quantize_affine", "dequantize_affine", "choose_qparams_affine")

#: aten ops whose result an accelerator chain carries on with, and the element-wise ops it
#: fuses after them (as :data:`accel_codegen.compiler.qdq._CHAIN_OPS` for ONNX).
_CHAIN_OPS = ("conv2d", "convolution", "linear", "addmm", "matmul", "mm", "add", "sub", "mul",
              "batch_norm", "_native_batch_norm_legit_no_training")
_FUSED_AFTER = ("add", "add_", "sub", "sub_", "mul", "mul_", "rsub")
#: aten ops whose output is non-negative wherever its data inputs are.
_KEEPS_SIGN = ("max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d",
               "mean", "amax", "view", "reshape", "flatten", "squeeze", "unsqueeze",
               "permute", "transpose", "contiguous", "clone", "cat", "concat", "slice",
               "split", "split_with_sizes", "getitem", "upsample_nearest2d", "dropout",
               "pixel_shuffle", "pixel_unshuffle", "_unsafe_view", "expand")
_NON_NEGATIVE = ("relu", "relu_", "relu6", "sigmoid", "hardsigmoid", "softmax", "_softmax",
                 "exp")
_DTYPES = {"torch.int8": ("int8", -128, 127, 0), "torch.uint8": ("uint8", 0, 255, -128)}


def _aten_name(node) -> Optional[str]:
    """``conv2d`` of ``aten.conv2d.default``, ``getitem`` of ``operator.getitem``."""
    if node.op != "call_function":
        return None
    target = node.target
    name = getattr(target, "_opname", None) or getattr(target, "__name__", None)
    return None if name is None else str(name)


def quant_op(node) -> Optional[str]:
    """``quantize_per_tensor``, ``dequantize_per_channel``, ... for a PT2E quantize /
    dequantize (or other ``quantized_decomposed``) call; ``quantize_affine``, ... for
    torchao's affine ones; None for any other node."""
    if node.op != "call_function":
        return None
    namespace = getattr(node.target, "namespace", None)
    name = getattr(node.target, "_opname", None)
    if namespace == NAMESPACE or (name in _AFFINE):
        return str(name)
    return None


def has_pt2e(model) -> bool:
    """Whether ``model`` is a GraphModule with PT2E quantize / dequantize nodes."""
    import torch

    return isinstance(model, torch.fx.GraphModule) and \
        any(quant_op(n) is not None for n in model.graph.nodes)


def _node_name(node) -> str:
    return f"node '{node.name}' ({node.target})" if node.op == "call_function" else \
        f"node '{node.name}' ({node.op})"


class _Stripper:
    """One pass of :func:`strip_pt2e` over a GraphModule's graph."""

    def __init__(self, module):
        self.module, self.graph = module, module.graph
        self.annotations = QdqAnnotations()
        self.input_ranges: Dict[str, Tuple[float, int, str]] = {}
        self.non_negative: set = set()
        self.constants: Dict[str, object] = {}
        self.buffers = 0

    # -- constants --------------------------------------------------------------------------
    def constant(self, value):
        """The tensor ``value`` (an fx node or a Python value) always is, or None."""
        import torch

        if not isinstance(value, torch.fx.Node):
            return value
        if value.name in self.constants:
            return self.constants[value.name]
        result = None
        if value.op == "get_attr":
            result = self.module
            for part in str(value.target).split("."):
                result = getattr(result, part)
        elif getattr(value.target, "namespace", None) == NAMESPACE:
            args = [self.constant(a) for a in value.args]
            computed = any(a is None and given is not None for a, given in zip(args, value.args))
            if not computed and isinstance(args[0], torch.Tensor):
                with torch.no_grad():
                    result = value.target(*args, **dict(value.kwargs))
        self.constants[value.name] = result
        return result

    def float_constant(self, node, value) -> None:
        """``node`` (a dequantize of a constant) replaced by a buffer holding ``value``."""
        import torch

        name = f"_accel_pt2e_{self.buffers}"
        self.buffers += 1
        self.module.register_buffer(name, value.detach().to(torch.float32).contiguous())
        with self.graph.inserting_before(node):
            replacement = self.graph.get_attr(name)
        replacement.meta.update(node.meta)
        node.replace_all_uses_with(replacement)
        self.graph.erase_node(node)
        weights_of = [u for u in replacement.users if _aten_name(u) in
                      ("conv2d", "convolution", "linear", "conv_transpose2d")
                      and len(u.args) > 1 and u.args[1] is replacement]
        if weights_of:
            self.annotations.weights[name] = "per-channel" if "per_channel" in \
                str(node.target) else "per-tensor"

    # -- activations ------------------------------------------------------------------------
    def quantization(self, node) -> Tuple[Tuple[float, int, str], int, int]:
        """(scale, zero point in the project's int8 codes, type), the lowest code and the
        zero point in the node's own codes, of an activation's quantize or dequantize."""
        import torch

        op = quant_op(node)
        if op != "quantize_per_tensor" and op != "dequantize_per_tensor":
            per_channel = "per_channel" in op or "per_token" in op
            raise AccelUnsupportedError(
                f"{_node_name(node)} quantises an activation "
                + ("per channel: the accelerator's int8 tensors have one scale and zero point"
                   if per_channel else "in a form the accelerator's int8 has no copy of"))
        args = list(node.args) + [None] * 6
        scale, zero, low, high, dtype = (self.constant(a) for a in args[1:6])
        computed = (isinstance(scale, torch.Tensor) or isinstance(zero, torch.Tensor)) and (
            not isinstance(args[1], torch.fx.Node) or self.constant(args[1]) is None or
            (isinstance(args[2], torch.fx.Node) and self.constant(args[2]) is None))
        if computed or scale is None or zero is None:
            raise AccelUnsupportedError(
                f"{_node_name(node)}: its scale is computed at run time (dynamic "
                "quantisation): the accelerator's int8 needs a scale at build time")
        scale = float(np.asarray(scale, np.float64).reshape(-1)[0]) if not \
            isinstance(scale, float) else scale
        zero = int(np.asarray(zero).reshape(-1)[0]) if not isinstance(zero, int) else zero
        if str(dtype) not in _DTYPES:
            raise AccelUnsupportedError(
                f"{_node_name(node)} quantises to {dtype}: the accelerator's int8 tensors "
                "are int8 or uint8 (shifted)")
        kind, lowest, highest, shift = _DTYPES[str(dtype)]
        if (int(low), int(high)) != (lowest, highest):
            raise AccelUnsupportedError(
                f"{_node_name(node)} quantises to codes {int(low)}..{int(high)} of {kind}: "
                f"the accelerator's int8 tensors saturate at the type's {lowest}..{highest}")
        return (float(np.float32(scale)), zero + shift, kind), lowest, zero

    def activation(self, node) -> None:
        """A quantize of a computed tensor and the dequantize nodes reading it."""
        import torch

        quant, lowest, zero = self.quantization(node)
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            raise AccelUnsupportedError(f"{_node_name(node)} quantises no tensor")
        readers = list(node.users)
        for user in readers:
            if user.op == "output":
                raise AccelUnsupportedError(f"{_node_name(node)}: the graph's output is the "
                                            "int8 tensor itself, not a dequantised one")
            if quant_op(user) is None or not quant_op(user).startswith("dequantize"):
                raise AccelUnsupportedError(
                    f"{_node_name(node)}: its int8 output is read by {_node_name(user)}, "
                    "not by a dequantize (a quantised operator: give convert_pt2e's "
                    "reference form)")
            if self.quantization(user)[0] != quant:
                raise AccelUnsupportedError(
                    f"{_node_name(user)} dequantises {_node_name(node)}'s output with "
                    "another scale or zero point")
        clamps = zero == lowest and source.name not in self.non_negative
        if source.op == "placeholder":
            self.input_ranges.setdefault(source.name, quant)
        for user in readers:
            self.replace_dequantize(node, user, quant, clamps)
        if not clamps:  # the float tensor itself is what was quantised
            self.annotations.tensors.setdefault(source.name, quant)
        self.graph.erase_node(node)

    def replace_dequantize(self, node, user, quant, clamps) -> None:
        """A dequantize reading an activation's quantize: the float tensor itself, a ReLU
        or a clamp to the codes' range (the module's docstring says which when)."""
        import torch

        source = node.args[0]
        scale, zero, kind = quant  # zero in the project's int8 codes
        fused = any(_aten_name(u) in _FUSED_AFTER for u in user.users)
        replacement = source
        with self.graph.inserting_before(user):
            if _aten_name(source) in _CHAIN_OPS and fused:
                bounds = [float(np.float32(scale) * np.float32(code - zero))
                          for code in (-128, 127)]
                replacement = self.graph.call_function(torch.ops.aten.clamp.default,
                                                       (source, *bounds))
                if bounds[0] >= 0:
                    self.non_negative.add(replacement.name)
            elif clamps:
                replacement = self.graph.call_function(torch.ops.aten.relu.default, (source,))
                self.non_negative.add(replacement.name)
        if replacement is not source:
            replacement.meta.update(user.meta)
            self.annotations.tensors[replacement.name] = quant
        user.replace_all_uses_with(replacement)
        self.graph.erase_node(user)

    # -- the pass ---------------------------------------------------------------------------
    def visit(self, node) -> None:
        op = quant_op(node)
        if op is None:
            self.track_sign(node)
            return
        if op in _AFFINE:
            raise AccelUnsupportedError(
                f"{_node_name(node)}: torchao's affine quantisation (block granularity) has "
                "no accelerator form: quantise with a per-tensor or per-channel quantizer")
        if op.startswith("dequantize") and self.is_constant(node.args[0]):
            value = self.constant(node)
            if value is None:
                raise AccelUnsupportedError(f"{_node_name(node)}: its scale is not a constant")
            self.float_constant(node, value)
        elif op.startswith("quantize") and self.is_constant(node.args[0]):
            pass  # a weight's quantize: evaluated by the dequantize reading it
        elif op.startswith("quantize"):
            self.activation(node)
        elif op.startswith("dequantize"):
            raise AccelUnsupportedError(
                f"{_node_name(node)} dequantises '{getattr(node.args[0], 'name', node.args[0])}'"
                ", which is not a constant nor a quantize's output (an int8 graph input?): "
                "give the model float inputs")
        else:
            raise AccelUnsupportedError(
                f"{_node_name(node)}: {op} (dynamic quantisation) has no accelerator form: "
                "the accelerator's int8 needs every scale at build time")

    def is_constant(self, value) -> bool:
        import torch

        if not isinstance(value, torch.fx.Node):
            return False
        if value.op == "get_attr":
            return True
        return quant_op(value) is not None and all(
            self.is_constant(a) for a in value.args[:1])

    def track_sign(self, node) -> None:
        name = _aten_name(node)
        if name is None:
            return
        data = [a for a in (node.args[0] if name in ("cat", "concat") and node.args else
                            node.args[:1]) if hasattr(a, "name")]
        low = node.args[1] if name in ("clamp", "clamp_", "hardtanh", "hardtanh_") and \
            len(node.args) > 1 else None
        if name in _NON_NEGATIVE or (isinstance(low, (int, float)) and low >= 0) or \
                (name in _KEEPS_SIGN and data and all(a.name in self.non_negative
                                                      for a in data)):
            self.non_negative.add(node.name)

    def run(self):
        for node in list(self.graph.nodes):
            if node in self.graph.nodes:  # a visit may have erased it
                self.visit(node)
        self.graph.eliminate_dead_code()
        for node in self.graph.nodes:
            if node.op == "call_function" and quant_op(node) is not None:
                raise AccelUnsupportedError(f"{_node_name(node)} is left after the quantize / "
                                            "dequantize pairs were taken out")
        # the root's buffers no node reads now (the int8 codes, the scales): torch.export
        # would lift them as constants of the program
        used = {str(n.target) for n in self.graph.nodes if n.op == "get_attr"}
        for name, _ in list(self.module.named_buffers(recurse=False)):
            if name not in used:
                delattr(self.module, name)
        self.module.recompile()


def strip_pt2e(module, example_inputs: tuple):
    """The float GraphModule of a PT2E model and what its pairs said (see the module's
    docstring). ``module`` is copied, not changed. ``example_inputs``: one tensor per input
    (their shapes are the matching input's). Returns ``(GraphModule, QdqAnnotations)``."""
    import copy

    import torch

    stripped = copy.deepcopy(module)
    stripper = _Stripper(stripped)
    stripper.run()
    annotations = stripper.annotations
    names = [n.name for n in stripped.graph.nodes if n.op == "placeholder"]
    if len(names) != len(example_inputs):
        raise AccelUnsupportedError(f"the GraphModule has {len(names)} inputs "
                                    f"({', '.join(names)}), the example {len(example_inputs)}")
    for name, example in zip(names, example_inputs):
        quant = stripper.input_ranges.get(name)
        lo, hi = (0.0, 0.0) if quant is None else \
            ((-128 - quant[1]) * quant[0], (127 - quant[1]) * quant[0])
        annotations.inputs.append((name, [int(d) for d in example.shape], lo, hi))
    _fingerprint(stripped, annotations)
    return stripped, annotations


def _fingerprint(module, annotations: QdqAnnotations) -> None:
    """Run the float GraphModule in torch on the matching input and keep each annotated
    tensor's size and values at fixed positions."""
    import torch

    wanted = set(annotations.tensors)
    values: Dict[str, np.ndarray] = {}

    class Recording(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node.name in wanted and isinstance(result, torch.Tensor):
                values[node.name] = result.detach().to(torch.float32).numpy().reshape(-1)
            return result

    inputs = [torch.from_numpy(x) for x in matching_inputs(annotations)]
    with torch.no_grad():
        Recording(module).run(*inputs)
    missing = sorted(wanted - set(values))
    if missing:
        raise AccelUnsupportedError(f"the annotated tensors {', '.join(missing)} are not "
                                    "computed as tensors by the GraphModule")
    for name, flat in values.items():
        where = fingerprint_positions(flat.size)
        annotations.fingerprints[name] = (int(flat.size), [int(i) for i in where],
                                          [float(v) for v in flat[where]])
