"""A global average over a window the PDP splits only with padding and a rescale (a side with
a prime factor above its 8: PP-PicoDet's squeeze-excite over a 25x19 map) runs in int8 as
the depthwise convolution it is (rewrites.global_means_as_convolutions): a squeeze-excite
block over a 13x11 map is whole in int8 (it split around the mean, kept on the host, before)
and within int8's error of PyTorch; fp32 keeps the pool."""
import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import assert_close, build_and_run, sqnr, torch_forward

SHAPE = (1, 3, 13, 11)


class SqueezeExcite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.reduce, self.expand = torch.nn.Conv2d(16, 4, 1), torch.nn.Conv2d(4, 16, 1)
        self.head = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.conv(x))
        s = torch.nn.functional.adaptive_avg_pool2d(y, 1)
        s = torch.nn.functional.hardsigmoid(self.expand(torch.relu(self.reduce(s))))
        return self.head(y * s)


def _input(seed):
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


def test_a_padded_global_mean_runs_as_a_depthwise_conv_in_int8():
    torch.manual_seed(0)
    model = SqueezeExcite().eval()
    x = _input(0)
    expected = torch_forward(model, x)
    int8 = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision="int8",
                                  calibration=[(_input(s),) for s in range(1, 5)])
    report = ac.partition_report(int8)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert sqnr(build_and_run(int8, x), expected) >= 25

    fp32 = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)))
    report = ac.partition_report(fp32)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert any("pool" in op.primitive or "mean" in op.primitive
               for op in report.offloaded), str(report)
    assert_close(build_and_run(fp32, x), expected, 1e-4)
