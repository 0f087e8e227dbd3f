"""Mish (YOLOv4's activation), x tanh(softplus(x)), on the SDP's LUT (ACCEL_ACT_MISH) as the
epilogue of the convolution before it, in the three forms the frontends spell it: torch's
where(x > 20, x, log(exp(x) + 1)), ONNX's Softplus (max(x, 0) + log(1 + exp(-|x|))) and
ONNX's Mish op (log(1 + exp(x))). Before: 8 of its 9 operators per activation on the host."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.sim.lut_math import mish64
from conftest import assert_close, build_and_run, ort_int8_sqnr, sqnr, torch_forward


class ConvMish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.head(torch.nn.functional.mish(self.conv(x) * 3))


def _input(seed, shape=(1, 3, 12, 12)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _model():
    torch.manual_seed(0)
    return ConvMish().eval()


def _lut_runs(part):
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    return report


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_mish_is_the_convolutions_lut_epilogue(precision, tmp_path):
    """fp32 measured 3.4e-7 of the output scale, fp16 62.2 dB, int8 28.0 dB."""
    model, x = _model(), _input(0)
    calibration = [(_input(seed),) for seed in range(1, 5)]
    options = {"calibration": calibration} if precision == "int8" else {}
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision=precision, **options)
    report = _lut_runs(part)
    assert any(op.primitive and op.primitive.endswith("_mish") for op in report.ops), report
    y, expected = build_and_run(part, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    elif precision == "fp16":
        assert sqnr(y, expected) >= 55.0
    else:
        assert sqnr(y, expected) >= ort_int8_sqnr(model, x, calibration, tmp_path) - 1.0


def test_the_onnx_export_is_the_same_layer(tmp_path):
    """torch.onnx (opset 17) writes Softplus + Tanh + Mul."""
    model, x = _model(), _input(0)
    path = export_onnx(model, (torch.from_numpy(x),), tmp_path / "mish.onnx")
    assert "Softplus" in [node.op_type for node in onnx.load(path).graph.node]
    part = ac.partition_for_accel(*from_onnx(path))
    _lut_runs(part)
    assert_close(build_and_run(part, x), torch_forward(model, x), 1e-5)


def test_onnxs_mish_op(tmp_path):
    """ONNX's Mish (opset 18), which TVM imports as x tanh(log(1 + exp(x)))."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Mish", ["c"], ["y"])], "mish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 7])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "mish18.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    part = ac.partition_for_accel(*from_onnx(path))
    _lut_runs(part)
    x = (rng.standard_normal((1, 3, 6, 7)) * 3).astype(np.float32)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    expected = mish64(conv.numpy().astype(np.float64)).astype(np.float32)
    assert_close(build_and_run(part, x), expected, 1e-5)


class SoftplusOnly(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.softplus(x) * x  # not tanh: not mish


def test_softplus_without_tanh_is_softplus_not_mish():
    """softplus(x) * x is the SDP's softplus then its multiply, no mish (test_softplus.py)."""
    x = _input(2, (1, 2, 4, 4)) * 10
    mod, params = from_pytorch(SoftplusOnly(), (torch.from_numpy(x),))
    report = ac.partition_report(mod, params)
    assert not report.host, report
    assert not any(op.primitive and "mish" in op.primitive for op in report.ops), report
    assert any(op.op == "relax.nn.softplus" for op in report.ops), report
    assert_close(build_and_run(mod, x, params=params), torch_forward(SoftplusOnly(), x), 1e-6)
