"""Models that arrive quantised from PyTorch (issue 33, item 7): a model quantised with PT2E
(torch.export, then torchao's prepare_pt2e / convert_pt2e: torch 2.13 no longer ships them)
keeps its own scales through the project's PyTorch front end, runs whole in int8 on the
accelerator and agrees with PyTorch's own run of the converted model."""
import warnings

import numpy as np
import pytest
import torch
import tvm
from torch import nn

from accel_codegen.compiler import pt2e, qdq
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import calibration_of
from accel_codegen.compiler.vm import virtual_machine
from accel_codegen.errors import AccelUnsupportedError
from accel_codegen.flows.pipeline import partition_for_accel, partition_report

# torchao is in the test extra: its absence is a failure, not a skip
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402

from accel_codegen.tools.pt2e_quantizer import AccelQuantizer  # noqa: E402

SHAPE = (1, 3, 16, 16)


class Net(nn.Module):
    """conv+bn+relu, a residual add with a ReLU, max pooling, a conv, a global average pool
    and a dense head."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.c3 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        z = self.pool(torch.relu(self.b2(self.c2(y)) + y))
        z = torch.relu(self.c3(z))
        return self.fc(nn.functional.adaptive_avg_pool2d(z, 1).flatten(1))


def inputs(count, first=0):
    return [torch.from_numpy(np.random.default_rng(first + i).standard_normal(SHAPE)
                             .astype(np.float32)) for i in range(count)]


def converted(quantizer, model=None, fold_quantize=True):
    torch.manual_seed(0)
    with torch.no_grad():
        model = (model or Net()).eval()
        exported = torch.export.export(model, tuple(inputs(1))).module()
        prepared = prepare_pt2e(exported, quantizer)
        for x in inputs(4):
            prepared(x)
        return convert_pt2e(prepared, fold_quantize=fold_quantize)


def output_scale(module):
    """The scale of the dequantize the converted graph's output comes from."""
    output = next(n for n in module.graph.nodes if n.op == "output")
    dequantize = output.args[0][0] if isinstance(output.args[0], (tuple, list)) \
        else output.args[0]
    assert pt2e.quant_op(dequantize) == "dequantize_per_tensor"
    return float(dequantize.args[1])


def code_differences(module, count=8):
    mod, _ = from_pytorch(module, tuple(inputs(1)))
    partitioned = partition_for_accel(mod, precision="int8")
    vm = virtual_machine(tvm.compile(partitioned, target="llvm"))
    scale = output_scale(module)
    differences = []
    for x in inputs(count, first=100):
        with torch.no_grad():
            reference = module(x)
        reference = (reference[0] if isinstance(reference, (tuple, list)) else reference).numpy()
        ours = vm["main"](tvm.runtime.tensor(x.numpy())).numpy()
        differences.append(np.abs(np.round(ours / scale) - np.round(reference / scale)))
    return np.concatenate([d.reshape(-1) for d in differences]), mod, partitioned


def assert_whole(partitioned):
    report = partition_report(partitioned)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions


