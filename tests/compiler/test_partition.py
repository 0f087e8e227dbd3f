"""Partitioning, structurally: what is offloaded as which primitive, what stays on the host and
why, the no-touch guarantee for batch norm, and compile-time folding of bias + batch norm."""
import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import accel_codegen as ac
from accel_codegen._accel_ffi import lib
from accel_codegen.compiler.frontend import from_pytorch
from conftest import assert_close, build_and_run, run_main, torch_forward

torch.manual_seed(0)


class ConvBnRelu(torch.nn.Module):
    def __init__(self, cin=4, cout=8, kernel=3, stride=1, bias=True, act="relu", pool=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=bias)
        self.bn = torch.nn.BatchNorm2d(cout)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)
        self.act = {"relu": torch.nn.ReLU(), "relu6": torch.nn.ReLU6(), "sigmoid":
                    torch.nn.Sigmoid(), "tanh": torch.nn.Tanh(), None: torch.nn.Identity()}[act]
        self.pool = pool or torch.nn.Identity()

    def forward(self, x):
        return self.pool(self.act(self.bn(self.conv(x))))


def _import(model, shape=(1, 4, 16, 16)):
    mod, _ = from_pytorch(model.eval(), (torch.randn(*shape),))
    return mod


def _primitives(report):
    return [p for prims in report.functions.values() for p in prims]


def test_conv_bias_bn_relu_is_one_primitive():
    report = ac.partition_report(_import(ConvBnRelu()))
    assert _primitives(report) == ["accel.conv2d_bias_bn_relu"]
    assert report.host == []
    assert {op.op for op in report.offloaded} >= {"relax.nn.conv2d", "relax.nn.batch_norm",
                                                 "relax.nn.relu", "relax.add"}


@pytest.mark.parametrize("act,primitive", [
    ("relu6", "accel.conv2d_bn_clip"), ("sigmoid", "accel.conv2d_bn_sigmoid"),
    ("tanh", "accel.conv2d_bn_tanh"), (None, "accel.conv2d_bn_maxpool"),
])
def test_activation_variants(act, primitive):
    pool = torch.nn.MaxPool2d(2) if act is None else None
    report = ac.partition_report(_import(ConvBnRelu(bias=False, act=act, pool=pool)))
    assert _primitives(report) == [primitive]


def test_pooling_fuses_after_the_convolution():
    report = ac.partition_report(_import(ConvBnRelu(pool=torch.nn.MaxPool2d(2))))
    assert _primitives(report) == ["accel.conv2d_bias_bn_relu_maxpool"]


