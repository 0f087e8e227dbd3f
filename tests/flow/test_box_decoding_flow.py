"""YOLOv8's head tail (issue 33: nudenet's 320n.onnx, a YOLOv8n detector shipped in its wheel,
was 5 external functions for these ops): DFL reshapes [N, 4 * R, L] to [N, 4, R, L], swaps
the two middle axes, takes a softmax over R and a 1x1 conv of arange(R), reshapes
[N, 1, 4, L] to [N, 4, L]; the boxes are then x2y2 - x1y1 of two computed tensors and all
four coordinates times a per-position stride [1, L]. Each runs on the engines: a reshape that
keeps the batch is one BDMA copy of the lines both sides share, a swap of two adjacent axes
a strided copy per row of the smaller side, a - b an add of b * -1, the stride a constant
operand of x's shape. Each precision against PyTorch."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import build_and_run, sqnr, torch_forward


class DflTail(torch.nn.Module):
    def __init__(self, bins=8, positions=40):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 4 * bins, 1)
        self.dfl = torch.nn.Conv2d(bins, 1, 1, bias=False)
        self.dfl.weight.data[:] = torch.arange(bins, dtype=torch.float32).view(1, bins, 1, 1)
        self.bins = bins
        self.register_buffer("anchor", torch.rand(1, 2, positions) * 10)
        self.register_buffer("stride", torch.rand(1, positions) + 1)

    def forward(self, x):
        n, _, h, w = x.shape
        y = self.conv(x).reshape(n, 4 * self.bins, h * w)
        y = y.view(n, 4, self.bins, h * w).transpose(2, 1).softmax(1)
        lt, rb = self.dfl(y).view(n, 4, h * w).chunk(2, 1)
        x1y1, x2y2 = self.anchor - lt, self.anchor + rb
        return torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.stride


def _input(seed):
    return np.random.default_rng(seed).standard_normal((1, 8, 5, 8)).astype(np.float32)


LEAST_DB = {"fp32": 100, "fp16": 45, "int8": 25}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_yolov8_box_decoding_runs_whole(precision):
    torch.manual_seed(0)
    model = DflTail().eval()
    x = _input(0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    part = ac.partition_for_accel(
        mod, params, precision=precision,
        calibration=[(_input(s),) for s in range(10, 14)] if precision == "int8" else None)
    report = ac.partition_report(part)
    host = [op.op for op in report.host]
    # int8: the DFL softmax runs in fp16 between converting runs (its sums have no
    # per-tensor int8 scale), the rest in int8
    assert host == [], str(report)
    if precision == "int8":
        assert {op.precision for op in report.offloaded if op.op == "relax.nn.softmax"} == \
            {"fp16"}, str(report)
    ops = [op.op for op in report.offloaded]
    assert "relax.subtract" not in ops and ops.count("relax.permute_dims") == 1, str(report)
    assert sqnr(build_and_run(part, x), torch_forward(model, x)) >= LEAST_DB[precision]


@pytest.mark.parametrize("shape, out, view", [
    ((1, 64, 2100), (1, 4, 16, 2100), (1, 64, 1, 2100)),
    ((1, 1, 4, 2100), (1, 4, 2100), (1, 4, 1, 2100)),
    ((2, 8, 6, 5), (2, 8, 30), (2, 8, 1, 30)),
    ((2, 8, 1, 1), (2, 8), (2, 8, 1, 1)),
    ((1, 6, 10), (1, 4, 15), (1, 1, 1, 60)),
])
def test_a_reshape_keeping_the_batch_copies_the_lines_both_sides_share(shape, out, view):
    from accel_codegen.compiler.lowering import _reshape_view

    assert _reshape_view(shape, out) == view
