"""torch's F.normalize over the last axis (CLIP's embeddings, Swin-V2's cosine attention)
alone on the accelerator: one composite whose runs are sim/decompose.l2_normalize_passes,
the built code the NumPy reference's passes bit for bit in fp32 and fp16, fp32 within 1e-4
of PyTorch's output scale, fp16 within 1 dB of PyTorch's own ``.half()`` against float64."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.sim import decompose, reference
from conftest import assert_close, assert_same, build_and_run, sqnr, torch_forward


class Normalize(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.normalize(x, dim=-1)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_normalize_alone_is_one_composite_bit_for_bit_the_reference(precision):
    rng = np.random.default_rng(5)
    shape = (1, 24, 32)  # [batch, tokens, channels]
    x = (rng.standard_normal(shape) * 2 + 0.3).astype(np.float32)
    x[0, 5] = 0.0  # a token of zeros: zeros, as torch's x / eps
    model = Normalize().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params, precision=precision)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert list(report.functions.values()) == [["accel.l2_normalize"]]
    y = build_and_run(mod, x, params=params, precision=precision)
    surface = x.transpose(0, 2, 1)[:, :, None, :]
    # the compiler's passes: fp32's sum one CONV of ones to one channel (decompose.fp32_sums)
    passes = decompose.l2_normalize_passes(
        surface.shape, 1e-12, precision,
        reduce=decompose.fp32_sums(surface.shape) if precision == "fp32" else "tree")
    assert precision != "fp32" or len(passes.passes) == 3
    expected = reference.run_decomposition(passes, surface.astype(
        decompose.dtype_for(precision)))
    expected = np.ascontiguousarray(expected[:, :, 0, :].transpose(0, 2, 1), np.float32)
    if precision == "fp32":
        assert_same(y, expected)
        assert_close(y, torch_forward(model, x), 1e-4)
        return
    keep = np.ones(shape[1], bool)
    keep[5] = False  # half's 0 * inf: NaN, as PyTorch's half F.normalize (its eps is 0 in half)
    assert_same(y[:, keep], expected[:, keep])
    exact = torch_forward(model.double(), x.astype(np.float64))[:, keep]
    half = torch_forward(model.half(), x.astype(np.float16)).astype(np.float64)[:, keep]
    assert sqnr(y[:, keep], exact) >= sqnr(half, exact) - 1.0


def test_normalize_from_onnx_is_the_same_composite(tmp_path):
    """torch.onnx spells F.normalize as ReduceL2 (TVM: sqrt(sum(x * x))), Clip with its min
    only and Expand + Div; TVM imports the one-sided Clip as a call_tir of maximum, read back
    as clip(x, eps, inf) (rewrites.clip_from_bounds): the PyTorch model's one composite, its
    output bit for bit (before: 3 of 8 operators offloaded, the norm on the host)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 12, 32)).astype(np.float32)
    x[0, 3] = 0.0
    model = Normalize().eval()
    path = tmp_path / "normalize.onnx"
    export_onnx(model, (torch.from_numpy(x),), path)
    mod, params = from_onnx(path)
    report = ac.partition_report(mod, params)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert list(report.functions.values()) == [["accel.l2_normalize"]]
    torch_mod, torch_params = from_pytorch(model, (torch.from_numpy(x),))
    y = build_and_run(mod, x, params=params)
    assert_same(y, build_and_run(torch_mod, x, params=torch_params))
    assert_close(y, torch_forward(model, x), 1e-4)


@pytest.mark.parametrize("opset", [13, 18])  # ReduceL2's axes an attribute, an input
def test_onnx_lp_normalization_is_the_same_composite(opset):
    """ONNX's LpNormalization (p = 2), which TVM's importer has no converter for, imported as
    ReduceL2, a Clip to 2^-63 and Div (frontend._lp_normalizations): one accel.l2_normalize
    composite, within 1e-4 of ONNX Runtime's LpNormalization, a token of zeros 0 as ONNX's."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("LpNormalization", ["h"], ["y"], name="norm", axis=-1, p=2)],
        "lp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 32])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    mod, params = from_onnx(model)
    report = ac.partition_report(mod, params)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1 and \
        "accel.l2_normalize" in list(report.functions.values())[0], report.functions
    x = rng.standard_normal((1, 12, 32)).astype(np.float32)
    x[0, 4] = 0.0
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    y = build_and_run(mod, x, params=params)
    assert_close(y, expected, 1e-4)
    assert not np.any(y[0, 4])
