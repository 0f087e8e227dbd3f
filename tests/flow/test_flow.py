"""The whole flow on the model zoo: import, partition, build, export, load, run on the
simulator, compare with PyTorch and with TVM's own host build (fp32: max error within 1e-4 of
the output's scale)."""
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen import frontend
from accel_codegen.compiler.library import CHECKSUM_MARKER, check_library
from conftest import (assert_close, build_and_run, ort_int8_sqnr, random_inputs, run_main,
                      sqnr, torch_forward)

RTOL = 1e-4
ZOO = ["lenet5", "resnet18", "resnet50", "vgg11_bn", "mobilenet_v1", "mobilenet_v2",
       "efficientnet_b0", "mobilenet_v3_small", "densenet121", "googlenet", "shufflenet_v2",
       "squeezenet1_1", "alexnet_lrn", "googlenet_lrn", "yolov8n"]
# TVM's host build of the larger ones takes 10-35 s each: these cover every engine.
HOST_BUILT = ["lenet5", "resnet18", "resnet50", "vgg11_bn", "mobilenet_v1", "shufflenet_v2",
              "squeezenet1_1", "alexnet_lrn"]


@pytest.fixture(scope="module")
def exported(zoo, tmp_path_factory):
    """model name -> (torch model, input, exported path, partition report, Relax module)."""
    cache = {}

    def get(name):
        if name not in cache:
            imported = zoo(name)
            partitioned = ac.partition_for_accel(imported.mod)
            path = ac.export_library(ac.build(partitioned),
                                     tmp_path_factory.mktemp(name) / f"{name}.so")
            cache[name] = (imported.model, imported.x_np, path,
                           ac.partition_report(partitioned), imported.mod)
        return cache[name]

    return get


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_matches_pytorch(name, exported):
    model, x, path, report, _ = exported(name)
    assert len(report.offloaded) > 0 and report.host == [], str(report)
    vm = ac.virtual_machine(path)
    with ac.profile() as prof:
        y = run_main(vm, x)
    assert_close(y, torch_forward(model, x), rtol=RTOL, what=f"{name} vs PyTorch")
    # Every layer ran: once, or as its parts (a residual branch, a concat's copies).
    layers = [p for primitives in report.functions.values() for p in primitives]
    ran = {re.match(r"f\d+\.\d+", record.label).group(0) for record in prof.records}
    assert len(ran) == len(layers)
    assert prof.totals["macs"] > 0 and prof.totals["cycles"] > 0


@pytest.mark.parametrize("name", HOST_BUILT)
def test_zoo_model_matches_tvm_host_build(name, exported, zoo):
    _, x, path, _, _ = exported(name)
    host = ac.virtual_machine(zoo.host_build(name))  # ac.build_host of the same module
    assert_close(run_main(ac.virtual_machine(path), x), run_main(host, x), rtol=RTOL,
                 what=f"{name} vs TVM host build")


def test_exported_library_runs_in_a_fresh_process(exported, tmp_path):
    model, x, path, _, _ = exported("resnet18")
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, tvm\n"
        "from tvm import relax\n"
        "assert 'accel_codegen' not in sys.modules\n"
        f"lib = tvm.runtime.load_module({str(path)!r})\n"
        "vm = relax.VirtualMachine(lib, tvm.cpu())\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, vm['main'](tvm.runtime.tensor(x)).numpy())\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_close(np.load(tmp_path / "y.npy"), torch_forward(model, x), rtol=RTOL)


