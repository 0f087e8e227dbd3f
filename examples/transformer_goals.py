"""Issue 29's goals, measured per model: the partition of the PyTorch import and of its ONNX
export (operators offloaded, external functions; goal >= 95 % in at most 2, and the ONNX
export partitioned as the PyTorch model is), the fp32 build's largest error against PyTorch
fp32 as a fraction of the output scale (goal 1e-4, or twice PyTorch fp32's own error against a
float64 run), and the fp16 build's SQNR against float64 beside PyTorch's own ``.half()`` (goal:
within 1 dB):

    python examples/transformer_goals.py [--models seed encoder ...] [--inputs 4]

The fp16 SQNRs pool ``--inputs`` N(0, 1) inputs (the signal's and the error's energies summed
over all of them, the first input the model's own example): a classifier's ten logits give
one input's SQNR a spread of several dB in ``.half()`` and in ours alike (Swin-V2 at test
size: 41 to 55 dB over six inputs), so one input cannot tell a 1 dB gap.

Models: ``seed`` (the forum's ``relu(layer_norm(matmul(x, W)))``, x 1x128x256), ``encoder``
(``nn.TransformerEncoderLayer(192, 3)`` on 1x197x192), ``mha_b2`` / ``mha_seq_b2``
(``nn.MultiheadAttention(48, 3)`` on two sentences of 10 tokens, batch-first or
sequence-first), ``decoder`` (``nn.TransformerDecoderLayer(48, 3)``, 10 target and 12 memory
tokens), ``maxvit_block`` (MBConv with squeeze-excite, then window and grid attention of 7x7
with a learnt relative position bias and pre-norm MLPs, on 16x14x14: written here, as no
package ships MaxViT without torchvision), ``swin_v2_tiny`` (``SwinTransformer(v2=True)`` of
width 16, [2, 2] blocks of [1, 2] heads, 3x56x56) and the zoo's transformers (``vit_ti16``,
``convnext_mini``, ``encoder_stack``, ``hybrid_recogniser``, ``swin_mini``). Weights are the
zoo's realistic initialisation or torch's defaults. nv_full. Figures: docs/transformer_ops.md,
"Issue 29's goals, model by model"."""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools.models import SwinTransformer, build_realistic, get_model


class Seed(nn.Module):
    """The forum's net: relu(layer_norm(matmul(x, W)))."""

    def __init__(self, channels: int = 256):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, channels) / channels ** 0.5)
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        return torch.relu(self.norm(torch.matmul(x, self.weight)))


class SelfAttention(nn.Module):
    def __init__(self, batch_first: bool):
        super().__init__()
        self.attention = nn.MultiheadAttention(48, 3, batch_first=batch_first)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(48, 3, 96, dropout=0.0, batch_first=True)

    def forward(self, target, memory):
        return self.layer(target, memory)


