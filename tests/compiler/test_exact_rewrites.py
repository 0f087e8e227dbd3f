"""The exact rewrites onto what the engines run (compiler/rewrites.py, issue 33): YOLO's SPP
pools as cascades of PDP pools, the Focus stem as a one-hot convolution, a permute before a
dense layer's flatten folded into its weight, a constant bias reshape read by two convs, and
c - x as the SDP's scale and shift. Each is offloaded (the partition report) and gives
PyTorch's answer: bit for bit where the rewrite only selects or copies, within fp32's
summation error where a convolution or dense layer sums, and within fp16's and int8's error
on a small detector that has all five (from PyTorch and from its ONNX export)."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen._accel_ffi import lib
from accel_codegen.compiler.frontend import export_onnx, from_onnx
from accel_codegen.compiler.frontend import from_pytorch
from conftest import (assert_close, assert_same, build_and_run, ort_int8_sqnr, run_main,
                      sqnr, torch_forward)


@pytest.fixture(autouse=True)
def _seeded_weights():
    """Each test's model weights from seed 0, whatever ran before it (int8's error depends on
    them: a figure measured alone is the figure in the whole suite)."""
    torch.manual_seed(0)


def _partition(model, x, **options):
    mod, params = from_pytorch(model.eval(), (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, **options)
    return partitioned, ac.partition_report(partitioned)


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def _input(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check_sqnr(model, x, y, precision, min_db, calibration, tmp_path):
    """fp16 at least ``min_db`` against PyTorch; int8 within 1 dB of ONNX Runtime's static int8
    of the same weights and calibration (int8's figure moves with the weights: 24-40 dB for
    one model's seeds, ONNX Runtime's within 0.5 dB of ours on each)."""
    ours = sqnr(y, torch_forward(model, x))
    if precision == "int8":
        baseline = ort_int8_sqnr(model, x, calibration, tmp_path)
        assert ours >= baseline - 1.0, (ours, baseline)
    else:
        assert ours >= min_db, ours


def _whole_and_close(model, x, calibration, precision, min_db, tmp_path):
    """``model`` one external function in ``precision`` (int8 calibrated on ``calibration``),
    its output fp32 within 1e-5 of PyTorch's scale, else as :func:`_check_sqnr` says."""
    options = {"calibration": calibration} if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    y = build_and_run(partitioned, x)
    if precision == "fp32":
        assert_close(y, torch_forward(model, x), 1e-5)
    else:
        _check_sqnr(model, x, y, precision, min_db, calibration, tmp_path)


# --- max pools wider than the PDP's window --------------------------------------------------------

class SpatialPyramid(torch.nn.Module):
    """YOLO's SPP (5, 9, 13) beside a 9 x 13 window and an 11 with ceil_mode (no effect at
    stride 1), all stride 1 with 'same' padding."""

    def __init__(self):
        super().__init__()
        self.pools = torch.nn.ModuleList([
            torch.nn.MaxPool2d(5, 1, 2), torch.nn.MaxPool2d(9, 1, 4), torch.nn.MaxPool2d(13, 1, 6),
            torch.nn.MaxPool2d((9, 13), 1, (4, 6)), torch.nn.MaxPool2d(11, 1, 5, ceil_mode=True)])

    def forward(self, x):
        return torch.cat([x] + [pool(x) for pool in self.pools], 1)


def test_spp_pools_run_as_shared_cascades_of_pdp_pools():
    x = _input((1, 3, 12, 10), 0)  # smaller than the 13 x 13 window
    partitioned, report = _partition(SpatialPyramid(), x)
    _whole(report)
    pools = [op for op in report.offloaded if op.op == "relax.nn.max_pool2d"]
    # 5; 9 = 5 then 5 (the 5 shared); 13 = 9 then 5 (the 9 shared: SPPF's form); 9 x 13 = 9
    # then 1 x 5; 11 = 9 then 3: five PDP runs for five pools
    assert len(pools) == 5, str(report)
    assert_same(build_and_run(partitioned, x), torch_forward(SpatialPyramid(), x))


class NoCascade(torch.nn.Module):
    """Wide max pools that are no cascade of 'same' pools: dilated, strided, not 'same'."""

    def forward(self, x):
        return (torch.nn.functional.max_pool2d(x, 9, 1, 4, dilation=2),
                torch.nn.functional.max_pool2d(x, 9, 2, 4),
                torch.nn.functional.max_pool2d(x, 9, 1, 2))


def test_a_wide_pool_that_is_no_cascade_stays_on_the_host_with_its_reason():
    mod, _ = from_pytorch(NoCascade().eval(), (torch.randn(1, 2, 24, 24),))
    report = ac.partition_report(mod)
    assert [op.op for op in report.host] == ["relax.nn.max_pool2d"] * 3, str(report)
    limit = f"exceeds the PDP limit of {lib.ACCEL_MAX_POOL_KERNEL}"
    assert [op.reason for op in report.host] == [
        "relax.nn.max_pool2d with dilation [2, 2]"] + [f"op 0 (PDP): pooling kernel 9x9 {limit} "
                                                      "per side"] * 2, str(report)


# --- Focus / space-to-depth ------------------------------------------------------------------------