def test_tvm_own_calls_run_what_build_returns(zoo, tmp_path):
    """A TVM user's first try: `relax.VirtualMachine(exe, dev)` and `exe.export_library`, as on
    any tvm.compile result (TVM's defaults alone compile the generated C without the simulator's
    headers and fail in the C compiler)."""
    imported = zoo("lenet5")
    exe = ac.build(imported.mod)
    x = imported.x_np
    expected = run_main(ac.virtual_machine(exe), x)
    y = tvm.relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(y, expected)
    assert exe.jit() is exe.jit() and exe.jit(force_recompile=True) is not None
    path = tmp_path / "lenet5.so"
    exe.export_library(str(path))
    # written as ac.export_library writes: checked in full on load
    assert path.read_bytes()[-48:-32] == CHECKSUM_MARKER and check_library(path) == path
    loaded = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    np.testing.assert_array_equal(loaded["main"](tvm.runtime.tensor(x)).numpy(), expected)
    with pytest.raises(ac.AccelInvalidError, match="must end in .so"):
        ac.export_library(exe, tmp_path / "lenet5.dll")
    # all on the host (a module with nothing to offload): TVM's own jit, no C to link
    builder = tvm.relax.BlockBuilder()
    v = tvm.relax.Var("x", tvm.relax.TensorType((2, 3), "float32"))
    with builder.function("main", [v]):
        builder.emit_func_output(builder.emit(tvm.relax.op.exp(v)))
    host_only = ac.build(builder.get())
    small = x[0, 0, :2, :3].copy()
    np.testing.assert_allclose(tvm.relax.VirtualMachine(host_only, tvm.cpu())["main"](
        tvm.runtime.tensor(small)).numpy(), np.exp(small), rtol=1e-6)


def test_decomposed_build_gives_the_same_numbers_and_moves_more_bytes(zoo):
    mod, _, x = zoo("resnet18").imported
    results = {}
    for fuse in (True, False):
        vm = ac.virtual_machine(ac.build(mod, fuse=fuse))
        with ac.profile() as prof:
            y = run_main(vm, x)
        results[fuse] = (y, prof.totals)
    assert_close(results[False][0], results[True][0], rtol=RTOL)
    fused, decomposed = results[True][1], results[False][1]
    # Whole network, weights included (they dominate the deep layers): 1.7x here.
    assert decomposed["bytes_read"] + decomposed["bytes_written"] > 1.5 * (
        fused["bytes_read"] + fused["bytes_written"])
    assert decomposed["cycles"] > fused["cycles"] and decomposed["macs"] == fused["macs"]


def test_runtime_weights_fold_at_run_time(zoo):
    """Weights left as inputs of main: the generated code folds batch norm on every call."""
    resnet18 = zoo("resnet18", keep_params_as_input=True)
    mod, params, x = resnet18.imported
    vm = ac.virtual_machine(ac.build(mod))
    names = [p.name for p in mod["main"].params[1:]]
    y = run_main(vm, x, *(params[n] for n in names))
    assert_close(y, torch_forward(resnet18.model, x), rtol=RTOL)


def test_onnx_model_runs_on_the_simulator(tmp_path, zoo):
    model, x = zoo("resnet18").model, zoo("resnet18").x
    path = frontend.export_onnx(model, (x,), tmp_path / "resnet18.onnx")
    mod, _ = frontend.from_onnx(path)
    report = ac.partition_report(ac.partition_for_accel(mod))
    assert report.host == [] and "relax.nn.batch_norm" in [op.op for op in report.offloaded]
    y = build_and_run(mod, x)
    assert_close(y, torch_forward(model, x), rtol=RTOL)


def test_conv_stem_and_transformer_block_run_whole(zoo):
    """The stem, its flatten and transpose into tokens (BDMA copies), the layer norm's engine
    passes, the dense layers over the tokens, attention, and the mean over the tokens (the PDP's
    global average of the tokens transposed) in one function; the answer is right."""
    mixed_block = zoo("mixed_block")
    model, x, mod = mixed_block.model, mixed_block.x, mixed_block.mod
    partitioned = ac.partition_for_accel(mod)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    # the norm, q, k and v, one after the other
    runs = ["accel.layer_norm"] + ["accel.token_dense_bias"] * 3
    assert any(ps[i:i + 4] == runs for ps in report.functions.values()
               for i in range(len(ps))), report.functions
    assert [op.primitive for op in report.ops if op.op == "relax.mean"] == \
        ["accel.global_avgpool"], str(report)
    assert any(p.startswith("accel.conv2d") for ps in report.functions.values() for p in ps)
    y = build_and_run(partitioned, x)
    assert_close(y, torch_forward(model, x), rtol=RTOL)


