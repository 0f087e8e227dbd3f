"""A selective-kernel block (SKNet): its branches stacked to a 5-D [N, M, C, H, W] tensor,
summed over M, its attention softmaxed over M and multiplied in. The stack is the concat's
channels read as [N, M C, H, W] (rewrites.branch_stacks_as_channels), so the block is one
function: each precision against PyTorch, int8 against ONNX Runtime's static int8 too."""
import pytest
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import build_and_run, ort_int8_sqnr, random_inputs, sqnr, torch_forward

LEAST_DB = {"fp32": 100, "fp16": 45}


class SelectiveKernel(nn.Module):
    """Li et al., 2019: M branches of 3x3 grouped convolutions of dilation 1..M, their sum's
    squeeze, one attention vector per branch, a softmax across the branches."""

    def __init__(self, channels=16, branches=3):
        super().__init__()
        self.convs = nn.ModuleList(nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1 + i, dilation=1 + i, groups=4),
            nn.BatchNorm2d(channels), nn.ReLU()) for i in range(branches))
        for conv in self.convs:
            conv[1].running_mean.uniform_(-0.2, 0.2)
            conv[1].running_var.uniform_(0.5, 1.5)
        self.squeeze = nn.Sequential(nn.Conv2d(channels, 8, 1), nn.ReLU())
        self.select = nn.ModuleList(nn.Conv2d(8, channels, 1) for _ in range(branches))

    def forward(self, x):
        feats = torch.stack([conv(x) for conv in self.convs], 1)
        z = self.squeeze(nn.functional.adaptive_avg_pool2d(feats.sum(1), 1))
        attention = torch.stack([select(z) for select in self.select], 1).softmax(1)
        return (feats * attention).sum(1)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_selective_kernel_block_is_one_function(precision, tmp_path):
    torch.manual_seed(0)
    model = SelectiveKernel().eval()
    shape = (1, 16, 12, 12)
    (x,) = random_inputs(shape, 1, 0)
    calibration = [(c,) for c in random_inputs(shape, 4, 1)] if precision == "int8" else None
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision=precision,
                                         calibration=calibration)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    ours = sqnr(build_and_run(partitioned, x), torch_forward(model, x))
    if precision == "int8":
        # 37.5 dB against ONNX Runtime's 37.8 on this input (2026-12-02): level within the
        # half dB one evaluation input of a 4-input calibration moves either by
        assert ours >= ort_int8_sqnr(model, x, calibration, tmp_path) - 0.5, ours
    else:
        assert ours >= LEAST_DB[precision], ours
