"""Transformer decoders whole on the accelerator (issue 29): torch's nn.TransformerDecoderLayer,
nn.TransformerDecoder and nn.Transformer, batch-first and sequence-first, at batch 1 and 2,
with and without the causal mask of ``generate_square_subsequent_mask``, from PyTorch and
from ONNX, in one external function; fp32 within 1e-4 of the output scale of PyTorch, fp16
within 1 dB of PyTorch's .half() against float64, int8 whole.

The decoder layer's cross-attention projects its query by rows of in_proj_weight and its key
and value by one packed matmul of the other rows: at batch 2 torch.export spells the two
selects of that packed projection as takes of a sequence-first [2, S, B, C] view, which stayed
on the host (65 of 67 operators in 2 functions) until compiler/attention.py read the slices of
in_proj_weight and in_proj_bias as the dense layers' constants. The two layers of a
TransformerDecoder before training are clones: their cross-attentions read equal projections
of one memory, which the rewrites merged into one view read by both cores
(attention.private_attention_inputs binds it again for each). The causal mask is
``triu(full(-inf), 1)``: TVM's R.full of -inf did not build (frontend._full), and its aranges
did not fold (constant_folding)."""
import copy

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, load_example, run_main, sqnr, torch_forward

#: the models and their inputs: examples/decoder_partitions.py's (its figures are these)
EXAMPLE = load_example("decoder_partitions")


def Decoder(kind, batch_first, causal=False, trained=True):
    """``kind`` ("layer"; "decoder": 2 layers; "transformer": 2 + 2 layers), trained: its
    attention biases N(0, 0.1) and the stacks' layers perturbed (not clones)."""
    return EXAMPLE.Decoder(kind, batch_first, causal, trained)


_inputs = EXAMPLE.inputs


def _whole(partitioned, cores):
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == cores, str(report)
    return report


def _half_and_exact(model, xs):
    with torch.no_grad():
        exact = copy.deepcopy(model).double()(*(torch.from_numpy(x).double() for x in xs))
        half = copy.deepcopy(model).half()(*(torch.from_numpy(x).half() for x in xs))
    return half.float().numpy(), exact.numpy()


CORES = {"layer": 2, "decoder": 4, "transformer": 6}


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "sequence_first"])
@pytest.mark.parametrize("batch", [1, 2])
def test_the_decoder_layer_is_one_function_in_fp32_and_fp16(batch_first, batch):
    """Measured (2026-12-02, examples/decoder_partitions.py --accuracy --trained): fp32 1.3e-7
    to 2.4e-7 of the output scale; fp16 64.9 to 65.3 dB against float64 where PyTorch's
    .half() gives 64.7 to 65.2."""
    model = Decoder("layer", batch_first)
    xs = _inputs(batch_first, batch)
    mod, params = from_pytorch(model, tuple(torch.from_numpy(x) for x in xs))
    for precision in ("fp32", "fp16"):
        partitioned = ac.partition_for_accel(mod, params, precision=precision)
        _whole(partitioned, CORES["layer"])
        vm = ac.virtual_machine(ac.build(partitioned))
        for seed in (2, 3):  # K and V change per call: read where their runs wrote them
            x = _inputs(batch_first, batch, seed)
            ours = run_main(vm, *x)
            if precision == "fp32":
                assert_close(ours, torch_forward(model, *x), 1e-4)
                continue
            half, exact = _half_and_exact(model, x)
            assert sqnr(ours, exact) >= sqnr(half, exact) - 1.0, (sqnr(ours, exact),
                                                                  sqnr(half, exact))


