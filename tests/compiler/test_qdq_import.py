"""Models that arrive quantised (issue 33, item 7): an ONNX model in ONNX Runtime's QDQ format
keeps its own scales, runs whole in int8 on the accelerator and agrees with ONNX Runtime's
own int8 run of the same file."""
import re
import warnings

import numpy as np
import onnx
import pytest
import torch
import tvm
from torch import nn

from accel_codegen.compiler import qdq
from accel_codegen.compiler.frontend import export_onnx, from_onnx
from accel_codegen.compiler.partition import calibration_of
from accel_codegen.flows.pipeline import partition_for_accel, partition_report
from accel_codegen.flows.qdq import qdq_calibration
from accel_codegen.compiler.vm import virtual_machine
from accel_codegen.errors import AccelInvalidError, AccelUnsupportedError
from accel_codegen.sim.config import AccelConfig

ac_config = AccelConfig.resolve

# onnxruntime is in the test extra: its absence is a failure, not a skip
import onnxruntime as ort  # noqa: E402
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat,  # noqa: E402
                                      QuantType, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: E402

SHAPE = (1, 3, 16, 16)


class Net(nn.Module):
    """conv+bn+relu, a residual add, max pooling, and a dense head: after a conv and a
    flatten, after a global average pool (``mean``), or after a 1x1 conv and a 2x2 average
    pool (``transition``: DenseNet's)."""

    def __init__(self, head: str):
        super().__init__()
        self.head = head
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.c3 = nn.Conv2d(8, 16, 3, padding=1)
        self.c4 = nn.Conv2d(16, 4, 8)
        self.c5 = nn.Conv2d(16, 4, 1)
        self.fc = nn.Linear({"mean": 16, "transition": 64}.get(head, 4), 10)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        z = self.pool(torch.relu(self.b2(self.c2(y)) + y))
        z = torch.relu(self.c3(z))
        if self.head == "transition":
            return self.fc(nn.functional.avg_pool2d(self.c5(z), 2).flatten(1))
        z = z.mean((2, 3)) if self.head == "mean" else self.c4(z).flatten(1)
        return self.fc(z)


class Branches(nn.Module):
    """MobileNet-style parts: ReLU6 (ONNX Clip), a depthwise conv, a concat of two branches,
    an average pool."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.dw, self.b2 = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)
        self.pw, self.c2 = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, padding=1)
        self.pool, self.c3, self.fc = nn.AvgPool2d(2), nn.Conv2d(16, 4, 8), nn.Linear(4, 10)

    def forward(self, x):
        y = nn.functional.relu6(self.b1(self.c1(x)))
        a = self.pw(nn.functional.relu6(self.b2(self.dw(y))))
        z = self.pool(torch.cat([a, torch.relu(self.c2(y))], 1))
        return self.fc(self.c3(z).flatten(1))


class Reader(CalibrationDataReader):
    def __init__(self):
        self.examples = iter({"x": np.random.default_rng(i).standard_normal(SHAPE)
                              .astype(np.float32)} for i in range(8))

    def get_next(self):
        return next(self.examples, None)


def quantized(tmp_path, head: str, activations, per_channel: bool,
              weights=QuantType.QInt8, extra_options=None):
    """An ONNX Runtime QDQ model, made as its documentation says (pre-processing first)."""
    torch.manual_seed(0)
    with torch.no_grad():
        model = Branches() if head == "branches" else Net(head)
    export_onnx(model, (torch.randn(SHAPE),), tmp_path / "f.onnx")
    quant_pre_process(str(tmp_path / "f.onnx"), str(tmp_path / "p.onnx"))
    quantize_static(str(tmp_path / "p.onnx"), str(tmp_path / "q.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=activations,
                    weight_type=weights, per_channel=per_channel,
                    extra_options=extra_options or {})
    return tmp_path / "q.onnx"


def _reference_session(model):
    """ONNX Runtime's run of the QDQ graph as written: each QuantizeLinear, DequantizeLinear and
    float operator on its own (graph optimisations off). Its optimised run fuses them into
    int8 kernels (QLinearConv) whose u8 x s8 products, on a CPU without VNNI (AVX2 only: AMD
    Zen 3), are summed in pairs in int16 and saturate (docs/trained_models.md): up to 21 codes
    off the graph's own values here, so that reference depended on the CPU that ran it."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def code_differences(path, inputs=24):
    """|accelerator int8 - ONNX Runtime int8| at the output, in output codes, per value; and
    the partition's report."""
    mod, _ = from_onnx(path)
    annotations = qdq.annotations_of(mod)
    partitioned = partition_for_accel(mod, precision="int8")
    vm = virtual_machine(tvm.compile(partitioned, target="llvm"))
    session = _reference_session(str(path))
    output = session.get_outputs()[0].name
    scale = annotations.tensors[output][0]
    differences = []
    for i in range(inputs):
        x = np.random.default_rng(100 + i).standard_normal(SHAPE).astype(np.float32)
        reference = session.run(None, {"x": x})[0]
        ours = vm["main"](tvm.runtime.tensor(x)).numpy()
        differences.append(np.abs(np.round(ours / scale) - np.round(reference / scale)))
    return np.concatenate([d.reshape(-1) for d in differences]), partitioned


