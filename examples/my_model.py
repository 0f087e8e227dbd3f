"""Your own PyTorch model to an ONNX file the command line takes (README: "Your own model, step
by step"). Replace MyNet with your torch.nn.Module and the example input with one of its
inputs' shape, then:

    python examples/my_model.py            # writes my_model.onnx (or: python ... other.onnx)

``frontend.export_onnx`` uses torch's TorchScript exporter (opset 17) and keeps batch norm
whole; ``torch.onnx.export``'s default exporter in the pinned torch needs ``onnxscript``, which
is not installed. The same file is a MODEL as it is, too: ``accel-codegen partition
examples/my_model.py:build`` imports the module through ``torch.export`` instead of ONNX.
"""
import sys

import torch
from torch import nn


class MyNet(nn.Module):
    """A small CNN: two conv + batch norm + ReLU blocks, a global pool and a classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(32, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build():
    """The model in eval mode and an example input: what a ``file.py:function`` MODEL gives."""
    torch.manual_seed(0)
    return MyNet().eval(), (torch.randn(1, 3, 32, 32),)


if __name__ == "__main__":
    from accel_codegen import frontend

    path = sys.argv[1] if len(sys.argv) > 1 else "my_model.onnx"
    model, inputs = build()
    frontend.export_onnx(model, inputs, path)
    print(f"wrote {path} (input {list(inputs[0].shape)})")
