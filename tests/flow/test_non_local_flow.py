"""A non-local block (Wang et al.'s embedded Gaussian form, as its open-source code writes it:
theta, phi and g 1x1 convs, softmax(theta^T phi) g with no scale, a 1x1 conv + BN back and
the residual add) whole on the accelerator: its keys arrive as phi's NCHW output reshaped
([B, d, HW], K^T itself, attention.py's channel-major keys, read through one transpose), its
batched matmuls' operands as torch's broadcasts to the shapes they have (identity_reshapes
before the attention cores). fp32 against PyTorch, fp16 near PyTorch's own .half(), int8
at least ONNX Runtime's static int8 on inputs held back from calibration, the ONNX export alike."""
import numpy as np
import pytest
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.tools.models import build_realistic
from conftest import (assert_close, build_and_run, int8_sqnrs_held_back, random_inputs, sqnr,
                      torch_forward)


class NonLocal(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.inter = channels // 2
        self.g = nn.Conv2d(channels, self.inter, 1)
        self.theta = nn.Conv2d(channels, self.inter, 1)
        self.phi = nn.Conv2d(channels, self.inter, 1)
        self.W = nn.Sequential(nn.Conv2d(self.inter, channels, 1), nn.BatchNorm2d(channels))

    def forward(self, x):
        b = x.size(0)
        g_x = self.g(x).view(b, self.inter, -1).permute(0, 2, 1)
        theta_x = self.theta(x).view(b, self.inter, -1).permute(0, 2, 1)
        phi_x = self.phi(x).view(b, self.inter, -1)
        y = torch.matmul(torch.matmul(theta_x, phi_x).softmax(dim=-1), g_x)
        y = y.permute(0, 2, 1).contiguous().view(b, self.inter, *x.size()[2:])
        return self.W(y) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.block = NonLocal(32)

    def forward(self, x):
        return self.block(self.stem(x))


def _net(batch):
    return build_realistic(Net, (3, 14, 14), batch=batch)


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert sum(p == "accel.attention" for ps in report.functions.values() for p in ps) == 1


@pytest.mark.parametrize("batch", [1, 2])
def test_a_non_local_block_is_one_function_fp32_and_fp16(batch):
    model, (x,) = _net(batch)
    mod, params = from_pytorch(model, (x,))
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision))
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours = sqnr(build_and_run(mod, x.numpy(), params=params, precision="fp16"), expected)
    half = sqnr(torch_forward(model.half(), x.half()).astype(np.float32), expected)
    model.float()
    assert ours >= half - 1.0, (ours, half)


def test_a_non_local_blocks_onnx_export_partitions_alike(tmp_path):
    model, (x,) = _net(1)
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "nl.onnx"))
    _whole(ac.partition_report(mod, params))
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)


def test_a_non_local_block_in_int8(tmp_path):
    model, (x,) = _net(1)
    rng = np.random.default_rng(3)
    calibration = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    # held back from calibration: the net's own input and 16 more; one input's figure moves
    # by up to 5 dB either way between the two quantisers (the sharp, unscaled softmax)
    held = [x.numpy()] + random_inputs(tuple(x.shape), 16, 77)
    ours, theirs = int8_sqnrs_held_back(model, partitioned, held, calibration, tmp_path)
    print(f"int8: ours {ours:.2f} dB, ONNX Runtime {theirs:.2f} dB")
    assert ours >= theirs, (ours, theirs)