def test_generated_function_validates_its_arguments(exported):
    """The external function checks what it receives and raises a clear error."""
    _, x, path, report, _ = exported("lenet5")
    lib = tvm.runtime.load_module(str(path))
    ac.virtual_machine(lib)  # the constant loader runs when the VM is made
    (symbol,) = report.functions
    function = lib.get_function(symbol, query_imports=True)
    out = tvm.runtime.tensor(np.zeros((1, 10), np.float32))
    with pytest.raises(ValueError, match=r"input 0 \(x\) has size 31 in dimension 2, expected 32"):
        function(tvm.runtime.tensor(np.zeros((1, 1, 31, 32), np.float32)), out)
    with pytest.raises(ValueError, match="expected float32"):
        function(tvm.runtime.tensor(x.astype(np.float64)), out)
    with pytest.raises(ac.AccelInvalidError, match="1 arguments, expected 2"):
        function(tvm.runtime.tensor(x))
    function(tvm.runtime.tensor(x), out)  # and the right call works
    assert np.abs(out.numpy()).sum() > 0


class StandaloneOps(torch.nn.Module):
    """PReLU after a conv, a standalone element-wise add + ReLU6 of two tensors, average
    pooling, and a dense layer with a sigmoid: each an accelerator primitive of its own."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.prelu = torch.nn.PReLU(8)
        self.other = torch.nn.Conv2d(3, 8, 1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        a = self.prelu(self.conv(x))
        b = self.other(x)
        y = torch.nn.functional.relu6(a * b + b)
        y = torch.nn.functional.avg_pool2d(y, 2)
        return torch.sigmoid(self.fc(torch.flatten(y, 1)))


def test_standalone_primitives_and_prelu():
    torch.manual_seed(3)
    model = StandaloneOps().eval()
    with torch.no_grad():
        model.prelu.weight.uniform_(0.05, 0.5)
    x = torch.randn(1, 3, 8, 8)
    mod, _ = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod)
    report = ac.partition_report(partitioned)
    primitives = [p for ps in report.functions.values() for p in ps]
    assert "accel.conv2d_bias_prelu" in primitives
    assert any(p.startswith("accel.mul") for p in primitives)
    assert report.host == [], str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


class SqueezeExcite(torch.nn.Module):
    """torchvision's squeeze-excite: a global average pool, two 1x1 convs, ``scale * input``."""

    def __init__(self, channels=16, squeezed=4):
        super().__init__()
        self.fc1 = torch.nn.Conv2d(channels, squeezed, 1)
        self.fc2 = torch.nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        scale = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))
        return scale * x


@pytest.mark.parametrize("size", [14, 13, 56, 112])
def test_a_global_pool_wider_than_the_pdp_runs_in_passes(size):
    """14 = 7 x 2 and 112 = 8 x 7 x 2 split exactly; 13 is padded to 16 and rescaled."""
    torch.manual_seed(size)
    model = SqueezeExcite().eval()
    x = torch.randn(1, 16, size, size) + 0.5
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    source = "\n".join(ac.generated_sources(partitioned).values())
    assert source.count("ACCEL_ENGINE_PDP") == (1 if size <= 8 else 3 if size == 112 else 2)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


class ShuffleUnit(torch.nn.Module):
    """ShuffleNetV2's basic unit (chunk, a branch, concat, channel shuffle) and a DenseNet-style
    concat of a tensor with what was computed from it."""

    def __init__(self, channels=16):
        super().__init__()
        half = channels // 2
        self.branch = torch.nn.Sequential(
            torch.nn.Conv2d(half, half, 1, bias=False), torch.nn.BatchNorm2d(half),
            torch.nn.ReLU(), torch.nn.Conv2d(half, half, 3, padding=1, groups=half, bias=False),
            torch.nn.BatchNorm2d(half), torch.nn.Conv2d(half, half, 1, bias=False),
            torch.nn.BatchNorm2d(half), torch.nn.ReLU())
        self.grow = torch.nn.Conv2d(channels, 4, 3, padding=1)

    def forward(self, x):
        kept, changed = x.chunk(2, dim=1)
        y = torch.cat((kept, self.branch(changed)), dim=1)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        return torch.cat([y, torch.relu(self.grow(y)), y[:, 3:9]], 1)


