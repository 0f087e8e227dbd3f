"""Frontends: PyTorch and ONNX models to a clean Relax ``IRModule`` plus a params dict.

Both importers return ``(mod, params)``:

* by default the weights are embedded in ``mod`` as constants and ``params`` is ``{}``;
* with ``keep_params_as_input=True`` (PyTorch) / ``keep_params_in_input=True`` (ONNX) the
  weights become trailing parameters of ``main`` and ``params`` maps each parameter's name
  to a NumPy array; :func:`bind_params` puts them back as constants.

Every imported module goes through ``CanonicalizeBindings`` + ``DeadCodeElimination``.
Without that cleanup the torch importer leaves a ``zeros_like`` + tuple behind each max pool
(the unused "indices" of ``max_pool2d_with_indices``) and the ONNX importer binds the unused
mean / variance outputs of every batch norm; both split or block the accelerator's
partitions. Inference batch norm survives the import as
``R.nn.batch_norm(..., training=False)`` in both paths.

``torch`` and ``onnx`` are imported inside the functions that need them.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import io
import math
import operator
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from ..errors import AccelError, AccelInvalidError, AccelShapeError, AccelUnsupportedError
from .onnx_folding import fold_shape_arithmetic
from .qdq import QDQ_ATTR, has_qdq, strip_qdq
from . import pt2e
from .rewrites import bounded_takes, clip_from_bounds
from . import custom
from . import source_names

__all__ = ["from_pytorch", "from_onnx", "load_onnx", "bind_params", "export_onnx", "cleanup"]

# Opset of :func:`export_onnx`: new enough for LayerNormalization, old enough for every
# converter in TVM's ONNX frontend.
ONNX_OPSET = 17


def cleanup(mod: tvm.IRModule) -> tvm.IRModule:
    """Remove importer leftovers (dead tuples, unused batch-norm outputs, trivial bindings).

    Parameters
    ----------
    mod : tvm.IRModule
        A freshly imported Relax module.

    Returns
    -------
    tvm.IRModule
        The module after ``CanonicalizeBindings`` and ``DeadCodeElimination``.
    """
    return tvm.transform.Sequential([
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(),
    ])(mod)


def _split_params(mod: tvm.IRModule) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """Detach the weights the importer attached to ``main`` and key them by parameter name."""
    mod, detached = relax.frontend.detach_params(mod)
    values = detached.get("main", [])
    if not values:
        return mod, {}
    # Weights are the trailing parameters of main, after the num_input graph inputs.
    names = [p.name for p in mod["main"].params[-len(values):]]
    if len(set(names)) != len(names):
        raise AccelInvalidError(f"the importer produced duplicate parameter names: {names}")
    return mod, {name: value.numpy() for name, value in zip(names, values)}


def _check_example_inputs(example_inputs: Any) -> tuple:
    """Reject anything but a non-empty tuple of tensors, naming the offending value."""
    import torch

    if not isinstance(example_inputs, tuple):
        hint = " (wrap a single tensor as (x,))" if isinstance(example_inputs, torch.Tensor) else ""
        raise AccelInvalidError(
            f"example_inputs must be a tuple of torch.Tensor, got {type(example_inputs).__name__}"
            f"{hint}")
    if not example_inputs:
        raise AccelInvalidError("example_inputs is an empty tuple: give one tensor per input")
    for i, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise AccelInvalidError(
                f"example_inputs[{i}] is a {type(value).__name__}, not a torch.Tensor")
    return example_inputs


def _check_model(model: Any) -> None:
    import torch

    if not isinstance(model, torch.nn.Module):
        raise AccelInvalidError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@contextlib.contextmanager
def _quiet_torch_export() -> Iterator[None]:
    """torch 2.13 warns about its own pytree internals (``isinstance(treespec, LeafSpec)``) on
    every export: noise the user can do nothing about, silenced where we trigger it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                                category=FutureWarning)
        yield


def from_pytorch(
    model: Any,
    example_inputs: tuple,
    *,
    custom_convert_map: Mapping[str, Callable] | None = None,
    keep_params_as_input: bool = False,
) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """Import a PyTorch module through ``torch.export`` and TVM's exported-program frontend.

    The model is put in eval mode (this changes ``model`` in place) and traced with the
    example inputs, whose shapes and dtypes become static in the module. The exported
    program keeps torch's default decomposition: without it batch norm is mis-imported
    (``training=True``, wrong epsilon).

    Parameters
    ----------
    model : torch.nn.Module
        The model to import.
    example_inputs : tuple[torch.Tensor, ...]
        One tensor per ``forward`` argument.
    custom_convert_map : Mapping[str, Callable], optional
        Passed to ``from_exported_program``: maps an fx target name (for a custom op
        ``ns::op``, the key is ``"op.default"``) to ``converter(node, importer) -> relax.Expr``.
        Custom primitives registered with :func:`accel_codegen.custom.register_primitive`
        are converted without it.
    keep_params_as_input : bool
        If True, the model's ``nn.Parameter`` s become trailing parameters of ``main``
        (named ``p_<qualified_name>``) and are returned in ``params``. Buffers such as
        batch-norm running statistics stay constants.

    A model quantised with PT2E (``convert_pt2e``'s GraphModule, its tensors between
    ``quantized_decomposed`` quantize / dequantize pairs) keeps its own scales: the pairs are
    taken out before the export (:func:`accel_codegen.compiler.pt2e.strip_pt2e`) and the
    module carries the scales, which an int8 :func:`~accel_codegen.partition_for_accel`
    without calibration uses, as for a QDQ ONNX model.

    Returns
    -------
    tuple[tvm.IRModule, dict[str, numpy.ndarray]]
        The cleaned module (see :func:`cleanup`) and the detached parameters, ``{}`` unless
        ``keep_params_as_input``. A model with one output returns a tensor from ``main``,
        not a 1-tuple, as an ONNX import does.

    Raises
    ------
    AccelInvalidError
        If ``model`` is not a ``torch.nn.Module`` or ``example_inputs`` is not a non-empty
        tuple of tensors.
    AccelUnsupportedError
        If ``torch.export`` cannot trace the model or TVM cannot convert one of its ops
        (the original exception is chained); for a PT2E model, a quantisation the
        accelerator's int8 has no form of (per-channel, 16-bit or dynamic activations),
        naming the fx node.
    """
    _check_model(model)
    args = _check_example_inputs(example_inputs)
    name = type(model).__name__
    annotations = None
    with _quiet_torch_export():
        if not pt2e.has_pt2e(model):
            exported = _export(model, args, name)
            if any(pt2e.quant_op(n) is not None for n in exported.graph.nodes):
                model = exported.module()  # quantize / dequantize ops written in a forward
        if pt2e.has_pt2e(model):
            # a PT2E model keeps its own scales: the pairs taken out (compiler/pt2e.py)
            model, annotations = pt2e.strip_pt2e(model, args)
            exported = _export(model, args, name)
        try:
            # Unwrapping the 1-tuple makes single-output models look like their ONNX import.
            # Registered custom primitives first, so that a user's own converter wins.
            converters = {**_MISSING_CONVERTERS, **custom.convert_map(),
                          **dict(custom_convert_map or {})}
            mod = _import_exported(exported, keep_params_as_input, converters)
        except AccelError:
            raise  # a converter's own typed refusal (a custom primitive's)
        except Exception as error:  # converters raise AssertionError, ValueError, TVM errors
            # TVM reports unconverted ops as "AssertionError: Unsupported function types";
            # a converter that fails on its op's arguments raises what it raises
            # (F.unfold's index_tensor: "ValueError: index_tensor: cannot broadcast ...").
            raise AccelUnsupportedError(
                f"TVM's PyTorch frontend could not import {name}: "
                f"{_first_line(error)}") from error
    mod = bounded_takes(cleanup(mod))
    mod, params = _split_params(mod) if keep_params_as_input else (mod, {})
    if annotations is not None:  # after detaching the params, which drops module attributes
        mod = mod.with_attr(QDQ_ATTR, annotations.to_json())
    return mod, params