class Focus(torch.nn.Module):
    """YOLOv5's stem without its conv: the four 2 x 2 phases of x stacked on channels."""

    def forward(self, x):
        return torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                          x[..., 1::2, 1::2]], 1)


class EvenRows(torch.nn.Module):
    """Phases that begin at 0 of an odd height: the last window reads one row of padding."""

    def forward(self, x):
        return torch.cat([x[:, :, ::2, 1::2], x[:, :, ::2, ::2]], 1)


class ThirdPhases(torch.nn.Module):
    """Stride-3 phases (a 3 x 3 kernel), the rows from 0 of a height 3 does not divide."""

    def forward(self, x):
        return torch.cat([x[:, :, ::3, 2::3], x[:, :, ::3, 1::3], x[:, :, ::3, 2::3]], 1)


@pytest.mark.parametrize("model, shape", [(Focus(), (1, 3, 8, 12)), (EvenRows(), (1, 2, 7, 8)),
                                          (ThirdPhases(), (2, 2, 7, 9))])
def test_space_to_depth_is_a_one_hot_convolution(model, shape):
    x = _input(shape, 1)
    partitioned, report = _partition(model, x)
    _whole(report)
    assert [op.op for op in report.offloaded] == ["relax.nn.conv2d"], str(report)
    # 1 * x plus zeros: the copy itself
    assert_same(build_and_run(partitioned, x), torch_forward(model, x))


def test_space_to_depth_in_int8_copies_the_input_codes():
    """The one-hot weights quantise exactly (1 = code 127 at scale 1/127), and the output holds
    the input's values, so calibration gives it the input's scale: the int8 conv copies each
    code, and the output is the input quantised once, as the slices would give it."""
    x = _input((1, 3, 8, 8), 6)
    partitioned, report = _partition(Focus(), x, precision="int8", calibration=[(x,)])
    _whole(report)
    quants = list(ac.calibration_of(partitioned).tensors.values())
    assert len({(q.scale, q.zero) for q in quants}) == 1, quants  # input and output alike
    expected = quants[0].dequantize(quants[0].quantize(torch_forward(Focus(), x)))
    assert_same(build_and_run(partitioned, x), expected.astype(np.float32))


# --- a convolution strided wider than the CONV's stride register -----------------------------------

@pytest.mark.parametrize("kernel, stride, padding, shape", [
    (16, 16, 0, (1, 3, 48, 40)),   # ViT's patch embedding: f = 2, then 8x8 stride 8
    ((12, 18), (12, 9), 3, (2, 2, 30, 29)),  # f = (2, 3); padding; rows the stride leaves over
])
def test_a_wide_stride_convolution_is_space_to_depth_then_a_convolution(kernel, stride, padding,
                                                                        shape):
    """Beyond the CONV's stride register (8): a one-hot f x f stride-f conv, then the conv of
    kernel k/f, stride s/f over its C f^2 channels: two offloaded convs with the same products
    as the original, within fp32's summation error of PyTorch."""
    assert max(np.atleast_1d(stride)) > lib.ACCEL_MAX_CONV_STRIDE
    model = torch.nn.Conv2d(shape[1], 6, kernel, stride, padding)
    x = _input(shape, 3)
    partitioned, report = _partition(model, x)
    _whole(report)
    assert [(op.op, op.primitive) for op in report.offloaded] == [
        ("relax.nn.conv2d", "accel.conv2d"), ("relax.nn.conv2d", "accel.conv2d_bias"),
        ("relax.reshape", "accel.conv2d_bias"), ("relax.add", "accel.conv2d_bias")], str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


def test_a_wide_stride_with_no_common_factor_stays_on_the_host_with_its_reason():
    """Stride 11 (prime, above 8): no f divides it, so the conv stays on the host, saying why."""
    x = _input((1, 2, 24, 24), 4)
    _, report = _partition(torch.nn.Conv2d(2, 4, 11, 11, bias=False), x)
    assert [op.op for op in report.host] == ["relax.nn.conv2d"], str(report)
    assert "stride_h = 11 is outside [1, 8]" in report.host[0].reason


class PatchGelu(torch.nn.Module):
    """ViT's patch conv (16x16, stride 16) and an MLP's Linear + GELU over the patches."""

    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 8, 16, 16)
        self.fc = torch.nn.Linear(8, 16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.patch(x).flatten(2).transpose(1, 2)))


def test_the_patch_conv_and_gelu_from_onnx_run_whole(tmp_path):
    """From ONNX too: the conv (whose out_dtype the importer leaves unset) is rewritten, and
    GELU, exported as its formula x * (erf(x / sqrt(2)) + 1) * 0.5, is read back as one
    activation; within fp32's error of PyTorch."""
    model, x = PatchGelu().eval(), _input((1, 3, 32, 48), 7)
    mod, params = from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / "pg.onnx"))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    _whole(report)
    assert "relax.erf" not in [op.op for op in report.ops], str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


# --- constants computed at compile time; one token taken ---------------------------------------------

class TokenHead(torch.nn.Module):
    """A class token expanded and concatenated before the tokens, a bias gathered from a table
    by constant indices (Swin's relative position bias), the class token taken for the head."""

    def __init__(self):
        super().__init__()
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, 8))
        self.table = torch.nn.Parameter(torch.randn(9, 8))
        self.register_buffer("index", torch.tensor([4, 0, 8, 3, 3, 1]))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1)
        return self.head((x + self.table[self.index])[:, 0])


