"""Average pools whose divisor is not the whole window everywhere: PoolFormer's token mixer
(``AvgPool2d(3, 1, 1, count_include_pad=False)``, its padded border averaging fewer values)
and ceil_mode's partial last windows that count padding. The PDP divides by the whole window
in int8 (NVDLA's reciprocal registers), and by nothing it has for a partial window that
counts padding; both become a depthwise convolution of weights 1 / (k k) times a constant
factor per position in int8, and a PDP average over whole windows times that factor in
fp32 and fp16 (``rewrites.varying_divisor_averages``)."""

import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, int8_sqnrs_held_back,
                      random_inputs, torch_forward)


class PoolFormerBlock(torch.nn.Module):
    """MetaFormer's PoolFormer block (Yu et al., 2022): x + s1 (pool(n1(x)) - n1(x)), then a
    1x1-conv MLP with GELU, each branch with its layer scale; the norms are GroupNorm(1, C)."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.norm1 = torch.nn.GroupNorm(1, channels)
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.norm2 = torch.nn.GroupNorm(1, channels)
        self.mlp = torch.nn.Sequential(torch.nn.Conv2d(channels, 4 * channels, 1),
                                       torch.nn.GELU(),
                                       torch.nn.Conv2d(4 * channels, channels, 1))
        self.scale1 = torch.nn.Parameter(torch.full((channels, 1, 1), 0.5))
        self.scale2 = torch.nn.Parameter(torch.full((channels, 1, 1), 0.5))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.scale1 * (self.pool(y) - y)
        return x + self.scale2 * self.mlp(self.norm2(x))


def _poolformer():
    torch.manual_seed(0)
    return PoolFormerBlock().eval(), torch.randn(1, 32, 14, 14)


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def _primitives(report):
    return [p for ps in report.functions.values() for p in ps]


def _int8_against_onnx_runtime(model, mod, params, x, calibration, tmp_path):
    """The int8 build whole, its average the depthwise conv times its factor (not the PDP's),
    and (ours, ONNX Runtime's) SQNR on 8 inputs held back from calibration."""
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    report = ac.partition_report(partitioned)
    _whole(report)
    assert any(p.startswith("accel.conv2d_mul") for p in _primitives(report)), str(report)
    held = random_inputs(tuple(x.shape), 8, 77)
    return int8_sqnrs_held_back(model, partitioned, held, calibration, tmp_path)


def test_poolformer_block_is_one_function_in_every_precision():
    model, x = _poolformer()
    mod, params = from_pytorch(model, (x,))
    calibration = random_inputs(tuple(x.shape), 4, 5)
    for precision in ("fp32", "fp16", "int8"):
        _whole(ac.partition_report(mod, params, precision=precision,
                                   calibration=calibration if precision == "int8" else None))
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours, half = fp16_and_half_sqnrs(mod, params, model, x)
    assert ours >= half - 1.0, (ours, half)


def test_poolformer_block_in_int8_against_onnx_runtime(tmp_path):
    """The int8 pool as a depthwise conv and its border factor, one function, at least ONNX
    Runtime's static int8 (QLinearAveragePool, which divides each window exactly) on inputs
    held back from calibration."""
    model, x = _poolformer()
    calibration = random_inputs(tuple(x.shape), 8, 5)
    mod, params = from_pytorch(model, (x,))
    ours, theirs = _int8_against_onnx_runtime(model, mod, params, x, calibration, tmp_path)
    print(f"PoolFormer block int8: ours {ours:.2f} dB, ONNX Runtime {theirs:.2f} dB")
    assert ours >= theirs, (ours, theirs)


@pytest.mark.parametrize("pool", [
    torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False),                 # PoolFormer's
    torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),  # a partial window
    torch.nn.AvgPool2d(3, 2, ceil_mode=True, count_include_pad=True),      # counting padding
    torch.nn.AvgPool2d(5, 3, 2, ceil_mode=True, count_include_pad=True),
    torch.nn.AvgPool2d((3, 2), (2, 1), (1, 0), ceil_mode=True),
])
@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_an_average_whose_divisor_varies_runs_in_every_precision(pool, source, tmp_path):
    """fp32 as PyTorch to rounding, fp16 within 1 dB of PyTorch's half; int8 on the
    accelerator (no host pool, no PDP: the depthwise conv and its factor) at least ONNX
    Runtime's static int8 on held-back inputs; the same divisor rule from PyTorch and from
    ONNX (its AveragePool's pads and ceil_mode)."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), pool).eval()
    x = torch.randn(1, 3, 16, 13)  # 14 x 11 at the pool: each ceil_mode case has a partial window
    if source == "onnx":
        mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "pool.onnx"))
    else:
        mod, params = from_pytorch(model, (x,))
    expected = torch_forward(model, x)
    _whole(ac.partition_report(mod, params))
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-5)
    ours, half = fp16_and_half_sqnrs(mod, params, model, x)
    assert ours >= half - 1.0, (ours, half)
    calibration = random_inputs(tuple(x.shape), 8, 6)
    ours, theirs = _int8_against_onnx_runtime(model, mod, params, x, calibration, tmp_path)
    print(f"{pool} int8: ours {ours:.2f} dB, ONNX Runtime {theirs:.2f} dB")
    assert ours >= theirs, (ours, theirs)