def _reduction(op: Callable) -> Callable:
    """A converter of aten's ``op(x, dim=[], keepdim=False)`` reductions (an empty dim: all)."""
    def convert(node, importer) -> relax.Expr:
        args = importer.retrieve_args(node)
        dim = args[1] if len(args) > 1 else node.kwargs.get("dim", [])
        keepdim = args[2] if len(args) > 2 else node.kwargs.get("keepdim", False)
        axis = [int(d) for d in dim] if dim else None
        return importer.block_builder.emit(op(args[0], axis=axis, keepdims=bool(keepdim)))
    return convert


def _extreme_along(largest: bool) -> Callable:
    """A converter of aten's ``max.dim`` / ``min.dim`` (``torch.max(x, dim)``: the values and
    their indices): the values as the reduction they are, the indices an argmax (argmin),
    where TVM's converter gives both from a topk of k = 1, which nothing runs but the host
    (an unused argmax is dead code)."""
    reduce, arg = (relax.op.max, relax.op.argmax) if largest else \
        (relax.op.min, relax.op.argmin)

    def convert(node, importer) -> relax.Expr:
        args = importer.retrieve_args(node)
        dim = int(args[1])
        keepdim = bool(args[2] if len(args) > 2 else node.kwargs.get("keepdim", False))
        emit = importer.block_builder.emit
        return emit(relax.Tuple([emit(reduce(args[0], axis=[dim], keepdims=keepdim)),
                                 emit(arg(args[0], axis=dim, keepdims=keepdim))]))
    return convert


