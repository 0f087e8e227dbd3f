"""int8 and fp16 through the whole flow (partition, calibrate, build, export, load, run) on
LeNet-5 and small modules: accuracy against the fp32 build of the same model in figures, the
exported int8 library in a fresh process, calibration reuse, the precision errors, what stays
on the host in int8 and why, the estimate's int8 figures and the accuracy report's own
figures checked against the builds'."""
import subprocess
import sys

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen import AccelInvalidError, AccelUnsupportedError, frontend
from accel_codegen.quantization import DEFAULT_METHOD, label_key, observing
from conftest import random_inputs, run_all, run_main, sqnr, torch_forward

# Measured on LeNet-5 (16 calibration inputs, seed 1234; 8 evaluation inputs, seed 1235):
# int8 30.8 dB, fp16 63.7 dB; runtime weights in int8 31.7 dB against PyTorch. The bounds
# leave about 5 dB of margin for a change of scale rounding or accumulation order.
INT8_MIN_DB = 25.0
FP16_MIN_DB = 55.0
CALIBRATION, EVALUATION = 16, 8


class ConvSigmoidConv(torch.nn.Module):
    """conv -> sigmoid -> relu -> conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(torch.sigmoid(self.conv1(x))))


@pytest.fixture(scope="module")
def lenet5(zoo):
    """(torch model, Relax module, calibration inputs, evaluation inputs) of the zoo's LeNet-5."""
    lenet = zoo("lenet5")
    shape = tuple(lenet.x.shape)
    return (lenet.model, lenet.mod, random_inputs(shape, CALIBRATION, 1234),
            random_inputs(shape, EVALUATION, 1235))


@pytest.fixture(scope="module")
def builds(lenet5):
    """precision -> (partitioned module, executable, VM) of LeNet-5."""
    _, mod, calibration, _ = lenet5
    result = {}
    for precision in ("fp32", "fp16", "int8"):
        part = ac.partition_for_accel(mod, precision=precision,
                                      calibration=calibration if precision == "int8" else None)
        exe = ac.build(part)
        result[precision] = (part, exe, ac.virtual_machine(exe))
    return result


@pytest.fixture(scope="module")
def outputs(lenet5, builds):
    """precision -> the outputs on the evaluation inputs, stacked."""
    evaluation = lenet5[3]
    return {p: run_all(vm, evaluation) for p, (_, _, vm) in builds.items()}


# --- accuracy of the builds -------------------------------------------------------------------

@pytest.mark.parametrize("precision, bound", [("int8", INT8_MIN_DB), ("fp16", FP16_MIN_DB)])
def test_reduced_precision_matches_fp32(outputs, precision, bound):
    fp32 = outputs["fp32"]
    actual = outputs[precision]
    assert actual.shape == fp32.shape and actual.dtype == np.float32
    figure = sqnr(actual, fp32)
    assert figure >= bound, f"{precision}: {figure:.2f} dB < {bound} dB"
    assert np.array_equal(actual.argmax(axis=-1), fp32.argmax(axis=-1)), precision


def test_fp16_is_closer_to_fp32_than_int8(outputs):
    assert sqnr(outputs["fp16"], outputs["fp32"]) > sqnr(outputs["int8"],
                                                               outputs["fp32"]) + 20


def test_every_accelerator_run_is_in_the_build_precision(lenet5, builds):
    x = lenet5[3][0]
    for precision, (_, _, vm) in builds.items():
        with ac.profile() as prof:
            run_main(vm, x)
        assert prof.records and {op.precision for op in prof.ops} == {precision}


def test_partition_report_says_int8(builds):
    report = ac.partition_report(builds["int8"][0])
    assert report.precision == "int8" and report.host == []
    assert str(report).startswith("partition for nv_full (fused, int8):")
    assert report.to_dict()["precision"] == "int8"


# --- the exported artifact and calibration reuse ------------------------------------------------

