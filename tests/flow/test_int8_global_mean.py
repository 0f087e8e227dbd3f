"""A global average over a window the PDP splits only with padding and a rescale (a side with
a prime factor above its 8: PP-PicoDet's squeeze-excite over a 25x19 map) runs in int8 as
the depthwise convolution it is (rewrites.global_means_as_convolutions): a squeeze-excite
block over a 13x11 map is whole in int8 (it split around the mean, kept on the host, before)
and within int8's error of PyTorch; fp32 keeps the pool. A mean whose value only leaves the
program (SqueezeNet's classifier) stays on the host, where it splits nothing."""
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


class ClassifierTail(torch.nn.Module):
    """SqueezeNet's classifier on a 13x11 map: a 1x1 conv, ReLU, the global mean, flattened."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 64, 1)

    def forward(self, x):
        y = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
        return torch.flatten(y, 1)


def test_a_global_mean_that_only_leaves_the_program_stays_on_the_host():
    """As a depthwise conv such a mean costs a weight block per channel and tap, each waiting
    for its load (SqueezeNet's: 2.7 M cycles on nv_full, 4x the rest of the network), and
    keeps no function whole: the estimate has the conv's run alone."""
    torch.manual_seed(0)
    model = ClassifierTail().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_input(0)),))
    for config in ("nv_full", "nv_small"):
        report = ac.estimate(mod, params, config=config, precision="int8")
        assert [layer.label for layer in report.layers] == ["f0.0 accel.conv2d_bias_relu"], \
            [layer.label for layer in report.layers]
