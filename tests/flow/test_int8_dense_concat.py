"""int8 on DenseNet-style networks (issue 33): every dense layer reads the concat of all the
earlier features through a batch norm + ReLU (an SDP reading int8 from memory) and a conv.

- The concat keeps each input's scale and zero point in its channels (a ChannelQuant): its
  copies move codes, and the batch norm's SDP takes each channel's scale into its multiplier
  and its zero point into its bias. One covering scale rescaled every input into it.
- That SDP's bias is in its input's codes, so the batch norm's shift is rounded to half an
  input step per channel, the same offset everywhere, which a global average pool keeps
  while it averages the rest away; the conv that reads the SDP's output (or its average
  pool) takes that mean shift back into its bias.
- The int8 average pool rounds half away from zero twice (NVDLA's two reciprocals): a 2x2
  window leans 0.375 codes away from code 0. A global pool's lean is taken back by the
  classifier; a transition's 1x1 conv and 2x2 pool are one 2x2 stride-2 conv in int8
  (rewrites.pooled_convolutions: one rounding, no pool).
"""
import numpy as np
import pytest
import torch
from torch import nn

import accel_codegen as ac
from accel_codegen import reference
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import program_of
from accel_codegen.quantization import ChannelQuant, TensorQuant, observing
from accel_codegen.tools import models
from conftest import random_inputs, run_main, sqnr, torch_forward


