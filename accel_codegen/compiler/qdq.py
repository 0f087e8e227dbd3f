"""Models that arrive quantised: ONNX graphs with QuantizeLinear / DequantizeLinear pairs (what
ONNX Runtime's ``quantize_static`` writes in QDQ format, and what other toolchains export)
keep their own scales.

On import (:func:`strip_qdq`, called by :func:`accel_codegen.frontend.from_onnx`) the pairs
are taken out and the graph becomes a float graph that computes what the QDQ graph computes
before its roundings:

* a DequantizeLinear of a constant (a weight, an int32 bias) becomes the constant
  ``(q - zero) * scale`` in float32, as ONNX Runtime dequantises it: symmetric int8 weights
  are then exactly ``scale * q``, and the project's weight quantisation finds those codes
  again where the scales are per output channel (``quantize_weights``: amax / 127, and
  ``quantize_static``'s symmetric weights reach +-127 in every channel);
* a QuantizeLinear of a constant (QAT exports fake-quantise float weights in the graph) is
  folded to its codes first;
* an activation's QuantizeLinear and the DequantizeLinear(s) reading it become one
  Identity, or one Relu where the quantisation's lowest code is 0 and the tensor can be
  negative (``quantize_static`` removes a Relu or Clip after a Conv and lets the unsigned
  range clamp instead), or a Clip to the codes' range where a Conv's (or an element-wise
  op's) output is quantised before an element-wise op that the accelerator's chain would
  fuse without that rounding (the Clip ends the chain there, so the next layer reads the
  rounded, saturated tensor, as ONNX Runtime does); the tensor's (scale, zero point) is
  recorded under the dequantised tensor's name, as the project's
  :class:`~accel_codegen.quantization.TensorQuant` (uint8 zero points shifted by -128: the
  same values, codes 128 lower).

The project's activation scales are keyed by accelerator run (``f0.3``, op index), not by ONNX
tensor, and TVM's importer keeps no tensor names. So import also runs the float graph once in
ONNX Runtime on a seeded input inside the input's quantised range and keeps a fingerprint of
every annotated tensor (its size and values at fixed positions); at partition time
(:func:`accel_codegen.flows.qdq.qdq_calibration`) the fp32 build of the partition runs the same
input under the simulator's observer, and each run tensor takes the quantisation of the
annotated tensor whose fingerprint it reproduces. A tensor the QDQ graph does not quantise
(inside a fused chain, where no int8 code needs one) keeps the range it showed on that input.
The result is a :class:`~accel_codegen.quantization.Calibration` with method ``"qdq"``, no bias
correction and no equalisation (both would move the weights off the model's codes).

What the accelerator's int8 does not reproduce bit for bit (docs/ptq.md, "Models that arrive
quantised"): rounding at ties (the converters round half away, ONNX Runtime half to even),
int16 multipliers (2^-15 relative), a local pool's output (kept at its input's scale, where
the QDQ graph may take another; a global mean requantised finer becomes a depthwise conv:
:func:`_means_as_convolutions`), and the output channels of a weight quantised per tensor with
a zero point whose codes minus the zero point go beyond -128..127 (re-quantised, with a
warning naming the initializer: :func:`_weight_beyond_int8`; the other channels keep the
model's codes).
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..errors import AccelUnsupportedError
from ..quantization.encoding import WEIGHT_MAX, WEIGHT_MIN

#: The module attribute that carries a stripped QDQ graph's annotations to the partitioner.
QDQ_ATTR = "accel_qdq"
#: ``Calibration.method`` of a calibration taken from a QDQ model's own scales.
QDQ_METHOD = "qdq"
#: Values kept per annotated tensor to recognise it among the runs' tensors.
FINGERPRINT_POINTS = 64
#: The seed of the input both ONNX Runtime and the fp32 build run to match tensors.
MATCH_SEED = 20261129
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
_ACTIVATION_TYPES = {2: ("uint8", 0, 255, -128), 3: ("int8", -128, 127, 0)}  # onnx dtype enum
# -> (name, lowest code, highest code, shift of the zero point into the project's int8)


@dataclasses.dataclass
class QdqAnnotations:
    """What a stripped QDQ graph said about its tensors."""

    # dequantised tensor name -> (scale, zero point in the project's int8 codes, ONNX type)
    tensors: Dict[str, Tuple[float, int, str]] = dataclasses.field(default_factory=dict)
    # constant weight name -> "per-channel" / "per-tensor" (what its scales were)
    weights: Dict[str, str] = dataclasses.field(default_factory=dict)
    # input name -> shape, and the range the seeded matching input is drawn from
    inputs: List[Tuple[str, List[int], float, float]] = dataclasses.field(default_factory=list)
    # tensor name -> (size, positions, values) of the float graph on the matching input
    fingerprints: Dict[str, Tuple[int, List[int], List[float]]] = dataclasses.field(
        default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "QdqAnnotations":
        data = json.loads(text)
        return cls({k: (float(s), int(z), str(t)) for k, (s, z, t) in data["tensors"].items()},
                   dict(data["weights"]),
                   [(n, list(s), float(lo), float(hi)) for n, s, lo, hi in data["inputs"]],
                   {k: (int(n), list(p), list(v)) for k, (n, p, v) in
                    data["fingerprints"].items()})


#: Ops whose result an accelerator chain carries on with, and the element-wise ops it fuses
#: after them: a tensor the QDQ graph quantises between the two keeps its saturation as a
#: Clip, which also ends the chain there (the SDP clips, then a layer of its own adds).
_CHAIN_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Add", "Sub",
              "Mul")
_FUSED_AFTER = ("Add", "Sub", "Mul", "Sum")


def _rounded_before_elementwise(producer, readers) -> bool:
    return producer is not None and producer.op_type in _CHAIN_OPS and \
        any(r.op_type in _FUSED_AFTER for r in readers)


def has_qdq(model) -> bool:
    """Whether the ONNX model has QuantizeLinear or DequantizeLinear nodes."""
    return any(node.op_type in _QDQ_OPS for node in model.graph.node)


def _node_name(node) -> str:
    return f"node '{node.name or node.output[0]}' ({node.op_type})"


def _attribute(node, name: str, default):
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _along_axis(node, ndim: int, scale: np.ndarray, zero: Optional[np.ndarray]):
    """A per-axis scale and zero point shaped to broadcast along the node's ``axis``."""
    if scale.size > 1 or (zero is not None and zero.size > 1):
        shape = [1] * ndim
        shape[_attribute(node, "axis", 1) % ndim] = -1
        scale = scale.reshape(shape)
        zero = None if zero is None else zero.reshape(shape)
    return scale, zero