def test_residual_add_then_relu_fuses_into_the_sdp():
    class Residual(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = ConvBnRelu(4, 4)
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.a(x)
            return torch.relu(self.bn(self.conv(y)) + x)

    report = ac.partition_report(_import(Residual()))
    assert _primitives(report) == ["accel.conv2d_bias_bn_relu", "accel.conv2d_bn_add_relu"]
    assert len(report.functions) == 1  # neighbours merge into one external function


def test_host_ops_with_reasons():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            over = lib.ACCEL_MAX_POOL_KERNEL + 1  # one past the PDP's window limit
            self.block = ConvBnRelu(4, 8)
            self.norm = torch.nn.LayerNorm(16 - over + 1)  # the pool's width
            # Without padding: a stride-1 'same' pool would become a cascade of PDP pools
            # (rewrites.max_pool_cascades).
            self.wide = torch.nn.MaxPool2d(kernel_size=over, stride=1)

        def forward(self, x):
            y = self.wide(self.block(x))
            return torch.softmax(self.norm(y), dim=-1)

    report = ac.partition_report(_import(Mixed()))
    reasons = {op.op: op.reason for op in report.host}
    limit = f"exceeds the PDP limit of {lib.ACCEL_MAX_POOL_KERNEL}"
    assert limit in reasons["relax.nn.max_pool2d"]
    # a layer norm and a softmax over the last axis run as engine passes (issue 29)
    assert "relax.nn.layer_norm" not in reasons and "relax.nn.softmax" not in reasons
    assert _primitives(report) == ["accel.conv2d_bias_bn_relu", "accel.layer_norm",
                                   "accel.softmax"]
    text = str(report)
    assert "host" in text and "exceeds the PDP limit" in text


def test_config_limits_decide_what_is_offloaded():
    """nv_small has no LUT and no element-wise unit: sigmoid and a residual add stay on the
    host there, with the hardware's reason, while nv_full takes them."""
    mod = _import(ConvBnRelu(act="sigmoid"))
    assert _primitives(ac.partition_report(mod, config="nv_full")) == [
        "accel.conv2d_bias_bn_sigmoid"]
    small = ac.partition_report(mod, config="nv_small")
    # The chain ends at the batch norm there; the sigmoid alone stays on the host.
    assert _primitives(small) == ["accel.conv2d_bias_bn"]
    assert [op.op for op in small.host] == ["relax.sigmoid"]
    assert "lookup table, which nv_small lacks" in small.host[0].reason


def test_conv_stride_over_the_hardware_limit_stays_on_host():
    """A prime stride over the limit: no space-to-depth factor brings it within (a stride that
    factors is rewritten: tests/compiler/test_exact_rewrites.py)."""
    limit = lib.ACCEL_MAX_CONV_STRIDE
    stride = next(n for n in range(limit + 1, 4 * limit)
                  if all(n % d for d in range(2, n)))
    model = torch.nn.Conv2d(4, 8, stride, stride=stride)
    report = ac.partition_report(_import(model, (1, 4, 4 * stride, 4 * stride)))
    conv = next(op for op in report.host if op.op == "relax.nn.conv2d")
    assert f"stride_h = {stride} is outside [1, {limit}]" in conv.reason


def _bn_module(training: bool):
    """conv + batch_norm built by hand: the BlockBuilder's default is training=True."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(np.random.rand(8, 4, 3, 3).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
            consts = [relax.const(np.random.rand(8).astype("float32") + 0.5) for _ in range(4)]
            bn = bb.emit(relax.op.nn.batch_norm(y, *consts, axis=1, training=training))
            normalized = bb.emit(relax.TupleGetItem(bn, 0))
            out = bb.emit_output(relax.op.nn.relu(normalized))
        bb.emit_func_output(out)
    return bb.get()


def test_training_mode_batch_norm_stays_on_host():
    report = ac.partition_report(_bn_module(training=True))
    bn = next(op for op in report.host if op.op == "relax.nn.batch_norm")
    assert bn.reason == "batch_norm in training mode (batch statistics)"
    assert _primitives(ac.partition_report(_bn_module(training=False))) == [
        "accel.conv2d_bn_relu"]


def _ops_in(mod):
    names = []
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func, lambda e: names.append(e.op.name) if isinstance(e, relax.Call)
                and isinstance(e.op, tvm.ir.Op) else None)
    return names


def test_batch_norm_is_never_decomposed_and_folds_into_one_scale_shift():
    """The no-touch guarantee: after partition_for_accel, TVM's passes that decompose batch
    norm find nothing to decompose, and the generated code programs ONE SDP op whose scale and
    shift hold batch norm and the conv bias (the two adds became one)."""
    mod = _import(ConvBnRelu())
    partitioned = ac.partition_for_accel(mod)
    report = ac.partition_report(partitioned)
    assert "relax.nn.batch_norm" in [op.op for op in report.offloaded]
    lowered = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                        relax.transform.LegalizeOps()])(partitioned)
    ops = _ops_in(lowered)
    assert "relax.nn.batch_norm" not in ops and "relax.call_dps_packed" in ops
    assert not any(name in ops for name in ("relax.sqrt", "relax.subtract", "relax.divide"))
    (source,) = ac.generated_sources(partitioned).values()
    assert source.count("ACCEL_ENGINE_SDP") == 1
    assert source.count("ACCEL_ENGINE_CONV") == 1
    sdp = re.search(r"sdp\.scale = (k_const\[\d+\]);\s+\S+sdp\.shift = (k_const\[\d+\]);",
                    source)
    assert sdp, "the SDP takes a compile-time scale and shift"
    # weights, scale, shift: the bias has no constant of its own
    counts = re.search(r"k_const_count\[\d+\] = \{([^}]*)\}", source).group(1)
    assert len(counts.split(",")) == 3, counts
    assert "fold them now" not in source


def test_decomposed_mode_runs_every_op_apart():
    partitioned = ac.partition_for_accel(_import(ConvBnRelu()), fuse=False)
    (source,) = ac.generated_sources(partitioned).values()
    assert source.count("ACCEL_ENGINE_SDP") == 3  # bias, batch norm, relu
    assert "ACCEL_MODE_INDEPENDENT" in source and "ACCEL_MODE_FUSED" not in source
    assert "decomposed" in str(ac.partition_report(partitioned))


def test_runtime_weights_are_folded_by_the_generated_code():
    mod, params = from_pytorch(ConvBnRelu().eval(), (torch.randn(1, 4, 16, 16),),
                               keep_params_as_input=True)
    assert params
    (source,) = ac.generated_sources(ac.partition_for_accel(mod)).values()
    assert "fold them now" in source and "fold_batch_norm(" in source


def test_partitioning_twice_is_an_error():
    partitioned = ac.partition_for_accel(_import(ConvBnRelu()))
    with pytest.raises(ac.AccelInvalidError, match="partitioned already"):
        ac.partition_for_accel(partitioned)
    with pytest.raises(ac.AccelInvalidError, match="expected a tvm.IRModule"):
        ac.partition_for_accel("resnet")


def test_unknown_config_is_a_clear_error():
    with pytest.raises(ac.AccelNotFoundError, match="nv_mega"):
        ac.partition_for_accel(_import(ConvBnRelu()), config="nv_mega")


def _host_vs_accel(model, x, **kwargs):
    mod = _import(model, tuple(x.shape))
    partitioned = ac.partition_for_accel(mod, **kwargs)
    y = build_and_run(partitioned, x)
    host = run_main(ac.virtual_machine(ac.build_host(mod)), x)
    return ac.partition_report(partitioned), y, host


def test_a_bias_broadcast_along_width_is_not_a_per_channel_bias():
    class WidthBias(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
            self.b = torch.nn.Parameter(torch.randn(1, 4, 1, 1))

        def forward(self, x):
            return torch.relu(self.conv(x) + self.b.reshape(1, 1, 1, 4))

    report, y, host = _host_vs_accel(WidthBias().eval(), torch.randn(1, 4, 4, 4))
    np.testing.assert_allclose(y, host, rtol=1e-5, atol=1e-5)
    assert "relax.add" in [op.op for op in report.host] or all(
        op.primitive != "accel.conv2d_bias_relu" for op in report.offloaded)


def test_a_branch_reading_the_chains_intermediate_stays_correct():
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
            self.c2, self.b2 = torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.b1(self.c1(x))
            return torch.relu(y + self.b2(self.c2(y)))

    _, y, host = _host_vs_accel(Inner().eval(), torch.randn(1, 4, 8, 8))
    np.testing.assert_allclose(y, host, rtol=1e-5, atol=1e-5)


def test_a_check_that_breaks_is_a_stated_host_fallback_or_a_strict_error(monkeypatch):
    """A lowering bug must never give a wrong answer: the chain stays on the host, saying so;
    under the suite's strict mode the bug is raised instead of hidden."""
    from accel_codegen.compiler import patterns

    def broken(*args):
        raise RuntimeError("a lowering bug")

    monkeypatch.setattr(patterns, "lower_chain", broken)
    mod = _import(ConvBnRelu())
    with pytest.raises(Exception, match="a lowering bug"):
        ac.partition_report(mod)
    monkeypatch.delenv(patterns.STRICT_ENV)
    report = ac.partition_report(mod)
    assert _primitives(report) == []
    assert any("not understood by the accelerator compiler (RuntimeError: a lowering bug)"
               in (op.reason or "") for op in report.host), report


class ScaleBeforeData(torch.nn.Module):
    """``s * x`` with a per-channel scale first (torchvision's squeeze-excite computes
    ``scale * input``): a constant scale, then a computed one."""

    def __init__(self, computed):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.fc = torch.nn.Conv2d(8, 8, 1)
        self.s = torch.nn.Parameter(torch.rand(1, 8, 1, 1) + 0.5)
        self.computed = computed

    def forward(self, x):
        y = torch.relu(self.conv(x))
        if self.computed:  # squeeze-excite
            s = torch.sigmoid(self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1)))
        else:
            s = self.s
        return s * y