def assert_whole(partitioned):
    """Every operator offloaded, in one external function (no QDQ op left on the host)."""
    report = partition_report(partitioned)
    assert not report.host, [(op.op, op.reason) for op in report.host]
    assert len(report.functions) == 1, report.functions


@pytest.mark.parametrize("activations, per_channel", [(QuantType.QUInt8, False),
                                                      (QuantType.QInt8, True)])
def test_qdq_model_runs_whole_and_agrees_with_onnx_runtime(tmp_path, activations, per_channel):
    path = quantized(tmp_path, "flatten", activations, per_channel)
    differences, partitioned = code_differences(path)
    assert_whole(partitioned)
    assert differences.max() <= 1, np.bincount(differences.astype(int))
    # rounding at ties and int16 multipliers flip a minority of values, never all
    assert (differences == 0).mean() > 0.6
    calibration = calibration_of(partitioned)
    assert calibration.method == qdq.QDQ_METHOD and not calibration.bias_correction
    assert not calibration.equalized


def test_asymmetric_per_tensor_weights(tmp_path):
    """Weights quantised per tensor with a zero point (uint8 weights, WeightSymmetric=False):
    the model's codes where q - zero fits int8 (-128 included), the channels beyond re-quantised on their
    own, which a warning names (an AccelUnsupportedError with qdq=True); within one output
    code of ONNX Runtime's int8 run, whole."""
    path = quantized(tmp_path, "flatten", QuantType.QUInt8, False, QuantType.QUInt8,
                     {"WeightSymmetric": False})
    zeros = {i.name: int(onnx.numpy_helper.to_array(i))
             for i in onnx.load(str(path)).graph.initializer
             if i.name.endswith("weight_zero_point")}
    assert zeros and all(z != 0 for z in zeros.values()), zeros
    codes = {i.name: onnx.numpy_helper.to_array(i).astype(int)
             for i in onnx.load(str(path)).graph.initializer}
    # c3 and c4 have channels reaching q - zero = -128: NVDLA's byte, kept (not re-quantised)
    assert [n for n, z in zeros.items() if n.startswith("c") and (
        codes[n.replace("_zero_point", "_quantized")] - z).min() == -128], zeros
    with pytest.raises(AccelUnsupportedError, match=r"initializer '\S+\.weight_quantized'"
                                                    r".* zero point \d+: in \d+ of its"):
        from_onnx(path, qdq=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        differences, partitioned = code_differences(path, inputs=12)
    said = [str(w.message) for w in caught if "initializer" in str(w.message)]
    assert any(re.search(r"initializer 'fc\.weight_quantized'.* 2 of its 10 output channels",
                         m) for m in said), said
    assert_whole(partitioned)
    assert differences.max() <= 1, np.bincount(differences.astype(int))
    assert (differences == 0).mean() > 0.8


def test_qdq_relu6_depthwise_concat_average_pool(tmp_path):
    path = quantized(tmp_path, "branches", QuantType.QUInt8, True)
    differences, partitioned = code_differences(path, inputs=12)
    assert_whole(partitioned)
    assert differences.max() <= 1, np.bincount(differences.astype(int))


def test_calibration_takes_the_models_scales(tmp_path):
    path = quantized(tmp_path, "flatten", QuantType.QUInt8, True)
    mod, _ = from_onnx(path)
    match = qdq_calibration(mod)
    graph = onnx.load(str(path)).graph
    scales = {i.name[:-len("_scale")]: float(onnx.numpy_helper.to_array(i))
              for i in graph.initializer if i.name.endswith("_scale") and
              onnx.numpy_helper.to_array(i).size == 1}
    assert not match.unmatched
    used = {("f0.0", -1): "x"}  # the input's quantisation, as the model gives it
    for key, tensor in used.items():
        assert match.calibration.tensors[key].scale == pytest.approx(scales[tensor], rel=1e-7)
    # every tensor of the runs has one of the model's activation scales
    model_scales = set(np.float32(s) for s in scales.values())
    assert all(np.float32(q.scale) in model_scales
               for q in match.calibration.tensors.values())
    # uint8 activations: zero points shifted into the accelerator's int8 codes
    zero = int(onnx.numpy_helper.to_array(
        next(i for i in graph.initializer if i.name == "x_zero_point")))
    assert match.calibration.tensors[("f0.0", -1)].zero == zero - 128
    with pytest.raises(AccelInvalidError, match="equalize"):
        partition_for_accel(mod, precision="int8", equalize=True)
    # the weights as parameters: the scales still travel with the module
    detached, params = from_onnx(path, keep_params_in_input=True)
    assert params and qdq.annotations_of(detached) == qdq.annotations_of(mod)


def test_global_average_takes_the_models_finer_scale(tmp_path):
    """ONNX Runtime requantises a global mean to a finer scale than its input's, which the
    accelerator's pool (no output converter) would keep: the import makes it a depthwise
    conv of weights 1 / (H W), whose converter gives the model's scale."""
    path = quantized(tmp_path, "mean", QuantType.QUInt8, True)
    differences, partitioned = code_differences(path, inputs=12)
    assert_whole(partitioned)
    report = partition_report(partitioned)
    assert all(op.op != "relax.mean" and "avgpool" not in op.primitive for op in report.ops)
    assert differences.max() <= 1, np.bincount(differences.astype(int))


def test_a_conv_and_its_average_pool_are_one_conv_into_the_pools_scale(tmp_path):
    """The QDQ model quantises a 1x1 conv's output, then its 2x2 average pool's: int8 runs
    them as one 2x2 stride-2 conv (rewrites.pooled_convolutions) whose converter writes the
    pool's scale, one rounding where ONNX Runtime has two. Measured (12 inputs, 120 logits):
    0 / 1 / 2 codes off 69 / 49 / 2 times; the conv + pool chain instead (the pool keeping
    the conv's scale, the PDP rounding twice) 63 / 49 / 7 / 1 (3 codes): within two codes,
    not one, either way."""
    path = quantized(tmp_path, "transition", QuantType.QUInt8, True)
    differences, partitioned = code_differences(path, inputs=12)
    assert_whole(partitioned)
    assert not any("avgpool" in op.primitive for op in partition_report(partitioned).ops)
    assert differences.max() <= 2, np.bincount(differences.astype(int))


def test_fake_quantised_weights_of_a_qat_export():
    """A QAT-style export: float weights through QuantizeLinear -> DequantizeLinear in the
    graph (per output channel), symmetric int8 activations."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 2, 3, 3)).astype(np.float32) * 0.3
    w_scale = (np.abs(weight).reshape(6, -1).max(axis=1) / 127).astype(np.float32)
    values = {"w": weight, "ws": w_scale, "wz": np.zeros(6, np.int8),
              "xs": np.float32(4 / 127), "z": np.int8(0), "ys": np.float32(0.05),
              "yz": np.int8(-128), "b": rng.standard_normal(6).astype(np.float32) * 0.1}
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
        onnx.helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xd"]),
        onnx.helper.make_node("QuantizeLinear", ["w", "ws", "wz"], ["wq"], axis=0),
        onnx.helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        onnx.helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c"], ["r"]),
        onnx.helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["rq"]),
        onnx.helper.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["y"])]
    model = _graph(nodes, values, (1, 6, 4, 4))
    mod, _ = from_onnx(model)
    partitioned = partition_for_accel(mod, precision="int8")
    assert_whole(partitioned)
    assert list(partition_report(partitioned).functions.values()) == \
        [["accel.conv2d_bias_relu"]]
    vm = virtual_machine(tvm.compile(partitioned, target="llvm"))
    session = _reference_session(model.SerializeToString())
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((1, 2, 4, 4)).astype(np.float32)
        ours = vm["main"](tvm.runtime.tensor(x)).numpy()
        reference = session.run(None, {"x": x})[0]
        assert np.abs(np.round(ours / 0.05) - np.round(reference / 0.05)).max() <= 1


def test_fingerprints_without_onnx_runtime(monkeypatch):
    """onnxruntime is optional: the import's float run falls back to ONNX's reference
    evaluator, with the same values."""
    values = {"s": np.float32(0.02), "z": np.int8(-128), "ys": np.float32(0.01),
              "yz": np.int8(0)}
    model = _graph([
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        onnx.helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        onnx.helper.make_node("MaxPool", ["xd"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        onnx.helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"]),
        onnx.helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["y"])], values,
        (1, 2, 2, 2))
    with_ort = qdq.strip_qdq(model)[1]
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)
    stripped, without = qdq.strip_qdq(model)
    assert without.fingerprints.keys() == with_ort.fingerprints.keys() == {"xd", "p", "y"}
    for name, (size, where, found) in without.fingerprints.items():
        assert size == with_ort.fingerprints[name][0]
        np.testing.assert_allclose(found, with_ort.fingerprints[name][2], atol=1e-6)
    # the pairs are gone: the input's lowest code is 0, so a Relu keeps its clamp; the
    # pool's output is non-negative already, so its pair is an Identity
    assert [n.op_type for n in stripped.graph.node] == ["Relu", "MaxPool", "Identity"]
    assert without.tensors["y"] == (pytest.approx(0.01), 0, "int8")
    # the matching input covers the input's codes: [0, 255 x 0.02]
    assert without.inputs == [("x", [1, 2, 4, 4], 0.0, pytest.approx(255 * 0.02))]


def test_tensors_the_model_leaves_unquantised_take_example_inputs():
    """A tensor the QDQ graph does not quantise (here the first conv's output) gets its
    scale from example inputs when given; without them, from the synthetic matching input,
    with a warning that says so."""
    rng = np.random.default_rng(5)
    values = {"s": np.float32(0.03), "z": np.int8(0), "ys": np.float32(0.05),
              "yz": np.int8(0), "ws": np.float32(0.01), "wz": np.int8(0),
              "w1": rng.integers(-127, 128, (2, 2, 3, 3)).astype(np.int8),
              "w2": rng.integers(-127, 128, (2, 2, 3, 3)).astype(np.int8)}
    model = _graph([
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        onnx.helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        onnx.helper.make_node("DequantizeLinear", ["w1", "ws", "wz"], ["w1d"]),
        onnx.helper.make_node("DequantizeLinear", ["w2", "ws", "wz"], ["w2d"]),
        onnx.helper.make_node("Conv", ["xd", "w1d"], ["c"], pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c"], ["r"]),
        onnx.helper.make_node("Conv", ["r", "w2d"], ["c2"], pads=[1, 1, 1, 1]),
        onnx.helper.make_node("QuantizeLinear", ["c2", "ys", "yz"], ["yq"]),
        onnx.helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])], values)
    mod, _ = from_onnx(model)
    examples = [(np.random.default_rng(i).standard_normal((1, 2, 4, 4)).astype(np.float32)
                 * 2,) for i in range(3)]
    alone = qdq_calibration(mod)
    given = qdq_calibration(mod, examples=examples, method="max")
    assert alone.unmatched == given.unmatched and ("f0.0", 1) in given.unmatched
    assert given.matched == {("f0.0", -1): "xd", ("f0.1", 0): "y"}
    # the unquantised ReLU output: the range the examples reach, unsigned
    from accel_codegen.compiler.partition import reference_machine, run_main
    from accel_codegen.quantization import calibrate
    vm = reference_machine(mod, None, ac_config("nv_full"), True)
    own = calibrate(lambda *inputs: run_main(vm, inputs), examples, "max")
    assert given.calibration.tensors[("f0.0", 1)] == own.tensors[("f0.0", 1)]
    assert alone.calibration.tensors[("f0.0", 1)] != own.tensors[("f0.0", 1)]
    with pytest.warns(UserWarning, match="no scale in the QDQ model"):
        partition_for_accel(mod, precision="int8")
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")
        partitioned = partition_for_accel(mod, precision="int8", calibration=examples,
                                          calibration_method="max")
    assert calibration_of(partitioned).tensors[("f0.0", 1)] == own.tensors[("f0.0", 1)]


def _graph(nodes, initializers, out_shape=(1, 2, 4, 4)):
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 4, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(out_shape))
    graph = onnx.helper.make_graph(nodes, "g", [x], [y], [
        onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_unsupported_quantisations_name_the_node():
    scalar = {"s": np.float32(0.1), "z": np.int8(0)}
    operator_format = _graph([
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
        onnx.helper.make_node("Relu", ["q"], ["y"], name="r")], scalar)
    with pytest.raises(AccelUnsupportedError, match="node 'quant'.*node 'r'"):
        from_onnx(operator_format, qdq=True)
    # by default: said, and imported as TVM imports it, without scales
    with pytest.warns(UserWarning, match="node 'quant'.*node 'r'"):
        mod, _ = from_onnx(operator_format)
    assert qdq.annotations_of(mod) is None
    per_axis = _graph([
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant", axis=1),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq", axis=1)],
        {"s": np.float32([0.1, 0.2]), "z": np.int8([0, 0])})
    with pytest.raises(AccelUnsupportedError, match="per axis"):
        from_onnx(per_axis, qdq=True)
    int8_input = _graph([
        onnx.helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq")], scalar)
    with pytest.raises(AccelUnsupportedError, match="node 'dq'"):
        from_onnx(int8_input, qdq=True)


@pytest.mark.parametrize("op, attributes, axis", [
    ("Conv", {}, 0), ("ConvTranspose", {}, 1), ("MatMul", {}, 1),
    ("Gemm", {"transB": 1}, 0), ("Gemm", {}, 1)])
def test_weight_channels_beyond_int8_are_counted_along_the_readers_output_axis(op, attributes,
                                                                               axis):
    """The warning's "N of its M output channels" counts along the axis the reading op
    takes its output channels from (ONNX's layouts differ: MatMul's B is [K, N])."""
    shape = [3, 5, 1, 1] if op.startswith("Conv") else [3, 5]
    q = np.full(shape, 127, np.uint8)
    index = [0] * len(shape)
    index[axis] = 1  # one output channel holds a code 128 above the zero point
    q[tuple(index)] = 255
    index[axis] = 2  # and one 127 below it: -127..127 and -128 (below) are int8 codes
    q[tuple(index)] = 0
    dequantize = onnx.helper.make_node("DequantizeLinear", ["w_q", "s", "z"], ["w"])
    reader = onnx.helper.make_node(op, ["x", "w"], ["y"], **attributes)
    said = qdq._weight_beyond_int8(dequantize, q, np.float32([0.1]), np.uint8([127]), reader)
    assert f"in 1 of its {shape[axis]} output channels" in said, said
    assert "reaches 128" in said
    # a code 128 below the zero point is NVDLA's -128: kept, nothing to say
    assert qdq._weight_beyond_int8(dequantize, q, np.float32([0.1]), np.uint8([128]),
                                   reader) is None
