"""The zoo's transformers on the accelerator (issue 29), at test sizes: an
``nn.TransformerEncoderLayer`` stack, the conv-stem + transformer hybrid (an OCR recogniser's
form), a ViT (its stride-16 patch conv, class token concat, position embedding add and
class-token head included: compiler/rewrites.py) and a Swin (shifted windows: rolls, window
partition and reverse, attention with its relative position bias and region mask, patch
merging: compiler/windows.py, compiler/attention.py) are whole, one external function,
within 1e-4 of the output scale of PyTorch in fp32; the Swin and the ViT in fp16 within
1 dB of PyTorch's own ``.half()`` against float64."""
import copy

import numpy as np
import pytest
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.tools.models import (HybridRecogniser, SwinTransformer, VisionTransformer,
                                        build_realistic)
from conftest import assert_close, build_and_run, sqnr, torch_forward


def _encoder_stack():
    """encoder_stack's layers (PyTorch's own attention, post-norm, GELU) at width 64, 2 heads,
    2 layers, 16 tokens."""
    return build_realistic(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(
        64, 2, 128, dropout=0.0, activation="gelu", batch_first=True), 2,
        enable_nested_tensor=False), (16, 64))


def _hybrid():
    """hybrid_recogniser at width 32 (its 3x32x128 line: 256 tokens)."""
    return build_realistic(lambda: HybridRecogniser(dim=32, heads=2, classes=40), (3, 32, 128))


def _vit():
    """vit_ti16's architecture at width 48, 2 blocks of 2 heads, on a 3x48x48 image (9 patches
    of 16x16 and the class token), 10 classes."""
    return build_realistic(lambda: VisionTransformer(image=48, dim=48, depth=2, heads=2,
                                                     num_classes=10), (3, 48, 48))


def _swin():
    """swin_mini's architecture at width 16, [2, 2] blocks of [1, 2] heads, window 7, on a
    3x56x56 image (14x14 then 7x7 tokens: 4 windows, shifted in the second block, then 1)."""
    return build_realistic(lambda: SwinTransformer(image=56, dim=16, depths=(2, 2),
                                                   heads=(1, 2), window=7, num_classes=10),
                           (3, 56, 56))


@pytest.mark.parametrize("make", [_encoder_stack, _hybrid, _vit, _swin],
                         ids=["encoder_stack", "hybrid", "vit", "swin"])
def test_zoo_transformer_is_one_function_and_matches_pytorch(make):
    model, (x,) = make()
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)


def test_swin_in_fp16_is_whole_and_within_1db_of_pytorch_half():
    model, (x,) = _swin()
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params, precision="fp16")
    assert not report.host and len(report.functions) == 1, report.functions
    ours = build_and_run(mod, x.numpy(), params=params, precision="fp16")
    exact = torch_forward(model.double(), x.double())
    half = torch_forward(model.half(), x.half()).astype(np.float64)
    assert sqnr(ours, exact) >= sqnr(half, exact) - 1.0


def test_vit_in_fp16_is_within_1db_of_pytorch_half():
    """The small ViT (2 blocks, 10 tokens) in fp16, SQNR against float64: measured 62.6 dB,
    PyTorch's ``.half()`` 60.6 dB (issue 29's goal: within 1 dB; zoo's vit_ti16: 56.0 and
    55.5 dB, docs/transformer_ops.md)."""
    model, (x,) = _vit()
    mod, params = from_pytorch(model, (x,))
    ours = build_and_run(mod, x.numpy(), params=params, precision="fp16")
    exact = torch_forward(copy.deepcopy(model).double(), x.double())
    half = torch_forward(copy.deepcopy(model).half(), x.half()).astype(np.float64)
    assert sqnr(ours, exact) >= sqnr(half, exact) - 1.0


def test_vit_from_onnx_partitions_like_pytorch(tmp_path):
    """The small ViT through ``export_onnx`` + ``from_onnx``: its head's ``x[:, 0]`` is a
    Gather whose index TVM's importer normalises at run time (``shape_of``, ``less``,
    ``add``, ``where``); the shape folds to a constant (compiler/constant_folding.py), the
    index with it, and the take becomes the class token's slice as from PyTorch: whole, one
    function (before: 64 of 70 operators in 2). fp32 within 1e-4 of the output scale of
    ONNX Runtime."""
    import onnxruntime

    model, (x,) = _vit()
    path = tmp_path / "vit.onnx"
    export_onnx(model, (x,), path)
    mod, params = from_onnx(path)
    report = ac.partition_report(mod, params)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