@pytest.mark.parametrize("computed", [False, True], ids=["constant", "squeeze_excite"])
def test_commutative_ops_are_offloaded_in_either_operand_order(computed):
    model = ScaleBeforeData(computed).eval()
    x = torch.randn(1, 4, 8, 8)
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and "accel.mul" in _primitives(report), report
    y = run_main(ac.virtual_machine(ac.build(partitioned)), x.numpy())
    assert_close(y, torch_forward(model, x))


class PaddedConv(torch.nn.Module):
    """An explicit padding before conv + BN + ReLU (nn.ZeroPad2d, F.pad)."""

    def __init__(self, value=0.0):
        super().__init__()
        self.value = value
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = torch.nn.functional.pad(x, (1, 2, 0, 1), value=self.value)  # left, right, top, bottom
        return torch.relu(self.bn(self.conv(x)))


def test_a_zero_padding_folds_into_the_convolution():
    model = PaddedConv().eval()
    x = torch.randn(1, 3, 8, 8)
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and _primitives(report) == ["accel.conv2d_bias_bn_relu"], report
    (source,) = ac.generated_sources(partitioned).values()
    assert "pad_top = 1; ops[0].conv.pad_left = 2; ops[0].conv.pad_bottom = 2; " \
           "ops[0].conv.pad_right = 3;" in source  # the conv's 1 plus the explicit padding
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), x.numpy()),
                 torch_forward(model, x))


