"""softsign, x / (1 + |x|), on the SDP (sim/decompose.softsign_passes): |x| as max(-x, x),
1 / (1 + |x|) through the reciprocal's LUT, then the product with x; one layer, a kind of the
softmax's entry (accel.softsign), from torch's F.softsign and ONNX's Softsign, which both
arrive as divide(x, abs(x) + 1). Before: its abs and divide on the host, its add alone."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, build_and_run, sqnr, torch_forward


class ConvSoftsign(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(torch.nn.functional.softsign(self.conv(x) * 3))


def _input(seed, shape=(1, 3, 8, 8)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _model():
    torch.manual_seed(0)
    return ConvSoftsign().eval()


def _whole(part):
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    assert any(op.primitive == "accel.softsign" for op in report.ops), report
    return report


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_conv_softsign_conv_is_whole(precision):
    """Measured against PyTorch: fp32 6e-8 of the output scale, fp16 5.2e-4 off; int8 (the
    softsign in fp16 between converting runs: the reciprocal has no int8 tables) 1.6e-2."""
    model, x = _model(), _input(0)
    calibration = [(_input(seed),) for seed in range(1, 4)]
    options = {"calibration": calibration} if precision == "int8" else {}
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision=precision, **options)
    report = _whole(part)
    y, expected = build_and_run(part, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-6)
    elif precision == "fp16":
        assert sqnr(y, expected) >= 55.0
    else:
        assert [op.precision for op in report.ops if op.primitive == "accel.softsign"] == \
            ["fp16"] * 3
        assert sqnr(y, expected) >= 30.0


def test_the_onnx_forms_are_the_same_layer(tmp_path):
    """torch.onnx's export (Abs, Add, Div) and ONNX's own Softsign op (opset 13)."""
    model, x = _model(), _input(0)
    path = export_onnx(model, (torch.from_numpy(x),), tmp_path / "softsign.onnx")
    part = ac.partition_for_accel(*from_onnx(path))
    _whole(part)
    assert_close(build_and_run(part, x), torch_forward(model, x), 1e-6)
    graph = helper.make_graph(
        [helper.make_node("Softsign", ["x"], ["y"])], "softsign",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])])
    path = tmp_path / "softsign13.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    part = ac.partition_for_accel(*from_onnx(path))
    _whole(part)
    x = _input(1, (1, 4, 5, 6)) * 5
    expected = torch.nn.functional.softsign(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(build_and_run(part, x), expected, rtol=2.5e-7, atol=0)


class NotSoftsign(torch.nn.Module):
    def forward(self, x):
        return x / (x.abs() + 2)


def test_another_constant_is_not_softsign_and_right():
    x = _input(2, (1, 2, 4, 4)) * 4
    mod, params = from_pytorch(NotSoftsign(), (torch.from_numpy(x),))
    report = ac.partition_report(mod, params)
    assert not any(op.primitive == "accel.softsign" for op in report.ops), report
    assert [op.op for op in report.host if op.op == "relax.divide"] == ["relax.divide"], report
    assert_close(build_and_run(mod, x, params=params), torch_forward(NotSoftsign(), x), 1e-6)