def test_constant_broadcasts_and_takes_fold_and_a_token_take_is_a_copy():
    x = _input((1, 5, 8), 5)
    model = TokenHead()
    partitioned, report = _partition(model, x)
    _whole(report)
    assert not [op for op in report.offloaded if op.op in ("relax.take", "relax.broadcast_to")]
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-6)


# --- a permute before a dense layer's flatten -------------------------------------------------------

class NhwcHead(torch.nn.Module):
    """A face detector's heads: convs, each output flattened NHWC into a Linear (torch's
    matmul by a transposed weight) or into y @ W' (a constant [C*H*W, K])."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(3, 4, 3, padding=1) for _ in range(2))
        self.fc = torch.nn.Linear(4 * 5 * 6, 7)
        self.w = torch.nn.Parameter(torch.randn(6 * 4 * 5, 3) * 0.1)

    def forward(self, x):
        y = torch.relu(self.convs[0](x)).permute(0, 2, 3, 1)
        z = torch.relu(self.convs[1](x)).permute(0, 3, 1, 2)  # any order but the batch's
        return torch.cat([self.fc(y.reshape(y.shape[0], -1)),
                          z.reshape(z.shape[0], -1) @ self.w], 1)


def test_a_permute_before_the_flatten_folds_into_the_dense_weight():
    torch.manual_seed(2)
    model = NhwcHead().eval()
    x = _input((2, 3, 5, 6), 2)
    partitioned, report = _partition(model, x)
    _whole(report)
    assert "relax.permute_dims" not in [op.op for op in report.ops if op.shape[0] == 2]
    assert_close(build_and_run(partitioned, x), torch_forward(model, x))


# --- a constant bias reshape read by two ops ----------------------------------------------------------

class SharedBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(4, 8, 1, bias=False)
        self.b = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        bias = self.bias.view(1, 8, 1, 1)  # one reshape, two readers
        return torch.cat([torch.relu(self.a(x) + bias), torch.relu(self.b(x) + bias)], 1)


def test_a_bias_reshape_read_by_two_convs_joins_both():
    torch.manual_seed(3)
    model = SharedBias().eval()
    x = _input((1, 4, 6, 6), 3)
    partitioned, report = _partition(model, x)
    _whole(report)
    assert [p for ps in report.functions.values() for p in ps] == [
        "accel.conv2d_bias_relu", "accel.conv2d_bias_relu", "accel.concat"], str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x))


# --- c - x --------------------------------------------------------------------------------------------

class ConstantMinus(torch.nn.Module):
    """Box decoding's c - x: a scalar and a grid of offsets minus the input itself, a
    per-channel constant minus a conv's output."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.register_buffer("c", torch.tensor([0.5, -1.25, 3.0]).view(1, 3, 1, 1))
        self.register_buffer("grid", torch.randn(1, 3, 6, 6))

    def forward(self, x):
        return torch.cat([2.5 - x, self.grid - x, self.c - self.conv(x)], 1)


def test_a_constant_minus_a_tensor_runs_on_the_sdp():
    torch.manual_seed(4)
    model = ConstantMinus().eval()
    x = _input((1, 3, 6, 6), 4)
    partitioned, report = _partition(model, x)
    _whole(report)
    assert "relax.subtract" not in [op.op for op in report.ops], str(report)
    out, expected = build_and_run(partitioned, x), torch_forward(model, x)
    assert_same(out[:, :6], expected[:, :6])  # -x + c rounds as c - x does
    assert_close(out, expected)


# --- all five in one detector, in every precision -------------------------------------------------------

