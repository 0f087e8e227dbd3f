"""``x.repeat`` (relax.tile; ONNX's Tile, which TVM's importer writes as a call_tir of TOPI's
tile kernel) as x concatenated with itself along each repeated axis
(``rewrites.tiles_as_concats``): a grey image made three channels for an RGB backbone, a
map repeated over its height and width, a 3-D tensor's channels. Each was a host op before
(ONNX: "no accelerator primitive for tile")."""
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, build_and_run, random_inputs, sqnr, torch_forward


class GreyToRgb(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x.repeat(1, 3, 1, 1)))


class SpatialRepeat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(torch.relu(x).repeat(1, 1, 2, 3)))


class ChannelRepeat3d(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x.repeat(1, 2, 1))


CASES = {"grey_to_rgb": (GreyToRgb, (1, 1, 16, 16)), "spatial": (SpatialRepeat, (1, 4, 6, 5)),
         "3d": (ChannelRepeat3d, (1, 8, 20))}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_a_repeat_is_copies_on_the_accelerator(case, source, tmp_path):
    torch.manual_seed(2)
    build, shape = CASES[case]
    model = build().eval()
    x = torch.randn(*shape)
    if source == "onnx":
        mod, params = from_onnx(export_onnx(model, (x,), tmp_path / f"{case}.onnx"))
    else:
        mod, params = from_pytorch(model, (x,))
    calibration = random_inputs(shape, 4, 8)
    for precision in ("fp32", "int8"):
        report = ac.partition_report(mod, params, precision=precision,
                                     calibration=calibration if precision == "int8" else None)
        assert report.host == [] and len(report.functions) == 1, str(report)
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-5)
    got = build_and_run(mod, x.numpy(), params=params, precision="int8",
                        calibration=calibration)
    assert sqnr(got, expected) > 30.0
