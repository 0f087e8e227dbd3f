"""Constants fp16 code cannot hold. A constant whose every value rounds to 0 in half changes
what its layer computes: Basic Pitch's spectrogram (basic-pitch's trained ONNX file) adds 1e-10
before a log on the host, and its fp16 build answered NaN (the log of 0 is -inf). Such a layer
stays in fp32, on the host, with the reason; a trained weight with a few tiny values among
others still runs in fp16 (engines._check_half_constants)."""
import numpy as np
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import build_and_run, random_inputs, sqnr, torch_forward


class LogMagnitude(nn.Module):
    """A convolution's rectified output scaled, plus an epsilon, then its log (dB)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x):
        return torch.log(torch.relu(self.conv(x)) * 0.5 + 1e-10) * 4.342944819


def test_an_epsilon_below_half_range_keeps_its_layer_in_fp32():
    torch.manual_seed(0)
    model = LogMagnitude().eval()
    (x,) = random_inputs((1, 1, 8, 8), 1, 0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params, precision="fp16")
    reasons = {op.reason for op in report.host}
    assert any("below half precision's smallest value" in (r or "") and "1.0e-10" in r
               for r in reasons), str(report)
    out = build_and_run(mod, x, params=params, precision="fp16")
    expected = torch_forward(model, x)
    assert np.all(np.isfinite(out)) and np.min(expected) < -90  # log(1e-10) where ReLU is 0
    assert sqnr(out, expected) >= 40


def test_parameters_with_a_few_tiny_values_run_in_fp16():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    with torch.no_grad():  # a channel weight decay left at 1e-34 beside others of ~0.1
        model[0].weight[2] = 1e-34
        model[0].bias[2] = 1e-34
    (x,) = random_inputs((1, 3, 8, 8), 1, 0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params, precision="fp16")
    assert report.host == [] and len(report.functions) == 1, str(report)
