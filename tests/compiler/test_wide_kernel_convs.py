"""Convolutions whose kernels are wider than the CONV's window (32 taps per side: audio front
ends, a pitch tracker's 512-tap first layer, a constant-Q spectrogram's 256 and 39) as one
convolution of kernel pieces of at most 32 taps over the input's shifted copies stacked on
channels (compiler/rewrites.py, ``wide_kernel_convs``, issue 33).

Each case is checked three ways: the rewritten Relax module alone on the host (LLVM) against
PyTorch, so the rewrite is exact whatever runs it, with no convolution left wider than the
window and every convolution before the pieces' one a copy; the partition, one external
function with nothing on the host (the padding, the one-hot stack of copies and the
convolution all offloaded); and the accelerator's output against PyTorch: fp32 within 1e-4
of the output's scale, fp16 at the suite's fp16 bound, int8 no worse than the same
convolution written by hand as 32-tap pieces over the stacked copies, a kernel the CONV
takes (the pieces share one int32 accumulation and one output converter: no extra
rounding), and than ONNX Runtime's static int8 of the same model. Beside them: groups,
dilation, a 1-D stride beyond the stride register (space-to-depth by layout), int8's copies
keeping the input's codes, a torchcrepe-like front end whole in each precision, and what
stays on the host with its reason."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen._accel_ffi import lib
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import rewritten
from conftest import assert_close, build_and_run, ort_int8_sqnr, sqnr, torch_forward

#: fp16's bound, as tests/compiler/test_exact_rewrites.py's 1-D convolutions in fp16
FP16_DB = 55.0


def _input(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv_relu(dims, cin, cout, kernel, stride, padding, seed=0, **options):
    """conv (1-D or 2-D, with bias) + ReLU, weights from ``seed``."""
    torch.manual_seed(seed)
    conv = (torch.nn.Conv1d if dims == 1 else torch.nn.Conv2d)(cin, cout, kernel, stride,
                                                               padding, **options)
    return torch.nn.Sequential(conv, torch.nn.ReLU()).eval()


def _same(kernel):
    """PyTorch's 'same' padding of an odd kernel, and the nearest for an even one (torch
    refuses padding='same' with a stride)."""
    return kernel // 2


def _convs(mod):
    """(weight shape, strides, padding, groups, weight) of every conv2d of ``mod``'s main, the
    output's last (post order)."""
    import tvm

    from accel_codegen.compiler.layer import constant_value

    found = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if getattr(
        getattr(e, "op", None), "name", "") == "relax.nn.conv2d" else None)
    return [(tuple(int(v) for v in c.args[1].ty.shape.values),
             tuple(int(v) for v in c.attrs.strides), tuple(int(v) for v in c.attrs.padding),
             int(c.attrs.groups), constant_value(c.args[1])) for c in found]


def _copies(weight):
    """Whether a conv of ``weight`` only copies: one weight of 1 per output channel."""
    rows = weight.reshape(weight.shape[0], -1)
    return bool(np.all(np.count_nonzero(rows, axis=1) == 1) and np.all(rows.max(axis=1) == 1))


