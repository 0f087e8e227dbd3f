"""A detector's last concat in int8 (issue 33: YOLOv8's one output holds the boxes in pixels
beside the class scores in 0..1): where the concat is only an output of its external
function, its copies keep each input's codes and scale and the output leaves as fp32 range
by range, so the scores keep their resolution (one scale covering the boxes, about 2.5, would
leave every score at one code). The detections after NMS are fp32's."""
import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools import trained_models as tm
from conftest import build_and_run, sqnr, torch_forward

class BoxesAndScores(torch.nn.Module):
    """[N, 4 + 2, L]: boxes (centre x, y, width, height) in pixels of a 320 x 240 image, one
    per position of a 40-pixel grid and at most 30 pixels wide (so NMS keeps each), then
    two class scores (YOLOv8's output layout)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.box = torch.nn.Conv2d(16, 4, 1)
        self.cls = torch.nn.Conv2d(16, 2, 1)
        ys, xs = torch.meshgrid(torch.arange(6.0), torch.arange(8.0), indexing="ij")
        centres = torch.stack([xs.flatten(), ys.flatten()]) * 40 + 20
        self.register_buffer("anchor", torch.cat([centres, torch.full((2, 48), 10.0)])[None])
        self.register_buffer("spread", torch.tensor([10.0, 10.0, 20.0, 20.0]).view(1, 4, 1))

    def forward(self, x):
        f = torch.relu(self.stem(x))
        boxes = (torch.sigmoid(self.box(f)).flatten(2) - 0.5) * self.spread + self.anchor
        scores = torch.sigmoid(self.cls(f) * 8).flatten(2)
        return torch.cat([boxes, scores], 1)


def _input(seed):
    return np.random.default_rng(seed).standard_normal((1, 3, 6, 8)).astype(np.float32)


def test_int8_output_concat_keeps_each_inputs_scale():
    torch.manual_seed(0)
    model = BoxesAndScores().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_input(0)),))
    part = ac.partition_for_accel(mod, params, precision="int8",
                                  calibration=[(_input(s),) for s in range(10, 16)])
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, str(report)
    for seed in (1, 2, 3):
        x = _input(seed)
        got, want = build_and_run(part, x), torch_forward(model, x)
        # the scores alone: with the boxes' scale they were a code or two (about 0 dB)
        assert sqnr(got[:, 4:], want[:, 4:]) >= 30, seed
        assert sqnr(got[:, :4], want[:, :4]) >= 30, seed
        expected = tm.yolov8_detections([want], None, score_thresh=0.5)
        found = tm.yolov8_detections([got], None, score_thresh=0.5)
        print(seed, len(expected[0]), len(found[0]), tm.box_f1(found, expected))
        assert len(expected[0]) >= 10, "the test wants detections to compare"
        assert tm.box_f1(found, expected) >= 0.95, seed