def test_exported_int8_library_is_bit_identical_in_a_fresh_process(lenet5, builds, tmp_path):
    """The scales are constants of the library: a process without accel_codegen reproduces
    the in-process VM's int8 output bit for bit."""
    _, exe, vm = builds["int8"]
    path = ac.export_library(exe, tmp_path / "lenet5_int8.so")
    evaluation = np.stack(lenet5[3][:4])
    np.save(tmp_path / "x.npy", evaluation)
    script = (
        "import sys, numpy as np, tvm\n"
        "from tvm import relax\n"
        f"vm = relax.VirtualMachine(tvm.runtime.load_module({str(path)!r}), tvm.cpu())\n"
        f"xs = np.load({str(tmp_path / 'x.npy')!r})\n"
        "ys = np.stack([vm['main'](tvm.runtime.tensor(x)).numpy() for x in xs])\n"
        "assert 'accel_codegen' not in sys.modules\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, ys)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = np.load(tmp_path / "y.npy")
    in_process = np.stack([run_main(vm, x) for x in evaluation])
    assert fresh.dtype == in_process.dtype and np.array_equal(fresh, in_process)


def test_reused_calibration_gives_identical_sources(lenet5, builds):
    part = builds["int8"][0]
    calibration = ac.calibration_of(part)
    assert calibration.method == DEFAULT_METHOD and calibration.samples == CALIBRATION
    again = ac.partition_for_accel(lenet5[1], precision="int8", calibration=calibration)
    assert ac.generated_sources(again) == ac.generated_sources(part)
    assert ac.calibration_of(again).to_json() == calibration.to_json()
    assert ac.calibration_of(builds["fp32"][0]) is None


# --- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"precision": "int8"}, AccelInvalidError, "int8 needs calibration"),
    ({"precision": "fp16", "config": "nv_small"}, AccelUnsupportedError, "nv_small has no fp16"),
    ({"precision": "int8", "fuse": False, "calibration": "CALIB"}, AccelUnsupportedError,
     "fused chains"),
    ({"precision": "int16"}, AccelUnsupportedError, "precision 'int16'"),
    ({"precision": "fp16", "calibration": "CALIB"}, AccelInvalidError,
     "calibration is for int8, not fp16"),
    ({"precision": "int8", "calibration": "CALIB", "calibration_method": "minmax"},
     AccelInvalidError, "calibration_method = 'minmax'"),
], ids=["int8-without-calibration", "fp16-on-nv_small", "int8-decomposed", "int16",
        "calibration-with-fp16", "unknown-method"])
def test_precision_errors(lenet5, kwargs, error, message):
    if kwargs.get("calibration") == "CALIB":
        kwargs = {**kwargs, "calibration": lenet5[2][:2]}
    with pytest.raises(error, match=message):
        ac.partition_for_accel(lenet5[1], **kwargs)


# --- what stays on the host in int8 -------------------------------------------------------------

def test_runtime_weights_in_int8(lenet5, zoo):
    """Unbound weights: the convolutions that read them run on the host (int8 code folds its
    weights at compile time); the dense layers run on the accelerator as dense layers of
    computed weights, in fp16 inside the int8 function (engines.fp16_in_int8: their CONV reads
    its weights where they lie, with no int8 per-kernel scales, rewrites.computed_matmuls);
    the rest runs int8, and the model still matches PyTorch."""
    model, _, calibration, evaluation = lenet5
    mod, params, _ = zoo("lenet5", keep_params_as_input=True).imported
    weights = tuple(params[p.name] for p in mod["main"].params[1:])
    part = ac.partition_for_accel(mod, precision="int8",
                                  calibration=[(x,) + weights for x in calibration[:4]])
    report = ac.partition_report(part)
    host = [op for op in report.host if op.op in ("relax.nn.conv2d", "relax.matmul")]
    assert [op.op for op in host] == ["relax.nn.conv2d"] * 2, str(report)
    for op in host:  # the reason names the weight the op reads
        assert "runtime input" in op.reason and "constant weights" in op.reason, op.reason
        assert op.reason.startswith("the conv weight is not a constant"), op.reason
    dense = [op for op in report.offloaded if op.op == "relax.matmul"]
    assert len(dense) == 3 and all(op.precision == "fp16" for op in dense), str(report)
    assert any(op.precision == "int8" for op in report.offloaded)  # relu and pooling in int8
    vm = ac.virtual_machine(ac.build(part))
    actual = run_all(vm, [(x,) + weights for x in evaluation])
    expected = np.stack([torch_forward(model, x) for x in evaluation])
    assert sqnr(actual, expected) >= INT8_MIN_DB


def test_sigmoid_after_conv_stays_one_int8_chain():
    """conv + sigmoid is one chain in every precision: in int8 the SDP's lookup table takes
    the converted accumulators (accel_lut_int8), so nothing stays on the host."""
    model = ConvSigmoidConv().eval()
    shape = (1, 3, 16, 16)
    mod, _ = frontend.from_pytorch(model, (torch.randn(*shape),))
    calibration = random_inputs(shape, 8, 1234)
    part = ac.partition_for_accel(mod, precision="int8", calibration=calibration)
    report = ac.partition_report(part)
    assert report.host == []
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.conv2d_bias_sigmoid") == 1
    evaluation = random_inputs(shape, 4, 1235)
    actual = run_all(ac.virtual_machine(ac.build(part)), evaluation)
    expected = run_all(ac.virtual_machine(ac.build(mod)), evaluation)
    assert sqnr(actual, expected) >= INT8_MIN_DB


