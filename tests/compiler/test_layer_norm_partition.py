"""The seed's net, relu(layer_norm(matmul(x, W))), partitioned (issue 29): from Relax, from
PyTorch (nn.Linear and torch.matmul) and from ONNX it is one composite in one external
function, whose runs are the dense layer's CONV + SDP and the layer norm's engine passes; what
the passes cannot run stays on the host with its reason."""
import numpy as np
import pytest
import torch
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch


class Linear(torch.nn.Module):
    def __init__(self, c=32, k=48):
        super().__init__()
        self.fc = torch.nn.Linear(c, k)
        self.ln = torch.nn.LayerNorm(k)

    def forward(self, x):
        return torch.relu(self.ln(self.fc(x)))


class MatMul(torch.nn.Module):
    def __init__(self, c=32, k=48):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(c, k) / c ** 0.5)
        self.ln = torch.nn.LayerNorm(k)

    def forward(self, x):
        return torch.relu(self.ln(torch.matmul(x, self.w)))


def _relax_seed(shape=(1, 8, 32), k=48):
    """relu(layer_norm(matmul(x, W))) written in Relax, as the forum question has it."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((shape[-1], k)).astype(np.float32))
            gamma = relax.const(rng.uniform(0.5, 1.5, k).astype(np.float32))
            beta = relax.const(rng.uniform(-0.5, 0.5, k).astype(np.float32))
            y = bb.emit(relax.op.matmul(x, w))
            y = bb.emit(relax.op.nn.layer_norm(y, gamma, beta, axes=[-1]))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def _one_composite(report, name):
    assert report.host == [], report
    assert list(report.functions.values()) == [[name]], report.functions


def test_relax_seed_is_one_composite_in_one_function():
    _one_composite(ac.partition_report(_relax_seed()), "accel.token_dense_layer_norm_relu")


@pytest.mark.parametrize("model,name", [(Linear, "accel.token_dense_bias_layer_norm_relu"),
                                        (MatMul, "accel.token_dense_layer_norm_relu")])
def test_pytorch_seed_is_one_composite_in_one_function(model, name):
    torch.manual_seed(0)
    mod, params = from_pytorch(model().eval(), (torch.randn(1, 8, 32),))
    report = ac.partition_report(mod, params)
    _one_composite(report, name)
    # torch's reshapes around nn.Linear's matmul are in the composite too
    assert {op.op for op in report.offloaded} >= {"relax.matmul", "relax.nn.layer_norm",
                                                 "relax.nn.relu"}


def test_onnx_seed_partitions_like_the_pytorch_model(tmp_path):
    torch.manual_seed(0)
    path = export_onnx(Linear().eval(), (torch.randn(1, 8, 32),), tmp_path / "seed.onnx")
    mod, params = from_onnx(path)
    _one_composite(ac.partition_report(mod, params), "accel.token_dense_bias_layer_norm_relu")


def test_int8_runs_the_layer_norm_in_fp16_where_the_configuration_has_it():
    """int8 code runs the layer norm in fp16 (its variance and 1/sqrt: engines.fp16_in_int8),
    the report saying why; nv_small, int8 only, keeps it on the host with that reason."""
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    report = ac.partition_report(_relax_seed(), precision="int8", calibration=[(x,)])
    assert not report.host, report
    assert {op.precision for op in report.ops} == {"fp16"}, report
    (why,) = set(report.fp16_layers().values())
    assert "variance and 1/sqrt" in why and "dynamic range" in why
    assert "in fp16 in int8 code" in str(report)
    small = ac.partition_report(_relax_seed(), config="nv_small", precision="int8",
                                calibration=[(x,)])
    reasons = {op.op: op.reason for op in small.host}
    assert "relax.nn.layer_norm" in reasons, small
    assert "int8 build runs in fp16" in reasons["relax.nn.layer_norm"] and "dynamic range" in \
        reasons["relax.nn.layer_norm"] and "nv_small" in reasons["relax.nn.layer_norm"]


def test_layer_norm_over_another_axis_stays_on_the_host():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.layer_norm(x, relax.const(np.ones(8, np.float32)),
                                               relax.const(np.zeros(8, np.float32)), axes=[1]))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    report = ac.partition_report(bb.get())
    reasons = {op.op: op.reason for op in report.host}
    assert "the last axis" in reasons["relax.nn.layer_norm"], report


def test_estimate_names_each_pass_of_the_layer_norm():
    estimate = ac.estimate(_relax_seed(), precision="fp16")
    labels = [layer.label for layer in estimate.layers]
    assert labels[0] == "f0.0p0 accel.token_dense_layer_norm_relu"
    roles = [label.split(":", 1)[1] for label in labels[1:]]
    # fp16: the sums as CONVs, the Newton steps, the last pass through the SDP's X units
    assert roles[-2:] == ["layer_norm.normalise.low", "layer_norm.normalise"]
    # fp16 only; each Newton step's label says which it is
    assert "layer_norm.rsqrt" in roles and "layer_norm.newton1" in roles
    assert len(set(roles)) == len(roles), roles
    assert all(layer.cycles > 0 for layer in estimate.layers)
    fp32 = ac.estimate(_relax_seed(), precision="fp32")
    fp32_roles = [layer.label.split(":")[-1] for layer in fp32.layers]
    assert not any(r.startswith("layer_norm.newton") for r in fp32_roles) and fp32_roles[-1] == "layer_norm.shift"