@pytest.mark.parametrize("batch", [1, 3])
def test_concat_split_and_channel_shuffle_run_on_the_bdma(batch):
    torch.manual_seed(11)
    model = ShuffleUnit().eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 1.5)
    x = torch.randn(batch, 16, 8, 8)
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    primitives = [p for ps in report.functions.values() for p in ps]
    for name in ("accel.slice", "accel.concat", "accel.channel_shuffle"):
        assert name in primitives, primitives
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)
    # The copies are costed: the profile has BDMA runs that move the bytes they copy.
    source = "\n".join(ac.generated_sources(partitioned).values())
    assert "ACCEL_ENGINE_BDMA" in source


class LrnStem(torch.nn.Module):
    """AlexNet's first layers: conv + ReLU, local response norm (on the CDP), max pool."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 5, stride=2, padding=2)
        self.norm = torch.nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0)
        self.pool = torch.nn.MaxPool2d(3, 2)

    def forward(self, x):
        return self.pool(self.norm(torch.relu(self.conv(x))))


@pytest.mark.parametrize("precision, rtol", [("fp32", RTOL), ("fp16", 2e-3)])
def test_local_response_norm_runs_on_the_cdp(precision, rtol):
    torch.manual_seed(5)
    model = LrnStem().eval()
    x = torch.randn(1, 3, 32, 32) * 4
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision=precision)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert "accel.lrn" in [p for ps in report.functions.values() for p in ps]
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=rtol)


def test_int8_local_response_norm_stays_on_the_host_with_its_reason():
    """The simulator runs NVDLA's int8 LRN (accel_cdp_int8), but the compiler does not build its
    tables yet: the LRN stays on the host, saying so, and the rest runs in int8."""
    torch.manual_seed(5)
    model = LrnStem().eval()
    x = torch.randn(1, 3, 32, 32) * 4
    mod, params = frontend.from_pytorch(model, (x,))
    calibration = [x * 4 for x in random_inputs((1, 3, 32, 32), 2, 5)]
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    report = ac.partition_report(partitioned)
    assert any("int8 LRN is not generated yet" in (op.reason or "") for op in report.host), \
        str(report)
    assert "accel.lrn" not in [p for ps in report.functions.values() for p in ps]


class LutActivations(torch.nn.Module):
    """MobileNetV3's hardswish and hardsigmoid, EfficientNet's SiLU, GELU and exp, each after a
    conv + batch norm (torch's frontend decomposes the first three into several ops)."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(5))
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm2d(8) for _ in range(5))
        self.acts = [torch.nn.functional.hardswish, torch.nn.functional.hardsigmoid,
                     torch.nn.functional.silu, torch.nn.functional.gelu,
                     lambda t: torch.exp(t * 0.25)]

    def forward(self, x):
        for conv, norm, act in zip(self.convs, self.norms, self.acts):
            x = act(norm(conv(x)))
        return x


@pytest.mark.parametrize("precision, rtol", [("fp32", RTOL), ("fp16", 1e-2)])
def test_lookup_table_activations_are_offloaded(precision, rtol):
    """fp32 computes them exactly; fp16 through the modelled LUT (accel.h states its bound)."""
    torch.manual_seed(7)
    model = LutActivations().eval()
    x = torch.randn(1, 8, 8, 8)
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision=precision)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    primitives = [p for ps in report.functions.values() for p in ps]
    for act in ("hardswish", "hardsigmoid", "silu", "gelu"):
        assert f"accel.conv2d_bias_bn_{act}" in primitives, primitives
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=rtol)


