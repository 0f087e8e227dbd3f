"""Transposed convolutions and nearest upsampling on the accelerator (issue 33, item 5): a CONV
of the phase kernels (or one BDMA copy per phase) then the RUBIK engine's contract, as NVDLA
runs a deconvolution. Against PyTorch in fp32, fp16 and int8; the estimate equals the profiled
run; what the two runs cannot compute exactly (and nv_small, which has no RUBIK) stays on the
host with its reason."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen.tools.estimation import estimate
from accel_codegen.compiler.frontend import from_pytorch
from conftest import assert_close, assert_same, build_and_run, sqnr, torch_forward


def _input(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _partition(model, x, source="pytorch", tmp_path=None, **options):
    """The model partitioned from PyTorch, or from its ONNX export (written in ``tmp_path``),
    and its report."""
    if source == "onnx":
        from accel_codegen.compiler.frontend import export_onnx, from_onnx

        mod, params = from_onnx(export_onnx(model.eval(), (torch.from_numpy(x),),
                                            tmp_path / "model.onnx"))
    else:
        mod, params = from_pytorch(model.eval(), (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, **options)
    return partitioned, ac.partition_report(partitioned)


class Neck(torch.nn.Module):
    """A DB head and an FPN's upsampling: transposed convolutions (kernel 2 and 4, with and
    without bias, batch norm, an activation, groups, output_padding) and nearest x2 / x(2, 3)
    upsampling beside an add."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(6, 8, 3, padding=1)
        self.up1 = torch.nn.ConvTranspose2d(8, 8, 2, 2)
        self.bn = torch.nn.BatchNorm2d(8)
        self.up2 = torch.nn.ConvTranspose2d(8, 4, 4, 2, padding=1, bias=False)
        self.grouped = torch.nn.ConvTranspose2d(8, 8, 3, 2, padding=1, output_padding=1,
                                                groups=4)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        z = torch.relu(self.bn(self.up1(y))) + F.interpolate(y, scale_factor=2, mode="nearest")
        wide = F.interpolate(self.grouped(y), scale_factor=(2, 3), mode="nearest")
        return torch.sigmoid(self.up2(z)), wide


def _neck():
    torch.manual_seed(0)
    model = Neck().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model, _input((1, 6, 5, 7), 0)


def _outputs(partitioned, x):
    """Every output of the built module's main on x."""
    import tvm

    vm = ac.virtual_machine(ac.build(partitioned))
    result = vm["main"](tvm.runtime.tensor(x))
    return [t.numpy() for t in result] if not hasattr(result, "numpy") else [result.numpy()]


def _torch(model, x):
    with torch.no_grad():
        return [t.numpy() for t in model(torch.from_numpy(x))]


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def test_transposed_convolutions_and_upsampling_run_whole_in_fp32():
    model, x = _neck()
    partitioned, report = _partition(model, x)
    _whole(report)
    primitives = {op.primitive for op in report.offloaded
                  if op.op in ("relax.nn.conv2d_transpose", "relax.image.resize2d")}
    assert any(p.startswith("accel.conv2d_transpose_bias_bn_relu") for p in primitives), primitives
    assert "accel.upsample_nearest" in primitives, primitives
    out = _outputs(partitioned, x)
    for actual, expected, what in zip(out, _torch(model, x), ("head", "wide")):
        assert_close(actual, expected, what=what)


def test_the_estimate_is_the_profiled_run_with_rubik_runs():
    model, x = _neck()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = estimate(mod, params, config="nv_full")
    partitioned = ac.partition_for_accel(mod, params, config="nv_full")
    with ac.profile() as prof:
        _outputs(partitioned, x)
    assert [(layer.label, layer.cycles, layer.bytes_read, layer.bytes_written)
            for layer in report.layers] == \
        [(r.label, r.cycles, r.bytes_read, r.bytes_written) for r in prof.records]
    contracts = [layer for layer in report.layers if layer.label.split()[0].endswith("r")]
    assert len(contracts) == 5 and all(layer.engines == "RUBIK" for layer in contracts), \
        [(layer.label, layer.engines) for layer in report.layers]
    assert all(layer.cycles > 0 for layer in contracts)