class SiluSqueezeExcite(torch.nn.Module):
    """EfficientNet's MBConv pieces: conv + batch norm + SiLU, a squeeze-excite (global
    average pool, 1x1 conv + SiLU, 1x1 conv + sigmoid, x * s), then conv + tanh."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.reduce = torch.nn.Conv2d(16, 4, 1)
        self.expand = torch.nn.Conv2d(4, 16, 1)
        self.project = torch.nn.Conv2d(16, 8, 1)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = torch.nn.functional.silu(self.bn(self.conv(x)))
        s = torch.sigmoid(self.expand(torch.nn.functional.silu(
            self.reduce(y.mean((2, 3), keepdim=True)))))
        return torch.tanh(self.project(y * s))


def test_silu_squeeze_excite_block_in_int8_against_pytorch():
    """Every LUT activation of the block runs in int8 on the accelerator (SiLU, sigmoid, tanh),
    and so does the computed per-channel scale x * s (the SDP's per-channel operand): nothing
    stays on the host. Bound 30 dB against PyTorch (8 calibration inputs, 4 others)."""
    model = SiluSqueezeExcite().eval()
    shape = (1, 3, 16, 16)
    mod, params = frontend.from_pytorch(model, (torch.randn(*shape),))
    part = ac.partition_for_accel(mod, params, precision="int8",
                                  calibration=random_inputs(shape, 8, 1234))
    report = ac.partition_report(part)
    assert report.host == [], [(op.op, op.reason) for op in report.host]
    primitives = [p for ps in report.functions.values() for p in ps]
    for primitive in ("accel.conv2d_bias_bn_silu", "accel.conv2d_bias_silu",
                      "accel.conv2d_bias_sigmoid", "accel.conv2d_bias_tanh"):
        assert primitive in primitives
    evaluation = random_inputs(shape, 4, 1235)
    vm = ac.virtual_machine(ac.build(part))
    with ac.profile() as prof:
        actual = run_all(vm, evaluation)
    assert {op.precision for op in prof.ops} == {"int8"}
    expected = np.stack([torch_forward(model, x) for x in evaluation])
    assert sqnr(actual, expected) >= 30.0


class TwoScaleConcat(torch.nn.Module):
    """A concat of a ReLU output (unsigned) and a signed, three times wider tensor."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.left = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.right = torch.nn.Conv2d(3, 5, 1)
        self.after = torch.nn.Conv2d(13, 6, 3, padding=1)

    def forward(self, x):
        return self.after(torch.cat([torch.relu(self.left(x)), 3 * self.right(x)], 1))


def test_int8_concat_rescales_each_input_and_matches_pytorch():
    """Each input of an int8 concat has its own scale: an SDP pass per input rescales it to
    the concat's (the widest range) and writes its channel range; the estimate counts those
    passes as the run does. Measured 34.6 dB against PyTorch; bound 28 dB. At batch 2 the
    channel ranges are not contiguous: the copies move each input's codes and one SDP pass
    rescales every channel (Layer.rescaled_rows), whole too."""
    model = TwoScaleConcat().eval()
    shape = (1, 3, 16, 16)
    mod, params = frontend.from_pytorch(model, (torch.randn(*shape),))
    part = ac.partition_for_accel(mod, params, precision="int8",
                                  calibration=random_inputs(shape, 8, 1234))
    report = ac.partition_report(part)
    assert report.host == [] and "accel.concat" in [
        p for ps in report.functions.values() for p in ps]
    evaluation = random_inputs(shape, 4, 1235)
    vm = ac.virtual_machine(ac.build(part))
    with ac.profile() as prof:
        actual = run_all(vm, evaluation[:1])
    copies = [run for run in prof.records if ".3c" in run.label]
    assert [op.op.split(":")[0] for run in copies for op in run.ops] == ["sdp", "sdp"]
    estimate = ac.estimate(mod, params, config="nv_full", precision="int8")
    assert estimate.total_cycles == prof.totals["cycles"]
    actual = run_all(vm, evaluation)
    expected = np.stack([torch_forward(model, x) for x in evaluation])
    assert sqnr(actual, expected) >= 28.0
    batch2 = (2, 3, 16, 16)
    mod2, params2 = frontend.from_pytorch(model, (torch.randn(*batch2),))
    part2 = ac.partition_for_accel(mod2, params2, precision="int8",
                                   calibration=random_inputs(batch2, 4, 1234))
    assert ac.partition_report(part2).host == []
    evaluation2 = random_inputs(batch2, 2, 1235)
    actual2 = run_all(ac.virtual_machine(ac.build(part2)), evaluation2)
    expected2 = np.stack([torch_forward(model, x) for x in evaluation2])
    assert sqnr(actual2, expected2) >= 28.0


def test_mixed_block_int8_runs_its_norm_and_attention_in_fp16_between_int8_runs(zoo):
    """The layer norm and the attention core (softmax's sums, computed K and V weights) run in
    fp16 inside the int8 code, the SDP converting at their borders; every other run is int8
    (the mean over the tokens too: a PDP average), all in one function, and the output stays
    close to fp32."""
    mixed_block = zoo("mixed_block")
    mod, x = mixed_block.mod, mixed_block.x
    part = ac.partition_for_accel(mod, precision="int8",
                                  calibration=random_inputs(x.shape, 8, 1234))
    report = ac.partition_report(part)
    assert report.precision == "int8", str(report)
    assert report.host == [] and len(report.functions) == 1, str(report)
    fp16 = {op.op for op in report.offloaded if op.precision == "fp16"}
    assert {"relax.nn.layer_norm", "relax.nn.attention"} <= fp16, str(report)
    evaluation = random_inputs(x.shape, 4, 1235)
    vm = ac.virtual_machine(ac.build(part))
    with ac.profile() as prof:
        actual = run_all(vm, evaluation)
    assert {op.precision for op in prof.ops} == {"int8", "fp16"}
    expected = run_all(ac.virtual_machine(ac.build(mod)), evaluation)
    assert sqnr(actual, expected) >= 20.0


# --- estimate -----------------------------------------------------------------------------------

def test_int8_estimate_of_resnet18_halves_cycles_and_bytes(zoo):
    """Costs need no data: int8 has twice fp16's MACs per cycle and 1-byte data. Direct
    convolution throughout (Winograd mode changes the MACs the array does, see
    tests/sim/test_winograd.py)."""
    mod = zoo("resnet18").mod
    int8, fp16 = (ac.estimate(mod, precision=p, winograd=False) for p in ("int8", "fp16"))
    assert int8.macs == fp16.macs > 1.5e9
    assert int8.total_cycles < fp16.total_cycles and int8.bytes < fp16.bytes
    # measured: cycles 2.33 M vs 4.66 M (0.50), bytes 18.0 MB vs 34.1 MB (0.53)
    assert 0.4 <= int8.total_cycles / fp16.total_cycles <= 0.6
    assert 0.45 <= int8.bytes / fp16.bytes <= 0.6
    assert int8.frames_per_s > 1.6 * fp16.frames_per_s


# --- calibration methods ------------------------------------------------------------------------

# Measured on LeNet-5 (4 evaluation inputs): max 33 dB, percentile 31 dB, entropy 8.6 dB: the
# KL threshold clips the post-ReLU tensors to about half their range (the spike at zero pulls
# it down, as quantization.py says), so entropy gets a weak bound of its own.
METHOD_MIN_DB = {"max": INT8_MIN_DB, "percentile": INT8_MIN_DB, "mse": INT8_MIN_DB,
                 "entropy": 5.0}


def test_calibration_methods_build_and_percentile_never_exceeds_max(lenet5, outputs):
    _, mod, calibration, evaluation = lenet5
    reaches = {}  # how far from zero each tensor's codes reach (symmetric or not)
    for method, bound in METHOD_MIN_DB.items():
        part = ac.partition_for_accel(mod, precision="int8", calibration=calibration,
                                      calibration_method=method)
        found = ac.calibration_of(part)
        assert found.method == method
        reaches[method] = {key: max(127 - q.zero, q.zero + 128) * q.scale
                           for key, q in found.tensors.items()}
        actual = run_all(ac.virtual_machine(ac.build(part)), evaluation[:4])
        assert np.all(np.isfinite(actual))
        assert sqnr(actual, outputs["fp32"][:4]) >= bound, method
    assert set(reaches["percentile"]) == set(reaches["max"]) == set(reaches["entropy"]) == \
        set(reaches["mse"])
    for method in ("percentile", "mse"):
        for key, reach in reaches[method].items():  # a symmetric code reaches 128 / 127 T
            assert 0 < reach <= reaches["max"][key] * 128 / 127, (method, key)
        assert any(reaches[method][k] < reaches["max"][k] for k in reaches["max"]), method


# --- the accuracy report ------------------------------------------------------------------------

class _PassOutputs:
    """The (run, op) of every pass output an int8 run hands the observer."""

    def __init__(self):
        self.keys = []

    def add(self, label, op_index, x):
        if op_index >= 0:
            self.keys.append((label_key(label), op_index))


def test_accuracy_report_figures(lenet5, builds, outputs):
    _, mod, calibration, evaluation = lenet5
    report = ac.accuracy_report(mod, None, evaluation, precision="int8",
                                calibration=calibration)
    assert (report.precision, report.config, report.inputs) == ("int8", "nv_full", EVALUATION)
    assert (report.calibration_method, report.calibration_samples) == (DEFAULT_METHOD,
                                                                       CALIBRATION)
    # one row per pass output, in execution order
    observed = _PassOutputs()
    with observing(observed):
        run_main(builds["int8"][2], evaluation[0])
    assert [(t.key, t.op_index) for t in report.tensors] == observed.keys
    # the output SQNR is the one of the two builds' outputs (the report's fp32 reference is
    # built from the equalised weights: the same function to float32 rounding)
    assert report.output_sqnr_db == pytest.approx(sqnr(outputs["int8"], outputs["fp32"]),
                                                  abs=1e-3)
    assert 0.0 <= report.top1_agreement <= 1.0
    agree = np.mean(outputs["int8"].argmax(-1) == outputs["fp32"].argmax(-1))
    assert report.top1_agreement == pytest.approx(agree)
    # the last pass output is the model output (its int8 codes, before the float32 rounding
    # of dequantisation)
    assert report.tensors[-1].sqnr_db == pytest.approx(report.output_sqnr_db, abs=1e-3)
    for t in report.tensors:
        assert t.sqnr_db >= 20.0 and 0.0 <= t.saturated <= 1.0 and t.scale > 0, t
    data = report.to_dict()
    assert len(data["tensors"]) == len(report.tensors)
    assert "output SQNR" in str(report) and len(str(report).splitlines()) == \
        3 + len(report.tensors)


def test_accuracy_report_forgives_only_the_relu_readers_saturation():
    """An int8 tensor with zero point -128 gives no negative value. Where the plan gave it the
    quantisation of the ReLU that alone reads it (int8_plan._select_outputs: a convolution
    whose output a reshape and a ReLU read), its reference is compared after that ReLU.
    Elsewhere (a convolution calibrated on inputs that never made it negative) a negative
    value it cannot give is an error the report shows, not a ReLU."""

    class ReluAfterReshape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.c1(x).reshape(1, 8, 1, 64)
            return self.c2(torch.relu(y).reshape(1, 8, 8, 8))

    torch.manual_seed(0)
    x = torch.randn(1, 4, 8, 8)
    examples = [(v,) for v in random_inputs((1, 4, 8, 8), 4, 1)]
    mod, params = frontend.from_pytorch(ReluAfterReshape().eval(), (x,))
    report = ac.accuracy_report(mod, params, examples, precision="int8", calibration=examples)
    first = report.tensors[0]  # the first conv's output, half of it negative before the ReLU
    assert first.zero == -128 and first.sqnr_db > 30.0, str(report)

    positive = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 1)).eval()
    with torch.no_grad():
        positive[0].weight.abs_()
        positive[0].bias.zero_()
    mod, params = frontend.from_pytorch(positive, (x,))
    calibration = [(np.abs(v),) for (v,) in examples]  # never a negative output
    report = ac.accuracy_report(mod, params, examples, precision="int8", calibration=calibration)
    (conv,) = [t for t in report.tensors if t.zero == -128]
    assert conv.sqnr_db < 10.0, str(report)  # 0.06 dB: its negative half reads 0


def test_fp16_accuracy_report(lenet5, outputs):
    _, mod, _, evaluation = lenet5
    report = ac.accuracy_report(mod, None, evaluation[:4], precision="fp16")
    assert report.precision == "fp16" and report.calibration_method is None
    assert report.output_sqnr_db == pytest.approx(
        sqnr(outputs["fp16"][:4], outputs["fp32"][:4]), abs=1e-9)
    assert report.output_sqnr_db >= FP16_MIN_DB
    assert all(t.saturated == 0 and t.scale is None for t in report.tensors)
