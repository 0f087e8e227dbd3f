"""PReLU from ONNX: torch.onnx writes its slope as a [C, 1, 1] initializer, which TVM's importer
reshapes to the [C] of ``relax.nn.prelu``. That reshape of a constant was an intermediate the
pattern could not read: fp32 took the slope as a run-time input of the function (the reshape
on the host), fp16 and int8 refused the PReLU ("the prelu alpha is not a constant"), and a
network of PReLUs (MTCNN's face detector, trained weights in facenet-pytorch's wheel) fell
into a function per layer. rewrites.shared_constant_reshapes now gives the PReLU the reshaped
constant."""
import pytest
import torch
import tvm
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx
from conftest import random_inputs, sqnr


class RefineNet(nn.Module):
    """MTCNN's R-Net shape: 3x3 convs with PReLU and ceil-mode max pools, the map permuted to
    [N, W, H, C] and flattened into a dense layer with PReLU, a box head and a softmax head."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 28, 3), nn.PReLU(28), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(28, 48, 3), nn.PReLU(48), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(48, 64, 2), nn.PReLU(64))
        self.dense = nn.Sequential(nn.Linear(576, 128), nn.PReLU(128))
        self.boxes, self.scores = nn.Linear(128, 4), nn.Linear(128, 2)
        for module in self.modules():
            if isinstance(module, nn.PReLU):
                nn.init.uniform_(module.weight, 0.05, 0.5)

    def forward(self, x):
        x = self.features(x).permute(0, 3, 2, 1).flatten(1)
        x = self.dense(x)
        return self.boxes(x), torch.softmax(self.scores(x), 1)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_prelu_network_from_onnx_is_one_function(precision, tmp_path):
    torch.manual_seed(0)
    model = RefineNet().eval()
    shape = (1, 3, 24, 24)
    (x,) = random_inputs(shape, 1, 0)
    mod, params = from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / "r.onnx"))
    extra = {"calibration": [(c,) for c in random_inputs(shape, 4, 1)]} \
        if precision == "int8" else {}
    partitioned = ac.partition_for_accel(mod, params, precision=precision, **extra)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    vm = ac.virtual_machine(ac.build(partitioned))
    ours = [o.numpy() for o in vm["main"](tvm.runtime.tensor(x))]
    with torch.no_grad():
        expected = [o.numpy() for o in model(torch.from_numpy(x))]
    least = {"fp32": 100, "fp16": 45, "int8": 25}[precision]
    assert all(sqnr(o, e) >= least for o, e in zip(ours, expected)), \
        [sqnr(o, e) for o, e in zip(ours, expected)]
