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
    passes = decompose.l2_normalize_passes(surface.shape, 1e-12, precision)
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