def test_a_padding_that_is_not_zero_stays_on_the_host_saying_why():
    model = PaddedConv(value=1.0).eval()
    x = torch.randn(1, 3, 8, 8)
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    (pad,) = report.host
    assert pad.op == "relax.nn.pad" and "constant padding with value 1" in pad.reason
    # the summary at the top counts the host operators by reason
    assert report.host_reasons() == [(pad.reason, 1)]
    assert str(report).splitlines()[1:3] == ["1 on the host:",
                                             f"     1 x [{pad.code}] {pad.reason}"]
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), x.numpy()),
                 torch_forward(model, x))


class LinearBottleneck(torch.nn.Module):
    """MobileNetV2's inverted residual as torchvision writes it, ``x + conv(x)``: the block
    ends in conv + BN with no activation, and a conv + BN feeds another conv."""

    def __init__(self, channels=8, expand=4):
        super().__init__()
        hidden = channels * expand
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(channels, hidden, 1, bias=False),
                                          torch.nn.BatchNorm2d(hidden))
        self.project = torch.nn.Sequential(torch.nn.Conv2d(hidden, channels, 1, bias=False),
                                           torch.nn.BatchNorm2d(channels))
        for bn in (self.expand[1], self.project[1]):
            with torch.no_grad():
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return x + self.project(self.expand(x))


def test_a_chain_ends_at_batch_norm_and_keeps_it_whole():
    """conv + BN with nothing after it is one primitive: batch norm reaches the code generator
    whole (no decomposition), and the numbers are PyTorch's."""
    model = ConvBnRelu(bias=False, act=None)
    x = np.random.default_rng(0).standard_normal((1, 4, 16, 16)).astype(np.float32)
    mod = ac.partition_for_accel(_import(model))
    report = ac.partition_report(mod)
    assert _primitives(report) == ["accel.conv2d_bn"] and report.host == []
    assert "relax.nn.batch_norm" in {op.op for op in report.offloaded}
    assert_close(build_and_run(mod, x), torch_forward(model, x))


def test_a_linear_bottleneck_is_one_function():
    model = LinearBottleneck()
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype(np.float32)
    mod = ac.partition_for_accel(_import(model, (1, 8, 8, 8)))
    report = ac.partition_report(mod)
    assert report.host == [] and len(report.functions) == 1
    assert _primitives(report) == ["accel.conv2d_bn", "accel.conv2d_bn_add"]
    assert_close(build_and_run(mod, x), torch_forward(model, x))


class BottleneckAfterConv(torch.nn.Module):
    """MobileNetV2's residual block after a projection: the add's other operand is a conv + BN
    too, whose output the block's expansion also reads."""

    def __init__(self, skip_first: bool):
        super().__init__()
        self.skip_first = skip_first
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1, bias=False),
                                        torch.nn.BatchNorm2d(8))
        self.block = LinearBottleneck()

    def forward(self, x):
        x = self.stem(x)
        y = self.block.project(self.block.expand(x))
        return x + y if self.skip_first else y + x


@pytest.mark.parametrize("skip_first", [True, False])
def test_a_residual_add_joins_its_own_branch_when_both_operands_are_convs(skip_first):
    """The add joins the chain whose output nothing else reads, in either operand order (one
    pattern with both orders took the first, the shared conv, and the add ran alone)."""
    model = BottleneckAfterConv(skip_first)
    x = np.random.default_rng(2).standard_normal((1, 8, 8, 8)).astype(np.float32)
    mod = ac.partition_for_accel(_import(model, (1, 8, 8, 8)))
    report = ac.partition_report(mod)
    assert report.host == []
    assert _primitives(report) == ["accel.conv2d_bn", "accel.conv2d_bn", "accel.conv2d_bn_add"]
    assert_close(build_and_run(mod, x), torch_forward(model, x))