def _dequantized(node, q: np.ndarray, scale: np.ndarray, zero: Optional[np.ndarray]):
    """DequantizeLinear of a constant, in float32 as ONNX Runtime computes it."""
    scale, zero = _along_axis(node, q.ndim, scale, zero)
    centred = q.astype(np.int64) - (0 if zero is None else zero.astype(np.int64))
    return (centred.astype(np.float32) * scale.astype(np.float32)).astype(np.float32)


def _quantized(node, value: np.ndarray, scale: np.ndarray, zero: Optional[np.ndarray]):
    """QuantizeLinear of a constant as ONNX defines it: round half to even, saturate."""
    dtype = np.dtype(np.uint8) if zero is None else zero.dtype
    if dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise AccelUnsupportedError(f"{_node_name(node)} quantises a constant to {dtype}: "
                                    "int8 or uint8 only")
    scale, zero = _along_axis(node, value.ndim, scale, zero)
    info = np.iinfo(dtype)
    codes = np.rint(value.astype(np.float32) / scale.astype(np.float32)) + \
        (0 if zero is None else zero.astype(np.int64))
    return np.clip(codes, info.min, info.max).astype(dtype)


def _output_channel_axis(reader) -> int:
    """The axis of a weight's output channels in ONNX's layout for the op reading it: Conv's
    [M, C/g, kH, kW] on 0, ConvTranspose's [C, M/g, kH, kW] and MatMul's [K, N] on 1, Gemm's
    B on 0 when it is transposed (transB) and on 1 otherwise."""
    if reader.op_type == "Gemm":
        return 0 if any(a.name == "transB" and a.i for a in reader.attribute) else 1
    return 0 if reader.op_type == "Conv" else 1