class TinyDetector(torch.nn.Module):
    """Focus stem, conv, SPP, two convs adding one bias reshape, an NHWC flatten into the
    head, and 1 - sigmoid."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(12, 8, 3, padding=1)
        self.pools = torch.nn.ModuleList(torch.nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.a = torch.nn.Conv2d(32, 8, 1, bias=False)
        self.b = torch.nn.Conv2d(32, 8, 3, padding=1, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(8) * 0.1)
        self.head = torch.nn.Linear(16 * 4 * 4, 6)

    def forward(self, x):
        x = torch.relu(self.stem(Focus()(x)))
        x = torch.cat([x] + [pool(x) for pool in self.pools], 1)
        bias = self.bias.view(1, 8, 1, 1)
        y = torch.cat([torch.relu(self.a(x) + bias), torch.relu(self.b(x) + bias)], 1)
        y = y.permute(0, 2, 3, 1).reshape(y.shape[0], -1)
        return 1.0 - torch.sigmoid(self.head(y))


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(5)
    return TinyDetector().eval(), _input((1, 3, 8, 8), 5)


def test_the_detector_from_onnx_is_whole_and_exact(detector, tmp_path):
    model, x = detector
    mod, params = from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / "det.onnx"))
    partitioned = ac.partition_for_accel(mod, params)
    _whole(ac.partition_report(partitioned))
    assert_close(build_and_run(partitioned, x), torch_forward(model, x))


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", None)])
def test_the_detector_in_fp16_and_int8(detector, precision, min_db, tmp_path):
    model, x = detector
    calibration = [(_input(x.shape, seed),) for seed in range(6, 10)]
    options = {"calibration": calibration} if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    _check_sqnr(model, x, build_and_run(partitioned, x), precision, min_db, calibration,
                tmp_path)


# --- a layer norm's shift folded into the conv after it -------------------------------------------

class NormThenConv(torch.nn.Module):
    """ConvNeXt's downsampling (LayerNorm2d, then a 2x2 stride-2 conv), and a layer norm read by
    a padded conv (not folded: its padding would not be shifted) and by the residual add."""

    def __init__(self, c=16):
        super().__init__()
        from accel_codegen.tools.models import LayerNorm2d
        self.down = torch.nn.Sequential(LayerNorm2d(c), torch.nn.Conv2d(c, 2 * c, 2, 2))
        self.norm = LayerNorm2d(2 * c)
        self.padded = torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        with torch.no_grad():
            for norm in (self.down[0], self.norm):
                norm.bias.copy_(torch.linspace(-0.5, 0.5, norm.bias.numel()))

    def forward(self, x):
        y = self.norm(self.down(x))
        return self.padded(y) + y


def test_a_layer_norms_shift_folds_into_the_conv_that_alone_reads_it():
    import tvm

    from accel_codegen.compiler import rewrites
    from accel_codegen.compiler.relax_exprs import constant_value

    model, x = NormThenConv().eval(), _input((1, 16, 8, 8), 0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    if params:
        mod = tvm.relax.transform.BindParams("main", params)(mod)
    mod = rewrites.layer_norm_shifts_into_convs(rewrites.channels_last_sandwiches(mod))
    norms = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: norms.append(e) if getattr(
        getattr(e, "op", None), "name", "") == "relax.nn.layer_norm" else None)
    # the downsampling's beta is in its conv's bias; the second norm's, read twice, stays
    assert sorted(float(np.abs(constant_value(n.args[2])).max()) for n in norms) == [0.0, 0.5]
    partitioned, report = _partition(model, x)
    _whole(report)
    expected = torch_forward(model, x)
    assert_close(build_and_run(partitioned, x), expected, 1e-4)
    half = torch_forward(model.half(), torch.from_numpy(x).half()).astype(np.float32)
    model.float()
    exact = torch_forward(model.double(), torch.from_numpy(x).double())
    assert sqnr(build_and_run(partitioned, x, precision="fp16"), exact) >= \
        sqnr(half, exact) - 3.0


def test_a_layer_norm_without_center_keeps_its_conv_bias():
    """center=False: the layer norm ignores its beta, so no W beta joins the conv's bias."""
    import tvm
    from tvm import relax

    from accel_codegen.compiler import rewrites
    from accel_codegen.compiler.relax_exprs import constant_value

    c = 8
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, 4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.layer_norm(
                x, relax.const(np.ones(c, np.float32)), relax.const(np.full(c, 0.5, np.float32)),
                axes=[1], center=False))
            z = bb.emit(relax.op.nn.conv2d(y, relax.const(np.ones((c, c, 1, 1), np.float32))))
            out = bb.emit_output(relax.op.add(z, relax.const(np.zeros((1, c, 1, 1), np.float32))))
        bb.emit_func_output(out)
    mod = rewrites.layer_norm_shifts_into_convs(bb.get())
    adds = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: adds.append(e) if getattr(
        getattr(e, "op", None), "name", "") == "relax.add" else None)
    assert [float(np.abs(constant_value(a.args[1])).max()) for a in adds] == [0.0]


