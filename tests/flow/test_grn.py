"""ConvNeXt-V2's global response normalisation (GRN) on the accelerator: a ConvNeXt-V2 block
(7x7 depthwise conv, permute to channels-last, layer norm, Linear 4C, GELU, GRN(4C), Linear C,
permute back, residual add) is one external function with nothing on the host, from PyTorch
and from its ONNX export, in fp32 (within 1e-4 of the output scale of PyTorch) and fp16
(SQNR within 1 dB of PyTorch's own .half()); the GRN over the channels-last tensor becomes
ops over the NCHW tensor (rewrites.channels_last_sandwiches), one accel.grn composite whose
runs are sim/decompose.grn_passes, the built code bit for bit the NumPy reference's passes."""
import numpy as np
import pytest
import torch
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.sim import decompose, reference
from accel_codegen.tools.models import CNv2Block, build_realistic
from conftest import (assert_close, assert_same, build_and_run, ort_int8_sqnr, random_inputs,
                      sqnr, torch_forward)


def _block(dim=16, size=10, seed=0):
    return build_realistic(lambda: CNv2Block(dim), (dim, size, size), seed=seed)


def _whole(report):
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions
    assert "accel.grn" in list(report.functions.values())[0], report.functions


@pytest.mark.parametrize("size", [10, 11])  # 11: the PDP's windows padded (8 + 3, then 2)
def test_a_convnext_v2_block_is_one_function_and_matches_pytorch(size):
    model, (x,) = _block(size=size)
    mod, params = from_pytorch(model, (x,))
    for precision in ("fp32", "fp16"):
        _whole(ac.partition_report(mod, params, precision=precision))
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    exact = torch_forward(model.double(), x.double()).astype(np.float64)
    ours = sqnr(build_and_run(mod, x.numpy(), params=params, precision="fp16"), exact)
    half = sqnr(torch_forward(model.half(), x.half()).astype(np.float64), exact)
    model.float()
    assert ours >= half - 1.0, (ours, half)


def test_the_onnx_export_partitions_as_the_pytorch_model(tmp_path):
    """torch.onnx writes the norm as ReduceL2 (TVM: sqrt(sum(x * x))) and GELU as erf: the
    same one function, the same output."""
    model, (x,) = _block()
    path = tmp_path / "cnv2.onnx"
    export_onnx(model, (x,), path)
    mod, params = from_onnx(path)
    _whole(ac.partition_report(mod, params))
    torch_mod, torch_params = from_pytorch(model, (x,))
    assert ac.partition_report(mod, params).functions == \
        ac.partition_report(torch_mod, torch_params).functions
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)


def test_int8_runs_the_grn_in_fp16_inside_one_function(tmp_path):
    """int8: the GRN's passes run in fp16 between converting SDP runs (engines.fp16_in_int8:
    its means of squares, 1/sqrt and 1/mean), the block still one function; its SQNR against
    PyTorch level with or above ONNX Runtime's static int8 of the ONNX export (31.6 dB against
    29.4 on this input, 8 calibration inputs, 2026-12-03)."""
    model, (x,) = _block()
    calibration = [(c,) for c in random_inputs(tuple(x.shape), 8, 1)]
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    ours = sqnr(build_and_run(partitioned, x.numpy()), torch_forward(model, x))
    assert ours >= ort_int8_sqnr(model, x.numpy(), calibration, tmp_path) - 0.5, ours


def _grn_nchw(shape, gamma, beta, eps):
    """GRN over NCHW data as Relax ops (the form rewrites.channels_last_sandwiches gives)."""
    bb = relax.BlockBuilder()
    var = relax.Var("x", relax.TensorType(shape, "float32"))
    c = shape[1]
    with bb.function("main", [var]):
        with bb.dataflow():
            norm = bb.emit(relax.op.sqrt(relax.op.sum(relax.op.multiply(var, var), axis=[2, 3],
                                                      keepdims=True)))
            mean = bb.emit(relax.op.mean(norm, axis=[1], keepdims=True))
            nx = bb.emit(relax.op.divide(norm, relax.op.add(mean, relax.const(eps, "float32"))))
            y = relax.op.multiply(relax.op.multiply(var, nx),
                                  relax.const(gamma.reshape(1, c, 1, 1)))
            y = relax.op.add(relax.op.add(y, relax.const(beta.reshape(1, c, 1, 1))), var)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(1, 24, 10, 10), (1, 40, 9, 13), (2, 16, 5, 6)])
def test_grn_runs_bit_for_bit_as_the_reference(precision, shape):
    """The built GRN layer's output is the NumPy reference's passes' bit for bit (one image:
    x f + beta + x through the X unit's per-channel multiplier; two: the element-wise
    per-channel multiplier and a pass after it), a channel of zeros included (its norm 0)."""
    rng = np.random.default_rng(3)
    c = shape[1]
    gamma = rng.normal(0, 0.5, c).astype(np.float32)
    beta = rng.normal(0, 0.2, c).astype(np.float32)
    x = (rng.standard_normal(shape) * 1.5).astype(np.float32)
    x[0, 2] = 0.0
    mod = _grn_nchw(shape, gamma, beta, 1e-6)
    assert list(ac.partition_report(mod).functions.values()) == [["accel.grn"]]
    y = build_and_run(mod, x, precision=precision)
    passes = decompose.grn_passes(shape, gamma, beta, 1e-6, precision)
    expected = reference.run_decomposition(passes, x.astype(decompose.dtype_for(precision)))
    assert_same(y, np.asarray(expected, np.float32))
    assert not np.any(np.isnan(y))
