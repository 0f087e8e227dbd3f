"""Attention with rotary position embeddings (RoPE: LLaMA's, EVA's), written on
``F.scaled_dot_product_attention``, and attention written with ``torch.einsum``, from
PyTorch and from their ONNX exports: one external function. RoPE rotates q and k between the
packed projection and the product, so the attention core is not read; what made it whole:
``-x`` as the SDP's scale of -1 (``rewrites.negatives_as_scales``), the packed projection's
5-D view sliced along its first axis (``leading_axis_slices``), torch's guard of fully masked
rows dropped where the scores are a scaled product with no mask (``unguarded_softmaxes``),
and ONNX's Einsum read as a MatMul (``frontend._einsums_as_matmuls``). Before: 121 of 138
operators in 4 functions (PyTorch), 104 of 113 in 3 (ONNX); the einsum export 10 of 19 in 3."""

import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, int8_sqnrs_held_back,
                      random_inputs, torch_forward)

T, C, HEADS = 16, 64, 4


def _rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


class RotaryAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.out = torch.nn.Linear(C, C)
        d = C // HEADS
        frequencies = torch.outer(torch.arange(T).float(),
                                  1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
        angles = torch.cat([frequencies, frequencies], -1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        q = q * self.cos + _rotate_half(q) * self.sin
        k = k * self.cos + _rotate_half(k) * self.sin
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class EinsumAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.out = torch.nn.Linear(C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * (c // HEADS) ** -0.5
        y = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


MODELS = {"rotary": RotaryAttention, "einsum": EinsumAttention}


def _import(name, source, tmp_path):
    torch.manual_seed(0)
    model, x = MODELS[name]().eval(), torch.randn(1, T, C)
    if source == "onnx":
        return model, x, from_onnx(export_onnx(model, (x,), tmp_path / f"{name}.onnx"))
    return model, x, from_pytorch(model, (x,))


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_one_function_fp32_and_fp16(name, source, tmp_path):
    model, x, (mod, params) = _import(name, source, tmp_path)
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision))
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours, half = fp16_and_half_sqnrs(mod, params, model, x)
    assert ours >= half - 1.0, (ours, half)


def test_rotary_attention_in_int8(tmp_path):
    """At least ONNX Runtime's static int8 on inputs held back from calibration."""
    model, x, (mod, params) = _import("rotary", "pytorch", tmp_path)
    calibration = random_inputs((1, T, C), 4, 3)
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    ours, theirs = int8_sqnrs_held_back(model, partitioned, random_inputs((1, T, C), 8, 77),
                                        calibration, tmp_path)
    print(f"rotary attention int8: ours {ours:.2f} dB, ONNX Runtime {theirs:.2f} dB")
    assert ours >= theirs, (ours, theirs)