def _host_run(mod, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(relax.build(relax.transform.LegalizeOps()(mod), "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


# (dims, cin, cout, kernel, stride, padding, input shape)
CASES = [
    (1, 2, 8, 33, 1, 0, (1, 2, 100)),
    (1, 2, 8, 33, 2, "same", (2, 2, 101)),
    (1, 3, 8, 39, 1, "same", (1, 3, 120)),
    (1, 3, 8, 39, 4, 0, (2, 3, 157)),
    (1, 2, 6, 64, 2, "same", (1, 2, 200)),
    (1, 1, 8, 256, 16, 0, (1, 1, 1024)),
    (1, 1, 8, 256, 4, "same", (2, 1, 600)),
    (1, 1, 8, 512, 4, "same", (1, 1, 1024)),
    (1, 1, 4, 512, 16, 0, (2, 1, 1100)),
    (2, 2, 4, (3, 33), 1, (1, 16), (1, 2, 6, 80)),
    (2, 1, 4, (3, 39), (1, 4), (1, 19), (2, 1, 4, 120)),
    (2, 1, 4, (2, 512), (1, 8), (0, 256), (1, 1, 3, 1100)),
    (2, 2, 4, (3, 64), (1, 2), (1, 32), (2, 2, 5, 150)),
    (2, 1, 4, (5, 256), (1, 4), (2, 128), (1, 1, 6, 400)),
    (2, 2, 4, (40, 3), (2, 1), (20, 1), (1, 2, 90, 10)),    # taller than the window
    (2, 2, 4, (33, 35), 1, 0, (2, 2, 40, 50)),              # both sides
]


def _case_id(case):
    dims, cin, cout, kernel, stride, padding, shape = case
    return f"conv{dims}d-k{kernel}-s{stride}-p{padding}-n{shape[0]}".replace(" ", "")


def _model(case, seed=0, kernel=None):
    dims, cin, cout, k, stride, padding, _ = case
    k = k if kernel is None else kernel
    pad = _same(k) if padding == "same" else padding
    return _conv_relu(dims, cin, cout, k, stride, pad, seed)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_rewrite_alone_gives_pytorchs_convolution(case):
    """The rewritten module on the host: no conv2d wider than the window, one conv2d that
    sums (over the stacked copies: input channels m times the original's), the others
    copies (the stack, its padding), PyTorch's values."""
    model, x = _model(case), _input(case[-1], 1)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    result = rewritten(mod, params)
    convs = _convs(result)
    limit = int(lib.ACCEL_MAX_CONV_KERNEL)
    assert all(max(c[0][2:]) <= limit for c in convs), [c[:4] for c in convs]
    out_ch, in_ch = convs[-1][0][:2]
    assert out_ch == case[2] and in_ch % case[1] == 0 and in_ch > case[1], convs[-1][:4]
    assert all(_copies(c[4]) for c in convs[:-1]), [c[:4] for c in convs]
    assert_close(_host_run(result, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_a_wide_kernel_runs_whole_on_the_accelerator_in_fp32(case):
    model, x = _model(case), _input(case[-1], 1)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params)
    _whole(ac.partition_report(partitioned))
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


@pytest.mark.parametrize("case", [CASES[i] for i in (0, 3, 7, 8, 12, 15)], ids=_case_id)
def test_a_wide_kernel_in_fp16(case):
    model, x = _model(case), _input(case[-1], 1)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision="fp16")
    _whole(ac.partition_report(partitioned))
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= FP16_DB


def _int8_sqnr(model, x, calibration):
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    report = ac.partition_report(partitioned)
    return sqnr(build_and_run(partitioned, x), torch_forward(model, x)), report


def _stacked(x, kernel, stride, padding, piece=32):
    """The definition in NumPy, for a kernel wider than ``piece`` along W only: x padded as
    the conv pads it, then X'[n, j C + c, h, t] = x[n, c, h, t + piece j] (0 past the end)
    for j < m = ceil(K / piece), as wide as the conv over them needs."""
    kh, kw = kernel
    (sh, sw), (ph, pw) = stride, padding
    m = -(-kw // piece)
    padded = np.pad(x, [(0, 0), (0, 0), (0, 0), (pw, pw + m * piece)])
    out_w = (x.shape[3] + 2 * pw - kw) // sw + 1
    span = (out_w - 1) * sw + piece
    return np.concatenate([padded[..., piece * j:piece * j + span] for j in range(m)], axis=1)


def _pieces_model(model, piece=32):
    """The convolution of the definition's pieces: W'[o, j C + c, u, b] = W[o, c, u, piece j
    + b] (0 past K), kernel ``piece`` wide, over _stacked's X': a 32-tap convolution with the
    wide one's weights, values and output, written by hand."""
    conv = model[0]
    weight = conv.weight.detach().numpy()
    weight = weight if weight.ndim == 4 else weight[:, :, None, :]
    out_ch, channels, kh, kw = weight.shape
    m = -(-kw // piece)
    grown = np.pad(weight, [(0, 0), (0, 0), (0, 0), (0, m * piece - kw)])
    pieces = grown.reshape(out_ch, channels, kh, m, piece).transpose(0, 3, 1, 2, 4)
    pieces = pieces.reshape(out_ch, m * channels, kh, piece)
    stride = tuple(conv.stride) if len(conv.stride) == 2 else (1, conv.stride[0])
    narrow = torch.nn.Conv2d(m * channels, out_ch, (kh, piece), stride,
                             (conv.padding[0] if kh > 1 else 0, 0))
    with torch.no_grad():
        narrow.weight.copy_(torch.from_numpy(np.ascontiguousarray(pieces)))
        narrow.bias.copy_(conv.bias)
    return torch.nn.Sequential(narrow, torch.nn.ReLU()).eval()


def _as_4d(x):
    return x if x.ndim == 4 else x[:, :, None, :]


INT8_CASES = [CASES[i] for i in (0, 3, 7, 8, 12)]


@pytest.mark.parametrize("case", INT8_CASES, ids=_case_id)
def test_a_wide_kernel_in_int8_loses_nothing_to_the_pieces(case, tmp_path):
    """Against the same convolution written by hand as 32-tap pieces over the stacked copies
    (a model whose input is X', weights W': the same values and output, a kernel the CONV
    takes): the wide model's int8 SQNR is that one's (within 0.5 dB: its calibration sees x,
    the other's X'), and no lower than ONNX Runtime's static int8 of the wide model (within 1
    dB, the suite's margin)."""
    x = _input(case[-1], 1)
    calibration = [(_input(x.shape, seed),) for seed in range(4, 8)]
    model = _model(case)
    ours, report = _int8_sqnr(model, x, calibration)
    _whole(report)
    conv = model[0]
    kernel = tuple(conv.weight.shape[2:]) if case[0] == 2 else (1, conv.weight.shape[2])
    stride = tuple(conv.stride) if case[0] == 2 else (1, conv.stride[0])
    padding = tuple(conv.padding) if case[0] == 2 else (0, conv.padding[0])
    pieces = _pieces_model(model)

    def stack(a):
        return _stacked(_as_4d(a), kernel, stride, padding)

    by_hand = ac.partition_for_accel(
        *from_pytorch(pieces, (torch.from_numpy(stack(x)),)), precision="int8",
        calibration=[(stack(c),) for (c,) in calibration])
    _whole(ac.partition_report(by_hand))
    y = build_and_run(by_hand, stack(x))
    expected = torch_forward(model, x)
    theirs = sqnr(y.reshape(expected.shape), expected)
    assert_close(torch_forward(pieces, stack(x)).reshape(expected.shape), expected, 1e-5)
    baseline = ort_int8_sqnr(model, x, calibration, tmp_path)
    assert ours >= theirs - 0.5 and ours >= baseline - 1.0, (ours, theirs, baseline)


def test_in_int8_every_run_before_the_pieces_moves_the_inputs_codes(tmp_path):
    """A 64-tap kernel strided 16 over a 2-D map: the one-hot stack of copies and the one-hot
    space-to-depth conv that wide_stride_convs puts before the pieces' conv keep the input's
    quantisation (a conv that only copies keeps it: int8_plan._copies_codes), so x is
    rounded once, and the one converter is the last conv's. The calibrated range of a copy
    drifts from the input's: rounded again at it, this output lost 1 dB."""
    model = _conv_relu(2, 2, 6, (3, 64), (1, 16), (1, 0))
    x = _input((2, 2, 5, 400), 0)
    calibration = [(_input(x.shape, seed),) for seed in range(4, 8)]
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    runs = ac.program_of(partitioned)["functions"][0]["runs"]
    primitives = [run["primitive"] for run in runs]
    assert primitives.count("accel.conv2d") == 2, primitives  # the two copying convs
    first = runs[0]["quant"]["input"]
    assert all(run["quant"]["output"] == first for run in runs[:-1]), runs
    ours = sqnr(build_and_run(partitioned, x), torch_forward(model, x))
    assert ours >= ort_int8_sqnr(model, x, calibration, tmp_path) - 1.0


def test_a_grouped_wide_kernel_keeps_its_groups():
    """Depthwise and two groups: the stack is shuffled so each group's copies are together, and
    the one conv keeps the groups."""
    for groups, cin, cout in ((4, 4, 4), (2, 4, 6)):
        model = _conv_relu(1, cin, cout, 64, 1, 32, groups=groups)
        x = _input((2, cin, 90), 2)
        mod, params = from_pytorch(model, (torch.from_numpy(x),))
        convs = _convs(rewritten(mod, params))
        assert convs[-1][3] == groups and all(_copies(c[4]) for c in convs[:-1]), \
            [c[:4] for c in convs]
        partitioned = ac.partition_for_accel(mod, params)
        _whole(ac.partition_report(partitioned))
        assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


def test_a_dilated_wide_kernel_shifts_its_copies_by_the_dilated_piece():
    model = _conv_relu(1, 2, 4, 33, 1, 32, dilation=2)
    x = _input((1, 2, 140), 3)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params)
    _whole(ac.partition_report(partitioned))
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


class PitchFront(torch.nn.Module):
    """A torchcrepe-like front: 1024 samples padded by 254 each side, conv1d 1 -> 64 of 512
    taps stride 4, batch norm, ReLU, a max pool of 2; then a second, narrow layer."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(1, 64, 512, 4)
        self.bn1 = torch.nn.BatchNorm1d(64)
        self.conv2 = torch.nn.Conv1d(64, 16, 32, 1, 16)
        with torch.no_grad():
            self.bn1.running_mean.uniform_(-0.2, 0.2)
            self.bn1.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        x = torch.nn.functional.pad(x, (254, 254))
        x = torch.nn.functional.max_pool1d(torch.relu(self.bn1(self.conv1(x))), 2)
        return torch.relu(self.conv2(x))


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_pitch_trackers_front_runs_whole(precision, tmp_path):
    torch.manual_seed(0)
    model = PitchFront().eval()
    x = _input((1, 1, 1024), 5)
    options = {}
    if precision == "int8":
        options["calibration"] = [(_input(x.shape, seed),) for seed in range(6, 10)]
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision=precision, **options)
    _whole(ac.partition_report(partitioned))
    y, expected = build_and_run(partitioned, x), torch_forward(model, x)
    if precision == "fp32":
        assert_close(y, expected, 1e-4)
    elif precision == "fp16":
        assert sqnr(y, expected) >= FP16_DB
    else:
        baseline = ort_int8_sqnr(model, x, options["calibration"], tmp_path)
        assert sqnr(y, expected) >= baseline - 1.0, (sqnr(y, expected), baseline)


@pytest.mark.parametrize("kernel, stride, channels, padding, length", [
    (400, 160, 1, 0, 2000),    # a 400-tap filter bank's hop of 160: beyond any phase factor
    (256, 256, 1, 0, 4410),    # Basic Pitch's constant-Q hop: frames as channels
    (256, 64, 3, 100, 3000),   # three channels, a padding
])
def test_a_1d_stride_beyond_the_register_is_space_to_depth_by_layout(kernel, stride, channels,
                                                                     padding, length):
    """S >= K / 32 beyond the stride register: x read as [N, C, O', S], transposed, one
    stride-1 conv of ceil(K / S) taps over the C S phases; no slice stack, no one-hot conv."""
    model = _conv_relu(1, channels, 4, kernel, stride, padding)
    x = _input((2, channels, length), 4)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    convs = _convs(rewritten(mod, params))
    taps = -(-kernel // stride)
    assert convs[-1][0] == (4, channels * stride, 1, taps), [c[:4] for c in convs]
    assert all(c[0][1:] == (1, 1, 1) for c in convs[:-1]), [c[:4] for c in convs]  # paddings
    partitioned = ac.partition_for_accel(mod, params)
    _whole(ac.partition_report(partitioned))
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


def test_a_wide_kernel_no_piece_width_can_cut_stays_on_the_host_with_its_reason():
    """A 2-D map (H > 1) strided 160 along W: no phase factor within the stride register
    divides 160 and space-to-depth by layout takes 1-D data only, so the conv stays on the
    host, saying why."""
    model = _conv_relu(2, 1, 4, (2, 400), (1, 160), 0)
    x = _input((1, 1, 4, 2000), 4)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(ac.partition_for_accel(mod, params))
    convs = [op for op in report.host if op.op == "relax.nn.conv2d"]
    assert len(convs) == 1 and "relax.nn.conv2d" not in [op.op for op in report.offloaded], \
        str(report)
    assert "kernel_w = 400 is outside [1, 32]" in convs[0].reason
