"""Swin's layout ops onto the BDMA's copies (compiler/windows.py): a permute of any rank that
swaps two adjacent groups of axes is the transpose of [N, A, B, L]; torch.roll is two slices
and a concat along its axis; patch merging's phases are slices along H and W with stride 2
and a concat along C. The layout ops alone are copies: bit for bit PyTorch's."""
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.windows import merged_swaps
from conftest import assert_same, build_and_run, torch_forward


@pytest.mark.parametrize("shape, axes, swaps", [
    ([1, 2, 7, 2, 7, 16], [0, 1, 3, 2, 4, 5], [(2, 7, 2, 112)]),  # window partition
    ([4, 49, 3, 1, 16], [2, 0, 3, 1, 4], [(1, 196, 3, 16)]),  # a packed head split
    ([2, 3, 4], [2, 0, 1], [(1, 6, 4, 1)]),
    ([1, 5, 1], [0, 2, 1], []),  # unit axes only: a reshape
    # the outer groups swapped past the middle one: three swaps of neighbours
    ([2, 3, 4, 5], [3, 1, 2, 0], [(1, 2, 12, 5), (12, 2, 5, 1), (1, 12, 5, 2)]),
    ([1, 2, 3, 2, 3, 4], [0, 2, 4, 1, 3, 5], [(1, 2, 3, 24), (6, 2, 3, 4), (3, 2, 3, 8)]),
])
def test_merged_swaps(shape, axes, swaps):
    assert merged_swaps(shape, axes) == swaps


class Windows(torch.nn.Module):
    """A shifted window's layout and back, then patch merging's phases (no arithmetic)."""

    def forward(self, x):  # [1, 14, 14, 8]
        b, h, w, c = x.shape
        y = torch.roll(x, (-3, -3), (1, 2))
        y = y.view(b, 2, 7, 2, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, c)
        y = y.view(b, 2, 2, 7, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        y = torch.roll(y, (3, 3), (1, 2)) + x
        # MaxViT's grid: windows of every 7th token, and back
        g = y.view(b, 7, 2, 7, 2, c).permute(0, 2, 4, 1, 3, 5).reshape(-1, 49, c)
        y = g.view(b, 2, 2, 7, 7, c).permute(0, 3, 1, 4, 2, 5).reshape(b, h, w, c) - x
        return torch.cat([y[:, 0::2, 0::2], y[:, 1::2, 0::2], y[:, 0::2, 1::2],
                          y[:, 1::2, 1::2]], -1)


def test_rolls_windows_and_patch_merging_are_copies():
    model, x = Windows().eval(), torch.randn(1, 14, 14, 8)
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    assert not report.host and len(report.functions) == 1, [(o.op, o.reason)
                                                            for o in report.host]
    primitives = {p for ps in report.functions.values() for p in ps}
    assert {"accel.slice", "accel.concat", "accel.transpose"} <= primitives, primitives
    assert_same(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x))
