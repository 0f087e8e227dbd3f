"""Attention-style CNN blocks whole on the accelerator (issue 29): DANet's position attention
(SAGAN's self-attention: q and k of C/8 channels, v of C, ``bmm(v, attention^T)``: a value
head size other than the key's, V channel-major read through one transpose, the output
written token-major and transposed back), DANet's channel attention (``softmax(max(energy) -
energy)``, softmax's shift invariance: one nn.attention of scale -1 whose tokens are the
channels) and GCNet's global context block (the map's positions summed with their softmaxed
weights: a dense layer whose weights are the map, rewrites.column_products; the context added
to the map as the SDP's per-channel operand) and coordinate attention (the map times a factor per
row and one per column: per-row products, the columns' on the map's transpose,
rewrites.per_row_products). fp32 against PyTorch, fp16 against PyTorch's own .half(), int8
against ONNX Runtime's static int8, the ONNX export alike."""

import numpy as np
import pytest
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.tools.models import build_realistic
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, int8_sqnrs_held_back,
                      random_inputs, torch_forward)

CHANNELS = 64


class PositionAttention(nn.Module):
    """DANet's position attention module (Fu et al., 2019), SAGAN's self-attention (Zhang et
    al., 2019) as their open-source code writes it."""

    def __init__(self, channels: int):
        super().__init__()
        self.query = nn.Conv2d(channels, channels // 8, 1)
        self.key = nn.Conv2d(channels, channels // 8, 1)
        self.value = nn.Conv2d(channels, channels, 1)
        # starts at 0 and is learnt; a trained block's is of order 0.1 to 1
        self.gamma = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x):
        b, c, h, w = x.size()
        q = self.query(x).view(b, -1, h * w).permute(0, 2, 1)
        k = self.key(x).view(b, -1, h * w)
        attention = torch.softmax(torch.bmm(q, k), dim=-1)
        v = self.value(x).view(b, -1, h * w)
        out = torch.bmm(v, attention.permute(0, 2, 1)).view(b, c, h, w)
        return self.gamma * out + x


class ChannelAttention(nn.Module):
    """DANet's channel attention module: the channels attend to each other."""

    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x):
        b, c, h, w = x.size()
        q = x.view(b, c, -1)
        k = x.view(b, c, -1).permute(0, 2, 1)
        energy = torch.bmm(q, k)
        energy = torch.max(energy, -1, keepdim=True)[0].expand_as(energy) - energy
        out = torch.bmm(torch.softmax(energy, dim=-1), x.view(b, c, -1)).view(b, c, h, w)
        return self.gamma * out + x


class ContextBlock(nn.Module):
    """GCNet's global context block (Cao et al., 2019), attention pooling and the channel-add
    fusion, as mmcv writes it."""

    def __init__(self, channels: int, ratio: int = 4):
        super().__init__()
        self.mask = nn.Conv2d(channels, 1, 1)
        inner = channels // ratio
        self.transform = nn.Sequential(nn.Conv2d(channels, inner, 1), nn.LayerNorm([inner, 1, 1]),
                                       nn.ReLU(inplace=True), nn.Conv2d(inner, channels, 1))
        nn.init.uniform_(self.transform[1].weight, 0.5, 1.5)
        nn.init.uniform_(self.transform[1].bias, -0.5, 0.5)

    def forward(self, x):
        b, c, h, w = x.size()
        flat = x.view(b, c, h * w).unsqueeze(1)
        mask = torch.softmax(self.mask(x).view(b, 1, h * w), dim=2).unsqueeze(-1)
        context = torch.matmul(flat, mask).view(b, c, 1, 1)
        return x + self.transform(context)