class RelativeAttention(nn.Module):
    """Multi-head self-attention over [B, N, C] tokens of a window x window block with a learnt
    relative position bias (a table indexed by each pair's offset), MaxViT's and Swin's."""

    def __init__(self, channels: int, heads: int, window: int = 7):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(channels, 3 * channels), nn.Linear(channels, channels)
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        grid = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                          indexing="ij")).flatten(1)
        offsets = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("index", offsets[..., 0] * (2 * window - 1) + offsets[..., 1])

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index.reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)
        out = (scores + bias[None]).softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class MaxViTBlock(nn.Module):
    """MBConv (1x1 expansion, 3x3 depthwise, squeeze-excite, 1x1 projection, residual), then
    block attention over 7x7 windows and grid attention over a 7x7 grid, each with a pre-norm
    MLP, as MaxViT's stages (Tu et al., 2022) at a small width."""

    def __init__(self, channels: int = 16, heads: int = 2, window: int = 7):
        super().__init__()
        wide, self.window = 4 * channels, window
        self.mbconv = nn.Sequential(
            nn.BatchNorm2d(channels), nn.Conv2d(channels, wide, 1), nn.BatchNorm2d(wide),
            nn.GELU(), nn.Conv2d(wide, wide, 3, 1, 1, groups=wide), nn.BatchNorm2d(wide),
            nn.GELU())
        self.excite = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(wide, channels // 4, 1),
                                    nn.SiLU(), nn.Conv2d(channels // 4, wide, 1), nn.Sigmoid())
        self.project = nn.Conv2d(wide, channels, 1)
        self.halves = nn.ModuleList(nn.ModuleDict({
            "norm1": nn.LayerNorm(channels), "attention": RelativeAttention(channels, heads),
            "norm2": nn.LayerNorm(channels),
            "mlp": nn.Sequential(nn.Linear(channels, wide), nn.GELU(),
                                 nn.Linear(wide, channels))}) for _ in range(2))

    def _attend(self, tokens, half):
        tokens = tokens + half["attention"](half["norm1"](tokens))
        return tokens + half["mlp"](half["norm2"](tokens))

    def forward(self, x):
        h = self.mbconv(x)
        x = x + self.project(h * self.excite(h))
        b, c, height, width = x.shape
        p, rows, cols = self.window, height // self.window, width // self.window
        t = x.permute(0, 2, 3, 1)
        blocks = t.reshape(b, rows, p, cols, p, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, p * p, c)
        blocks = self._attend(blocks, self.halves[0])
        t = blocks.reshape(b, rows, cols, p, p, c).permute(0, 1, 3, 2, 4, 5).reshape(
            b, height, width, c)
        grid = t.reshape(b, p, rows, p, cols, c).permute(0, 2, 4, 1, 3, 5).reshape(-1, p * p, c)
        grid = self._attend(grid, self.halves[1])
        t = grid.reshape(b, rows, cols, p, p, c).permute(0, 3, 1, 4, 2, 5).reshape(
            b, height, width, c)
        return t.permute(0, 3, 1, 2)


def _normal(model: nn.Module, *shapes, seed: int = 0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    return model.eval(), tuple(torch.from_numpy(rng.standard_normal(s).astype(np.float32))
                               for s in shapes)


MODELS = {
    "seed": lambda: _normal(Seed(), (1, 128, 256)),
    "encoder": lambda: _normal(nn.TransformerEncoderLayer(192, 3, batch_first=True),
                               (1, 197, 192)),
    "mha_b2": lambda: _normal(SelfAttention(True), (2, 10, 48)),
    "mha_seq_b2": lambda: _normal(SelfAttention(False), (10, 2, 48)),
    "decoder": lambda: _normal(Decoder(), (1, 10, 48), (1, 12, 48)),
    "maxvit_block": lambda: build_realistic(MaxViTBlock, (16, 14, 14)),
    "swin_v2_tiny": lambda: build_realistic(lambda: SwinTransformer(
        image=56, dim=16, depths=(2, 2), heads=(1, 2), window=7, num_classes=10, v2=True),
        (3, 56, 56)),
    **{name: (lambda name=name: get_model(name))
       for name in ("vit_ti16", "convnext_mini", "encoder_stack", "hybrid_recogniser",
                    "swin_mini")},
}


def _partition(report) -> str:
    return f"{len(report.offloaded)}/{len(report.ops)} in {len(report.functions)}"


def _run(vm, inputs) -> np.ndarray:
    return np.asarray(vm["main"](*[i.numpy() for i in inputs]).numpy(), np.float64)


def measure(model: nn.Module, inputs: tuple, count: int) -> dict:
    """One model's row (see the module's docstring)."""
    mod, params = from_pytorch(model, inputs)
    with tempfile.TemporaryDirectory() as directory:
        path = export_onnx(model, inputs, Path(directory) / "model.onnx")
        onnx_report = ac.partition_report(*from_onnx(path))
    builds = {p: ac.virtual_machine(ac.build(mod, params=params, precision=p))
              for p in ("fp32", "fp16")}
    rng = np.random.default_rng(1)
    energy = {"signal": 0.0, "ours": 0.0, "half": 0.0}
    errors = {}
    for i in range(count):
        x = inputs if i == 0 else tuple(
            torch.from_numpy(rng.standard_normal(t.shape).astype(np.float32)) for t in inputs)
        with torch.no_grad():
            exact = copy.deepcopy(model).double()(*(t.double() for t in x)).numpy()
            half = copy.deepcopy(model).half()(*(t.half() for t in x)).double().numpy()
            fp32 = model(*x).double().numpy()
        if i == 0:
            scale = np.abs(exact).max()
            errors = {"ours": np.abs(_run(builds["fp32"], x) - fp32).max() / scale,
                      "pytorch": np.abs(fp32 - exact).max() / scale}
        energy["signal"] += float(np.sum(exact ** 2))
        energy["ours"] += float(np.sum((_run(builds["fp16"], x) - exact) ** 2))
        energy["half"] += float(np.sum((half - exact) ** 2))
    ours, half = (sqnr_db(energy["signal"], energy[k]) for k in ("ours", "half"))
    return {"pytorch": _partition(ac.partition_report(mod, params)),
            "onnx": _partition(onnx_report), "fp32": errors["ours"],
            "fp32_pytorch": errors["pytorch"], "fp16": ours, "half": half}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--inputs", type=int, default=4,
                        help="inputs pooled in the fp16 SQNRs (default 4)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"{'model':18s} {'PyTorch':>14s} {'ONNX':>14s} {'fp32 error':>10s} "
          f"{'(PyTorch)':>9s} {'fp16 dB':>8s} {'.half()':>8s} {'gap':>6s} {'s':>5s}")
    for name in args.models:
        start = time.time()
        row = measure(*MODELS[name](), args.inputs)
        print(f"{name:18s} {row['pytorch']:>14s} {row['onnx']:>14s} {row['fp32']:10.1e} "
              f"{row['fp32_pytorch']:9.1e} {row['fp16']:8.2f} {row['half']:8.2f} "
              f"{row['half'] - row['fp16']:+6.2f} {time.time() - start:5.0f}", flush=True)


if __name__ == "__main__":
    main()
