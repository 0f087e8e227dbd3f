"""Channel-blocked (C16) tensors inside an offloaded fp32 function: the code generator keeps the
tensors between 1x1 and depthwise 3x3 layers (multiples of 16 channels) C16, converts at the
group's edges, leaves every other tensor NCHW, and the network's output is bit for bit the one
it gives with every tensor NCHW."""
import numpy as np
import torch

import accel_codegen as ac
from accel_codegen import frontend
from accel_codegen.compiler.codegen import layouts
from accel_codegen.sim.device import host_isa
from conftest import assert_close, assert_same, build_and_run, torch_forward

RTOL = 1e-4


def _trained_bn(channels):
    bn = torch.nn.BatchNorm2d(channels)
    bn.running_mean.uniform_(-0.2, 0.2)
    bn.running_var.uniform_(0.5, 1.5)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.2, 0.2)
    return bn


def _separable(c_in, c_out, stride):
    return [torch.nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), _trained_bn(c_in),
            torch.nn.ReLU6(), torch.nn.Conv2d(c_in, c_out, 1, bias=False), _trained_bn(c_out),
            torch.nn.ReLU6()]


class SmallMobileNet(torch.nn.Module):
    """MobileNet-v1's shape at a small scale: a dense stem, separable blocks on 32-128 channels
    (28x28 and 14x14 planes; on 14x14 the NCHW path sums the last positions as dot products),
    a residual 1x1 with an add, the pool and the classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 2, 1, bias=False),
                                        _trained_bn(32), torch.nn.ReLU6())
        self.body = torch.nn.Sequential(*_separable(32, 64, 1), *_separable(64, 128, 2),
                                        *_separable(128, 128, 1), *_separable(128, 128, 1))
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(128, 128, 1, bias=False),
                                          _trained_bn(128))
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        y = self.body(self.stem(x))
        y = torch.relu(self.expand(y) + y)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


# The C16 kernels are AVX-512 code: without them (an AVX2-only build) no tensor pays to be C16.
C16_KERNELS = "avx512" in host_isa()


def _all_nchw(partitioned, source, model, x):
    """Without C16 kernels the plan keeps every tensor NCHW, and the answer is PyTorch's."""
    assert "ACCEL_LAYOUT_C16" not in source
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


def _partitioned(model, *inputs):
    """The model partitioned for the accelerator, and its generated C."""
    mod, params = frontend.from_pytorch(model, inputs)
    partitioned = ac.partition_for_accel(mod, params)
    return partitioned, "\n".join(ac.generated_sources(partitioned).values())


def _assert_nchw_bits(monkeypatch, blocked, model, *inputs):
    """The build with no tensor planned C16 gives ``blocked``'s output bit for bit."""
    with monkeypatch.context() as patched:
        patched.setattr(layouts, "plan_layouts", lambda *args: set())
        plain, source = _partitioned(model, *inputs)
    assert "ACCEL_LAYOUT_C16" not in source
    assert_same(blocked, build_and_run(plain, *inputs))


def test_c16_tensors_between_separable_layers_give_the_nchw_bits(monkeypatch):
    torch.manual_seed(0)
    model = SmallMobileNet().eval()
    x = torch.randn(1, 3, 56, 56)
    partitioned, source = _partitioned(model, x)
    if not C16_KERNELS:
        return _all_nchw(partitioned, source, model, x)
    # every separable layer's output but the last one's (read by the pool) stays C16
    assert source.count("ACCEL_LAYOUT_C16") >= 8, source
    blocked = build_and_run(partitioned, x)
    assert_close(blocked, torch_forward(model, x), rtol=RTOL)

    _assert_nchw_bits(monkeypatch, blocked, model, x)


