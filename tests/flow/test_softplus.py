"""softplus, ln(1 + e^x) with PyTorch's beta 1 and threshold 20, on the SDP's LUT
(ACCEL_ACT_SOFTPLUS): as the epilogue of the convolution before it and alone, from torch's
where(x > 20, x, log(exp(x) + 1)) and ONNX's Softplus (max(x, 0) + log(1 + exp(-|x|))), both
read back as relax.nn.softplus (rewrites.softplus_from_formula). Before: its 5 or 7 operators
on the host. Other betas and thresholds stay on the host, saying why."""
import numpy as np
import onnx
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.sim.lut_math import softplus64
from conftest import assert_close, build_and_run, ort_int8_sqnr, sqnr, torch_forward


class ConvSoftplus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.head(torch.nn.functional.softplus(self.conv(x) * 3))


class Softplus(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return torch.nn.functional.softplus(x, **self.options)


def _input(seed, shape=(1, 3, 12, 12)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _model():
    torch.manual_seed(0)
    return ConvSoftplus().eval()


def _whole(part):
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    return report


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_softplus_is_the_convolutions_lut_epilogue(precision, tmp_path):
    """Conv + softplus + conv, whole, one function. Measured: fp32 2.8e-7 of the output scale,
    fp16 62.8 dB, int8 28.7 dB (ONNX Runtime's static int8 of the same weights 29.3)."""
    model, x = _model(), _input(0)
    calibration = [(_input(seed),) for seed in range(1, 5)]
    options = {"calibration": calibration} if precision == "int8" else {}
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision=precision, **options)
    report = _whole(part)
    assert any(op.primitive and op.primitive.endswith("_softplus") for op in report.ops), report
    y, expected = build_and_run(part, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    elif precision == "fp16":
        assert sqnr(y, expected) >= 55.0
    else:
        assert sqnr(y, expected) >= ort_int8_sqnr(model, x, calibration, tmp_path) - 1.0


def test_the_onnx_export_is_the_same_layer(tmp_path):
    """torch.onnx (opset 17) writes Softplus, which TVM imports as max(x, 0) + log(1 +
    exp(-|x|))."""
    model, x = _model(), _input(0)
    path = export_onnx(model, (torch.from_numpy(x),), tmp_path / "softplus.onnx")
    assert "Softplus" in [node.op_type for node in onnx.load(path).graph.node]
    part = ac.partition_for_accel(*from_onnx(path))
    report = _whole(part)
    assert any(op.primitive and op.primitive.endswith("_softplus") for op in report.ops), report
    assert_close(build_and_run(part, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_softplus_alone(precision, tmp_path):
    """softplus of the model's input: one SDP pass, bit for bit the FP32 reference's softplus
    (libm in double, rounded once) in fp32, PyTorch's within the LUT's bound in fp16; from
    ONNX too."""
    x = _input(3, (1, 4, 6, 6)) * 8
    x.flat[:3] = [25.0, -30.0, 20.5]
    model = Softplus().eval()
    for mod, params in (from_pytorch(model, (torch.from_numpy(x),)),
                        from_onnx(export_onnx(model, (torch.from_numpy(x),),
                                              tmp_path / "alone.onnx"))):
        part = ac.partition_for_accel(mod, params, precision=precision)
        report = _whole(part)
        assert [op.op for op in report.ops] == ["relax.nn.softplus"], report
        y = build_and_run(part, x)
        if precision == "fp32":
            np.testing.assert_array_equal(y, softplus64(x).astype(np.float32))
            assert_close(y, torch_forward(model, x), 1e-6)
        else:  # accel.h: E = 1.3e-4, plus the half's rounding of entries and output
            expected = softplus64(x)
            assert np.all(np.abs(y - expected) <= 1.3e-4 + 2**-10 * np.abs(expected))


@pytest.mark.parametrize("options, reason", [
    ({"beta": 2.0}, "relax.nn.softplus with beta = 2.0: the engine's softplus computes beta = 1.0"),
    ({"threshold": 5.0}, "relax.nn.softplus with threshold = 5.0: the engine's softplus "
                         "computes threshold = 20.0")])
def test_other_betas_and_thresholds_stay_on_the_host_saying_why(options, reason):
    """torch's where(b x > c, x, log(exp(b x) + 1) / b) is read back as softplus(x, b, c)
    (rewrites.softplus_from_formula): with beta 2 or threshold 5 (t and softplus(t) differ
    above 5) it is not the engine's softplus, and the host runs it, rightly."""
    x = _input(4, (1, 2, 5, 5)) * 6
    x.flat[:2] = [5.5, 10.5]
    model = Softplus(**options).eval()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params)
    [op] = report.ops
    assert not op.offloaded and op.reason == reason, report
    assert_close(build_and_run(mod, x, params=params), torch_forward(model, x), 1e-6)


def test_mish_alone_is_one_mish():
    """x * tanh(softplus(x)) of the input: the mish, not a softplus then tanh and multiply."""
    x = _input(5, (1, 3, 4, 4)) * 4
    model = torch.nn.Mish().eval()
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)))
    report = _whole(part)
    assert {op.primitive for op in report.ops} == {"accel.mish"}, report  # its three ops
    assert_close(build_and_run(part, x), torch_forward(model, x), 1e-5)
