"""``F.unfold`` / ``F.fold`` (aten's im2col and col2im) from PyTorch. torch decomposes them
into gathers that TVM's converter refused (session 22 made that a typed error); they are now
imported whole (``frontend._im2col``, ``_col2im``): unfold a convolution of one-hot weights, k^2
outputs per input channel, fold the transposed convolution of the same weights, both exact.
torch.onnx writes unfold as a Pad, two Gathers, a Transpose and a Reshape, which TVM imports
as host kernels: ``frontend._unfolds_as_convs`` reads them as the same convolution."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, random_inputs,
                      torch_forward)


class UnfoldFold(torch.nn.Module):
    """Patches taken with padding and a stride, scaled, put back (the overlaps summed)."""

    def forward(self, x):
        patches = F.unfold(x, 3, padding=1, stride=2)
        return F.fold(patches * 2.0, (8, 8), 3, padding=1, stride=2)


class PatchEmbedding(torch.nn.Module):
    """A ViT-style patch embedding written with unfold: 4x4 patches, a Linear over each."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3 * 4 * 4, 32)

    def forward(self, x):
        return self.proj(F.unfold(x, 4, stride=4).transpose(1, 2))


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


@pytest.mark.parametrize("kernel, dilation, padding, stride", [
    (3, 1, 1, 2), ((2, 3), (1, 2), (0, 1), 1), (2, 1, 0, 2)])
def test_unfold_is_a_one_hot_convolution_bit_for_bit(kernel, dilation, padding, stride):
    class Unfold(torch.nn.Module):
        def forward(self, x):
            return F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)

    x = torch.randn(2, 3, 7, 9)
    model = Unfold().eval()
    mod, params = from_pytorch(model, (x,))
    _whole(ac.partition_report(mod, params))
    np.testing.assert_array_equal(build_and_run(mod, x.numpy(), params=params),
                                  torch_forward(model, x))


def test_fold_of_unfold_and_a_patch_embedding_in_every_precision():
    torch.manual_seed(0)
    for model, shape in ((UnfoldFold().eval(), (1, 4, 8, 8)),
                         (PatchEmbedding().eval(), (1, 3, 16, 16))):
        x = torch.randn(*shape)
        mod, params = from_pytorch(model, (x,))
        calibration = random_inputs(shape, 4, 5)
        for precision in ("fp32", "fp16", "int8"):
            extra = {"calibration": calibration} if precision == "int8" else {}
            _whole(ac.partition_report(mod, params, precision=precision, **extra))
        assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x),
                     1e-5)
        ours, half = fp16_and_half_sqnrs(mod, params, model, x)
        assert ours >= half - 1.0, (type(model).__name__, ours, half)


@pytest.mark.parametrize("kernel, dilation, padding, stride", [
    (3, 1, 1, 2), ((2, 3), (1, 2), (0, 1), 1), (2, 1, 0, 2), (3, 1, 0, 1)])
def test_unfold_from_onnx_is_the_same_convolution_bit_for_bit(kernel, dilation, padding,
                                                               stride, tmp_path):
    class Unfold(torch.nn.Module):
        def forward(self, x):
            return F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)

    x = torch.randn(2, 3, 7, 9)
    model = Unfold().eval()
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "unfold.onnx"))
    _whole(ac.partition_report(mod, params))
    np.testing.assert_array_equal(build_and_run(mod, x.numpy(), params=params),
                                  torch_forward(model, x))


def test_a_patch_embedding_from_onnx_in_every_precision(tmp_path):
    torch.manual_seed(0)
    model, shape = PatchEmbedding().eval(), (1, 3, 16, 16)
    x = torch.randn(*shape)
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "patches.onnx"))
    calibration = random_inputs(shape, 4, 5)
    for precision in ("fp32", "fp16", "int8"):
        extra = {"calibration": calibration} if precision == "int8" else {}
        _whole(ac.partition_report(mod, params, precision=precision, **extra))
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-5)


def _gathered_windows(row_index):
    """x [1, 1, 5, 3]'s rows gathered by ``row_index`` [3, 2], its columns by [[0, 1], [1, 2]],
    viewed as torch.onnx views unfold's patches: [1, 6, 4]."""
    from onnx import TensorProto, helper, numpy_helper

    constants = [numpy_helper.from_array(np.array(row_index, np.int64), "rows"),
                 numpy_helper.from_array(np.array([[0, 1], [1, 2]], np.int64), "columns"),
                 numpy_helper.from_array(np.array([1, 6, 4], np.int64), "shape")]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "rows"], ["a"], axis=2),
         helper.make_node("Gather", ["a", "columns"], ["b"], axis=4),
         helper.make_node("Transpose", ["b"], ["t"], perm=[0, 1, 2, 4, 3, 5]),
         helper.make_node("Reshape", ["t", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gathers_that_are_not_windows_stay_gathers():
    """Rows [0, 2, 1] of each window are no grid of taps: that graph is imported as it is;
    rows [0, 1, 2] (stride 2) are, and become the Conv (checked by ONNX Runtime)."""
    import onnx
    import onnxruntime as ort

    from accel_codegen.compiler.frontend import _unfolds_as_convs

    model = _gathered_windows([[0, 2], [2, 4], [1, 3]])
    assert _unfolds_as_convs(model) is model
    model = _gathered_windows([[0, 2], [1, 3], [2, 4]])
    converted = _unfolds_as_convs(model)
    assert [n.op_type for n in converted.graph.node] == ["Conv", "Reshape"]
    onnx.checker.check_model(converted)
    x = np.random.default_rng(0).standard_normal((1, 1, 5, 3)).astype(np.float32)
    run = [ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
           for m in (model, converted)]
    np.testing.assert_array_equal(*run)