# --- preconditions that keep a rewrite exact ----------------------------------------------------
def _relax_run(mod, *arrays):
    import tvm
    from tvm import relax
    vm = relax.VirtualMachine(relax.build(relax.transform.LegalizeOps()(mod), "llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_gelu_formula_whose_half_broadcasts_to_a_higher_rank_keeps_its_shape():
    """A [1, 1] 0.5 makes x * (erf(x / sqrt 2) + 1) * 0.5 of [4] a [1, 4]: gelu(x) would be [4]."""
    import tvm
    from tvm.script import relax as R
    from accel_codegen.compiler import rewrites

    @tvm.script.ir_module
    class Gelu:
        @R.function
        def main(x: R.Tensor((4,), "float32")):
            with R.dataflow():
                a = R.divide(x, R.const(np.sqrt(2.0), "float32"))
                c = R.add(R.erf(a), R.const(1.0, "float32"))
                e = R.multiply(R.multiply(x, c), R.const(np.full((1, 1), 0.5, "float32")))
                R.output(e)
            return e

    x = np.linspace(-2, 2, 4).astype("float32")
    assert_same(_relax_run(rewrites.gelu_from_erf(Gelu), x), _relax_run(Gelu, x))


def test_a_take_at_a_negative_index_in_fast_mode_is_no_slice():
    """take's "fast" mode reads in bounds only: a negative index is not clipped to 0 here."""
    import tvm
    from tvm.script import relax as R
    from accel_codegen.compiler import rewrites

    @tvm.script.ir_module
    class Take:
        @R.function
        def main(x: R.Tensor((2, 3, 4), "float32")):
            with R.dataflow():
                y = R.add(x, x)
                e = R.take(y, R.const(-1, "int64"), axis=1)
                R.output(e)
            return e

    assert "strided_slice" not in rewrites.sliced_takes(Take).script()


class LastSteps(torch.nn.Module):
    """Negative indices as torch reads them, from the end: an LSTM's last step for a head
    (`out[:, -1]`), the token before it of a dense layer's output, and a gather of token ids
    with one negative (an embedding of the last id)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.proj = torch.nn.Linear(8, 16)
        self.register_buffer("ids", torch.tensor([0, -1, 3]))

    def forward(self, x):
        steps = self.proj(x)
        picked = steps[:, self.ids].sum(1)
        return self.lstm(x)[0][:, -1] + steps[:, -2] + picked


def test_negative_indices_read_from_the_end_as_in_torch():
    """torch's frontend gathers with take(mode="fast"); made checked, a negative index must wrap
    (it was clamped: `x[:, -1]` read `x[:, 0]`, a wrong answer on every LSTM head)."""
    model, x = LastSteps().eval(), _input((1, 6, 8), 11)
    partitioned, _ = _partition(model, x)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


# --- a constant scale and shift after a conv (PP-LCNetV3's learnable affine blocks) -----------

class ConvAffine(torch.nn.Module):
    """conv + bias, then x * c + d per channel, then hardswish; a depthwise conv without bias,
    then 0.25 + 1.5 * x; and a conv whose output a second op also reads (not folded)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.shared = torch.nn.Conv2d(8, 8, 1)
        self.register_buffer("c", torch.linspace(0.5, 2, 8).reshape(1, 8, 1, 1))
        self.register_buffer("d", torch.linspace(-1, 1, 8).reshape(1, 8, 1, 1))

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.conv(x) * self.c + self.d)
        y = 0.25 + 1.5 * self.dw(y)  # the constants first (Paddle's scale * x + bias)
        z = self.shared(y)
        return (z * 2.0 + 1.0) + z


def test_a_constant_scale_and_shift_fold_into_the_conv():
    import tvm

    from accel_codegen.compiler import rewrites

    torch.manual_seed(0)
    model, x = ConvAffine().eval(), _input((1, 3, 10, 12), 0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = rewrites.affines_into_convs(tvm.relax.transform.BindParams("main", params)(mod))
    ops = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: ops.append(e.op.name) if hasattr(
        getattr(e, "op", None), "name") else None)
    assert ops.count("relax.multiply") == 2  # hardswish's x * relu6(x + 3); the shared conv's
    assert_close(_relax_run(mod, x), torch_forward(model, x), 1e-5)
    partitioned, report = _partition(model, x)
    _whole(report)
    # the two folded scale/shifts are their convs' layers, not layers of their own
    layers = {r.key: r.primitive for r in report.offloaded}
    assert layers["f0.0"] == "accel.conv2d_bias_hardswish" and \
        layers["f0.1"] == "accel.conv2d_bias", str(report)
    expected = torch_forward(model, x)
    assert_close(build_and_run(partitioned, x), expected, 1e-4)
    int8, _ = _partition(model, x, precision="int8",
                         calibration=[(_input((1, 3, 10, 12), s),) for s in range(1, 5)])
    assert sqnr(build_and_run(int8, x), expected) >= 30


# --- a cast to the type its input has ------------------------------------------------------------

def test_a_cast_to_the_inputs_own_type_is_no_op_on_the_host():
    """skl2onnx begins its graphs with a Cast to float of the float input: nothing to compute,
    it was a host op before the first function."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    w = np.random.default_rng(3).standard_normal((8, 4, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
         helper.make_node("Conv", ["xf", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "cast_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod, params = from_onnx(model)
    partitioned = ac.partition_for_accel(mod, params)
    _whole(ac.partition_report(partitioned))
    x = _input((1, 4, 8, 8), 4)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close(build_and_run(partitioned, x), expected, 1e-5)


# --- 1-D convolutions -----------------------------------------------------------------------------

class KeywordSpotter(torch.nn.Module):
    """A 1-D conv network over [N, C, L] (audio features, a TCN): a biased conv + batch norm +
    ReLU, a max pool, a dilated depthwise conv without bias, a strided conv whose output is
    also read by a residual add (its bias then not folded: two readers), a global average."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv1d(20, 32, 5, padding=2),
                                        torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                                        torch.nn.MaxPool1d(2))
        self.depthwise = torch.nn.Conv1d(32, 32, 3, padding=2, dilation=2, groups=32, bias=False)
        self.strided = torch.nn.Conv1d(32, 48, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(48, 6)
        with torch.no_grad():
            self.stem[1].running_mean.uniform_(-0.5, 0.5)
            self.stem[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.strided(torch.relu(self.depthwise(self.stem(x))))
        y = y + torch.sigmoid(y)
        return self.head(y.mean(2))


@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_1d_convolutions_are_the_2d_convolutions_of_one_row(source, tmp_path):
    model, x = KeywordSpotter().eval(), _input((1, 20, 64), 3)
    if source == "onnx":
        mod, params = from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / "k.onnx"))
        partitioned = ac.partition_for_accel(mod, params)
    else:
        partitioned, _ = _partition(model, x)
    report = ac.partition_report(partitioned)
    _whole(report)
    ops = [op.op for op in report.ops]
    assert "relax.nn.conv1d" not in ops and ops.count("relax.nn.conv2d") == 3, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", None)])
