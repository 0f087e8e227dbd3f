"""log_softmax on the engines: x - (max + ln(sum(exp(x - max)))), softmax's passes with ln
through the SDP's LUT (ACCEL_ACT_LOG) and a subtraction on the SDP
(sim/decompose.log_softmax_passes), over the last axis of [T, C], [B, T, C] or
[B, H, W, C] and over the channels of NCHW data, as softmax. F.log_softmax, nn.LogSoftmax and
ONNX's LogSoftmax (opset 13 on) all arrive as relax.nn.log_softmax. Before: on the host."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, build_and_run, sqnr, torch_forward


class Classifier(torch.nn.Module):
    """conv -> relu -> global average -> linear -> log_softmax over the classes."""

    def __init__(self, module: bool = False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)
        self.log_softmax = torch.nn.LogSoftmax(dim=1) if module else None

    def forward(self, x):
        y = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1)
        y = self.fc(y) * 2
        return self.log_softmax(y) if self.log_softmax else torch.nn.functional.log_softmax(y, -1)


class ChannelLogSoftmax(torch.nn.Module):
    """log_softmax over the channels of a convolution's NCHW output (a segmentation head)."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.dim = dim

    def forward(self, x):
        return torch.nn.functional.log_softmax(self.conv(x) * 3, self.dim)


def _input(seed, shape=(1, 3, 8, 8)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _model(cls=Classifier, **options):
    torch.manual_seed(0)
    return cls(**options).eval()


def _whole(part):
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    assert any(op.primitive == "accel.log_softmax" for op in report.ops), report
    return report


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("module", [False, True])
def test_a_classifier_head_ending_in_log_softmax_is_whole(precision, module):
    """F.log_softmax(dim=-1) and nn.LogSoftmax(dim=1) of [1, 10] logits. Measured: fp32 within
    2.4e-7 of PyTorch, fp16 within 1.4e-3 (its sums below 9: the log's LO table)."""
    model, x = _model(module=module), _input(0)
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision=precision)
    _whole(part)
    y, expected = build_and_run(part, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    else:
        assert np.abs(y - expected).max() <= 4e-3


class Logits(Classifier):
    """The classifier's logits: its layers up to the log_softmax."""

    def forward(self, x):
        y = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1).flatten(1)
        return self.fc(y) * 2


def test_int8_runs_the_log_softmax_in_fp16():
    """As a softmax's: its sum of exponentials and log in fp16 between converting runs, the
    layers before it int8, all one function. Its output is within fp16's rounding (8.0e-4
    measured) of torch's log_softmax of the same int8 build's logits: the log_softmax adds
    no int8 error. Against PyTorch 59.8 dB measured; ONNX Runtime's static int8 of the same
    weights 63.2, the gap the logits' own (43.3 dB against ORT's 45.2, before any
    log_softmax)."""
    model, x = _model(), _input(0)
    calibration = [(_input(seed),) for seed in range(1, 5)]
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision="int8", calibration=calibration)
    report = _whole(part)
    assert {op.op: op.precision for op in report.ops}["relax.nn.log_softmax"] == "fp16"
    assert {op.precision for op in report.ops if op.op != "relax.nn.log_softmax"} == {"int8"}
    y = build_and_run(part, x)
    logits = build_and_run(ac.partition_for_accel(
        *from_pytorch(_model(Logits), (torch.from_numpy(x),)), precision="int8",
        calibration=calibration), x)
    assert np.abs(y - torch.log_softmax(torch.from_numpy(logits), -1).numpy()).max() <= 2e-3
    assert sqnr(y, torch_forward(model, x)) >= 55.0


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_over_the_channels_of_nchw_data(precision):
    model, x = _model(ChannelLogSoftmax), _input(1)
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision=precision)
    _whole(part)
    y, expected = build_and_run(part, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    else:
        assert sqnr(y, expected) >= 50.0


def test_the_onnx_export_is_the_same_layer(tmp_path):
    """torch.onnx writes LogSoftmax (opset 17)."""
    model, x = _model(), _input(0)
    path = export_onnx(model, (torch.from_numpy(x),), tmp_path / "head.onnx")
    assert "LogSoftmax" in [node.op_type for node in onnx.load(path).graph.node]
    part = ac.partition_for_accel(*from_onnx(path))
    _whole(part)
    assert_close(build_and_run(part, x), torch_forward(model, x), 1e-5)


def test_onnx_opset_13_log_softmax(tmp_path):
    """Gemm + LogSoftmax over the last axis in opset 13 (its axis default -1 since 13)."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((12, 16)) * 0.5).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1),
         helper.make_node("LogSoftmax", ["z"], ["y"])], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    path = tmp_path / "log_softmax13.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    part = ac.partition_for_accel(*from_onnx(path))
    _whole(part)
    x = (rng.standard_normal((2, 16)) * 2).astype(np.float32)
    expected = torch.log_softmax(torch.from_numpy(x @ w.T + b), -1).numpy()
    assert_close(build_and_run(part, x), expected, 1e-5)


def test_another_axis_stays_on_the_host_and_right():
    """Over the rows (axis 2) of NCHW data: no engine pass reduces them; the host runs it."""
    model, x = _model(ChannelLogSoftmax, dim=2), _input(3)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params)
    [op] = report.host
    assert op.op == "relax.nn.log_softmax" and "log_softmax over axis 2" in op.reason, report
    assert_close(build_and_run(mod, x, params=params), torch_forward(model, x), 1e-6)