class Block(nn.Module):
    """A stem (conv + BN + ReLU: unsigned), a growth layer (conv: signed, a smaller
    range), their concat through BN + ReLU into a 1x1 conv, as DenseNet's layers read it."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.grow = nn.Conv2d(16, 4, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(20)
        self.conv = nn.Conv2d(20, 8, 1, bias=False)

    def forward(self, x):
        s = self.stem(x)
        return self.conv(torch.relu(self.norm(torch.cat([s, self.grow(s)], 1))))


class _Codes:
    """Every int8 tensor of one run of the build, by (run key, op index)."""

    def __init__(self):
        self.codes = {}

    def add(self, label, op_index, x):
        if x.dtype == np.int8:
            self.codes[(label.split(" ", 1)[0], op_index)] = np.array(x)


def test_concat_keeps_its_inputs_scales_and_the_batch_norm_reads_them_bit_exactly():
    model, (x,) = models.build_realistic(Block, (3, 12, 12), seed=3)
    calibration = random_inputs((1, 3, 12, 12), 8, 1234)
    part = ac.partition_for_accel(*from_pytorch(model, (x,)), precision="int8",
                                  calibration=[(c,) for c in calibration])
    runs = {run["label"].split(" ")[0]: run for f in program_of(part)["functions"]
            for run in f["runs"]}
    copies = [r for r in runs.values() if r["primitive"] == "accel.concat"]
    (norm,) = [r for r in runs.values() if r["primitive"] == "accel.batch_norm_relu"]
    assert len(copies) == 2
    for copy in copies:  # identity converters: each input's codes in its own quantisation
        q, c = copy["quant"], copy["quant"]["converters"]
        assert q["input"] == q["output"] and not any(c["bias"]), q
        assert all(m == 1 << s for m, s in zip(c["mul"], c["rshift"])), c
    assert copies[0]["quant"]["output"] != copies[1]["quant"]["output"]
    assert norm["quant"]["input"] is None  # per channel: in the converters

    seen = _Codes()
    vm = ac.virtual_machine(ac.build(part))
    x = random_inputs((1, 3, 12, 12), 1, 99)[0]
    with observing(seen):
        run_main(vm, x)
    key = norm["key"]
    read, wrote = seen.codes[(key, -1)], seen.codes[(key, 0)]
    # the concat's codes are its inputs' codes, each in its own channels
    for copy in copies:
        np.testing.assert_array_equal(seen.codes[(copy["key"], 0)],
                                      seen.codes[(copy["key"], -1)])
    c, out = norm["quant"]["converters"], norm["quant"]["output"]
    expected = reference.sdp_int8(read.astype(np.int64), bias=np.array(c["bias"], np.int32),
                                  mul=np.array(c["mul"], np.int16),
                                  rshift=np.array(c["rshift"], np.uint8), act="relu",
                                  out_zero=out["zero"])
    np.testing.assert_array_equal(wrote, expected)
    # what those codes mean: each channel dequantised with its input's quantisation is the
    # fp32 concat to within half a step of that input
    parts = ChannelQuant.of_parts(
        (16 if i == 0 else 4, TensorQuant(**copy["quant"]["output"]))
        for i, copy in enumerate(copies))
    with torch.no_grad():
        t = torch.from_numpy(x)
        s = model.stem(t)
        fp32 = torch.cat([s, model.grow(s)], 1).numpy()
    assert sqnr(parts.dequantize(read), fp32) >= 30


def test_channel_quant_round_trips_each_channel_as_its_tensor_quant():
    a, b = TensorQuant(0.02, -128), TensorQuant(0.005, 3)
    quant = ChannelQuant.of_parts([(2, a), (3, b)])
    x = np.random.default_rng(0).standard_normal((2, 5, 4, 4)).astype(np.float32) * 0.3
    q = quant.quantize(x)
    np.testing.assert_array_equal(q[:, :2], a.quantize(x[:, :2]))
    np.testing.assert_array_equal(q[:, 2:], b.quantize(x[:, 2:]))
    np.testing.assert_array_equal(quant.dequantize(q)[:, 2:], b.dequantize(q[:, 2:]))


def test_pool_rounding_bias_is_the_pdps():
    """int8.pool_rounding_bias is the mean error of the reference PDP's average over every
    window sum of codes 1..127 per position: one window per sum."""
    from accel_codegen.compiler.codegen.int8 import pool_rounding_bias

    for k in (2, 3, 4):
        n = k * k
        sums = np.arange(1, 127 * n + 1)
        # window i holds sums[i]: every code sums[i] // n, the remainder spread one by one
        codes = np.repeat((sums // n)[:, None], n, axis=1)
        codes += np.arange(n)[None, :] < (sums % n)[:, None]
        x = codes.reshape(1, 1, -1, k, k).transpose(0, 1, 3, 2, 4).reshape(1, 1, k, -1)
        pooled = reference.pool2d_int8(x.astype(np.int8), "avg", k, k).reshape(-1)
        assert pool_rounding_bias(k, k) == pytest.approx(np.mean(pooled - sums / n)), k
    assert pool_rounding_bias(2, 2) == pytest.approx(0.375)


@pytest.mark.parametrize("blocks, growth, seed, bound", [
    ((4, 4), 12, 0, 31.0), ((4, 4), 12, 2, 28.0), ((6,), 32, 1, 33.0)])
def test_small_densenet_int8_sqnr(blocks, growth, seed, bound):
    """Small DenseNets on 3x64x64 (two blocks of 4 layers of growth 12 with a transition,
    or one block of 6 of growth 32): output SQNR against PyTorch over 4 inputs. Measured
    (2026-12-02) 32.9 / 29.3 / 35.9 dB since the transition's conv and pool are one
    strided conv (rewrites.pooled_convolutions), 30.0 / 28.7 / 35.9 dB before it; before
    the concat's and the batch norms' changes (one covering scale per concat, nothing
    taken back) 22.2 / 23.0 / 26.8 dB. ONNX Runtime's static int8 of the same networks (16
    calibration and 8 other inputs, against our fp32 build): 31.0 / 27.9 / 37.6 dB
    (docs/onnxruntime.md, docs/ptq.md)."""
    model, (x,) = models.build_realistic(
        lambda: models.DenseNet(growth=growth, blocks=blocks, init_features=16, bn_size=4,
                                num_classes=10), (3, 64, 64), seed=seed)
    calibration = random_inputs((1, 3, 64, 64), 16, 1234)
    part = ac.partition_for_accel(*from_pytorch(model, (x,)), precision="int8",
                                  calibration=[(c,) for c in calibration])
    evaluation = random_inputs((1, 3, 64, 64), 4, 1235)
    vm = ac.virtual_machine(ac.build(part))
    actual = np.stack([run_main(vm, e) for e in evaluation])
    expected = np.stack([torch_forward(model, e) for e in evaluation])
    assert sqnr(actual, expected) >= bound