class Upsample(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="nearest") * 1.0 + 0.5


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_nearest_upsampling_moves_codes_bit_for_bit(precision):
    """The copies and the contract move values: fp16 and int8 upsample exactly what the
    input's conversion gave (x * 1 + 0.5 keeps the output a layer's, not the input's)."""
    x = _input((1, 3, 4, 5), 1)
    options = {"calibration": [(x,)]} if precision == "int8" else {}
    partitioned, report = _partition(Upsample(), x, precision=precision, **options)
    _whole(report)
    out = build_and_run(partitioned, x)
    # each 2 x 2 block is one value
    assert_same(out[..., ::2, ::2], out[..., 1::2, 1::2])
    assert_same(out[..., ::2, 1::2], out[..., 1::2, ::2])
    assert sqnr(out, torch_forward(Upsample(), x)) >= (60 if precision == "fp16" else 35)


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", 30.0)])
def test_the_neck_in_fp16_and_int8(precision, min_db):
    model, x = _neck()
    options = {"calibration": [(_input(x.shape, seed),) for seed in range(6, 9)]} \
        if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    out = _outputs(partitioned, x)
    for actual, expected in zip(out, _torch(model, x)):
        assert sqnr(actual, expected) >= min_db


class Refused(torch.nn.Module):
    """What the CONV + contract cannot compute exactly."""

    def __init__(self):
        super().__init__()
        self.dilated = torch.nn.ConvTranspose2d(4, 4, 3, 2, dilation=2, bias=False)
        self.odd = torch.nn.ConvTranspose2d(4, 4, 3, 2, bias=False)          # 11 rows: not a multiple of 2

    def forward(self, x):
        return (self.dilated(x), self.odd(x),
                F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),  # runs
                F.interpolate(x, size=(7, 9), mode="nearest"),
                F.interpolate(x, scale_factor=2, mode="nearest"))


def test_what_the_contract_cannot_compute_stays_on_the_host_with_its_reason():
    x = _input((1, 4, 5, 6), 2)
    _, report = _partition(Refused(), x)
    reasons = {(op.op, op.reason) for op in report.host}
    assert ("relax.nn.conv2d_transpose", "conv2d_transpose with dilation [2, 2]: the phase "
            "kernels of NVDLA's deconvolution are undilated") in reasons, str(report)
    assert ("relax.nn.conv2d_transpose", "conv2d_transpose of 5x6 gives 11x13, not a multiple "
            "of its stride: the RUBIK contract would write 12x14 (a crop it does not do)") \
        in reasons, str(report)
    assert any(op == "relax.image.resize2d" and "not an integer scale" in reason
               for op, reason in reasons), str(report)
    # the integer nearest one runs, and the bilinear one with align_corners as a dense layer
    # per axis (test_other_bilinear_resizes_are_a_dense_layer_per_axis)
    assert [op.op for op in report.offloaded if op.op == "relax.image.resize2d"] == \
        ["relax.image.resize2d"], str(report)
    assert [op.op for op in report.offloaded].count("relax.matmul") == 2, str(report)


def test_without_rubik_the_deconvolutions_stay_on_the_host():
    model, x = _neck()
    _, report = _partition(model, x, config="nv_small")
    reasons = {op.reason for op in report.host if op.op in ("relax.nn.conv2d_transpose",
                                                           "relax.image.resize2d")}
    assert reasons and all("nv_small has no" in r for r in reasons), reasons
    assert "op 0 (RUBIK): configuration nv_small has no RUBIK engine" in reasons, reasons


def test_the_neck_in_mixed_precision(parity=0):
    """Each layer in int8 or fp16, alternating: a deconvolution's conv (or copies) and its
    contract run in its layer's precision, with converting runs between the precisions."""
    model, x = _neck()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    layers = [f"f0.{i}" for i in range(7)]
    precisions = {key: "int8" if i % 2 == parity else "fp16" for i, key in enumerate(layers)}
    partitioned = ac.partition_for_accel(
        mod, params, precision="mixed", layer_precisions=precisions,
        calibration=[(_input(x.shape, seed),) for seed in range(6, 9)])
    report = ac.partition_report(partitioned)
    _whole(report)
    assert {op.precision for op in report.offloaded} == {"int8", "fp16"}, str(report)
    for actual, expected in zip(_outputs(partitioned, x), _torch(model, x)):
        assert sqnr(actual, expected) >= 25


class Geometries(torch.nn.Module):
    """Transposed convolutions of drawn geometries on one input, each its own output."""

    def __init__(self, channels, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.ConvTranspose2d(channels, k, kernel, stride, padding, output_padding,
                                     groups, bias=bias)
            for k, kernel, stride, padding, output_padding, groups, bias in layers)

    def forward(self, x):
        return tuple(layer(x) for layer in self.layers)


def _geometries(rng, shape, count):
    channels = shape[1]
    layers = []
    while len(layers) < count:
        stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        padding = tuple(int(rng.integers(0, k)) for k in kernel)
        output_padding = tuple(int(rng.integers(0, s)) for s in stride)
        groups = int(rng.choice([g for g in (1, 2, channels) if channels % g == 0]))
        k = groups * int(rng.integers(1, 4))
        sizes = [(n - 1) * s - 2 * p + k_ + o for n, s, p, k_, o in
                 zip(shape[2:], stride, padding, kernel, output_padding)]
        if any(p >= k_ for p, k_ in zip(padding, kernel)) or min(sizes) < 1:
            continue
        layers.append((k, kernel, stride, padding, output_padding, groups,
                       bool(rng.integers(0, 2))))
    return layers