def _weight_beyond_int8(node, q: np.ndarray, scale: np.ndarray, zero: Optional[np.ndarray],
                        reader) -> Optional[str]:
    """Why a weight's codes have no int8 form, or None. NVDLA's CONV multiplies int8 weights
    without a zero point; a weight quantised per tensor with one, (q - zero) * scale, keeps
    the model's codes q - zero in every output channel where they lie within -128..127
    (``quantize_weights``; the CONV's weights are signed bytes: exact, what ONNX Runtime
    computes), but a channel with a code beyond (9 bits: a zero point far from the middle of
    the range) is re-quantised at its own
    amax / 127, one more rounding than the model's int8 runtime makes. Folding the zero
    point into the bias instead is not exact either: zero * the sum of the window's inputs
    depends on the input."""
    if scale.size != 1 or zero is None or not np.any(zero != 0) or q.ndim < 2:
        return None
    centred = q.astype(np.int64) - zero.astype(np.int64).reshape(-1)[0]
    by_channel = np.moveaxis(centred, _output_channel_axis(reader), 0)
    rows = by_channel.reshape(by_channel.shape[0], -1)
    highest, lowest = rows.max(axis=1), rows.min(axis=1)
    outside = (highest > WEIGHT_MAX) | (lowest < WEIGHT_MIN)
    beyond = int(np.count_nonzero(outside))
    if not beyond:
        return None
    name = node.input[0]
    reach = int(highest[outside].max()) if np.any(highest[outside] > WEIGHT_MAX) else \
        int(lowest[outside].min())
    return (f"initializer '{name}' (dequantised by {_node_name(node)}, the weights of "
            f"{_node_name(reader)}) is quantised per tensor with zero point "
            f"{int(zero.reshape(-1)[0])}: in {beyond} of its {len(rows)} output "
            f"channels a code minus the zero point reaches {reach}, beyond "
            "int8's -128..127 (NVDLA's CONV has no weight zero point, and folding it into the "
            "bias is not exact: zero x the sum of each window's inputs), so those channels "
            "are re-quantised on their own (amax / 127), one rounding more than the model's "
            "int8 runtime makes; the others keep the model's codes. Quantise weights "
            "symmetric (WeightSymmetric=True) or per channel for the model's codes "
            "everywhere")


def strip_qdq(model, strict: bool = False):
    """The float graph of a QDQ model and what its pairs said (see the module's docstring).

    Returns ``(model, QdqAnnotations)``; ``model`` is a new ``ModelProto``. Raises
    AccelUnsupportedError, naming the node, for what the project's int8 has no form of:
    activations quantised per axis or to 16 bits, a quantised tensor read by anything but a
    DequantizeLinear, a DequantizeLinear of a graph input, and a QuantizeLinear whose readers
    dequantise it with other parameters. A weight quantised per tensor with a zero point
    whose codes minus the zero point go beyond int8's -128..127 in some output channels
    (:func:`_weight_beyond_int8`): those channels' codes have no int8 form, so they are
    re-quantised; a warning names the initializer, or with ``strict`` an
    AccelUnsupportedError does.
    """
    import onnx

    stripper = _QdqStripper(onnx.ModelProto.FromString(model.SerializeToString()), strict)
    for node in stripper.graph.node:
        stripper.visit(node)
    return stripper.finish()