class CoordinateAttention(nn.Module):
    """Coordinate attention (Hou et al., CVPR 2021, as YOLO and MobileNet variants add it):
    the map pooled along W and along H, the two strips through one 1x1 conv + BN + hardswish,
    then a sigmoid factor per row and one per column multiply the map."""

    def __init__(self, channels: int, reduction: int = 8):
        super().__init__()
        mid = max(8, channels // reduction)
        self.reduce = nn.Sequential(nn.Conv2d(channels, mid, 1), nn.BatchNorm2d(mid),
                                    nn.Hardswish())
        self.rows = nn.Conv2d(mid, channels, 1)
        self.columns = nn.Conv2d(mid, channels, 1)

    def forward(self, x):
        h, w = x.shape[2:]
        strips = torch.cat([nn.functional.adaptive_avg_pool2d(x, (h, 1)),
                            nn.functional.adaptive_avg_pool2d(x, (1, w)).permute(0, 1, 3, 2)], 2)
        along_h, along_w = torch.split(self.reduce(strips), [h, w], 2)
        return x * torch.sigmoid(self.rows(along_h)) * \
            torch.sigmoid(self.columns(along_w.permute(0, 1, 3, 2)))


class Net(nn.Module):
    def __init__(self, block: nn.Module):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, CHANNELS, 3, padding=1),
                                  nn.BatchNorm2d(CHANNELS), nn.ReLU())
        self.block = block

    def forward(self, x):
        return self.block(self.stem(x))


BLOCKS = {"position": lambda: Net(PositionAttention(CHANNELS)),
          "channel": lambda: Net(ChannelAttention()),
          "context": lambda: Net(ContextBlock(CHANNELS)),
          "coordinate": lambda: Net(CoordinateAttention(CHANNELS))}
#: the attention layers each block's one external function holds
ATTENTION_LAYERS = {"position": 1, "channel": 1, "context": 0, "coordinate": 0}


def _net(block: str, batch: int = 1):
    return build_realistic(BLOCKS[block], (3, 16, 16), batch=batch)


def _whole(report, block: str):
    assert report.host == [] and len(report.functions) == 1, str(report)
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == ATTENTION_LAYERS[block], str(report)


def test_the_blocks_attention_matters():
    """The test's weights make each block's attention branch a visible part of its output:
    without it the output moves by more than a tenth of its scale (so a wrong core fails)."""
    for block in BLOCKS:
        model, (x,) = _net(block)
        expected = torch_forward(model, x)
        stem = torch_forward(model.stem, x)
        assert np.max(np.abs(expected - stem)) > 0.1 * np.max(np.abs(expected)), block


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("block", list(BLOCKS))
def test_an_attention_block_is_one_function_fp32_and_fp16(block, batch):
    model, (x,) = _net(block, batch)
    mod, params = from_pytorch(model, (x,))
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision), block)
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours, half = fp16_and_half_sqnrs(mod, params, model, x)
    assert ours >= half - 1.0, (ours, half)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_an_attention_blocks_onnx_export_partitions_alike(block, tmp_path):
    model, (x,) = _net(block)
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / f"{block}.onnx"))
    _whole(ac.partition_report(mod, params), block)
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_an_attention_block_in_int8(block, tmp_path):
    """Its attention core (or GCNet's dense layer of computed weights) in fp16 inside the
    int8 function (engines.fp16_in_int8), at least ONNX Runtime's static int8 of the export
    calibrated on the same inputs, on inputs held back from calibration: the net's own and 8
    more (one input's figure moves by a dB either way between the two quantisers: coordinate
    attention's 28.5 against 29.8 on the net's input, 28.7 against 28.3 on the nine)."""
    model, (x,) = _net(block)
    rng = np.random.default_rng(3)
    calibration = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned), block)
    held = [x.numpy()] + random_inputs(tuple(x.shape), 8, 77)
    ours, theirs = int8_sqnrs_held_back(model, partitioned, held, calibration, tmp_path)
    print(f"{block} int8: ours {ours:.2f} dB, ONNX Runtime {theirs:.2f} dB")
    assert ours >= theirs, (ours, theirs)
