"""A batched matmul of a constant and a computed tensor (``rewrites.computed_matmuls``'s
constant-rows form): a Perceiver's cross-attention of learned latent queries, whose ONNX
export folds the latents' projection into a constant Q ([H, M, d] against the batch's
[1, H, d, N] keys: batch axes of another rank). Before, that scores matmul stayed on the
host ("whose batch axes broadcast") and split the function in two; now each head is the
dense layer of its keys' rows with Q's rows as constant weights, transposed."""
import copy

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, build_and_run, sqnr, torch_forward


class LatentCrossAttention(torch.nn.Module):
    """Perceiver's encoder step: learned latents attend to the input's tokens."""

    def __init__(self, channels: int = 64, latents: int = 16, heads: int = 4):
        super().__init__()
        self.latents = torch.nn.Parameter(torch.randn(1, latents, channels) * 0.5)
        self.attention = torch.nn.MultiheadAttention(channels, heads, batch_first=True)
        self.norm = torch.nn.LayerNorm(channels)

    def forward(self, x):
        kv = self.norm(x)
        y, _ = self.attention(self.latents, kv, kv, need_weights=False)
        return y + self.latents


class ConstantTimesComputed(torch.nn.Module):
    """``C @ relu(x W)^T`` per head, C a parameter [H, M, d] (constant once bound)."""

    def __init__(self, heads: int = 2, rows: int = 5, d: int = 8, transposed: bool = True):
        super().__init__()
        self.c = torch.nn.Parameter(torch.randn(heads, rows, d))
        self.proj = torch.nn.Linear(d, d)
        self.transposed = transposed

    def forward(self, x):  # x [H, N, d]
        k = torch.relu(self.proj(x))
        return self.c @ (k.transpose(-1, -2) if self.transposed else k.transpose(-1, -2) * 2.0)


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def test_latent_cross_attention_onnx_export_is_one_function(tmp_path):
    torch.manual_seed(0)
    model, x = LatentCrossAttention().eval(), torch.randn(1, 50, 64)
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "perceiver.onnx"))
    expected = torch_forward(model, x)
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision))
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours = sqnr(build_and_run(mod, x.numpy(), params=params, precision="fp16"), expected)
    half = sqnr(torch_forward(copy.deepcopy(model).half(), x.half()).astype(np.float32),
                expected)
    assert ours >= half - 1.5, (ours, half)


@pytest.mark.parametrize("transposed", [True, False])
def test_a_constant_times_a_computed_tensor_per_head(transposed):
    """K^T given (its rows read as they lie) or another tensor (transposed first)."""
    torch.manual_seed(1)
    model, x = ConstantTimesComputed(transposed=transposed).eval(), torch.randn(2, 12, 8)
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    _whole(report)
    per_head = [op for op in report.ops if op.op == "relax.matmul" and list(op.shape) == [12, 5]]
    # one dense layer of constant weights per head (its data [N, d] as a plain or token dense)
    assert len(per_head) == 2 and all(op.primitive in ("accel.dense", "accel.token_dense")
                                      for op in per_head), report
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-5)