def test_a_c16_tensor_that_does_not_pay_stays_nchw():
    """Two 1x1 layers between dense 3x3 ones: the tensor between them could be C16, but only
    through a conversion on each side and no layer that runs C16 in and out, so the code
    generator keeps it NCHW."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 16, 3, padding=1)).eval()
    x = torch.randn(1, 16, 20, 20)
    partitioned, source = _partitioned(model, x)
    assert "ACCEL_LAYOUT_C16" not in source
    np.testing.assert_allclose(build_and_run(partitioned, x), torch_forward(model, x),
                               rtol=RTOL, atol=1e-4)


class ConstantAdd(torch.nn.Module):
    """1x1 layers whose middle one adds a constant tensor: the constant pool holds it NCHW,
    so that run's output must not be C16 (a C16 run reads its operand as C16)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(16, 256, 1)
        self.c2 = torch.nn.Conv2d(256, 256, 1)
        self.c3 = torch.nn.Conv2d(256, 16, 1)
        self.register_buffer("k", torch.randn(1, 256, 8, 8))

    def forward(self, x):
        return self.c3(self.c2(torch.relu(self.c1(x))) + self.k)


def test_a_constant_operand_keeps_its_run_nchw():
    torch.manual_seed(2)
    model = ConstantAdd().eval()
    x = torch.randn(1, 16, 8, 8)
    partitioned, source = _partitioned(model, x)
    (adding,) = [line for line in source.splitlines() if "accel_glue_run_layer" in line and
                 "accel.conv2d_bias_add" in line]
    assert adding.endswith("ACCEL_LAYOUT_NCHW) != 0) return -1;"), adding
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


def _run_lines(source):
    return [line for line in source.splitlines() if "accel_glue_run_layer" in line]


def test_the_image_layer_writes_c16_for_c16_readers():
    """The dense stem reads the function's NCHW input and writes its output C16 (its kernel
    reads NCHW, writes C16), so the depthwise layer after it runs its C16 kernel in and out."""
    torch.manual_seed(0)
    model, x = SmallMobileNet().eval(), torch.randn(1, 3, 56, 56)
    partitioned, source = _partitioned(model, x)
    if not C16_KERNELS:
        return _all_nchw(partitioned, source, model, x)
    stem, depthwise = _run_lines(source)[:2]
    assert stem.endswith("ACCEL_LAYOUT_NCHW, ACCEL_LAYOUT_C16) != 0) return -1;"), stem
    assert depthwise.endswith("ACCEL_LAYOUT_C16, ACCEL_LAYOUT_C16) != 0) return -1;"), depthwise


class Bottleneck(torch.nn.Module):
    """ResNet-50's stage transition at a small scale: 1x1, 3x3/2, 1x1 + the downsample branch
    (1x1/2 + batch norm) added, then a second bottleneck on the identity, and the pool."""

    def __init__(self, c_in=128, width=128, c_out=256):
        super().__init__()

        def block(c_in, stride):
            return torch.nn.Sequential(
                torch.nn.Conv2d(c_in, width, 1, bias=False), _trained_bn(width), torch.nn.ReLU(),
                torch.nn.Conv2d(width, width, 3, stride, 1, bias=False), _trained_bn(width),
                torch.nn.ReLU(), torch.nn.Conv2d(width, c_out, 1, bias=False), _trained_bn(c_out))

        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c_in, 3, 1, 1, bias=False),
                                        _trained_bn(c_in), torch.nn.ReLU())
        self.first, self.second = block(c_in, 2), block(c_out, 1)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 1, 2, bias=False),
                                        _trained_bn(c_out))

    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.first(x) + self.down(x))
        y = torch.relu(self.second(y) + y)
        return torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)


def test_a_downsample_branch_writes_its_run_output_layout(monkeypatch):
    """The downsample branch's output is its layer's element-wise operand: it is written in the
    layout of that layer's output, and the block gives the bits of the all-NCHW build."""
    torch.manual_seed(3)
    model = Bottleneck().eval()
    x = torch.randn(1, 3, 56, 56)
    partitioned, source = _partitioned(model, x)
    if not C16_KERNELS:
        return _all_nchw(partitioned, source, model, x)
    lines = _run_lines(source)
    (branch,) = [line for line in lines if "(branch)" in line]
    adding = lines[lines.index(branch) + 1]
    assert branch.endswith("ACCEL_LAYOUT_C16) != 0) return -1;"), branch
    assert adding.endswith("ACCEL_LAYOUT_C16) != 0) return -1;"), adding
    blocked = build_and_run(partitioned, x)
    assert_close(blocked, torch_forward(model, x), rtol=RTOL)

    _assert_nchw_bits(monkeypatch, blocked, model, x)