@pytest.mark.parametrize("pool", [
    torch.nn.MaxPool2d(3, 2, ceil_mode=True),                              # GoogLeNet's
    torch.nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
])
def test_ceil_mode_pooling_with_a_partial_window(pool):
    """A partial last window is a window over more padding: the PDP runs it."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), pool).eval()
    x = torch.randn(1, 3, 14, 14)  # 12 after the conv: ceil mode adds a partial window
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [], str(report)
    floor = torch.nn.Sequential(model[0], type(pool)(3, 2, padding=pool.padding)).eval()
    assert torch_forward(model, x).shape[-1] == torch_forward(floor, x).shape[-1] + 1
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


def test_squeeze_excite_stays_whole_in_fp16():
    """fp16 reads squeeze-excite's computed per-channel scale as the SDP's scale (batch 1)."""
    torch.manual_seed(14)
    model = SqueezeExcite().eval()
    x = torch.randn(1, 16, 14, 14) + 0.5
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="fp16")
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=3e-3)


class ConvSqueezeExcite(torch.nn.Module):
    """A conv + ReLU, then squeeze-excite on it, then ReLU (RegNetY's and EfficientNet's
    blocks)."""

    def __init__(self, channels=16):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.se = SqueezeExcite(channels)

    def forward(self, x):
        return torch.relu(self.se(torch.relu(self.conv(x))))


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_squeeze_excite_on_a_batch_stays_whole(precision, tmp_path):
    """x * s with s [N, C, 1, 1], N = 3: the SDP's per-channel multiplier reads s [N][C] (it
    was a host op, 'multiply with broadcasting', splitting the function in two)."""
    torch.manual_seed(3)
    model = ConvSqueezeExcite().eval()
    x = torch.randn(3, 16, 14, 14) + 0.5
    calibration = [(torch.randn(3, 16, 14, 14) + 0.5).numpy() for _ in range(4)]
    mod, params = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(
        mod, params, precision=precision,
        calibration=calibration if precision == "int8" else None)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    y, expected = build_and_run(partitioned, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, rtol=RTOL)
    elif precision == "fp16":
        assert_close(y, expected, rtol=3e-3)
    else:
        assert sqnr(y, expected) >= ort_int8_sqnr(model, x.numpy(), calibration, tmp_path) - 1.0


def test_squeeze_excite_on_a_batch_unfused_stays_on_the_host():
    """The per-image multiplier is a fused run: decomposed kernels keep x * s on the host,
    with the reason."""
    model = ConvSqueezeExcite().eval()
    x = torch.randn(2, 16, 8, 8)
    mod, params = frontend.from_pytorch(model, (x,))
    report = ac.partition_report(ac.partition_for_accel(mod, params, fuse=False))
    assert [r.op for r in report.host] == ["relax.multiply"], str(report)
    assert "one value per image and channel" in report.host[0].reason


@pytest.mark.parametrize("bias_first", [False, True])
def test_a_runtime_bias_reshaped_before_the_dense_layers_output(bias_first):
    """reshape(b, [1, K]) + x W^T with b and W inputs of main: the chain's data is the dense
    layer's output in either order (bias first, the bias was read as the data: a wrong
    answer, 0.4-3.0 off on 4 outputs)."""
    from tvm import relax

    builder = relax.BlockBuilder()
    x, w, b = (relax.Var(n, relax.TensorType(s, "float32"))
               for n, s in (("x", [1, 8]), ("w", [4, 8]), ("b", [4])))
    with builder.function("main", [x, w, b]):
        with builder.dataflow():
            product = builder.emit(relax.op.matmul(x, builder.emit(
                relax.op.permute_dims(w, [1, 0]))))
            bias = builder.emit(relax.op.reshape(b, [1, 4]))
            terms = (bias, product) if bias_first else (product, bias)
            out = builder.emit_output(relax.op.add(*terms))
        builder.emit_func_output(out)
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((1, 8), (4, 8), (4,))]
    y = run_main(ac.virtual_machine(ac.build(builder.get())), *inputs)
    assert_close(y, inputs[0] @ inputs[1].T + inputs[2])
