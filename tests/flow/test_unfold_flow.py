"""``F.unfold`` / ``F.fold`` (aten's im2col and col2im) from PyTorch. torch decomposes them
into gathers that TVM's converter refused (session 22 made that a typed error); they are now
imported whole (``frontend._im2col``, ``_col2im``): unfold a convolution of one-hot weights, k^2
outputs per input channel, fold the transposed convolution of the same weights, both exact."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, random_inputs,
                      torch_forward)


class UnfoldFold(torch.nn.Module):
    """Patches taken with padding and a stride, scaled, put back (the overlaps summed)."""

    def forward(self, x):
        patches = F.unfold(x, 3, padding=1, stride=2)
        return F.fold(patches * 2.0, (8, 8), 3, padding=1, stride=2)


class PatchEmbedding(torch.nn.Module):
    """A ViT-style patch embedding written with unfold: 4x4 patches, a Linear over each."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3 * 4 * 4, 32)

    def forward(self, x):
        return self.proj(F.unfold(x, 4, stride=4).transpose(1, 2))


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


@pytest.mark.parametrize("kernel, dilation, padding, stride", [
    (3, 1, 1, 2), ((2, 3), (1, 2), (0, 1), 1), (2, 1, 0, 2)])
def test_unfold_is_a_one_hot_convolution_bit_for_bit(kernel, dilation, padding, stride):
    class Unfold(torch.nn.Module):
        def forward(self, x):
            return F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)

    x = torch.randn(2, 3, 7, 9)
    model = Unfold().eval()
    mod, params = from_pytorch(model, (x,))
    _whole(ac.partition_report(mod, params))
    np.testing.assert_array_equal(build_and_run(mod, x.numpy(), params=params),
                                  torch_forward(model, x))


def test_fold_of_unfold_and_a_patch_embedding_in_every_precision():
    torch.manual_seed(0)
    for model, shape in ((UnfoldFold().eval(), (1, 4, 8, 8)),
                         (PatchEmbedding().eval(), (1, 3, 16, 16))):
        x = torch.randn(*shape)
        mod, params = from_pytorch(model, (x,))
        calibration = random_inputs(shape, 4, 5)
        for precision in ("fp32", "fp16", "int8"):
            extra = {"calibration": calibration} if precision == "int8" else {}
            _whole(ac.partition_report(mod, params, precision=precision, **extra))
        assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x),
                     1e-5)
        ours, half = fp16_and_half_sqnrs(mod, params, model, x)
        assert ours >= half - 1.0, (type(model).__name__, ours, half)
