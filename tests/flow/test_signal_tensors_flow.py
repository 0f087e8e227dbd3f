"""[N, C, L] tensors (issue 33, item 5's table): a detection head's tail flattens each scale's
[N, C, H, W] to [N, C, H*W], concatenates the scales along L and transposes to [N, L, C]
(YOLOX, ddddocr_det). The engines read [N, C, L] as the surface [N, C, 1, L]
(layer.feature_surface: the same bytes), so element-wise ops, activations, a batch norm and a
concat over the channels run as on NCHW; the reshapes that keep N and C are one BDMA copy, the
concat along L the BDMA's ranges of the [N * C, L] rows, the transpose one strided copy per
row. Each precision against PyTorch."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools.estimation import estimate
from conftest import build_and_run, sqnr, torch_forward


class HeadTail(torch.nn.Module):
    """Two scales of a YOLOX-style head: sigmoid on part of the channels, flatten, concat
    along the positions, transpose to [N, L, C]."""

    def __init__(self):
        super().__init__()
        self.reg = torch.nn.ModuleList(torch.nn.Conv2d(8, 4, 1) for _ in range(2))
        self.cls = torch.nn.ModuleList(torch.nn.Conv2d(8, 2, 1) for _ in range(2))
        self.down = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)

    def forward(self, x):
        outs = []
        for i, f in enumerate((x, self.down(x))):
            outs.append(torch.cat([self.reg[i](f), torch.sigmoid(self.cls[i](f))], 1).flatten(2))
        return torch.cat(outs, 2).permute(0, 2, 1)


class Signal(torch.nn.Module):
    """Element-wise ops, a batch norm and a concat over the channels of [N, C, L]."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)

    def forward(self, a, b):
        y = torch.relu(self.bn(a)) + torch.sigmoid(b)
        return torch.cat([y, a * b], 1)


def _inputs(shapes, seed=0):
    return [np.random.default_rng(seed + i).standard_normal(s).astype(np.float32)
            for i, s in enumerate(shapes)]


def _calibration(shapes):
    return [tuple(_inputs(shapes, seed)) for seed in range(10, 14)]


LEAST_DB = {"fp32": 100, "fp16": 45, "int8": 25}


def _partitioned(model, shapes, precision):
    """The model's inputs, its import and its partition in ``precision`` (int8 calibrated)."""
    inputs = _inputs(shapes)
    mod, params = from_pytorch(model, tuple(torch.from_numpy(x) for x in inputs))
    partitioned = ac.partition_for_accel(
        mod, params, precision=precision,
        calibration=_calibration(shapes) if precision == "int8" else None)
    return inputs, mod, params, partitioned


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_detection_head_tail_runs_on_the_bdma(precision):
    torch.manual_seed(0)
    model = HeadTail().eval()
    inputs, mod, params, partitioned = _partitioned(model, [(1, 8, 8, 10)], precision)
    report = ac.partition_report(partitioned)
    host = {op.op: op.reason for op in report.host}
    if precision == "int8":  # each scale's codes would be rescaled into rows, not a range
        assert list(host) == ["relax.concat"] and "other than the channels" in \
            host["relax.concat"], str(report)
    else:
        assert host == {} and len(report.functions) == 1, str(report)
        primitives = [p for ps in report.functions.values() for p in ps]
        assert primitives.count("accel.reshape") == 2 and "accel.transpose" in primitives
    actual = build_and_run(partitioned, *inputs)
    assert actual.shape == (1, 80 + 20, 6)
    assert sqnr(actual, torch_forward(model, *inputs)) >= LEAST_DB[precision]
    if precision == "fp32":  # the estimate's runs are the profile's
        with ac.profile() as prof:
            build_and_run(partitioned, *inputs)
        assert [(layer.label, layer.cycles) for layer in estimate(mod, params).layers] == \
            [(r.label, r.cycles) for r in prof.records]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_signal_tensors_run_as_surfaces(precision):
    torch.manual_seed(0)
    model = Signal().eval()
    inputs, mod, params, partitioned = _partitioned(model, [(1, 6, 50), (1, 6, 50)], precision)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert sqnr(build_and_run(partitioned, *inputs), torch_forward(model, *inputs)) >= \
        LEAST_DB[precision]
