"""Paddle's SVTR mixer as Paddle2ONNX writes it (PP-OCRv4's recogniser, issue 29): a small
net of the same ONNX ops, opset 12, against ONNX Runtime.

The token tensor [1, T, C] comes from an NCHW [1, C, 1, T] feature map (Reshape, Transpose);
layer norm is its formula (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add); the
attention's head split is a Reshape to [1, T, 3, heads, d], a Transpose [2, 0, 3, 1, 4] and a
Slice + Squeeze of axis 0 per q, k, v, the scale a Mul of q; the softmax is opset 12's
(TVM imports it as a softmax of the [heads x T, T] rows between two reshapes); then the tokens
go back to [1, C, 1, T] (Reshape to [1, 1, T, C], Transpose [0, 3, 1, 2]) for a 1x1 conv, are
squeezed to [1, C, T], transposed, and classified by a dense layer and a softmax per token.
"""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_onnx
from conftest import assert_close, run_main

T, C, HEADS, CLASSES, CONV = 12, 32, 4, 20, 24
D = C // HEADS


def _paddle_mixer() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=f"{op}.{len(nodes)}", **attrs))
        return output

    def weight(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def layer_norm(x, tag):
        mean = node("ReduceMean", [x], f"{tag}.mean", axes=[-1])
        centred = node("Sub", [x, mean], f"{tag}.centred")
        square = node("Pow", [centred, const(f"{tag}.two", np.float32(2.0))], f"{tag}.square")
        var = node("ReduceMean", [square], f"{tag}.var", axes=[-1])
        std = node("Sqrt", [node("Add", [var, const(f"{tag}.eps", np.float32(1e-5))],
                                 f"{tag}.vareps")], f"{tag}.std")
        normed = node("Div", [centred, std], f"{tag}.normed")
        scaled = node("Mul", [normed, const(f"{tag}.g", 1 + weight(C, scale=0.1))],
                      f"{tag}.scaled")
        return node("Add", [scaled, const(f"{tag}.b", weight(C, scale=0.1))], f"{tag}.out")

    def linear(x, cin, cout, tag):
        product = node("MatMul", [x, const(f"{tag}.w", weight(cin, cout))], f"{tag}.mm")
        return node("Add", [product, const(f"{tag}.bias", weight(cout, scale=0.1))], tag)

    def head(qkv, index, tag):
        part = node("Slice", [qkv, const(f"{tag}.begin", np.array([index], np.int64)),
                              const(f"{tag}.end", np.array([index + 1], np.int64)),
                              const(f"{tag}.axes", np.array([0], np.int64)),
                              const(f"{tag}.step", np.array([1], np.int64))], f"{tag}.slice")
        return node("Squeeze", [part], tag, axes=[0])

    shape = lambda name, dims: const(name, np.array(dims, np.int64))  # noqa: E731
    tokens = node("Transpose", [node("Reshape", ["x", shape("flat", [1, C, T])], "flat_x")],
                  "tokens", perm=[0, 2, 1])
    qkv = linear(layer_norm(tokens, "ln1"), C, 3 * C, "qkv")
    split = node("Transpose", [node("Reshape", [qkv, shape("split", [1, T, 3, HEADS, D])],
                                    "qkv5")], "qkv_t", perm=[2, 0, 3, 1, 4])
    q = node("Mul", [head(split, 0, "q"), const("scale", np.array([D ** -0.5], np.float32))],
             "q_scaled")
    k = node("Transpose", [head(split, 1, "k")], "k_t", perm=[0, 1, 3, 2])
    scores = node("Softmax", [node("MatMul", [q, k], "scores")], "probs", axis=3)
    merged = node("Transpose", [node("MatMul", [scores, head(split, 2, "v")], "pv")],
                  "pv_t", perm=[0, 2, 1, 3])
    attended = linear(node("Reshape", [merged, shape("merge", [1, T, C])], "merged"), C, C,
                      "proj")
    mixed = layer_norm(node("Add", [tokens, attended], "residual"), "ln2")
    surface = node("Transpose", [node("Reshape", [mixed, shape("unflat", [1, 1, T, C])],
                                      "mixed4")], "surface", perm=[0, 3, 1, 2])
    conv = node("Conv", [surface, const("conv.w", weight(CONV, C, 1, 1, scale=C ** -0.5))],
                "conv", kernel_shape=[1, 1])
    squeezed = node("Squeeze", [node("Relu", [conv], "conv_relu")], "squeezed", axes=[2])
    logits = linear(node("Transpose", [squeezed], "per_token", perm=[0, 2, 1]), CONV, CLASSES,
                    "classifier")
    node("Softmax", [logits], "y", axis=2)
    graph = helper.make_graph(
        nodes, "paddle_mixer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 1, T])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def _x(seed):
    return np.random.default_rng(seed).standard_normal((1, C, 1, T)).astype(np.float32)


@pytest.fixture(scope="module")
def mixer():
    model = _paddle_mixer()
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return model, session


def test_paddle_mixer_is_whole_on_the_accelerator(mixer):
    """The head split, scale, Q K^T, opset-12 softmax, P V and head merge are one
    ``accel.attention`` between dense layers over the tokens; the layout ops around (the
    squeeze, the tokens put back on the NCHW surface, the classifier's opset-12 softmax
    between reshapes) name the same bytes as ops the BDMA and the SDP run: one external
    function, nothing on the host, and the net runs as ONNX Runtime does."""
    model, session = mixer
    mod, params = from_onnx(model)
    report = ac.partition_report(mod, params)
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == 1, report
    assert report.host == [] and len(report.functions) == 1, report
    vm = ac.virtual_machine(ac.build(mod, params=params))
    for seed in (1, 2):
        x = _x(seed)
        assert_close(run_main(vm, x), session.run(None, {"x": x})[0], 1e-4)
