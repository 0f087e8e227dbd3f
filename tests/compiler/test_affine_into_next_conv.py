"""rewrites.affines_into_next_convs (issue 33): a constant scale and shift after an op no conv
computes (PP-LCNetV3's learnable affine block after a hardswish) folds into the conv that
reads it, per input channel, groups included; where the conv pads, a padded tap reads 0, not
the shift, and the fold adds the border's correction (a constant of the output's shape, 0
inside) where that is no larger than the shift. Against PyTorch in fp32 (rewrite alone, and whole builds), fp16 and int8."""
import numpy as np
import torch
import tvm

import accel_codegen as ac
from accel_codegen.compiler import rewrites
from accel_codegen.compiler.frontend import from_pytorch
from conftest import assert_close, build_and_run, sqnr, torch_forward


class AffineAfterHardswish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pw = torch.nn.Conv2d(8, 12, 1)                      # folds (scalar c, d)
        self.dw = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)  # padded
        self.grouped = torch.nn.Conv2d(12, 8, 3, groups=4)       # folds (per channel, groups)
        with torch.no_grad():  # a padded conv folds where the border's correction is no
            self.dw.weight.abs_()  # larger than the shift (taps of one sign, as trained ones)
        self.register_buffer("c", torch.linspace(0.5, 2, 12).reshape(1, 12, 1, 1))
        self.register_buffer("d", torch.linspace(-1, 1, 12).reshape(1, 12, 1, 1))

    def forward(self, x):
        h = torch.nn.functional.hardswish
        y = self.pw(1.25 * h(self.stem(x)) + 0.375)  # Paddle's scale * x + bias
        y = self.dw(h(y) * 0.75 - 0.5)
        return self.grouped(h(y) * self.c + self.d)


def _ops(mod) -> list:
    ops = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: ops.append(e.op.name) if hasattr(
        getattr(e, "op", None), "name") else None)
    return ops


def _relax_run(mod, x):
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_an_affine_folds_into_the_conv_that_reads_it():
    torch.manual_seed(0)
    model = AffineAfterHardswish().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 14)).astype(np.float32)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = tvm.relax.transform.BindParams("main", params)(mod)
    before = _ops(mod).count("relax.multiply")
    new = rewrites.affines_into_next_convs(mod)
    # the 1x1's, the padded depthwise conv's and the grouped conv's scales went into their
    # weights
    assert _ops(new).count("relax.multiply") == before - 3, new["main"].script()
    expected = torch_forward(model, x)
    assert_close(_relax_run(new, x), expected, 1e-5)

    partitioned = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)))
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert_close(build_and_run(partitioned, x), expected, 1e-4)
    calibration = [(np.random.default_rng(s).standard_normal(x.shape).astype(np.float32),)
                   for s in range(1, 5)]
    int8 = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision="int8", calibration=calibration)
    assert sqnr(build_and_run(int8, x), expected) >= 25


def test_an_affine_read_twice_is_not_folded():
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pw = torch.nn.Conv2d(4, 4, 1)

        def forward(self, x):
            y = torch.relu(x) * 2.0 + 1.0
            return self.pw(y) + y

    model = Twice().eval()
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = tvm.relax.transform.BindParams("main", params)(mod)
    new = rewrites.affines_into_next_convs(mod)
    assert _ops(new).count("relax.multiply") == _ops(mod).count("relax.multiply")
    assert_close(_relax_run(new, x), torch_forward(model, x), 1e-6)


class PaddedReaders(torch.nn.Module):
    """Paddle's text backbones: depthwise kernels taller than the input, strided in height
    alone, each read through an affine after a hardswish."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.dw = torch.nn.Conv2d(12, 12, 5, padding=2, groups=12)
        self.strided = torch.nn.Conv2d(12, 12, (3, 5), stride=(2, 1), padding=(1, 2),
                                       groups=12, bias=False)
        self.grouped = torch.nn.Conv2d(12, 8, 3, padding=1, groups=4)
        with torch.no_grad():  # taps of one sign: the correction within the shift
            for conv in (self.dw, self.strided, self.grouped):
                conv.weight.abs_()

    def forward(self, x):
        h = torch.nn.functional.hardswish
        y = self.dw(h(self.stem(x)) * 0.75 + -0.5)
        y = self.strided(h(y) * 1.5 + 0.25)
        return self.grouped(h(y) * 0.5 + 2.0)


def test_a_padded_conv_takes_the_affine_with_its_border_correction():
    torch.manual_seed(0)
    model = PaddedReaders().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 3, 14)).astype(np.float32)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = tvm.relax.transform.BindParams("main", params)(mod)
    new = rewrites.affines_into_next_convs(mod)
    assert _ops(new).count("relax.multiply") == _ops(mod).count("relax.multiply") - 3
    expected = torch_forward(model, x)
    assert_close(_relax_run(new, x), expected, 1e-5)
    for precision, least in (("fp32", 100), ("fp16", 50), ("int8", 35)):
        kwargs = {} if precision != "int8" else {"calibration": [
            (np.random.default_rng(s).standard_normal(x.shape).astype(np.float32),)
            for s in range(1, 5)]}
        part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                      precision=precision, **kwargs)
        report = ac.partition_report(part)
        assert report.host == [] and len(report.functions) == 1, str(report)
        assert sqnr(build_and_run(part, x), expected) >= least, precision
    # taps that sum to 0: the interior's shift is 0 and the border's correction larger (an
    # int8 operand of that range rounds the border coarsely): the affine stays
    with torch.no_grad():
        model.dw.weight -= model.dw.weight.mean(dim=(2, 3), keepdim=True)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    mod = tvm.relax.transform.BindParams("main", params)(mod)
    new = rewrites.affines_into_next_convs(mod)
    assert _ops(new).count("relax.multiply") == _ops(mod).count("relax.multiply") - 2
    assert_close(_relax_run(new, x), torch_forward(model, x), 1e-5)