class _QdqStripper:
    """One pass of :func:`strip_qdq` over a graph: each Quantize/DequantizeLinear visited is
    removed or replaced (``replaced``), and what it said recorded (``annotations``)."""

    def __init__(self, model, strict: bool = False):
        from onnx import numpy_helper

        self.model, self.graph, self.strict = model, model.graph, strict
        self.constants = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}
        for node in self.graph.node:  # Constant nodes hold scales and zero points too
            if node.op_type == "Constant" and node.output:
                value = _attribute(node, "value", None)
                if value is not None:
                    self.constants[node.output[0]] = numpy_helper.to_array(value)
        self.readers: Dict[str, list] = {}
        self.producers = {}
        for node in self.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
            for name in node.output:
                self.producers[name] = node
        self.annotations = QdqAnnotations()
        self.input_ranges = {}  # tensor -> the quantisation a QuantizeLinear reading it gives
        self.replaced = {}  # id(node) -> replacement node or None (removed)
        self.new_constants = {}

    def parameters(self, node):
        scale = self.constants.get(node.input[1]) if len(node.input) > 1 else None
        zero = self.constants.get(node.input[2]) \
            if len(node.input) > 2 and node.input[2] else None
        if scale is None:
            raise AccelUnsupportedError(f"{_node_name(node)}: its scale "
                                        f"'{node.input[1]}' is not a constant" if len(node.input) > 1
                                        else "input is missing")
        return scale, zero

    def visit(self, node) -> None:
        if node.op_type == "DequantizeLinear" and node.input[0] in self.constants:
            self.dequantized_constant(node)
        elif node.op_type == "QuantizeLinear" and node.input[0] in self.constants:
            # a float weight fake-quantised in the graph (QAT exports): its codes are a
            # constant that the DequantizeLinear reading it turns back into scale * q
            scale, zero = self.parameters(node)
            self.constants[node.output[0]] = _quantized(node, self.constants[node.input[0]],
                                                        scale, zero)
            self.replaced[id(node)] = None
        elif node.op_type == "QuantizeLinear":
            self.quantized_activation(node)
        elif node.op_type == "DequantizeLinear" and id(node) not in self.replaced:
            source = self.producers.get(node.input[0])
            if source is None or source.op_type != "QuantizeLinear":
                raise AccelUnsupportedError(
                    f"{_node_name(node)} dequantises '{node.input[0]}', which is not a "
                    "constant nor a QuantizeLinear's output (an int8 graph input?): give the "
                    "model float inputs")

    def dequantized_constant(self, node) -> None:
        """A DequantizeLinear of a constant (a weight's codes): the float constant instead."""
        scale, zero = self.parameters(node)
        self.new_constants[node.output[0]] = _dequantized(node, self.constants[node.input[0]],
                                                          scale, zero)
        self.replaced[id(node)] = None
        weights_of = [r for r in self.readers.get(node.output[0], []) if r.op_type in
                      ("Conv", "ConvTranspose", "Gemm", "MatMul")
                      and len(r.input) > 1 and r.input[1] == node.output[0]]
        if weights_of:
            self.annotations.weights[node.output[0]] = "per-channel" if scale.size > 1 \
                else "per-tensor"
            beyond = _weight_beyond_int8(node, self.constants[node.input[0]], scale, zero,
                                         weights_of[0])
            if beyond is not None and self.strict:
                raise AccelUnsupportedError(beyond)
            if beyond is not None:
                warnings.warn(beyond, stacklevel=5)
                self.annotations.weights[node.output[0]] = "per-tensor, re-quantised"

    def quantized_activation(self, node) -> None:
        """A QuantizeLinear of a computed tensor: removed, and each DequantizeLinear reading it
        replaced by what the pair did to the float tensor (nothing, a ReLU or a clamp)."""
        import onnx

        scale, zero = self.parameters(node)
        if scale.size != 1 or (zero is not None and zero.size != 1):
            raise AccelUnsupportedError(
                f"{_node_name(node)} quantises an activation per axis: the accelerator's "
                "int8 tensors have one scale and zero point")
        elem = onnx.TensorProto.UINT8 if zero is None else \
            onnx.helper.np_dtype_to_tensor_dtype(zero.dtype)
        if elem not in _ACTIVATION_TYPES:
            raise AccelUnsupportedError(
                f"{_node_name(node)} quantises to {onnx.TensorProto.DataType.Name(elem)}: "
                "the accelerator's int8 tensors are int8 or uint8 (shifted)")
        kind, lowest, _, shift = _ACTIVATION_TYPES[elem]
        z = 0 if zero is None else int(zero.reshape(-1)[0])
        quant = (float(np.float32(scale.reshape(-1)[0])), z + shift, kind)
        source = node.input[0]
        producer = self.producers.get(source)
        clamps = z == lowest and not (producer is not None and producer.op_type == "Relu")
        if any(o == node.output[0] for o in (out.name for out in self.graph.output)):
            raise AccelUnsupportedError(f"{_node_name(node)}: the graph's output is the "
                                        "int8 tensor itself, not a dequantised one")
        for user in self.readers.get(node.output[0], []):
            self.replace_dequantize(node, user, elem, quant, z, clamps)
        if not clamps:  # the float tensor itself is what was quantised
            self.annotations.tensors.setdefault(source, quant)
        self.input_ranges.setdefault(source, quant)
        self.replaced[id(node)] = None

    def replace_dequantize(self, node, user, elem, quant, z, clamps) -> None:
        import onnx

        if user.op_type != "DequantizeLinear":
            raise AccelUnsupportedError(
                f"{_node_name(node)}: its int8 output is read by {_node_name(user)}, "
                "not by a DequantizeLinear (QOperator format: quantise in QDQ format)")
        u_scale, u_zero = self.parameters(user)
        if u_scale.size != 1 or not np.float32(u_scale.reshape(-1)[0]) == \
                np.float32(quant[0]) or (0 if u_zero is None else
                                         int(u_zero.reshape(-1)[0])) != z:
            raise AccelUnsupportedError(
                f"{_node_name(user)} dequantises {_node_name(node)}'s output with "
                "another scale or zero point")
        source = node.input[0]
        name = f"{user.name or user.output[0]}_qdq"
        if _rounded_before_elementwise(self.producers.get(source),
                                       self.readers.get(user.output[0], [])):
            bounds = [f"{name}_low", f"{name}_high"]
            _, low, high, _ = _ACTIVATION_TYPES[elem]
            for bound, code in zip(bounds, (low, high)):
                self.new_constants[bound] = np.asarray(np.float32(quant[0]) * (code - z),
                                                       np.float32)
            self.replaced[id(user)] = onnx.helper.make_node(
                "Clip", [source] + bounds, [user.output[0]], name=name)
        else:
            self.replaced[id(user)] = onnx.helper.make_node(
                "Relu" if clamps else "Identity", [source], [user.output[0]], name=name)
        self.annotations.tensors[user.output[0]] = quant

    def finish(self):
        """The graph without the removed nodes and unused constants, and the annotations."""
        from onnx import numpy_helper

        graph, annotations = self.graph, self.annotations
        # A DequantizeLinear may come before its QuantizeLinear in the node list only in an
        # unsorted graph; every reader of a QuantizeLinear was replaced by the visits.
        nodes = []
        for node in graph.node:
            if id(node) in self.replaced:
                if self.replaced[id(node)] is not None:
                    nodes.append(self.replaced[id(node)])
            else:
                nodes.append(node)
        del graph.node[:]
        graph.node.extend(_needed_clamps(nodes, {id(n) for n in self.replaced.values() if n},
                                         {**self.constants, **self.new_constants}))
        used = {name for node in nodes for name in node.input} | {o.name for o in graph.output}
        kept = [i for i in graph.initializer if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in
                                 self.new_constants.items() if name in used)
        annotations.tensors = {k: v for k, v in annotations.tensors.items()
                               if k in used or k in {o.name for o in graph.output}}
        _means_as_convolutions(self.model, annotations)
        _fingerprint(self.model, annotations, self.input_ranges)
        return self.model, annotations