def test_1d_convolutions_in_fp16_and_int8(precision, min_db, tmp_path):
    model, x = KeywordSpotter().eval(), _input((1, 20, 64), 3)
    calibration = [(_input(x.shape, seed),) for seed in range(4, 8)]
    options = {"calibration": calibration} if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    _check_sqnr(model, x, build_and_run(partitioned, x), precision, min_db, calibration,
                tmp_path)


class TokenMeans(torch.nn.Module):
    """Means over a 3-D tensor's axes: a text encoder's mean pooling of [N, T, C] tokens (an
    MLP-Mixer's head), kept as [N, 1, C], as a sum over the tokens divided by their count
    (sentence-transformers'), and the mean over the last axis of [N, C, L]."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(12, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        tokens = self.norm(self.embed(x))                     # [1, 10, 16]
        pooled = tokens.mean(1, keepdim=True)                  # [1, 1, 16]
        channels = tokens.transpose(1, 2).mean(-1)             # [1, 16]
        summed = tokens.sum(1) / 10                            # sentence-transformers' pooling
        return torch.relu(pooled.flatten(1) + channels) + summed


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_means_over_tokens_and_the_last_axis_are_pdp_averages(precision):
    model, x = TokenMeans().eval(), _input((1, 10, 12), 5)
    partitioned, report = _partition(model, x, precision=precision)
    _whole(report)
    assert [op.primitive for op in report.ops if op.op in ("relax.mean", "relax.sum")] == \
        ["accel.global_avgpool"] * 3, str(report)
    y, expected = build_and_run(partitioned, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    else:
        assert sqnr(y, expected) >= 55.0


# --- group and instance norms ---------------------------------------------------------------------

class GroupNorms(torch.nn.Module):
    """A diffusion / detection head's GroupNorm + SiLU, an affine and a plain InstanceNorm2d (a
    style-transfer block), and a GroupNorm over a 1-D conv's [N, C, L]."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.group = torch.nn.GroupNorm(4, 16)
        self.instance = torch.nn.InstanceNorm2d(16, affine=True)
        self.plain = torch.nn.InstanceNorm2d(16)
        self.conv1d = torch.nn.Conv1d(16, 8, 3, padding=1)
        self.group1d = torch.nn.GroupNorm(2, 8)
        with torch.no_grad():
            for norm in (self.group, self.instance, self.group1d):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        y = self.plain(torch.relu(self.instance(torch.nn.functional.silu(
            self.group(self.conv(x))))))
        return self.group1d(self.conv1d(y.flatten(2)))


@pytest.mark.parametrize("batch", [1, 2])
def test_group_and_instance_norms_are_layer_norms_of_their_groups(batch):
    model, x = GroupNorms().eval(), _input((batch, 3, 8, 10), 13)
    partitioned, report = _partition(model, x)
    _whole(report)
    ops = [op.op for op in report.ops]
    assert "relax.nn.group_norm" not in ops and "relax.nn.instance_norm" not in ops
    assert ops.count("relax.nn.layer_norm") == 4, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


def test_group_and_instance_norms_from_onnx(tmp_path):
    """torch's ONNX export: InstanceNormalization (of the groups, reshaped, with a scale of ones
    and a bias of zeros, then the affine per channel), which TVM imports as its formula (mean,
    subtract, variance, sqrt, divide): read back as layer norms, whole."""
    model, x = GroupNorms().eval(), _input((1, 3, 8, 10), 13)
    mod, params = from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / "g.onnx"))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    _whole(report)
    assert [op.op for op in report.ops].count("relax.nn.layer_norm") == 4, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", None)])
def test_group_and_instance_norms_in_fp16_and_int8(precision, min_db, tmp_path):
    model, x = GroupNorms().eval(), _input((1, 3, 8, 10), 13)
    calibration = [(_input(x.shape, seed),) for seed in range(14, 18)]
    options = {"calibration": calibration} if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    _check_sqnr(model, x, build_and_run(partitioned, x), precision, min_db, calibration,
                tmp_path)


# --- a map of one channel applied to every channel ----------------------------------------------

class SpatialGate(torch.nn.Module):
    """A spatial attention gate: features times the sigmoid of a one-channel map (BiSeNet's,
    CBAM's second half), plus a one-channel bias map added."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.gate = torch.nn.Conv2d(12, 1, 3, padding=1)
        self.shift = torch.nn.Conv2d(3, 1, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y * torch.sigmoid(self.gate(y)) + self.shift(x)


@pytest.mark.parametrize("precision, min_db", [("fp32", None), ("fp16", 55.0), ("int8", None)])
def test_a_one_channel_map_is_copied_to_the_channels_by_a_convolution(precision, min_db,
                                                                       tmp_path):
    model, x = SpatialGate().eval(), _input((1, 3, 10, 12), 19)
    calibration = [(_input(x.shape, seed),) for seed in range(20, 24)]
    _whole_and_close(model, x, calibration, precision, min_db, tmp_path)


# --- reductions over the channels -----------------------------------------------------------

class ChannelPools(torch.nn.Module):
    """CBAM's spatial attention (the mean and the max over the channels, a 7x7 conv, a
    sigmoid gate; torch.max's values along a dim beside torch.amax), plus a channel sum; 7
    channels, so the max's halves overlap."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 7, 3, padding=1)
        self.gate = torch.nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        pooled = torch.cat([y.mean(1, keepdim=True), y.amax(1, keepdim=True)], 1)
        return y * torch.sigmoid(self.gate(pooled)) + y.sum(1, keepdim=True) + \
            torch.max(y, 1)[0][:, None]