def test_a_batch_norm_whose_statistics_are_read_stays_on_the_host():
    """Only the normalised output can leave the SDP: a chain may not end at a batch norm whose
    mean or variance output is read too."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    channels = [relax.const(np.full(4, v, np.float32)) for v in (1.5, 0.1, 0.2, 0.9)]
    with bb.function("main", [x]):
        with bb.dataflow():
            bn = bb.emit(relax.op.nn.batch_norm(x, *channels, axis=1, training=False))
            out = bb.emit(relax.op.add(relax.TupleGetItem(bn, 0),
                                       relax.op.reshape(relax.TupleGetItem(bn, 1), (1, 4, 1, 1))))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    report = ac.partition_report(bb.get())
    (bn_op,) = [op for op in report.host if op.op == "relax.nn.batch_norm"]
    assert "mean and variance outputs are read too" in bn_op.reason




class ConstantOperands(torch.nn.Module):
    """Leaky ReLU, and ops with a scalar constant operand: each becomes an SDP scale/shift."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.leaky_relu(self.conv(x), 0.1)
        y = (y - 0.5) / 3.0
        return torch.relu(y * 2.0 + 1.0)


def test_leaky_relu_and_constant_operands_are_offloaded():
    model = ConstantOperands().eval()
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    mod = ac.partition_for_accel(_import(model, (1, 4, 8, 8)))
    report = ac.partition_report(mod)
    assert report.host == [], str(report)
    assert _primitives(report) == ["accel.conv2d_bias_prelu", "accel.subtract", "accel.divide",
                                   "accel.multiply_add_relu"]
    # x / 3 runs as x * (1 / 3): within an ulp of the division.
    assert_close(build_and_run(mod, x), torch_forward(model, x), rtol=1e-6)


class TensorDifference(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) - y, 1.0 - torch.relu(y)


def test_a_difference_of_tensors_runs_as_an_add_of_the_negation():
    """relu(x) - y is relu(x) + y * -1 (rewrites.tensor_minus_tensor: the SDP's scale, then
    its element-wise adder), 1 - relu(y) is relu(y) * -1 + 1 (constant_minus_tensor): no
    subtract reaches the pattern table, nothing stays on the host, and the values are
    PyTorch's (IEEE subtraction is the addition of the negation)."""
    model = TensorDifference().eval()
    x, y = (np.random.default_rng(seed).standard_normal((1, 4, 4, 4)).astype(np.float32)
            for seed in (0, 1))
    mod, _ = from_pytorch(model, (torch.from_numpy(x), torch.from_numpy(y)))
    partitioned = ac.partition_for_accel(mod)
    report = ac.partition_report(partitioned)
    assert report.host == [], str(report)
    assert "relax.subtract" not in [op.op for op in report.ops], str(report)
    vm = ac.virtual_machine(ac.build(partitioned))
    outs = vm["main"](*(tvm.runtime.tensor(a) for a in (x, y)))
    with torch.no_grad():
        refs = model(torch.from_numpy(x), torch.from_numpy(y))
    for out, ref in zip(outs, refs):
        np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_a_flattened_global_pool_needs_no_reshape():
    """torch.flatten after AdaptiveAvgPool2d(1) moves no data: the pool writes [N, C]."""
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    x = np.random.default_rng(3).standard_normal((2, 4, 9, 9)).astype(np.float32)
    mod = ac.partition_for_accel(_import(model, (2, 4, 9, 9)))
    report = ac.partition_report(mod)
    assert report.host == []
    assert (report.ops[-1].op, report.ops[-1].shape) == ("relax.mean", [2, 8])
    assert_close(build_and_run(mod, x), torch_forward(model, x))


class PositionEmbedding(torch.nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(*shape))

    def forward(self, tokens):
        return self.pos + tokens


@pytest.mark.parametrize("shape", [(1, 6, 8), (1, 4, 3, 3)])
def test_a_constant_operand_is_never_the_data(shape):
    """pos + x reads x as its input and the constant (a learned embedding) as the operand,
    so a reason about "the input" is about x."""
    from accel_codegen.compiler.layer import bound_values
    from accel_codegen.compiler.lowering import lower_chain

    mod, params = from_pytorch(PositionEmbedding(shape).eval(), (torch.randn(*shape),))
    main = ac.frontend.bind_params(mod, params)["main"]
    (binding,) = main.body.blocks[0].bindings
    layer = lower_chain(binding.value, bound_values(main))
    assert layer.data.same_as(main.params[0]) and layer.sdp.ew_op == "add"
    # [N, C, L] is the surface [N, C, 1, L] (layer.feature_surface)
    assert layer.in_shape == (shape if len(shape) == 4 else (1, 6, 1, 8))
