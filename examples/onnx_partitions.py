"""The transformer zoo from PyTorch and from ONNX (issue 29: "ONNX export partitions like the
PyTorch model"): per model, the partition of ``frontend.from_pytorch`` beside that of
``frontend.export_onnx`` then ``from_onnx``, and the host operators of the ONNX one by reason:

    python examples/onnx_partitions.py [--models vit_ti16 swin_mini ...]

Zoo models by name (``tools.models.get_model``), and: ``mha_b1`` / ``mha_b2``
(``nn.MultiheadAttention(48, 3, batch_first=True)`` on 1 or 2 images of 10 tokens),
``mha_seq_b2`` (the sequence-first form on [10, 2, 48]), ``normalize`` (a Linear then
F.normalize over 48 channels), ``swin_v2_blocks`` (two ``SwinBlockV2`` of width 16, 2 heads,
window 7, the second shifted, on 14x14x16), ``swin_v2_tiny`` (``SwinTransformer(v2=True)`` of
width 16, [2, 2] blocks of [1, 2] heads, 3x56x56). nv_full, fp32, realistic initialisation (the
partition does not depend on the weights' values). Figures in docs/transformer_ops.md."""
import argparse
import collections
import tempfile
from pathlib import Path

import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.tools.models import (SwinBlockV2, SwinTransformer, build_realistic,
                                        get_model)


class _SelfAttention(torch.nn.Module):
    def __init__(self, batch_first: bool):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(48, 3, batch_first=batch_first)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


class _Normalize(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(48, 48)

    def forward(self, x):
        return torch.nn.functional.normalize(self.linear(x), dim=-1)


def _small(model: torch.nn.Module, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return model.eval(), (torch.from_numpy(x),)


EXTRA = {
    "mha_b1": lambda: _small(_SelfAttention(True), (1, 10, 48)),
    "mha_b2": lambda: _small(_SelfAttention(True), (2, 10, 48)),
    "mha_seq_b2": lambda: _small(_SelfAttention(False), (10, 2, 48)),
    "normalize": lambda: _small(_Normalize(), (1, 10, 48)),
    "swin_v2_blocks": lambda: build_realistic(lambda: torch.nn.Sequential(
        SwinBlockV2(16, 2, 7, 0, 14), SwinBlockV2(16, 2, 7, 3, 14)), (14, 14, 16)),
    "swin_v2_tiny": lambda: build_realistic(lambda: SwinTransformer(
        image=56, dim=16, depths=(2, 2), heads=(1, 2), window=7, num_classes=10, v2=True),
        (3, 56, 56)),
}
DEFAULT = ["vit_ti16", "swin_mini", "convnext_mini", "encoder_stack", "hybrid_recogniser",
           *EXTRA]


def _summary(report) -> str:
    return (f"{len(report.offloaded)} of {len(report.ops)} in "
            f"{len(report.functions)} function(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model, inputs = EXTRA[name]() if name in EXTRA else get_model(name)
            torch_report = ac.partition_report(*from_pytorch(model, inputs))
            path = Path(tmp) / f"{name}.onnx"
            export_onnx(model, inputs, path)
            report = ac.partition_report(*from_onnx(path))
            print(f"{name:18s} PyTorch {_summary(torch_report):26s} ONNX {_summary(report)}",
                  flush=True)
            for (op, reason), count in collections.Counter(
                    (op.op, op.reason) for op in report.host).most_common():
                print(f"    {count} x {op}: {reason}")


if __name__ == "__main__":
    main()