def _adaptive_windows(size: int, out: int) -> list:
    """PyTorch's adaptive pooling windows along an axis: [floor(i size / out),
    ceil((i + 1) size / out)) for each of the ``out`` outputs."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_max_pool2d(node, importer) -> relax.Expr:
    """aten's adaptive_max_pool2d (its values; the indices raise where a node reads them): a
    max pool of kernel = stride = size / out where out divides the size (a PSPNet / SPP-net
    pyramid level, which the PDP runs), else each window's max, concatenated."""
    args = importer.retrieve_args(node)
    x, out = args[0], args[1]
    if any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users):
        raise AccelUnsupportedError(f"{node.name}: the indices of adaptive_max_pool2d are not "
                                    "imported (its values are)")
    try:
        h, w = (int(v) for v in x.ty.shape.values[-2:])
    except (TypeError, AttributeError):
        raise AccelShapeError(f"{node.name}: adaptive_max_pool2d of a tensor without a static "
                              f"shape ({x.ty})") from None
    sizes = [out, out] if isinstance(out, int) else list(out)
    oh, ow = (int(s) if s is not None else full for s, full in zip(sizes, (h, w)))
    emit = importer.block_builder.emit
    if h % oh == 0 and w % ow == 0:
        kernel = (h // oh, w // ow)
        return emit(relax.Tuple([emit(relax.op.nn.max_pool2d(x, kernel, kernel))]))
    rows = []
    for top, bottom in _adaptive_windows(h, oh):
        cells = [emit(relax.op.max(emit(relax.op.strided_slice(
            x, axes=[2, 3], begin=[top, left], end=[bottom, right])), axis=[2, 3],
            keepdims=True)) for left, right in _adaptive_windows(w, ow)]
        rows.append(emit(relax.op.concat(cells, axis=3)))
    return emit(relax.Tuple([emit(relax.op.concat(rows, axis=2))]))


def _elu(node, importer) -> relax.Expr:
    """aten's ``elu(x, alpha, scale, input_scale)`` = scale * (x > 0 ? x : alpha * (exp(x *
    input_scale) - 1)), which ``nn.SELU`` decomposes into (alpha 1.6733, scale 1.0507). TVM's
    converter reads alpha alone, so SELU came out as an ELU 1.0507 times too small (a wrong
    answer on every backend). Written as TVM writes ELU, -alpha scale relu(1 - exp(x
    input_scale)) + relu(scale x) (relu(s x) = s relu(x) for s > 0, bit for bit)."""
    args = importer.retrieve_args(node)
    names = ("alpha", "scale", "input_scale")
    alpha, scale, input_scale = (
        float(args[1 + i]) if len(args) > 1 + i else float(node.kwargs.get(name, 1.0))
        for i, name in enumerate(names))
    x = args[0]
    dtype = str(x.ty.dtype)
    emit = importer.block_builder.emit

    def const(value: float) -> relax.Expr:
        return relax.const(value, dtype)
    inner = x if input_scale == 1.0 else emit(relax.op.multiply(x, const(input_scale)))
    negative = emit(relax.op.multiply(const(-alpha * scale), emit(relax.op.nn.relu(
        emit(relax.op.subtract(const(1.0), emit(relax.op.exp(inner))))))))
    if scale > 0.0:
        positive = emit(relax.op.nn.relu(
            x if scale == 1.0 else emit(relax.op.multiply(x, const(scale)))))
    else:
        positive = emit(relax.op.multiply(emit(relax.op.nn.relu(x)), const(scale)))
    return emit(relax.op.add(negative, positive))


def _full(node, importer) -> relax.Expr:
    """aten's ``full(size, fill)`` of a static size and an infinite fill as ``broadcast_to``
    of the number: TVM imports it as ``R.full``, whose legalisation fails for a fill of +-inf
    (``TypeError: argument of type 'PrimType' is not iterable``, in the host build and in
    constant folding alike), and ``nn.Transformer.generate_square_subsequent_mask`` is
    ``triu(full((T, T), -inf), 1)``: a decoder's causal mask. The same elements. Any other
    fill is TVM's converter's."""
    args = importer.retrieve_args(node)
    size = args[0] if isinstance(args[0], (list, tuple)) else (args[0],)
    value = node.meta.get("val")
    if not isinstance(args[1], float) or math.isfinite(args[1]) or value is None or \
            not all(isinstance(n, int) for n in size):
        return importer._full(node)  # pylint: disable=protected-access
    dtype = str(value.dtype).replace("torch.", "")
    return importer.block_builder.emit(relax.op.broadcast_to(
        relax.const(args[1], dtype), relax.ShapeExpr([int(n) for n in size])))


#: Converters of aten ops TVM's PyTorch frontend lacks (its import raised "Unsupported function
#: types"): torch.amax / amin, a CBAM block's channel max; adaptive max pooling; and torch.max
#: / min along a dim, which it imports as a topk. And ones it gets wrong: elu's scale and
#: input_scale (SELU); full of an infinite fill, which does not build (_full).
def _patch_args(node, importer, name: str):
    """(x, kernel, dilation, padding, stride, its static shape) of aten's im2col / col2im
    (``name``), each pair of ints; col2im's output size comes first after x."""
    args = importer.retrieve_args(node)
    x, rest = args[0], args[1:]
    try:
        shape = [int(v) for v in x.ty.shape.values]
    except (TypeError, AttributeError):
        raise AccelShapeError(f"{node.name}: {name} of a tensor without a static shape "
                              f"({x.ty})") from None
    pairs = [[int(v), int(v)] if isinstance(v, int) else [int(e) for e in v] for v in rest]
    return x, pairs, shape


def _one_hot_kernels(channels: int, kernel, dtype) -> np.ndarray:
    """[C kh kw, 1, kh, kw]: output channel c kh kw + i kw + j of group c takes tap (i, j),
    the channel order of torch's unfold."""
    kh, kw = kernel
    weights = np.zeros((channels * kh * kw, 1, kh, kw), dtype)
    taps = np.arange(kh * kw)
    weights[:, 0].reshape(channels, kh * kw, kh * kw)[:, taps, taps] = 1.0
    return weights


def _one_hot_patches(channels: int, kernel, dtype: str) -> relax.Expr:
    return relax.const(_one_hot_kernels(channels, kernel, dtype))


def _im2col(node, importer) -> relax.Expr:
    """aten's im2col (``F.unfold``, ``nn.Unfold``), which TVM's converter cannot import once
    torch decomposes it into gathers: a convolution of one-hot weights, k^2 outputs per input
    channel (groups = C), its output viewed as [N, C kh kw, L]; exact (each output is one
    input times 1)."""
    x, (kernel, dilation, padding, stride), (n, c, _, _) = _patch_args(node, importer, "im2col")
    dtype = str(x.ty.dtype)
    emit = importer.block_builder.emit
    patches = emit(relax.op.nn.conv2d(x, _one_hot_patches(c, kernel, dtype), strides=stride,
                                      padding=padding, dilation=dilation, groups=c))
    oh, ow = (int(v) for v in patches.ty.shape.values[2:])
    return emit(relax.op.reshape(patches, [n, c * kernel[0] * kernel[1], oh * ow]))


def _col2im(node, importer) -> relax.Expr:
    """aten's col2im (``F.fold``, ``nn.Fold``): the patches summed into the image, a
    transposed convolution of the same one-hot weights (groups = C) of the patches viewed as
    [N, C kh kw, OH, OW]."""
    x, (size, kernel, dilation, padding, stride), (n, ckk, length) = _patch_args(
        node, importer, "col2im")
    taps = kernel[0] * kernel[1]
    blocks = [(size[a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1
              for a in (0, 1)]
    if ckk % taps or blocks[0] * blocks[1] != length:
        raise AccelShapeError(f"{node.name}: col2im of {[n, ckk, length]} is not {taps} taps "
                              f"of {blocks[0]} x {blocks[1]} blocks")
    emit = importer.block_builder.emit
    grid = emit(relax.op.reshape(x, [n, ckk, *blocks]))
    reach = [(blocks[a] - 1) * stride[a] - 2 * padding[a] + dilation[a] * (kernel[a] - 1) + 1
             for a in (0, 1)]
    return emit(relax.op.nn.conv2d_transpose(
        grid, _one_hot_patches(ckk // taps, kernel, str(x.ty.dtype)), strides=stride,
        padding=padding, output_padding=[size[a] - reach[a] for a in (0, 1)],
        dilation=dilation, groups=ckk // taps))


_MISSING_CONVERTERS = {"amax.default": _reduction(relax.op.max),
                       "amin.default": _reduction(relax.op.min),
                       "max.dim": _extreme_along(True), "min.dim": _extreme_along(False),
                       "adaptive_max_pool2d.default": _adaptive_max_pool2d,
                       "elu.default": _elu, "full.default": _full,
                       "im2col.default": _im2col, "col2im.default": _col2im}


def _in_eval_mode(model):
    """``model.eval()``; a module of an exported program (``convert_pt2e``'s) refuses
    ``eval()`` and is traced in the mode it was exported in (torchao's
    ``move_exported_model_to_eval`` switches its dropout and batch norm)."""
    try:
        return model.eval()
    except NotImplementedError:
        return model


def _export(model, args: tuple, name: str):
    """``torch.export`` of ``model`` in eval mode, its errors typed."""
    import torch

    try:
        return torch.export.export(_in_eval_mode(model), args)
    except Exception as error:  # torch raises many unrelated types; the cause stays chained
        raise AccelUnsupportedError(
            f"torch.export could not trace {name}: {_first_line(error)}") from error


def _recording(convert: Callable, recorder: source_names.Recorder,
               parameters: Mapping[str, str]) -> Callable:
    """``convert`` (an fx node's converter), noting the node's name on what it returns
    (``parameters``: the program's parameter placeholders' names, see
    :func:`source_names.torch_node_name`)."""
    def converted(node, *rest):
        result = convert(node, *rest)
        recorder.record(result, source_names.torch_node_name(node, parameters))
        return result
    return converted


def _import_exported(exported, keep_params_as_input: bool, converters: Mapping[str, Callable]):
    """TVM's ``from_exported_program`` (torch's default decomposition first, as it runs it),
    each converter wrapped to note which Relax expression each fx node gives, so that every
    call of ``main`` carries its PyTorch module path (:mod:`.source_names`)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    import torch

    recorder = source_names.Recorder()
    table = torch.export.default_decompositions()
    for kept in (torch.ops.aten.im2col.default, torch.ops.aten.col2im.default):
        table.pop(kept, None)  # imported whole (_im2col, _col2im), not as gathers
    decomposed = exported.run_decompositions(table)
    parameters = dict(decomposed.graph_signature.inputs_to_parameters)
    importer = ExportedProgramImporter()
    importer.convert_map = {name: _recording(convert, recorder, parameters)
                            for name, convert in importer.convert_map.items()}
    mod = importer.from_exported_program(
        decomposed, keep_params_as_input, True, False,
        {name: _recording(convert, recorder, parameters) for name, convert in converters.items()})
    return source_names.attach(mod, recorder, "torch")


_ONNX_RECORDING = threading.Lock()


@contextlib.contextmanager
def _recording_onnx(recorder: source_names.Recorder) -> Iterator[None]:
    """While TVM's ONNX importer runs: its per-node conversion notes the node's name (or its
    first output's, for an unnamed node) on the Relax expression it gives. The importer has
    no hook for it; its one per-node method is wrapped for the import's duration."""
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    original = ONNXGraphImporter._convert_operator

    def converted(self, op_name, inputs, attrs, opset):
        result = original(self, op_name, inputs, attrs, opset)
        node = sys._getframe(1).f_locals.get("node")
        name = getattr(node, "name", "") or \
            (node.output[0] if getattr(node, "output", None) else "") or op_name
        recorder.record(result, name)
        return result

    with _ONNX_RECORDING:
        ONNXGraphImporter._convert_operator = converted
        try:
            yield
        finally:
            ONNXGraphImporter._convert_operator = original


def load_onnx(model_or_path: Any):
    """Return an ``onnx.ModelProto`` from a proto, a ``str`` path or an ``os.PathLike``; a
    missing or unreadable file is an :class:`AccelInvalidError` naming it."""
    import onnx

    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if not isinstance(model_or_path, (str, os.PathLike)):
        raise AccelInvalidError(
            f"expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")
    path = Path(model_or_path)
    if not path.is_file():
        raise AccelInvalidError(f"ONNX file '{path}' does not exist or is not a file")
    try:
        return onnx.load(str(path))
    except Exception as error:  # protobuf's DecodeError and friends
        raise AccelInvalidError(
            f"'{path}' is not a readable ONNX model: {_first_line(error)}") from error


#: LpNormalization's p = 2 as ReduceL2, a Clip to this floor, Div: ONNX's y = x / ||x||_2 (0
#: where the norm is 0) wherever the norm is 0 or at least the floor, whose square is float32's
#: smallest normal number (the accelerator's passes add it to the sum of squares).
LP_NORM_FLOOR = 2.0 ** -63


def _lp_normalizations(model):
    """``model`` with each LpNormalization of p = 2 as ReduceL2 (keepdims) over its axis, a
    Clip to :data:`LP_NORM_FLOOR` and Div (F.normalize's form, which TVM imports and
    ``accel.l2_normalize`` reads; TVM has no converter for LpNormalization); the model
    itself where it has none."""
    import onnx
    from onnx import helper

    if not any(n.op_type == "LpNormalization" and n.domain in ("", "ai.onnx") and
               helper.get_attribute_value(next((a for a in n.attribute if a.name == "p"),
                                               helper.make_attribute("p", 2))) == 2
               for n in model.graph.node):
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "LpNormalization" or node.domain not in ("", "ai.onnx") or \
                attrs.get("p", 2) != 2:
            nodes.append(node)
            continue
        name = node.name or node.output[0]
        x, axis = node.input[0], int(attrs.get("axis", -1))
        norm, floor, floored = (f"{name}/norm", f"{name}/floor", f"{name}/floored")
        if opset >= 18:  # the axes an input
            axes = f"{name}/axes"
            nodes.append(helper.make_node("Constant", [], [axes], name=axes, value=(
                helper.make_tensor(axes, onnx.TensorProto.INT64, [1], [axis]))))
            nodes.append(helper.make_node("ReduceL2", [x, axes], [norm], name=norm,
                                          keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceL2", [x], [norm], name=norm, axes=[axis],
                                          keepdims=1))
        if opset >= 11:  # the bounds inputs
            nodes.append(helper.make_node("Constant", [], [floor], name=floor, value=(
                helper.make_tensor(floor, onnx.TensorProto.FLOAT, [], [LP_NORM_FLOOR]))))
            nodes.append(helper.make_node("Clip", [norm, floor], [floored], name=floored))
        else:
            nodes.append(helper.make_node("Clip", [norm], [floored], name=floored,
                                          min=LP_NORM_FLOOR))
        nodes.append(helper.make_node("Div", [x, floored], list(node.output), name=name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _sums_as_adds(model):
    """``model`` with each Sum of two or more inputs as a chain of Adds, ((a + b) + c) ...,
    and a Sum of one input as Identity; the model itself where it has none. TVM's importer
    reads a Sum of static shapes as its inputs broadcast, stacked and summed over the stack
    (three host operators beside the accelerator's element-wise adder: Caffe2's and other
    exporters' residual additions); ONNX's Sum is the same element-wise addition with the
    same broadcasting (opset 8 on; before it the inputs have one shape), in this order."""
    import onnx
    from onnx import helper

    if not any(n.op_type == "Sum" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        name, inputs = node.name or node.output[0], list(node.input)
        if len(inputs) == 1:
            nodes.append(helper.make_node("Identity", inputs, list(node.output), name=name))
            continue
        total = inputs[0]
        for i, term in enumerate(inputs[1:], 1):
            last = i == len(inputs) - 1
            out = node.output[0] if last else f"{name}/sum{i}"
            nodes.append(helper.make_node("Add", [total, term], [out],
                                          name=name if last else out))
            total = out
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _einsum_as_matmul(node) -> Optional[list]:
    """The Transpose / MatMul nodes of an Einsum of two operands whose equation is a batched
    matmul (every label once per term, one summed label, one free label of the second term
    and one of the first, or several where the second has no batch labels; no ellipsis:
    attention's ``bhid,bhjd->bhij`` and ``bhij,bhjd->bhid``, a linear layer's ``btc,dc->btd``,
    whose MatMul broadcasts the 2-D weight over the first term's leading axes), else None."""
    from onnx import helper

    equation = next((a.s.decode() for a in node.attribute if a.name == "equation"), "")
    equation = equation.replace(" ", "")
    if len(node.input) != 2 or "->" not in equation or "." in equation:
        return None
    terms, out = equation.split("->")
    if terms.count(",") != 1:
        return None
    a, b = terms.split(",")
    if any(len(set(t)) != len(t) for t in (a, b, out)) or set(out) - set(a + b):
        return None
    batch = [c for c in out if c in a and c in b]
    summed = [c for c in a if c in b and c not in out]
    free_a, free_b = [c for c in a if c not in b], [c for c in b if c not in a]
    # a label of both terms is a batch axis (kept) or the summed one; of one term, free (kept)
    if len(summed) != 1 or len(free_b) != 1 or not free_a or (len(free_a) > 1 and batch) or \
            len(batch) + 1 != len(set(a) & set(b)) or len(batch) + len(free_a) + 1 != len(out):
        return None
    name = node.name or node.output[0]
    nodes, operands = [], []
    for term, order, which in ((a, batch + free_a + summed, "a"),
                               (b, batch + summed + free_b, "b")):
        perm = [term.index(c) for c in order]
        if perm == list(range(len(perm))):
            operands.append(node.input[0 if which == "a" else 1])
            continue
        moved = f"{name}/{which}_moved"
        nodes.append(helper.make_node("Transpose", [node.input[0 if which == "a" else 1]],
                                      [moved], name=moved, perm=perm))
        operands.append(moved)
    product_labels = batch + free_a + free_b
    perm = [product_labels.index(c) for c in out]
    if perm == list(range(len(perm))):
        nodes.append(helper.make_node("MatMul", operands, list(node.output), name=name))
    else:
        product = f"{name}/product"
        nodes.append(helper.make_node("MatMul", operands, [product], name=product))
        nodes.append(helper.make_node("Transpose", [product], list(node.output), name=name,
                                      perm=perm))
    return nodes


def _einsums_as_matmuls(model):
    """``model`` with each Einsum whose equation is a batched matmul as Transposes and a
    MatMul (the model itself where it has none): TVM's importer writes Einsum as a call_tir of
    TOPI's einsum kernel, an op the partitioner cannot read, where the same products as a
    MatMul are attention's, or a dense layer's."""
    import onnx

    if not any(n.op_type == "Einsum" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for node in model.graph.node:
        replaced = _einsum_as_matmul(node) if node.op_type == "Einsum" and \
            node.domain in ("", "ai.onnx") else None
        nodes.extend(replaced if replaced is not None else [node])
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _constant_arrays(graph) -> dict:
    """The graph's constant tensors by name: its initializers and Constant nodes' values."""
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    return values


def _zero_pad_widths(node, constants, opset: int):
    """A Pad node's (begins, ends) over every axis where it pads with zeros in constant mode
    and its widths are known, else None."""
    attrs = {a.name: a for a in node.attribute}
    mode = attrs["mode"].s.decode() if "mode" in attrs else "constant"
    if mode != "constant":
        return None
    if opset < 11:
        pads = list(attrs["pads"].ints) if "pads" in attrs else None
        value = attrs["value"].f if "value" in attrs else 0.0
    else:
        inputs = list(node.input) + [""] * 3
        if inputs[1] not in constants or (inputs[2] and inputs[2] not in constants) or \
                inputs[3]:  # Pad-18's axes: not generated by the exporters met so far
            return None
        pads = [int(v) for v in np.asarray(constants[inputs[1]]).ravel()]
        value = float(np.asarray(constants[inputs[2]]).ravel()[0]) \
            if inputs[2] and np.asarray(constants[inputs[2]]).size else 0.0
    if pads is None or len(pads) % 2 or value != 0.0 or min(pads) < 0:
        return None
    rank = len(pads) // 2
    return pads[:rank], pads[rank:]


def _pads_into_convs(model):
    """``model`` with each zero Pad of the spatial axes that only Convs read folded into
    their own padding (ONNX's Conv pads each side on its own: the same products); the model
    itself where it has none. TensorFlow's exporters write a stride-2 "SAME" convolution and
    a causal one so (an explicit Pad, then a Conv without padding), which TVM's importer
    makes a host kernel (call_tir) that the partitioner cannot fold."""
    import onnx
    from onnx import helper

    graph = model.graph
    if not any(n.op_type == "Pad" for n in graph.node):
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    constants = _constant_arrays(graph)
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    folded = {}
    for node in graph.node:
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or \
                node.output[0] in outputs:
            continue
        widths = _zero_pad_widths(node, constants, opset)
        convs = readers.get(node.output[0], [])
        if widths is None or not convs or any(
                c.op_type != "Conv" or c.input[0] != node.output[0] or
                c.input[1:].count(node.output[0]) or
                any(a.name == "auto_pad" and a.s not in (b"", b"NOTSET") for a in c.attribute)
                for c in convs):
            continue
        begins, ends = widths
        if len(begins) < 3 or any(begins[:2]) or any(ends[:2]):
            continue  # the batch or the channels padded: not a convolution's padding
        folded[node.output[0]] = (node.input[0], begins[2:], ends[2:])
    if not folded:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Pad" and node.output[0] in folded:
            continue
        if node.op_type == "Conv" and node.input[0] in folded:
            source, begins, ends = folded[node.input[0]]
            spatial = len(begins)
            own = next((list(a.ints) for a in node.attribute if a.name == "pads"),
                       [0] * 2 * spatial)
            pads = [own[i] + begins[i] for i in range(spatial)] + \
                [own[spatial + i] + ends[i] for i in range(spatial)]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                     if a.name not in ("pads", "auto_pad")}
            node = helper.make_node("Conv", [source] + list(node.input[1:]), list(node.output),
                                    name=node.name, pads=pads, **attrs)
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _window_grid(indices) -> Optional[Tuple[int, int]]:
    """(dilation, stride) where ``indices`` [k, o] is i * dilation + o * stride, the rows
    that tap i of output o reads (an unfold's gather along one axis), else None."""
    if indices.ndim != 2 or indices.shape[0] < 1 or indices.shape[1] < 1:
        return None
    k, o = indices.shape
    dilation = int(indices[1, 0] - indices[0, 0]) if k > 1 else 1
    stride = int(indices[0, 1] - indices[0, 0]) if o > 1 else 1
    grid = np.arange(k)[:, None] * dilation + np.arange(o)[None, :] * stride
    if dilation < 1 or stride < 1 or not np.array_equal(indices, grid):
        return None
    return dilation, stride


def _reshape_target(shape, source) -> Optional[List[int]]:
    """An ONNX Reshape's output shape for the static ``source`` shape: 0 copies an axis, -1
    takes what is left (allowzero not set); None where that does not resolve."""
    shape = [int(v) for v in shape]
    shape = [source[i] if v == 0 and i < len(source) else v for i, v in enumerate(shape)]
    if shape.count(-1) > 1:
        return None
    if -1 in shape:
        known = int(np.prod([v for v in shape if v != -1]))
        total = int(np.prod(source))
        if known == 0 or total % known:
            return None
        shape[shape.index(-1)] = total // known
    return shape


def _unfolds_as_convs(model):
    """``model`` with each unfold that torch.onnx writes (``F.unfold``: a Gather of rows
    [kh, oh], a Gather of columns [kw, ow], a Transpose [0, 1, 2, 4, 3, 5] and a Reshape to
    [N, C kh kw, oh ow], after a Pad where it pads) as the convolution of one-hot weights it
    is (groups = C, k^2 outputs per channel; what ``_im2col`` imports from PyTorch), and the
    same Reshape; the model itself where it has none. TVM imports the gathers as host
    kernels; the Pad is then the convolution's padding (``_pads_into_convs``). Exact: each
    output is one input times 1."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    if not any(n.op_type == "Gather" for n in graph.node):
        return model
    constants = None  # read at the first chain of the unfold's shape: every weight, copied
    producers = {out: node for node in graph.node for out in node.output}
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def only(name, reader) -> bool:
        return name not in outputs and readers.get(name) == [reader]

    def attr(node, name, default=None):
        return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name),
                    default)

    inferred = None
    found = {}  # Reshape output -> (data, the Conv's output, its weights, its attributes)
    dropped: set = set()  # the outputs of the gathers and transposes the Convs replace
    for reshape in graph.node:
        transpose = producers.get(reshape.input[0]) if reshape.op_type == "Reshape" else None
        if transpose is None or transpose.op_type != "Transpose" or \
                list(attr(transpose, "perm", [])) != [0, 1, 2, 4, 3, 5] or \
                not only(transpose.output[0], reshape) or len(reshape.input) < 2 or \
                attr(reshape, "allowzero", 0):
            continue
        columns = producers.get(transpose.input[0])
        rows = producers.get(columns.input[0]) if columns is not None and \
            columns.op_type == "Gather" else None
        if rows is None or rows.op_type != "Gather" or \
                not only(columns.output[0], transpose) or not only(rows.output[0], columns) or \
                attr(rows, "axis", 0) not in (2, -2) or attr(columns, "axis", 0) not in (4, -1):
            continue
        constants = _constant_arrays(graph) if constants is None else constants
        if any(name not in constants for name in (reshape.input[1], rows.input[1],
                                                   columns.input[1])):
            continue
        if inferred is None:
            inferred = {info.name: info.type.tensor_type for info in [
                *onnx.shape_inference.infer_shapes(model).graph.value_info, *graph.input]}
        data = inferred.get(rows.input[0])
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in data.shape.dim] if data is not None and data.HasField("shape") else []
        if len(dims) != 4 or None in dims or data.elem_type not in (
                onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            continue
        row_index, column_index = constants[rows.input[1]], constants[columns.input[1]]
        grids = _window_grid(row_index), _window_grid(column_index)
        if None in grids:
            continue
        (dh, sh), (dw, sw) = grids
        (kh, oh), (kw, ow) = row_index.shape, column_index.shape
        n, c, h, w = dims
        reach = [(size - d * (k - 1) - 1) // s + 1
                 for size, d, k, s in ((h, dh, kh, sh), (w, dw, kw, sw))]
        if reach != [oh, ow] or _reshape_target(constants[reshape.input[1]], [
                n, c, kh, kw, oh, ow]) != [n, c * kh * kw, oh * ow]:
            continue  # windows that stop before the end, or another view of the patches
        taps = _one_hot_kernels(c, (kh, kw), helper.tensor_dtype_to_np_dtype(data.elem_type))
        found[reshape.output[0]] = (
            rows.input[0], f"{transpose.output[0]}_unfold",
            numpy_helper.from_array(taps, f"{transpose.output[0]}_unfold_taps"),
            {"group": c, "kernel_shape": [kh, kw], "strides": [sh, sw],
             "dilations": [dh, dw], "pads": [0, 0, 0, 0]})
        dropped |= {rows.output[0], columns.output[0], transpose.output[0]}
    if not found:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = []
    for node in model.graph.node:
        if any(out in dropped for out in node.output):
            continue
        if node.op_type == "Reshape" and node.output[0] in found:
            data, conv, weights, attrs = found[node.output[0]]
            model.graph.initializer.append(weights)
            nodes.append(helper.make_node("Conv", [data, weights.name], [conv],
                                          name=f"{node.name or conv}_unfold", **attrs))
            node = helper.make_node("Reshape", [conv, node.input[1]], list(node.output),
                                    name=node.name)
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _edge_paddings_as_slices(model):
    """``model`` with each reflect or edge Pad (known widths, the batch not padded) as the
    rows it repeats: per padded axis, a Concat of the input and of one-row Slices of it (a
    reflection's rows 1..p reversed before, an edge's first row p times); the model itself
    where it has none. TVM imports such a Pad as a host kernel (mirror_pad, replicate_pad);
    the slices and concats are BDMA copies, as torch's own paddings become
    (rewrites.gathers_as_slices): ONNX exports of style-transfer generators pad so."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if opset < 11 or not any(n.op_type == "Pad" for n in graph.node):
        return model
    constants = _constant_arrays(graph)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in
             list(graph.input) + list(graph.value_info) + list(graph.output)
             if v.type.tensor_type.HasField("shape")}
    plans = {}
    for node in graph.node:
        attrs = {a.name: a for a in node.attribute}
        mode = attrs["mode"].s.decode() if "mode" in attrs else "constant"
        inputs = list(node.input) + [""] * 3
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx") or \
                mode not in ("reflect", "edge") or inputs[1] not in constants or inputs[3]:
            continue
        pads = [int(v) for v in np.asarray(constants[inputs[1]]).ravel()]
        rank = len(pads) // 2
        if ranks.get(node.input[0], rank) != rank or rank < 2 or pads[0] or pads[rank] or \
                min(pads) < 0 or sum(pads) > 64:
            continue
        plans[node.output[0]] = (node, mode, pads[:rank], pads[rank:])
    if not plans:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    extra = []

    def index(name, values):
        extra.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    nodes = []
    for node in model.graph.node:
        if node.op_type != "Pad" or node.output[0] not in plans:
            nodes.append(node)
            continue
        _, mode, begins, ends = plans[node.output[0]]
        stem = node.name or node.output[0]
        x = node.input[0]
        for axis, (before, after) in enumerate(zip(begins, ends)):
            if not before and not after:
                continue
            def row(i, what):  # one row of x along axis; negative i from the end
                out = f"{stem}/{what}{axis}_{i}"
                nodes.append(helper.make_node(
                    "Slice", [x, index(f"{out}/b", [i]),
                              index(f"{out}/e", [i + 1 if i != -1 else np.iinfo(np.int64).max]),
                              index(f"{out}/a", [axis])], [out], name=out))
                return out
            if mode == "reflect":
                head = [row(i, "r") for i in range(before, 0, -1)]
                tail = [row(-2 - i, "r") for i in range(after)]
            else:
                head = [row(0, "e")] * before
                tail = [row(-1, "e")] * after
            last = all(not b and not e for b, e in zip(begins[axis + 1:], ends[axis + 1:]))
            out = node.output[0] if last else f"{stem}/padded{axis}"
            nodes.append(helper.make_node("Concat", head + [x] + tail, [out], axis=axis,
                                          name=stem if last else out))
            x = out
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(extra)
    return model


def _even_lrns(model):
    """``model`` with each LRN of an even size as its ONNX definition in ops TVM imports; the
    model itself where it has none. ONNX sums the squares over channels c - (size/2 - 1) ..
    c + size/2 (floor((size - 1) / 2) before, ceil after), a window TVM's converter centres
    (size/2 on each side: one channel too many, and a divide of mismatched shapes) and
    ONNX Runtime refuses (its LRN kernel takes odd sizes). Written out: x * x, a channel
    axis inserted, an AveragePool of size x 1 ... over it with the window's zero padding
    counted, the axis taken out, times alpha, plus bias, to the power beta, x divided by it.
    These run on the host (the CDP's windows are centred: sizes 3, 5, 7, 9), each named after
    the LRN node. Only the input's rank is needed (a symbolic batch stays symbolic); an input
    of unknown rank, or of a rank TVM cannot pool (1 to 3 axes: ranks 3 and 4), is an
    AccelUnsupportedError naming the node (TVM's converter would fail on it)."""
    import onnx
    from onnx import helper

    def even(node):
        return node.op_type == "LRN" and node.domain in ("", "ai.onnx") and any(
            a.name == "size" and helper.get_attribute_value(a) % 2 == 0 for a in node.attribute)

    if not any(even(n) for n in model.graph.node):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {info.name: len(info.type.tensor_type.shape.dim)
             for info in [*inferred.input, *inferred.value_info]
             if info.type.tensor_type.HasField("shape")}
    # Unsqueeze and Squeeze take their axes as an input from opset 13, an attribute before
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [1])
    nodes = []
    for node in model.graph.node:
        if not even(node):
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        size, name = int(attrs["size"]), node.name or node.output[0]
        rank = ranks.get(node.input[0])
        if rank not in (3, 4):  # TVM pools 1 to 3 axes: the channels and 1 or 2 spatial
            known = "of unknown rank" if rank is None else f"of rank {rank}"
            raise AccelUnsupportedError(
                f"LRN '{name}' of even size {size}: its input is {known}; an even size is "
                f"imported as its definition's ops, which need an input of rank 3 or 4")
        x, part = node.input[0], (lambda what: f"{name}/{what}")

        def constant(what, dtype, dims, values):
            nodes.append(helper.make_node("Constant", [], [part(what)], name=part(what),
                                          value=helper.make_tensor(part(what), dtype, dims,
                                                                   values)))
            return part(what)

        def op(op_type, inputs, what, **attributes):
            out = node.output[0] if what is None else part(what)
            nodes.append(helper.make_node(op_type, inputs, [out], name=name if what is None
                                          else out, **attributes))
            return out

        def on_axis_1(op_type, data, what):  # Unsqueeze / Squeeze of axis 1
            if opset >= 13:
                return op(op_type, [data, constant(f"{what}_axes", onnx.TensorProto.INT64, [1],
                                                   [1])], what)
            return op(op_type, [data], what, axes=[1])

        axes = rank - 1  # the pool's: the channels and the spatial axes
        squares = op("Mul", [x, x], "square")
        stacked = on_axis_1("Unsqueeze", squares, "wide_square")
        before, after = (size - 1) // 2, size // 2
        pooled = op("AveragePool", [stacked], "mean", kernel_shape=[size] + [1] * (axes - 1),
                    pads=[before] + [0] * (axes - 1) + [after] + [0] * (axes - 1),
                    count_include_pad=1)
        mean = on_axis_1("Squeeze", pooled, "channel_mean")
        scaled = op("Mul", [mean, constant("alpha", onnx.TensorProto.FLOAT, [],
                                           [float(attrs.get("alpha", 1e-4))])], "scaled")
        based = op("Add", [scaled, constant("bias", onnx.TensorProto.FLOAT, [],
                                            [float(attrs.get("bias", 1.0))])], "based")
        power = op("Pow", [based, constant("beta", onnx.TensorProto.FLOAT, [],
                                           [float(attrs.get("beta", 0.75))])], "power")
        op("Div", [x, power], None)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _unconvertible_nodes(graph, convert_map) -> list:
    """(name, op type, outputs) of every node, subgraphs included, that TVM's importer has no
    converter for (it checks the op types, without saying which node has them)."""
    found = []
    for node in graph.node:
        if node.op_type not in convert_map and node.op_type not in ("If", "Constant"):
            found.append((node.name, node.op_type, list(node.output)))
        for attribute in node.attribute:
            for inner in ([attribute.g] if attribute.HasField("g") else []) + \
                    list(attribute.graphs):
                found += _unconvertible_nodes(inner, convert_map)
    return found


def _node_label(name: str, op_type: str, outputs=()) -> str:
    if name:
        return f"node '{name}' ({op_type})"
    named = [o for o in outputs if o]
    return f"an unnamed {op_type} node" + (f" (output '{named[0]}')" if named else "")


def _failing_node(error: BaseException):
    """The ONNX node TVM's importer was converting when it raised: the ``node`` local of its
    innermost conversion loop (it names only the op type, and only on stdout)."""
    node = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("_construct_nodes", "_convert_subgraph"):
            node = frame.f_locals.get("node", node)
        tb = tb.tb_next
    return node if hasattr(node, "op_type") else None


def from_onnx(
    model_or_path: Any, *, keep_params_in_input: bool = False, fold_shapes: bool = True,
    qdq: bool | None = None,
) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """Import an ONNX model with TVM's ONNX frontend.

    Input shapes come from the graph's inputs, which must be static. To keep batch norm as
    an op, export without constant folding (:func:`export_onnx` does). Before the import, the
    graph's shape arithmetic (``Shape``, and what is computed from it: reshape targets,
    ``Range`` bounds, flatten sizes) is folded to constants
    (:func:`accel_codegen.compiler.onnx_folding.fold_shape_arithmetic`): TVM would otherwise
    import it as run-time shape computations with ``match_cast`` and symbolic dimensions, or
    fail on it.

    Parameters
    ----------
    model_or_path : onnx.ModelProto or str or os.PathLike
        The model, or the path of a ``.onnx`` file.
    keep_params_in_input : bool
        If True, every initializer (including batch-norm running statistics) becomes a
        trailing parameter of ``main``, named after the initializer, and is returned in
        ``params``. (TVM spells this ``_in_`` for ONNX and ``_as_`` for PyTorch.)
        Initializers that only folded shape arithmetic read are not among them.
    fold_shapes : bool
        False: give the graph to TVM as it is, shape arithmetic included.
    qdq : bool, optional
        A model with QuantizeLinear / DequantizeLinear pairs (QDQ format, e.g. ONNX
        Runtime's ``quantize_static``) keeps its own scales: the pairs are taken out
        (:func:`accel_codegen.compiler.qdq.strip_qdq`) and the module carries the scales,
        which an int8 :func:`~accel_codegen.partition_for_accel` without calibration uses.
        None (default): where the quantisation has no accelerator form (QOperator format,
        per-axis or 16-bit activations), a warning says why and TVM imports the graph as
        it is; True: that is an AccelUnsupportedError naming the node; False: TVM imports
        the pairs as they are.

    Returns
    -------
    tuple[tvm.IRModule, dict[str, numpy.ndarray]]
        The cleaned module (see :func:`cleanup`) and the detached parameters, ``{}`` unless
        ``keep_params_in_input``.

    Raises
    ------
    AccelInvalidError
        If the argument is neither a ``ModelProto`` nor a path, the path does not exist, or
        the file is not an ONNX model.
    AccelUnsupportedError
        If TVM has no converter for one of the model's ops, or its converter fails: the
        message names the ONNX node (name and op type); the original exception is chained.
    """
    model = load_onnx(model_or_path)
    from tvm.relax.frontend.onnx import from_onnx as tvm_from_onnx
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    model = _einsums_as_matmuls(_even_lrns(_sums_as_adds(_lp_normalizations(model))))
    graph_name = model.graph.name
    missing = _unconvertible_nodes(model.graph, _get_convert_map())
    if missing:
        listed = ", ".join(_node_label(*n) for n in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise AccelUnsupportedError(
            f"TVM's ONNX frontend cannot import graph '{graph_name}': it has no converter for "
            f"{listed}{more}")
    annotations = None
    if qdq is not False and has_qdq(model):
        try:
            model, annotations = strip_qdq(model, strict=bool(qdq))
        except AccelUnsupportedError as error:
            if qdq:
                raise
            warnings.warn(f"graph '{graph_name}' keeps its QuantizeLinear / DequantizeLinear "
                          f"nodes as TVM imports them (no int8 scales taken): {error}",
                          stacklevel=2)
    if fold_shapes:
        model = fold_shape_arithmetic(model)[0]
    # after the folding: a Pad's widths may be computed
    model = _edge_paddings_as_slices(_pads_into_convs(_unfolds_as_convs(model)))
    # TVM's importer prints the op and its Relax inputs before re-raising a converter's error;
    # the error raised here says it, with the node's name.
    printed = io.StringIO()
    try:
        recorder = source_names.Recorder()
        with contextlib.redirect_stdout(printed), _recording_onnx(recorder):
            mod = tvm_from_onnx(model, keep_params_in_input=keep_params_in_input)
        mod = source_names.attach(mod, recorder, "onnx")
    except Exception as error:  # converters raise TypeError, ValueError, TVM errors, ...
        node = _failing_node(error)
        where = f" at {_node_label(node.name, node.op_type, node.output)}" if node is not None \
            else ""
        raise AccelUnsupportedError(
            f"TVM's ONNX frontend could not import graph '{graph_name}'{where}: "
            f"{_first_line(error)}") from error
    if printed.getvalue():
        sys.stdout.write(printed.getvalue())
    mod = clip_from_bounds(cleanup(mod))
    mod, params = _split_params(mod) if keep_params_in_input else (mod, {})
    if annotations is not None:  # after detaching the params, which drops module attributes
        mod = mod.with_attr(QDQ_ATTR, annotations.to_json())
    return mod, params


def _param_type(param: relax.Var) -> tuple[list[int | None] | None, str | None]:
    """Static shape (``None`` for symbolic dims) and dtype of a tensor parameter, if known."""
    ty = param.ty
    if not isinstance(ty, relax.TensorType):
        return None, None
    shape = None
    if isinstance(ty.shape, relax.ShapeExpr):
        shape = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in ty.shape.values]
    dtype = str(ty.dtype)
    return shape, (None if dtype in ("", "void") else dtype)


def bind_params(mod: tvm.IRModule, params: Mapping[str, Any], *,
                func_name: str = "main") -> tvm.IRModule:
    """Bind named parameters of a function as constants (the inverse of ``keep_params_*``).

    Parameters
    ----------
    mod : tvm.IRModule
        A module whose function ``func_name`` has parameters with these names.
    params : Mapping[str, numpy.ndarray or tvm.runtime.Tensor]
        Parameter name to value. Names that match no parameter are an error; parameters
        without a value stay parameters.
    func_name : str
        The function to bind, ``"main"`` by default.

    Returns
    -------
    tvm.IRModule
        A new module; ``mod`` is not modified.

    Raises
    ------
    AccelInvalidError
        If ``func_name`` is not in ``mod``, ``params`` is not a mapping, or a name matches
        no parameter.
    AccelShapeError
        If a value's shape or dtype differs from its parameter's.
    """
    if not isinstance(params, Mapping):
        raise AccelInvalidError(
            f"params must be a mapping name -> array, got {type(params).__name__}")
    if func_name not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise AccelInvalidError(f"function '{func_name}' is not in the module")
    by_name = {p.name: p for p in mod[func_name].params}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise AccelInvalidError(
            f"params {unknown} match no parameter of '{func_name}' "
            f"(parameters: {', '.join(by_name)})")
    values = {}
    for name, value in params.items():
        array = value if isinstance(value, tvm.runtime.Tensor) else np.asarray(value)
        shape, dtype = _param_type(by_name[name])
        got_shape, got_dtype = tuple(array.shape), str(array.dtype)
        if shape is not None and (len(shape) != len(got_shape) or any(
                e is not None and e != g for e, g in zip(shape, got_shape))):
            raise AccelShapeError(f"param '{name}' has shape {got_shape}, but the parameter "
                                  f"expects {tuple('?' if e is None else e for e in shape)}")
        if dtype is not None and got_dtype != dtype:
            raise AccelShapeError(
                f"param '{name}' has dtype {got_dtype}, but the parameter expects {dtype}")
        values[name] = array
    return relax.transform.BindParams(func_name, values)(mod)


def _input_names(model: Any, count: int) -> list[str]:
    """``forward``'s argument names, so both frontends call the graph inputs the same."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    plain = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return plain[:count] if len(plain) >= count else [f"input{i}" for i in range(count)]


#: The start of the TracerWarning a tensor's truth value raises.
_TRACED_BOOL = r"Converting a tensor to a Python boolean"


def _ignore_attention_shape_checks(torch) -> None:
    """In the current warnings context, ignore the TracerWarnings of torch's own multi-head
    attention and nothing else: its ``multi_head_attention_forward`` checks its shapes in
    Python (embed_dim, head_dim, key.shape), which the trace records as the constants they
    are for the static shapes exported; the tracer warns of them from torch's code, not the
    model's. A filter names a module and a line, not a function: one per line of that
    function, each for that warning's message only, so a user's own data-dependent branch,
    or another torch function's warning, still shows."""
    function = torch.nn.functional.multi_head_attention_forward
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):  # no source (a frozen install): nothing can be told apart
        return
    for line in range(first, first + len(lines)):
        warnings.filterwarnings("ignore", message=_TRACED_BOOL,
                                category=torch.jit.TracerWarning,
                                module=r"torch\.nn\.functional\Z", lineno=line)


def _given_arguments_only(model: Any, count: int) -> Any:
    """``model`` as the exporter should trace it: called with its ``count`` example inputs and
    nothing else. torch's TorchScript exporter appends the defaults of ``forward``'s further
    parameters to the inputs it traces, so a Python default becomes a traced tensor
    (``nn.TransformerEncoderLayer``'s ``is_causal=False`` then reaches
    ``scaled_dot_product_attention`` as a tensor, which refuses it). A shallow copy whose
    ``forward`` takes positional inputs only: the same parameters and module names, so the
    ONNX graph's names are the model's."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())[count:]
    except (TypeError, ValueError):  # no signature to read (a compiled forward): as it is
        return model
    if not any(p.default is not inspect.Parameter.empty and p.default is not None
               for p in parameters):
        return model
    traced = copy.copy(model)
    forward = model.forward
    object.__setattr__(traced, "forward", lambda *inputs: forward(*inputs))
    return traced


def export_onnx(model: Any, example_inputs: tuple, path: str | os.PathLike) -> Path:
    """Export a PyTorch model to ONNX with batch norm kept as ``BatchNormalization``.

    Uses the TorchScript-based exporter (``dynamo=False``), opset :data:`ONNX_OPSET`, and
    ``do_constant_folding=False``: with folding on, torch folds batch norm into the
    preceding convolution. Graph inputs are named after ``forward``'s arguments.

    Parameters
    ----------
    model : torch.nn.Module
        The model to export; it is put in eval mode.
    example_inputs : tuple[torch.Tensor, ...]
        One tensor per ``forward`` argument; their shapes become the graph's static shapes.
    path : str or os.PathLike
        Where to write the ``.onnx`` file; its directory must exist.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    AccelInvalidError
        For a non-module model, bad example inputs, or a missing output directory.
    AccelUnsupportedError
        If the exporter fails (the original exception is chained).
    """
    _check_model(model)
    args = _check_example_inputs(example_inputs)
    path = Path(path)
    if not path.parent.is_dir():
        raise AccelInvalidError(f"directory '{path.parent}' of the ONNX file does not exist")
    import torch

    try:
        with warnings.catch_warnings():
            # dynamo=False is chosen (the docstring says why): torch's notice that this exporter
            # is the legacy one, and the deprecation its exporter raises on its own internal
            # helper, say nothing the caller can act on.
            warnings.filterwarnings("ignore", category=DeprecationWarning,
                                    message=r"You are using the legacy TorchScript-based ONNX")
            warnings.filterwarnings("ignore", category=DeprecationWarning,
                                    message=r"The feature will be removed",
                                    module=r"torch\.onnx\.")
            _ignore_attention_shape_checks(torch)
            torch.onnx.export(_given_arguments_only(model.eval(), len(args)), args, str(path),
                              dynamo=False, do_constant_folding=False, opset_version=ONNX_OPSET,
                              input_names=_input_names(model, len(args)))
    except Exception as error:  # the exporter raises many unrelated types
        raise AccelUnsupportedError(
            f"torch.onnx.export failed on {type(model).__name__}: {_first_line(error)}") from error
    return path
