"""ConvNeXt on the accelerator (issue 29): a ConvNeXt block (7x7 depthwise conv, permute to
channels-last, layer norm over C, Linear 4C, GELU in its erf and tanh forms, Linear C,
permute back, layer scale, residual add) is one external function in fp32 and fp16, within
1e-4 of the output scale of PyTorch in fp32 and near PyTorch's own .half() in fp16; the
channels-last sandwich becomes ops over the NCHW tensor's channels (rewrites.py), and a layer
norm over axis 1 of NCHW data runs its engine passes on that surface bit for bit as the NumPy
reference (sim/decompose.py)."""
import numpy as np
import pytest
import torch
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.sim import decompose, reference
from accel_codegen.tools.models import CNBlock, build_realistic
from conftest import assert_close, assert_same, build_and_run, sqnr, torch_forward


def _block(approximate, dim=32, size=10):
    return build_realistic(lambda: CNBlock(dim, approximate), (dim, size, size))


def _whole(report):
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_a_convnext_block_is_one_function_and_matches_pytorch(approximate):
    model, (x,) = _block(approximate)
    mod, params = from_pytorch(model, (x,))
    expected = torch_forward(model, x)
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision))
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    ours = sqnr(build_and_run(mod, x.numpy(), params=params, precision="fp16"), expected)
    half = sqnr(torch_forward(model.half(), x.half()).astype(np.float32), expected)
    model.float()
    # the layer norm's passes round to half between runs (docs/transformer_ops.md)
    assert ours >= half - 3.0, (ours, half)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_layer_norm_over_nchw_channels_runs_bit_for_bit_as_the_reference(precision):
    """layer_norm(x, axes=[1]) of NCHW data: its surface is the tensor itself (no transpose),
    the passes the decomposition's, bit for bit (fp16: the simulator's; the reference's within
    the CONV sums' order)."""
    rng = np.random.default_rng(5)
    shape = (1, 24, 3, 5)
    gamma = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    beta = rng.uniform(-0.5, 0.5, shape[1]).astype(np.float32)
    x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [var]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.layer_norm(var, relax.const(gamma),
                                                        relax.const(beta), axes=[1],
                                                        epsilon=1e-6))
        bb.emit_func_output(out)
    mod = bb.get()
    assert list(ac.partition_report(mod).functions.values()) == [["accel.layer_norm"]]
    y = build_and_run(mod, x, precision=precision)
    # fp16: the CONV-sum form (sim/decompose.py), the reference's bits too (its CONVs sum in
    # the library's order, csrc/conv/f32_order.h)
    reduce = "conv" if precision == "fp16" else "conv1"
    passes = decompose.layer_norm_passes(shape, gamma, beta, 1e-6, precision, reduce)
    expected = np.asarray(reference.run_decomposition(passes, x), np.float32)
    assert_same(y, expected)