@pytest.mark.parametrize("shape", [(1, 4, 1, 5), (1, 6, 4, 3)])
def test_drawn_geometries_run_as_offloaded_or_stay_on_the_host(shape):
    """Whatever the report offloads runs and equals PyTorch; the rest is on the host with a
    reason (a 1-row input, kernels taller and wider than the input, strides 1 to 3, groups,
    output_padding)."""
    rng = np.random.default_rng(shape[2])
    torch.manual_seed(shape[2])
    model = Geometries(shape[1], _geometries(rng, shape, 8)).eval()
    x = _input(shape, 3)
    partitioned, report = _partition(model, x)
    offloaded = [op for op in report.offloaded if op.op == "relax.nn.conv2d_transpose"]
    assert offloaded, str(report)
    assert all(op.reason for op in report.host), str(report)
    for actual, expected in zip(_outputs(partitioned, x), _torch(model, x)):
        assert_close(actual, expected)


# --- bilinear upsampling ------------------------------------------------------------------------

class BilinearHead(torch.nn.Module):
    """A segmentation head's bilinear upsampling (align_corners=False): x2 of a feature map
    beside a skip connection, then x4 (and x(2, 4)) of the logits; odd and rectangular sizes."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, 2, padding=1)
        self.skip = torch.nn.Conv2d(3, 8, 1)
        self.logits = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = F.interpolate(torch.relu(self.conv(x)), scale_factor=2, mode="bilinear",
                          align_corners=False) + self.skip(x)
        logits = self.logits(y)
        return (F.interpolate(logits, scale_factor=4, mode="bilinear"),
                F.interpolate(logits, scale_factor=(2, 4), mode="bilinear"))


@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_bilinear_upsampling_is_a_depthwise_deconvolution(source, tmp_path):
    model, x = BilinearHead().eval(), _input((1, 3, 10, 14), 21)
    partitioned, report = _partition(model, x, source, tmp_path)
    _whole(report)
    assert [op.op for op in report.ops].count("relax.nn.conv2d_transpose") == 3, str(report)
    for y, expected in zip(_outputs(partitioned, x), _torch(model, x)):
        assert_close(y, expected, 1e-5)


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", 30.0)])
def test_bilinear_upsampling_in_fp16_and_int8(precision, min_db):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                                torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    x = _input((1, 3, 9, 12), 22)
    options = {"calibration": [(_input(x.shape, seed),) for seed in range(4)]} \
        if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= min_db


def _resized(**resize):
    """conv + ReLU, a bilinear resize, conv: the resize between two layers of one function."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Upsample(mode="bilinear", **resize),
                               torch.nn.Conv2d(8, 4, 3, padding=1)).eval()


OTHER_RESIZES = [dict(scale_factor=2, align_corners=True), dict(scale_factor=3),
                 dict(size=(13, 20)), dict(size=(4, 17), align_corners=True)]


@pytest.mark.parametrize("resize", OTHER_RESIZES, ids=["x2_corners", "x3", "to_13x20",
                                                       "to_4x17_corners"])
@pytest.mark.parametrize("source", ["pytorch", "onnx"])
def test_other_bilinear_resizes_are_a_dense_layer_per_axis(resize, source, tmp_path):
    """align_corners=True, an odd or non-integer factor, a downsampling: the interpolation
    matrix of each axis as a dense layer (rewrites.linear_resizes_as_dense_layers: H on the
    transposed map, then W), where the resize stayed on the host and split the function."""
    model, x = _resized(**resize), _input((1, 3, 9, 12), 23)
    partitioned, report = _partition(model, x, source, tmp_path)
    _whole(report)
    assert "relax.image.resize2d" not in [op.op for op in report.ops], str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-5)


@pytest.mark.parametrize("precision, min_db", [("fp16", 55.0), ("int8", 30.0)])
def test_a_dense_layer_resize_in_fp16_and_int8(precision, min_db):
    torch.manual_seed(0)  # the model's weights, whatever ran before (int8 26.8-38.6 dB by seed)
    model, x = _resized(scale_factor=2, align_corners=True), _input((1, 3, 9, 12), 24)
    options = {"calibration": [(_input(x.shape, seed),) for seed in range(4)]} \
        if precision == "int8" else {}
    partitioned, report = _partition(model, x, precision=precision, **options)
    _whole(report)
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= min_db
