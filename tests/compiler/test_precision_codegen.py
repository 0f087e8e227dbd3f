"""The int8 and fp16 code generator: what it emits equals the engines' definition composed by
hand, and its costs equal what a run records."""
import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen import codegen, frontend, reference
from accel_codegen.compiler.lowering import BatchNormSpec
from accel_codegen.quantization import (Calibration, TensorQuant, encode_multipliers,
                                        quantize_weights, round_half_away)
from conftest import build_and_run, random_inputs, run_main, torch_forward


class ConvBnReluPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(5, 7, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(7)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(-1.5, 1.5)  # negative factors too
            self.bn.bias.uniform_(-0.5, 0.5)
        self.eval()

    def forward(self, x):
        return torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)


class AddRelu(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y)


def _module(model, *inputs):
    mod, params = frontend.from_pytorch(model, tuple(torch.from_numpy(x) for x in inputs))
    return mod, params


def test_int8_conv_layer_equals_the_engine_definition():
    torch.manual_seed(0)
    model = ConvBnReluPool()
    x = np.random.default_rng(0).standard_normal((2, 5, 8, 8)).astype(np.float32)
    mod, params = _module(model, x)
    q_in, q_out = TensorQuant(0.03125, 0), TensorQuant(0.0119, -128)
    calibration = Calibration("max", 1, {("f0.0", -1): q_in, ("f0.0", 1): q_out,
                                         ("f0.0", 2): TensorQuant(0.5, 0)})
    got = build_and_run(mod, x, params=params, precision="int8", calibration=calibration)

    # The same layer composed from the engine definitions (reference.py) by hand.
    bn = model.bn
    scale, shift = codegen.fold_batch_norm(BatchNormSpec(
        tvm.relax.const(bn.weight.detach().numpy()), tvm.relax.const(bn.bias.detach().numpy()),
        tvm.relax.const(bn.running_mean.numpy()), tvm.relax.const(bn.running_var.numpy()),
        bn.eps), model.conv.bias.detach().numpy(), 7)
    weights = model.conv.weight.detach().numpy().astype(np.float64) * \
        scale.astype(np.float64).reshape(-1, 1, 1, 1)
    codes, weight_scales = quantize_weights(weights)
    unit = q_in.scale * weight_scales
    mul, rshift = encode_multipliers(unit / q_out.scale, "test")
    acc = reference.conv2d_int8(q_in.quantize(x), codes, padding=1, in_zero=q_in.zero)
    y = reference.sdp_int8(acc, bias=round_half_away(shift / unit).astype(np.int32), mul=mul,
                           rshift=rshift, act="relu", out_zero=q_out.zero).astype(np.int8)
    pooled = reference.pool2d_int8(y, "max", 2, 2, zero=q_out.zero)
    np.testing.assert_array_equal(got, q_out.dequantize(pooled))
    assert len(np.unique(got)) > 20  # a real spread of codes, not a saturated or empty layer
    # The scale of the pooled output is the SDP's: the (f0.0, 2) entry is not used.
    used = ac.calibration_of(ac.partition_for_accel(mod, params, precision="int8",
                                                    calibration=calibration), used=True)
    assert used.tensors[("f0.0", 2)] == q_out and used.tensors[("f0.0", -1)] == q_in


def test_int8_residual_add_rescales_both_streams_below_the_output_step():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    y = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    mod, params = _module(AddRelu(), x, y)
    qx, qy, qo = TensorQuant(0.02, 0), TensorQuant(0.035, 0), TensorQuant(0.015, -128)
    calibration = Calibration("max", 1, {("f0.0", -1): qx, ("f0.0", -2): qy,
                                         ("f0.0", 0): qo})
    got = build_and_run(mod, x, y, params=params, precision="int8", calibration=calibration)
    target = qo.scale / 256  # 8 bits below the output step
    mul, rshift = encode_multipliers(np.full(4, qx.scale / target), "x")
    ew_mul, ew_shift = encode_multipliers([qy.scale / target], "y")
    v = qx.quantize(x).astype(np.int64) - qx.zero
    codes = reference.sdp_int8(v, bias=np.zeros(4, np.int32), mul=mul, rshift=rshift,
                               ew_op="add", operand=qy.quantize(y), ew_zero=qy.zero,
                               ew_mul=int(ew_mul[0]), ew_shift=int(ew_shift[0]), act="relu",
                               out_mul=1, out_shift=8, out_zero=qo.zero).astype(np.int8)
    np.testing.assert_array_equal(got, qo.dequantize(codes))
    assert len(np.unique(got)) > 20
    expected = np.maximum(x + y, 0)
    assert np.max(np.abs(got - expected)) <= qo.scale + qx.scale + qy.scale


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_estimate_equals_the_profiled_run(precision, zoo):
    mod, params, x = zoo("lenet5").imported
    calibration = [np.random.default_rng(2).standard_normal(tuple(x.shape), dtype=np.float32)
                   for _ in range(2)] if precision == "int8" else None
    vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision,
                                     calibration=calibration))
    with ac.profile() as prof:
        run_main(vm, x)
    estimate = ac.estimate(mod, params, precision=precision)
    assert prof.totals["cycles"] == estimate.total_cycles
    assert prof.totals["bytes_read"] == estimate.bytes_read
    fp32 = ac.estimate(mod, params, precision="fp32")
    if precision == "int8":  # the int8 MAC rate and 1-byte data
        assert estimate.total_cycles < fp32.total_cycles and estimate.bytes_read < fp32.bytes_read