#: Ops whose output is non-negative where their data input is (a max or mean of
#: non-negative values, the same values moved).
_KEEPS_SIGN = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean",
               "ReduceMax", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
               "Identity", "Resize", "Upsample", "Slice", "Split", "DepthToSpace",
               "SpaceToDepth")


def _needed_clamps(nodes, added, constants) -> list:
    """The Relus that stand for a quantisation's lower bound (``added``), as Identity where
    the tensor is already non-negative: a max pool's output quantised like its ReLU input
    would otherwise become a ReLU layer of its own."""
    import onnx

    non_negative = set()
    result = []
    for node in nodes:
        data = [i for i in node.input[:1] if i] if node.op_type != "Concat" else \
            [i for i in node.input if i]
        if id(node) in added and node.op_type == "Relu" and node.input[0] in non_negative:
            node = onnx.helper.make_node("Identity", list(node.input), list(node.output),
                                         name=node.name)
        low = constants.get(node.input[1]) if node.op_type == "Clip" and \
            len(node.input) > 1 and node.input[1] else None
        if node.op_type in ("Relu", "Sigmoid") or (low is not None and float(low) >= 0) or (
                (node.op_type in _KEEPS_SIGN or node.op_type == "Concat") and data and
                all(i in non_negative for i in data)):
            non_negative.update(o for o in node.output if o)
        result.append(node)
    return result


def _spatial_mean(node, constants) -> Optional[bool]:
    """Whether ``node`` averages a 4-D tensor over its two spatial axes: its keepdims (True
    for GlobalAveragePool), or None for any other node."""
    if node.op_type == "GlobalAveragePool":
        return True
    if node.op_type != "ReduceMean":
        return None
    axes = _attribute(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1] in constants:
        axes = constants[node.input[1]].reshape(-1).tolist()
    if axes is None or sorted(int(a) % 4 for a in axes) != [2, 3]:
        return None
    return bool(_attribute(node, "keepdims", 1))