@pytest.mark.parametrize("precision, min_db", [("fp32", None), ("fp16", 55.0), ("int8", None)])
def test_channel_means_maxima_and_sums_run_on_the_engines(precision, min_db, tmp_path):
    """Before: the mean, the max and the sum over axis 1 on the host ('the PDP averages H and
    W only', 'no accelerator primitive'), torch.max a topk, 2 functions. fp32 measured
    1.4e-7 of the output scale, fp16 69.1 dB, int8 25.1 dB."""
    model, x = ChannelPools().eval(), _input((1, 3, 8, 10), 31)
    calibration = [(_input(x.shape, seed),) for seed in range(32, 36)]
    _whole_and_close(model, x, calibration, precision, min_db, tmp_path)


class ArgMax(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.max(x, 1)
        return values + indices.float()


def test_torch_max_along_a_dim_gives_its_values_and_indices():
    """torch.max(x, dim) imports as max and argmax (frontend._extreme_along): the values on
    the accelerator, the indices (an argmax) on the host, both as torch gives them."""
    x = _input((1, 5, 4, 6), 37)
    partitioned, report = _partition(ArgMax(), x)
    assert [op.op for op in report.host] == ["relax.argmax", "relax.astype"], report
    assert sum(op.op == "relax.maximum" for op in report.offloaded) == 3  # 5 -> 3 -> 2 -> 1
    assert_close(build_and_run(partitioned, x), torch_forward(ArgMax(), x), 1e-6)


class LayerNorm2d(torch.nn.Module):
    """detectron2's and SAM's LayerNorm2d (ConvNeXt's channels_first LayerNorm): the formula
    over axis 1 of NCHW data, x - u written twice, the affine's weight[:, None, None]."""

    def __init__(self, channels=8):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(channels) * 0.1)

    def forward(self, x):
        x = self.conv(x)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_channels_first_layer_norm_formula_is_one_layer_norm(precision):
    """Before: its means convolutions, the rest (x - u, the power, the sqrt, the divide) on
    the host, 10 of 17 operators in 3 functions; now one layer_norm over axis 1."""
    model, x = LayerNorm2d().eval(), _input((1, 3, 6, 7), 41)
    partitioned, report = _partition(model, x, precision=precision)
    _whole(report)
    assert [op.primitive for op in report.ops if op.op == "relax.nn.layer_norm"] == \
        ["accel.layer_norm"], report
    y, expected = build_and_run(partitioned, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-5)
    else:
        assert sqnr(y, expected) >= 55.0


class Cbam(torch.nn.Module):
    """A whole CBAM block: channel attention (a shared MLP over the global average and the
    global max, adaptive pools of output 1, 12x12 wider than the PDP's window), then spatial
    attention (the channel mean and max, a 7x7 conv)."""

    def __init__(self, channels=16):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.mlp = torch.nn.Sequential(torch.nn.Conv2d(channels, 4, 1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(4, channels, 1))
        self.spatial = torch.nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        pool = torch.nn.functional
        y = y * torch.sigmoid(self.mlp(pool.adaptive_avg_pool2d(y, 1)) +
                              self.mlp(pool.adaptive_max_pool2d(y, 1)))
        maps = torch.cat([y.mean(1, keepdim=True), torch.max(y, 1, keepdim=True)[0]], 1)
        return y * torch.sigmoid(self.spatial(maps))


@pytest.mark.parametrize("precision, min_db", [("fp32", None), ("fp16", 55.0), ("int8", None)])
def test_a_cbam_block_is_one_function(precision, min_db, tmp_path):
    """Before: adaptive_max_pool2d did not import ('Unsupported function types'); its global
    max is a cascade of 6x6 and 2x2 max pools (rewrites.global_max_pools)."""
    model, x = Cbam().eval(), _input((1, 3, 12, 12), 43)
    calibration = [(_input(x.shape, seed),) for seed in range(44, 48)]
    _whole_and_close(model, x, calibration, precision, min_db, tmp_path)


class AdaptiveMax(torch.nn.Module):
    def forward(self, x):
        pool = torch.nn.functional.adaptive_max_pool2d
        return torch.cat([pool(x, k).flatten(1) for k in (1, 2, 3, 5)], 1)


def test_adaptive_max_pools_give_pytorchs_windows():
    """Output sizes that divide the input (1, 2, 3 of 12) are max pools on the PDP; 5 does
    not, and its overlapping windows (PyTorch's floor / ceil bounds) stay on the host."""
    x = _input((1, 4, 12, 12), 49)
    partitioned, report = _partition(AdaptiveMax(), x)
    assert sum(op.op == "relax.nn.max_pool2d" and op.offloaded for op in report.ops) == 4
    assert_same(build_and_run(partitioned, x), torch_forward(AdaptiveMax(), x))


class Squares(torch.nn.Module):
    """An energy feature: a conv's outputs squared (x ** 2 and x.pow(2)) and mixed."""

    def __init__(self):
        super().__init__()
        self.conv, self.mix = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(16, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return self.mix(torch.cat([y ** 2, torch.relu(y).pow(2)], 1))


@pytest.mark.parametrize("precision, min_db", [("fp32", None), ("fp16", 55.0), ("int8", None)])
def test_squares_are_the_sdps_products(precision, min_db, tmp_path):
    """power(x, 2) is x * x, the SDP's element-wise multiplier (no engine has a power: it was a
    host op splitting the function in two)."""
    x = _input((1, 3, 12, 12), 51)
    calibration = [(_input((1, 3, 12, 12), 52 + s),) for s in range(4)]
    _whole_and_close(Squares().eval(), x, calibration, precision, min_db, tmp_path)


# --- a 1x1 conv and the average pool that alone reads it -----------------------------------------

class Transition(torch.nn.Module):
    """DenseNet's transition (batch norm, ReLU, 1x1 conv, 2x2 average pool) after a stem, on an
    odd-sized image (the pool's floor mode drops a row and a column); the conv with a bias."""

    def __init__(self, pool=None, groups=1, kernel=1):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(16), torch.nn.ReLU())
        self.norm = torch.nn.BatchNorm2d(16)
        self.conv = torch.nn.Conv2d(16, 8, kernel, groups=groups)
        self.pool = pool or torch.nn.AvgPool2d(2)

    def forward(self, x):
        return self.pool(self.conv(torch.relu(self.norm(self.stem(x)))))


class SharedTransition(Transition):
    """The conv's output read by the pool and by the output too."""

    def forward(self, x):
        y = self.conv(torch.relu(self.norm(self.stem(x))))
        return self.pool(y), y


def _ops_of(mod):
    import tvm

    ops = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: ops.append(e.op.name) if hasattr(
        getattr(e, "op", None), "name") else None)
    return ops


