"""RMS norm on the accelerator (issue 29: "layer norm, and RMS norm"): torch's nn.RMSNorm and
T5's / LLaMA's formula (``w * x * rsqrt(mean(x^2, -1) + eps)``; exported to ONNX as a
reciprocal of a sqrt) become ``relax.nn.rms_norm`` (rewrites.rms_norm_from_formula), whose
runs are sim/decompose.rms_norm_passes: a layer norm's passes without the centring. Before: the
power, mean, rsqrt and multiplies on the host, a T5 block in 12 external functions."""
import copy

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen import reference
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.sim import decompose
from conftest import (assert_close, assert_same, build_and_run, ort_int8_sqnr, sqnr,
                      torch_forward)

C = 64


class T5Norm(torch.nn.Module):
    """T5's layer norm: no mean subtracted, no bias (``weight=False``: none at all)."""

    def __init__(self, weight=True, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.2 * torch.randn(C)) if weight else None
        self.eps = eps

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y if self.weight is None else self.weight * y


class Block(torch.nn.Module):
    """A pre-norm MLP block with a final norm, of ``norm`` layers."""

    def __init__(self, norm):
        super().__init__()
        self.norm1, self.norm2 = norm(), norm()
        self.up, self.down = torch.nn.Linear(C, 2 * C), torch.nn.Linear(2 * C, C)

    def forward(self, x):
        return self.norm2(x + self.down(torch.nn.functional.silu(self.up(self.norm1(x)))))


def _torch_rms_norm():
    norm = torch.nn.RMSNorm(C, eps=1e-6)
    with torch.no_grad():
        norm.weight.mul_(1 + 0.2 * torch.randn(C))
    return norm


NORMS = {"nn.RMSNorm": _torch_rms_norm, "t5": T5Norm, "t5_no_weight": lambda: T5Norm(False)}


def _model(norm):
    torch.manual_seed(0)
    return Block(NORMS[norm]).eval(), torch.randn(2, 16, C)


def _whole(partitioned):
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert sum(op.primitive == "accel.rms_norm" for op in report.ops) == 2, str(report)


@pytest.mark.parametrize("norm", list(NORMS))
def test_fp32_is_whole_and_within_1e_4_of_pytorch(norm):
    model, x = _model(norm)
    partitioned = ac.partition_for_accel(*from_pytorch(model, (x,)))
    _whole(partitioned)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=1e-4)


def test_the_onnx_export_partitions_as_the_pytorch_model(tmp_path):
    model, x = _model("t5")
    partitioned = ac.partition_for_accel(*from_onnx(export_onnx(model, (x,),
                                                                tmp_path / "t5.onnx")))
    _whole(partitioned)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=1e-4)


@pytest.mark.parametrize("norm", ["nn.RMSNorm", "t5"])
def test_fp16_within_a_decibel_of_pytorch_half(norm):
    model, x = _model(norm)
    partitioned = ac.partition_for_accel(*from_pytorch(model, (x,)), precision="fp16")
    _whole(partitioned)
    expected = torch_forward(model, x)
    with torch.no_grad():
        half = copy.deepcopy(model).half()(x.half()).float().numpy()
    assert sqnr(build_and_run(partitioned, x), expected) >= sqnr(half, expected) - 1.0


def test_int8_at_least_onnx_runtime_static_int8(tmp_path):
    """The norms' passes run in fp16 inside the int8 function (engines.fp16_in_int8)."""
    model, x = _model("t5")
    calibration = [torch.randn(2, 16, C).numpy() for _ in range(4)]
    partitioned = ac.partition_for_accel(*from_pytorch(model, (x,)), precision="int8",
                                         calibration=calibration)
    _whole(partitioned)
    ours = sqnr(build_and_run(partitioned, x), torch_forward(model, x))
    assert ours >= ort_int8_sqnr(model, x.numpy(), calibration, tmp_path) - 1.0, ours


@pytest.mark.parametrize("precision, reduce", [("fp32", "tree"), ("fp32", "conv1"),
                                               ("fp16", "tree")])
def test_the_passes_equal_the_reference_bit_for_bit(precision, reduce):
    rng = np.random.default_rng(3)
    dtype = decompose.dtype_for(precision)
    shape = (2, 48, 1, 9)
    x = (rng.standard_normal(shape) * 2 + 0.3).astype(dtype)
    gamma = (1 + 0.3 * rng.standard_normal(48)).astype(dtype)
    decomposition = decompose.rms_norm_passes(shape, gamma, 1e-6, precision, reduce)
    y, _ = decompose.run_passes(ac.Device("nv_full"), decomposition, x)
    assert_same(y, reference.run_decomposition(decomposition, x), f"{precision}, {reduce}")


class T5Layer(torch.nn.Module):
    """A T5 encoder layer: RMS norms, attention without biases whose scores add a relative
    position bias gathered from an embedding by a constant table of buckets (an int64 buffer,
    cast for the gather), a ReLU MLP."""

    def __init__(self, heads=4, tokens=16):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = T5Norm(), T5Norm()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(C, C, bias=False) for _ in range(4))
        self.wi, self.wo = torch.nn.Linear(C, 4 * C, bias=False), torch.nn.Linear(4 * C, C,
                                                                                 bias=False)
        self.relative = torch.nn.Embedding(32, heads)
        offset = torch.arange(tokens)[None, :] - torch.arange(tokens)[:, None]
        self.register_buffer("bucket", (offset > 0).long() * 16 + offset.abs().clamp(max=15),
                             persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        y = self.norm1(x)
        q, k, v = (f(y).view(b, t, self.heads, -1).transpose(1, 2) for f in (self.q, self.k,
                                                                            self.v))
        scores = q @ k.transpose(-1, -2) + self.relative(self.bucket).permute(2, 0, 1)[None]
        mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, C)
        x = x + self.o(mixed)
        return x + self.wo(torch.relu(self.wi(self.norm2(x))))


@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_a_t5_encoder_is_whole(source, tmp_path):
    """Its relative position bias is a constant once the buckets' cast and reshape are read
    (attention.evaluate_indices): before, a T5 encoder of two layers was 7 external
    functions (the bias's gather, both attention matmuls and their broadcasts on the host)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(T5Layer(), T5Layer(), T5Norm()).eval()
    x = torch.randn(2, 16, C)
    imported = from_pytorch(model, (x,)) if source == "pytorch" else \
        from_onnx(export_onnx(model, (x,), tmp_path / "t5.onnx"))
    partitioned = ac.partition_for_accel(*imported)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=1e-4)