class Flattened(torch.nn.Module):
    """1x1 layers, then a classifier on the flattened 4x4 plane: the dense layer reads its
    input as [N, C*H*W], which a C16 tensor is not."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(16, 256, 1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(256, 256, 1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(256, 256, 1), torch.nn.ReLU())
        self.head = torch.nn.Linear(256 * 4 * 4, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.body(x), 1))


def test_a_flattened_input_stays_nchw():
    torch.manual_seed(4)
    model = Flattened().eval()
    x = torch.randn(1, 16, 4, 4)
    partitioned, source = _partitioned(model, x)
    dense = _run_lines(source)[-1]
    assert dense.endswith("ACCEL_LAYOUT_NCHW, ACCEL_LAYOUT_NCHW) != 0) return -1;"), dense
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


class NarrowResidual(torch.nn.Module):
    """MobileNetV2's 24-channel stage, widened so that C16 pays inside the block: expand to 192
    channels, separable layers on them, project back to 24 and add the block's input. The
    projection reads a C16 tensor and writes NCHW, its operand NCHW with it (24 channels are
    not whole atoms of 16)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 24, 3, 2, 1, bias=False),
                                        _trained_bn(24))
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(24, 192, 1, bias=False),
                                          _trained_bn(192), torch.nn.ReLU6())
        self.body = torch.nn.Sequential(*_separable(192, 192, 1), *_separable(192, 192, 1))
        self.project = torch.nn.Sequential(torch.nn.Conv2d(192, 24, 1, bias=False),
                                           _trained_bn(24))

    def forward(self, x):
        x = self.stem(x)
        y = self.project(self.body(self.expand(x))) + x
        return torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)


def test_a_c16_input_with_a_narrow_operand_runs_nchw_out():
    torch.manual_seed(5)
    model = NarrowResidual().eval()
    x = torch.randn(1, 3, 112, 112)
    partitioned, source = _partitioned(model, x)
    if not C16_KERNELS:
        return _all_nchw(partitioned, source, model, x)
    (project,) = [line for line in _run_lines(source) if "accel.conv2d_bn_add" in line]
    assert project.endswith("ACCEL_LAYOUT_C16, ACCEL_LAYOUT_NCHW) != 0) return -1;"), project
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=RTOL)


class CrossCorrelation(torch.nn.Module):
    """A Siamese tracker's head: the template's features (separable layers, C16-able) are the
    weights of the conv over the search image's features, which read them as NCHW."""

    def __init__(self):
        super().__init__()
        self.template = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 1, 1), torch.nn.ReLU(),
                                            *_separable(32, 32, 1), *_separable(32, 32, 1))
        self.search = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 1, 1), torch.nn.ReLU())

    def forward(self, z, x):
        return torch.nn.functional.conv2d(self.search(x), self.template(z))


class ConcatAfterC16(torch.nn.Module):
    """A concat whose second source is a C16-able tensor: the copies read it NCHW."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, 1, 1), torch.nn.ReLU())
        self.body = torch.nn.Sequential(*_separable(32, 64, 1), *_separable(64, 64, 1))
        self.other = torch.nn.Conv2d(3, 16, 3, 1, 1)
        self.head = torch.nn.Conv2d(80, 16, 3, 1, 1)

    def forward(self, x):
        return self.head(torch.cat([self.other(x), self.body(self.stem(x))], 1))


def test_a_tensor_read_as_weights_or_copied_stays_nchw(monkeypatch):
    cases = [(CrossCorrelation, (torch.randn(1, 3, 3, 3), torch.randn(1, 3, 24, 24))),
             (ConcatAfterC16, (torch.randn(1, 3, 40, 40),))]
    for make, inputs in cases:
        torch.manual_seed(6)
        model = make().eval()
        blocked = build_and_run(_partitioned(model, *inputs)[0], *inputs)
        assert_close(blocked, torch_forward(model, *inputs), rtol=RTOL)
        _assert_nchw_bits(monkeypatch, blocked, model, *inputs)