def test_pt2e_model_runs_whole_agrees_with_pytorch_and_keeps_its_scales():
    module = converted(AccelQuantizer(per_channel=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every run tensor has a scale of the model's
        differences, mod, partitioned = code_differences(module)
    assert_whole(partitioned)
    assert differences.max() <= 1, np.bincount(differences.astype(int))
    # rounding at ties and int16 multipliers flip a minority of values, never all
    assert (differences == 0).mean() > 0.6
    calibration = calibration_of(partitioned)
    assert calibration.method == qdq.QDQ_METHOD and not calibration.bias_correction
    scales = {np.float32(n.args[1]) for n in module.graph.nodes
              if pt2e.quant_op(n) == "quantize_per_tensor"}
    assert {np.float32(q.scale) for q in calibration.tensors.values()} <= scales
    annotations = qdq.annotations_of(mod)
    assert annotations.weights and set(annotations.weights.values()) == {"per-channel"}
    # the input's quantisation gives the matching input's range: the int8 codes' values
    name, shape, low, high = annotations.inputs[0]
    assert shape == list(SHAPE) and low < 0 < high
    # nothing of the pairs is left for TVM's importer
    assert "quantize" not in mod.script()


def test_per_tensor_weights_and_uint8_activations():
    """uint8 activations (zero points shifted into the accelerator's int8 codes) and one
    weight scale per tensor (the model's own codes, kept as they are, not re-quantised per
    output channel: docs/ptq.md)."""
    module = converted(AccelQuantizer(per_channel=False, activations="uint8"))
    differences, mod, partitioned = code_differences(module)
    assert_whole(partitioned)
    assert differences.max() <= 1, np.bincount(differences.astype(int))
    assert set(qdq.annotations_of(mod).weights.values()) == {"per-tensor"}


def test_unfolded_weight_quantisation_and_detached_params():
    """convert_pt2e(fold_quantize=False) keeps each weight's quantize in the graph: the import
    evaluates it, and gives the same float graph and scales as the folded codes; with the
    weights as parameters the scales still travel with the module."""
    folded = qdq.annotations_of(from_pytorch(converted(AccelQuantizer()), tuple(inputs(1)))[0])
    module = converted(AccelQuantizer(), fold_quantize=False)
    assert any(pt2e.quant_op(n) == "quantize_per_channel" for n in module.graph.nodes)
    mod, params = from_pytorch(module, tuple(inputs(1)), keep_params_as_input=True)
    unfolded = qdq.annotations_of(mod)
    assert params, "the biases are parameters of the converted model"
    assert sorted(unfolded.tensors.values()) == sorted(folded.tensors.values())
    assert sorted(f[2] for f in unfolded.fingerprints.values()) == \
        sorted(f[2] for f in folded.fingerprints.values())


def test_unsupported_quantisations_name_the_node():
    """Dynamic quantisation (a scale computed at run time) and 16-bit activations have no
    accelerator form: a typed error naming the fx node."""

    class Dynamic(nn.Module):
        def forward(self, x):
            scale, zero = torch.ops.quantized_decomposed.choose_qparams.tensor(
                x, -128, 127, 2 ** -12, torch.int8)
            q = torch.ops.quantized_decomposed.quantize_per_tensor.tensor(
                x, scale, zero, -128, 127, torch.int8)
            return torch.ops.quantized_decomposed.dequantize_per_tensor.tensor(
                q, scale, zero, -128, 127, torch.int8)

    gm = torch.export.export(Dynamic(), tuple(inputs(1))).module()
    with pytest.raises(AccelUnsupportedError, match="node 'choose_qparams"):
        from_pytorch(gm, tuple(inputs(1)))

    class Wide(nn.Module):
        def forward(self, x):
            q = torch.ops.quantized_decomposed.quantize_per_tensor(
                x, 0.001, 0, -32768, 32767, torch.int16)
            return torch.ops.quantized_decomposed.dequantize_per_tensor(
                q, 0.001, 0, -32768, 32767, torch.int16)

    with pytest.raises(AccelUnsupportedError, match="node 'quantize_per_tensor.*int16"):
        from_pytorch(Wide(), tuple(inputs(1)))


def test_per_channel_activations_and_int8_inputs_name_the_node():
    qd = torch.ops.quantized_decomposed

    class PerChannel(nn.Module):
        def forward(self, x):
            scales, zeros = torch.full((3,), 0.01), torch.zeros(3, dtype=torch.int64)
            q = qd.quantize_per_channel(x, scales, zeros, 1, -128, 127, torch.int8)
            return qd.dequantize_per_channel(q, scales, zeros, 1, -128, 127, torch.int8)

    with pytest.raises(AccelUnsupportedError, match="node 'quantize_per_channel.*per channel"):
        from_pytorch(PerChannel(), tuple(inputs(1)))

    class Int8Input(nn.Module):
        def forward(self, x):
            return qd.dequantize_per_tensor(x, 0.01, 0, -128, 127, torch.int8)

    with pytest.raises(AccelUnsupportedError, match="node 'dequantize_per_tensor.*int8 graph"):
        from_pytorch(Int8Input(), (torch.zeros(SHAPE, dtype=torch.int8),))