@pytest.mark.parametrize("pool, groups", [(torch.nn.AvgPool2d(2), 1), (torch.nn.AvgPool2d(2), 2),
                                          (torch.nn.AvgPool2d(3), 1)])
def test_a_1x1_conv_and_the_pool_that_alone_reads_it_are_one_strided_conv(pool, groups):
    import tvm

    from accel_codegen.compiler import rewrites

    model, x = Transition(pool, groups).eval(), _input((1, 3, 9, 11), 0)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = rewrites.pooled_convolutions(tvm.relax.transform.BindParams("main", params)(mod))
    ops = _ops_of(mod)
    assert "relax.nn.avg_pool2d" not in ops and ops.count("relax.nn.conv2d") == 2, ops
    assert_close(_relax_run(mod, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("model", [
    Transition(torch.nn.AvgPool2d(3, 2)),              # overlapping windows: more MACs
    Transition(torch.nn.AvgPool2d(2, padding=1)),      # a padded tap is no conv tap
    Transition(torch.nn.AvgPool2d(2, ceil_mode=True)),  # a partial window at the edge
    Transition(kernel=3),                              # not 1x1
    SharedTransition()], ids=["overlapping", "padded", "ceil", "3x3", "shared"])
def test_a_pool_that_is_no_strided_conv_of_its_1x1_conv_stays(model):
    import tvm

    from accel_codegen.compiler import rewrites

    x = _input((1, 3, 9, 11), 0)
    mod, params = from_pytorch(model.eval(), (torch.from_numpy(x),))
    mod = rewrites.pooled_convolutions(tvm.relax.transform.BindParams("main", params)(mod))
    assert "relax.nn.avg_pool2d" in _ops_of(mod)


def test_a_transition_in_int8_is_one_conv_run_bit_exact_with_the_reference(tmp_path):
    """int8 alone takes the rewrite (fp32 keeps the conv + pool chain, whose weights are 4x
    smaller: docs/ptq.md); each int8 run of the build is the NumPy reference's chain on the
    run's own input, code for code."""
    from accel_codegen.sim import reference
    from accel_codegen.sim.ops import Pool
    from accel_codegen.sim.recorder import OtherOp, recording
    from accel_codegen.tools import models

    model, (x,) = models.build_realistic(Transition, (3, 9, 11), seed=0)
    x = x.numpy()
    calibration = [(_input((1, 3, 9, 11), s),) for s in range(1, 9)]
    _, fp32 = _partition(model, x)
    assert "accel.conv2d_bias_avgpool" in {r.primitive for r in fp32.offloaded}, str(fp32)
    int8, report = _partition(model, x, precision="int8", calibration=calibration)
    _whole(report)
    assert {r.primitive for r in report.offloaded} == {
        "accel.conv2d_bn_relu", "accel.batch_norm_relu", "accel.conv2d_bias"}, str(report)
    vm = ac.virtual_machine(ac.build(int8))
    with recording() as runs:
        y = run_main(vm, x)
    int8_runs = [r for r in runs if r.input is not None and r.input.dtype == np.int8 and
                 not any(isinstance(op, OtherOp) for op in r.ops)]
    assert len(int8_runs) >= 2 and not any(isinstance(op, Pool) for r in int8_runs
                                           for op in r.ops)
    for run in int8_runs:
        np.testing.assert_array_equal(run.output, reference.run_chain(run.ops, run.input),
                                      err_msg=run.label)
    _check_sqnr(model, x, y, "int8", None, calibration, tmp_path)