def test_fp16_layer_rounds_once_per_engine_pass():
    torch.manual_seed(3)
    model = ConvBnReluPool()
    x = np.random.default_rng(3).standard_normal((1, 5, 8, 8)).astype(np.float32)
    mod, params = _module(model, x)
    got = build_and_run(mod, x, params=params, precision="fp16")
    # Every value is a half, and within half an ulp plus the fp32 sum's error of fp32's result.
    assert np.array_equal(got.astype(np.float16).astype(np.float32), got)
    expected = torch_forward(model, x)
    assert np.max(np.abs(got - expected)) <= 4e-3 * np.max(np.abs(expected))


def test_int8_generated_source_reads_typed_constants(zoo):
    mod, params, x = zoo("lenet5").imported
    calibration = [np.zeros(tuple(x.shape), np.float32)]
    part = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    source = next(iter(ac.generated_sources(part).values()))
    assert "ops[0].conv.precision = ACCEL_INT8;" in source and "pack_weights(" in source
    assert "ops[1].sdp.rshift = (const uint8_t*)" in source
    constants = dict(part.attrs["const_name_to_constant"])
    dtypes = {str(v.dtype) for v in constants.values()}
    assert {"int8", "int32", "int16", "uint8"} <= dtypes and "float32" not in dtypes


class ConvPoolConv(torch.nn.Module):
    """A conv with no SDP of its own: int8 and fp16 give it a converter, fp32 does not."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.eval()

    def forward(self, x):
        return torch.relu(self.second(torch.nn.functional.max_pool2d(self.first(x), 3, 1, 1)))


@pytest.mark.parametrize("precision", ["int8", "fp16", "mixed"])
def test_accuracy_report_pairs_the_tensors_of_a_conv_without_sdp(precision):
    torch.manual_seed(4)
    x = random_inputs((1, 4, 8, 8), 4, seed=4)
    mod, params = _module(ConvPoolConv(), x[0])
    mixed = {"layer_precisions": {"f0.0": "fp16", "f0.1": "int8"}} if precision == "mixed" \
        else {}
    report = ac.accuracy_report(mod, params, x[:2], precision=precision,
                                calibration=x[2:] if precision != "fp16" else None, **mixed)
    rows = [(t.key, t.op_index) for t in report.tensors]
    assert rows == [("f0.0", 1), ("f0.0", 2), ("f0.1", 1)]
    floor = 55 if precision == "fp16" else 25
    assert all(t.sqnr_db > floor for t in report.tensors), str(report)


def test_calibration_must_be_examples_not_one_array(zoo):
    mod, params, x = zoo("lenet5").imported
    with pytest.raises(ac.AccelInvalidError, match="wrap it"):
        ac.partition_for_accel(mod, params, precision="int8", calibration=x)


def test_calibration_examples_as_dicts_are_refused_typed(zoo):
    """{name: array} (ONNX Runtime's calibration readers give them) used to reach TVM as an
    object array and come back as its bare ValueError ("unknown dtype `object`")."""
    mod, params, x = zoo("lenet5").imported
    with pytest.raises(ac.AccelInvalidError, match="input 0 of example 0 is a dict"):
        ac.partition_for_accel(mod, params, precision="int8", calibration=[{"x": x}])


def test_int8_code_generation_errors_come_back_typed():
    """An error only the scales reveal (here an element-wise operand 10^6 times coarser than
    the output) is raised by the code generator inside TVM; the caller gets it typed."""
    x = np.ones((1, 4, 5, 5), np.float32)
    mod, params = _module(AddRelu(), x, x)
    calibration = Calibration("max", 1, {("f0.0", -1): TensorQuant(0.02, 0),
                                         ("f0.0", -2): TensorQuant(2e4, 0),
                                         ("f0.0", 0): TensorQuant(0.02, -128)})
    with pytest.raises(ac.AccelInvalidError, match="element-wise operand's scale"):
        ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)


class ScaleShiftRelu(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(scale).reshape(1, -1, 1, 1))
        self.shift = torch.nn.Parameter(torch.ones(1, len(scale), 1, 1))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


def test_int8_zero_channel_factor_runs_as_its_shift():
    """A dead channel of a scale/shift with no conv before it (a batch norm's gamma of 0):
    its output is the shift alone, which int8.channel_converters encodes with a raised
    multiplier (the input's part below 2^-22 of the shift); it stayed on the host before
    ("a per-channel scale of 0 has no int8 converter")."""
    x = np.random.default_rng(6).standard_normal((1, 4, 5, 5)).astype(np.float32)
    mod, params = _module(ScaleShiftRelu([1.0, 0.0, 2.0, 3.0]), x)
    part = ac.partition_for_accel(mod, params, precision="int8", calibration=[x])
    report = ac.partition_report(part)
    assert report.host == [] and len(report.functions) == 1, str(report)
    got = build_and_run(part, x)
    assert np.max(np.abs(got - np.maximum(x * np.array([1, 0, 2, 3.0]).reshape(1, 4, 1, 1) + 1,
                                          0))) < 0.1