def _means_as_convolutions(model, annotations: QdqAnnotations) -> None:
    """A global average whose output the QDQ graph quantises finer than its input becomes a
    depthwise convolution with weights 1 / (H W) (an exact rewrite): the accelerator's pool
    keeps its input's scale (the PDP has no output converter), a CONV's SDP converts to the
    model's finer one, as ONNX Runtime requantises the mean. Windows up to the CONV's
    largest kernel (ACCEL_MAX_CONV_KERNEL)."""
    import onnx
    from onnx import numpy_helper

    from .._accel_ffi import lib

    graph = model.graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    readers: Dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    shapes = {}
    inferred = onnx.shape_inference.infer_shapes(model).graph
    for value in list(inferred.value_info) + list(inferred.input):
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [int(d.dim_value) for d in dims]
    nodes = []
    for node in graph.node:
        keepdims = _spatial_mean(node, constants)
        if keepdims is None:
            nodes.append(node)
            continue
        shape = shapes.get(node.input[0])
        quant_in = annotations.tensors.get(node.input[0])
        outputs = [node.output[0]] + [r.output[0] for r in readers.get(node.output[0], [])
                                      if r.op_type in ("Identity", "Relu")]
        quant_out = next((annotations.tensors[o] for o in outputs if o in annotations.tensors),
                         None)
        if shape is None or len(shape) != 4 or quant_in is None or quant_out is None or \
                not quant_out[0] < quant_in[0] or \
                max(shape[2:]) > lib.ACCEL_MAX_CONV_KERNEL:
            nodes.append(node)
            continue
        channels, height, width = shape[1:]
        weight = f"{node.output[0]}_mean_weight"
        graph.initializer.append(numpy_helper.from_array(
            np.full((channels, 1, height, width), 1.0 / (height * width), np.float32), weight))
        conv_out = node.output[0] if keepdims else f"{node.output[0]}_mean_conv"
        nodes.append(onnx.helper.make_node("Conv", [node.input[0], weight], [conv_out],
                                           name=f"{node.name or node.output[0]}_as_conv",
                                           group=channels, kernel_shape=[height, width]))
        if not keepdims:
            target = f"{node.output[0]}_mean_shape"
            graph.initializer.append(numpy_helper.from_array(
                np.asarray([shape[0], channels], np.int64), target))
            nodes.append(onnx.helper.make_node("Reshape", [conv_out, target],
                                               [node.output[0]]))
    del graph.node[:]
    graph.node.extend(nodes)


def matching_inputs(annotations: QdqAnnotations) -> List[np.ndarray]:
    """The seeded input both sides run: uniform over each input's quantised range (or
    N(0, 1) for an input the graph does not quantise)."""
    rng = np.random.default_rng(MATCH_SEED)
    arrays = []
    for _, shape, lo, hi in annotations.inputs:
        if hi > lo:
            arrays.append(rng.uniform(lo, hi, size=shape).astype(np.float32))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def fingerprint_positions(size: int) -> np.ndarray:
    return np.unique(np.linspace(0, size - 1, min(FINGERPRINT_POINTS, size)).astype(np.int64))


def _fingerprint(model, annotations: QdqAnnotations, input_ranges) -> None:
    """Run the float graph in ONNX Runtime on the matching input and keep each annotated
    tensor's size and values at fixed positions."""
    import onnx
    initial = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initial:
            continue
        dims = value.type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            raise AccelUnsupportedError(f"input '{value.name}' has a symbolic shape: a QDQ "
                                        "model needs static input shapes")
        shape = [int(d.dim_value) for d in dims]
        quant = input_ranges.get(value.name)
        lo, hi = (0.0, 0.0) if quant is None else \
            ((-128 - quant[1]) * quant[0], (127 - quant[1]) * quant[0])
        annotations.inputs.append((value.name, shape, lo, hi))
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name for o in probe.graph.output}
    wanted = [n for n in annotations.tensors if n not in initial]
    for name in wanted:
        if name not in outputs and name not in {v[0] for v in annotations.inputs}:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    feeds = dict(zip((v[0] for v in annotations.inputs), matching_inputs(annotations)))
    values = _run_float(probe, feeds)
    values.update(feeds)
    for name in wanted:
        flat = np.asarray(values[name], np.float32).reshape(-1)
        where = fingerprint_positions(flat.size)
        annotations.fingerprints[name] = (int(flat.size), [int(i) for i in where],
                                          [float(v) for v in flat[where]])


def _run_float(model, feeds) -> Dict[str, np.ndarray]:
    """Every output of ``model`` on ``feeds``: ONNX Runtime where it is installed (it is
    optional), otherwise ONNX's reference evaluator (slower, the same float graph)."""
    names = [o.name for o in model.graph.output]
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return dict(zip(names, ReferenceEvaluator(model).run(names, feeds)))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, feeds)))


def annotations_of(mod) -> Optional[QdqAnnotations]:
    """The annotations :func:`accel_codegen.frontend.from_onnx` attached to a module imported
    from a QDQ model (None for any other module)."""
    if mod.attrs is None or QDQ_ATTR not in mod.attrs:
        return None
    return QdqAnnotations.from_json(str(mod.attrs[QDQ_ATTR]))