@pytest.mark.parametrize("kind", ["decoder", "transformer"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "sequence_first"])
@pytest.mark.parametrize("causal", [False, True], ids=["unmasked", "causal"])
def test_decoder_stacks_are_one_function_within_1e4_at_batch_two(kind, batch_first, causal):
    """nn.TransformerDecoder (2 layers) and nn.Transformer (2 + 2 layers) at batch 2, with
    and without the causal mask. Measured: fp32 2.1e-7 to 3.9e-7 of the output scale."""
    model = Decoder(kind, batch_first, causal)
    xs = _inputs(batch_first, 2)
    partitioned = ac.partition_for_accel(*from_pytorch(
        model, tuple(torch.from_numpy(x) for x in xs)))
    _whole(partitioned, CORES[kind])
    vm = ac.virtual_machine(ac.build(partitioned))
    for seed in (2, 3):
        x = _inputs(batch_first, 2, seed)
        assert_close(run_main(vm, *x), torch_forward(model, *x), 1e-4)


@pytest.mark.parametrize("kind", ["decoder", "transformer"])
def test_decoder_stacks_in_fp16_are_within_a_decibel_of_pytorch_half(kind):
    """The causal stacks at batch 2, batch-first, one input. Measured 61.2 dB (.half() 61.3)
    for the decoder, 59.1 dB (59.2) for nn.Transformer. Not every input of every form is
    within 1 dB: docs/transformer_ops.md, "Decoders whole"."""
    model = Decoder(kind, True, causal=True)
    xs = _inputs(True, 2)
    partitioned = ac.partition_for_accel(*from_pytorch(
        model, tuple(torch.from_numpy(x) for x in xs)), precision="fp16")
    _whole(partitioned, CORES[kind])
    x = _inputs(True, 2, 2)
    half, exact = _half_and_exact(model, x)
    ours = run_main(ac.virtual_machine(ac.build(partitioned)), *x)
    assert sqnr(ours, exact) >= sqnr(half, exact) - 1.0, (sqnr(ours, exact), sqnr(half, exact))


def test_cloned_layers_share_their_cross_attention_views_and_stay_whole():
    """nn.TransformerDecoder's layers before training are clones: both cross-attentions read
    the same projections of the memory, which the rewrites merged into one view that the
    attention pattern refused (its chain would leak): 62 of 64 operators in 5 functions."""
    model = Decoder("decoder", False, trained=False)
    xs = _inputs(False, 1)
    partitioned = ac.partition_for_accel(*from_pytorch(
        model, tuple(torch.from_numpy(x) for x in xs)))
    _whole(partitioned, CORES["decoder"])
    x = _inputs(False, 1, 2)
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), *x),
                 torch_forward(model, *x), 1e-4)


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "sequence_first"])
def test_the_onnx_export_partitions_like_the_pytorch_model(tmp_path, batch_first):
    model = Decoder("layer", batch_first, causal=True)
    xs = _inputs(batch_first, 2)
    path = export_onnx(model, tuple(torch.from_numpy(x) for x in xs), tmp_path / "dec.onnx")
    partitioned = ac.partition_for_accel(*from_onnx(path))
    _whole(partitioned, CORES["layer"])
    x = _inputs(batch_first, 2, 2)
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), *x),
                 torch_forward(model, *x), 1e-4)


def test_int8_keeps_the_decoder_layer_whole():
    """int8 calibrated on 4 inputs: one function, the attention cores in fp16 between
    converting runs; its SQNR against PyTorch reported (measured in the docs), held above
    20 dB."""
    model = Decoder("layer", True, causal=True)
    xs = _inputs(True, 2)
    mod, params = from_pytorch(model, tuple(torch.from_numpy(x) for x in xs))
    calibration = [tuple(_inputs(True, 2, seed)) for seed in range(10, 14)]
    partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                         calibration=calibration)
    report = _whole(partitioned, CORES["layer"])
    assert {op.precision for op in report.ops if op.op == "relax.nn.attention"} == {"fp16"}
    x = _inputs(True, 2, 2)
    ours = run_main(ac.virtual_machine(ac.build(partitioned)), *x)
    assert sqnr(ours, torch_forward(model, *x)) >= 20.0
