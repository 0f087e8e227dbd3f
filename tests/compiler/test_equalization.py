"""Cross-layer equalisation and bias correction (compiler/equalization.py, codegen/int8.py):
each leaves the fp32 function as it was, each lowers the int8 error where it should, and each
switches off."""
import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen import AccelInvalidError, frontend
from accel_codegen.compiler.partition import calibration_of
from accel_codegen.compiler.equalization import equalize
from conftest import assert_close, random_inputs, run_main


def _batch_norm(channels: int, gamma) -> torch.nn.BatchNorm2d:
    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.copy_(torch.as_tensor(gamma, dtype=torch.float32))
        bn.bias.copy_(torch.linspace(-0.2, 0.3, channels))
        bn.running_mean.copy_(torch.linspace(-0.5, 0.5, channels))
        bn.running_var.copy_(torch.linspace(0.5, 2.0, channels))
    return bn


class Chains(torch.nn.Module):
    """Every chain the transform handles: conv + BN + ReLU + max pool -> conv; conv + bias +
    ReLU -> depthwise conv (BN, ReLU) -> pointwise conv; one ReLU feeding two convolutions;
    then a ReLU6 chain, which must be left alone. As in a trained network, a channel that a
    batch norm makes small is read with large weights by its consumers (their columns are
    divided by its gamma), so its int8 codes matter."""

    def __init__(self, spread: float = 100.0):
        super().__init__()
        torch.manual_seed(0)
        conv = torch.nn.Conv2d
        self.a = conv(3, 16, 3, padding=1, bias=False)
        self.a_bn = _batch_norm(16, np.geomspace(1 / spread, 1, 16)[::-1].copy())
        self.b = conv(16, 16, 3, padding=1)                     # bias, no batch norm
        self.dw = conv(16, 16, 3, padding=1, groups=16, bias=False)
        self.dw_bn = _batch_norm(16, np.geomspace(1 / spread, 1, 16))
        self.pw1 = conv(16, 8, 1)
        self.pw2 = conv(16, 8, 3, padding=1)                    # the second consumer
        self.c = conv(16, 8, 1)
        self.d = conv(8, 8, 3, padding=1)
        with torch.no_grad():
            self.b.weight /= self.a_bn.weight.reshape(1, -1, 1, 1)
            for pointwise in (self.pw1, self.pw2):
                pointwise.weight /= self.dw_bn.weight.reshape(1, -1, 1, 1)

    def forward(self, x):
        y = torch.max_pool2d(torch.relu(self.a_bn(self.a(x))), 2)
        y = torch.relu(self.dw_bn(self.dw(torch.relu(self.b(y)))))
        y = torch.cat([self.pw1(y), self.pw2(y)], dim=1)
        return self.d(torch.nn.functional.relu6(self.c(torch.relu(y))))


def _host(mod) -> tvm.runtime.vm.VirtualMachine:
    return ac.virtual_machine(tvm.compile(mod, target="llvm"))


@pytest.fixture(scope="module")
def chains():
    model = Chains()
    x = torch.randn(1, 3, 16, 16)
    mod, _ = frontend.from_pytorch(model, (x,))
    return model, mod, tuple(x.shape)


def test_equalisation_keeps_the_fp32_function(chains):
    _, mod, shape = chains
    equalised, report = equalize(mod)
    # a -> b, b -> dw, dw -> pw1 + pw2; not c -> d (ReLU6), not the concat
    assert report.pairs == 3 and report.channels == 48
    assert report.max_ratio > 3  # the planted spread of ranges moved
    before, after = _host(mod), _host(equalised)
    for x in random_inputs(shape, 3, 7):
        assert_close(run_main(after, x), run_main(before, x), rtol=2e-6)


def test_relu6_and_shared_outputs_are_not_equalised():
    class NotExact(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.c = torch.nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = torch.nn.functional.relu6(self.a(x))   # ReLU6: clip(y / s) != clip(y) / s
            z = torch.relu(self.b(y))
            return self.c(z) + z                         # z also leaves through the add

    mod, _ = frontend.from_pytorch(NotExact(), (torch.randn(1, 3, 8, 8),))
    equalised, report = equalize(mod)
    assert report.pairs == 0 and equalised is mod


def _int8_sqnr(mod, shape, mean=0.0, spread=1.0, **options) -> float:
    """The int8 output's SQNR on N(mean, spread^2) inputs, calibrated on others."""
    def draw(count, seed):
        return [(x * spread + mean).astype(np.float32) for x in random_inputs(shape, count, seed)]

    report = ac.accuracy_report(mod, None, draw(4, 1235), precision="int8",
                                calibration=draw(8, 1234), **options)
    return report.output_sqnr_db


def test_equalisation_raises_the_int8_sqnr_where_channel_ranges_differ(chains):
    """Channels whose ranges span 100x share one per-tensor scale: equalised, the small ones
    get codes of their own."""
    _, mod, shape = chains
    plain = _int8_sqnr(mod, shape, equalize=False)
    equalised = _int8_sqnr(mod, shape)
    assert equalised > plain + 3.0, (plain, equalised)


def test_bias_correction_raises_the_int8_sqnr_on_inputs_far_from_zero():
    """Inputs of mean 4 and spread 0.5, and one large weight per output channel that makes
    its quantisation step coarse: the rounding error of the other weights, summed over the
    fan-in, moves every output's mean, which the corrected bias takes back."""

    class Offset(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(2)
            self.conv = torch.nn.Conv2d(64, 16, 3)  # no padding: every position sees the mean
            with torch.no_grad():
                self.conv.weight[:, 0, 0, 0] = 10 * self.conv.weight.abs().amax()

        def forward(self, x):
            return self.conv(x)

    # the offset is the inputs' own: an affine x * 0.5 + 4 in the model would fold into the
    # conv's weights and bias before quantisation (rewrites.affines_into_next_convs)
    shape = (1, 64, 8, 8)
    mod, _ = frontend.from_pytorch(Offset(), (torch.randn(*shape),))
    off = _int8_sqnr(mod, shape, 4.0, 0.5, bias_correction=False)
    on = _int8_sqnr(mod, shape, 4.0, 0.5)
    assert on > off + 3.0, (off, on)


def test_the_options_switch_the_transforms_off(chains):
    _, mod, shape = chains
    calibration = random_inputs(shape, 4, 1234)
    on = ac.partition_for_accel(mod, precision="int8", calibration=calibration)
    off = ac.partition_for_accel(mod, precision="int8", calibration=calibration,
                                 equalize=False, bias_correction=False)
    used_on, used_off = calibration_of(on), calibration_of(off)
    assert used_on.equalized and used_on.bias_correction
    assert not used_off.equalized and not used_off.bias_correction
    # the scales differ (equalised tensors), and so do the weights and biases
    assert used_on.tensors != used_off.tensors
    assert not _same_constants(on, off)
    with pytest.raises(AccelInvalidError, match="equalize=True"):
        ac.partition_for_accel(mod, precision="int8", calibration=used_on, equalize=False)
    # a calibration made without equalisation rebuilds the same code when reused (its own
    # setting is the default then: calibrations saved before equalisation existed still work)
    again = ac.partition_for_accel(mod, precision="int8", calibration=used_off,
                                   bias_correction=False)
    assert ac.generated_sources(again) == ac.generated_sources(off)
    assert _same_constants(again, off)


def test_an_equalised_calibration_given_back_builds_the_same_code(chains):
    """A Calibration made with equalisation (an earlier build's, ``calibration_of``) holds the
    scales of the equalised weights' tensors: given back to ``partition_for_accel``, the code
    must be generated from the equalised weights again, the same constants as the build that
    made it (before the fix it was generated from the weights as given, so each equalised
    channel ran at a scale made for another range), and its int8 output the same bits."""
    _, mod, shape = chains
    calibration = random_inputs(shape, 4, 1234)
    on = ac.partition_for_accel(mod, precision="int8", calibration=calibration)
    used_on = calibration_of(on)
    assert used_on.equalized
    again = ac.partition_for_accel(mod, precision="int8", calibration=used_on)
    assert _same_constants(again, on)
    assert ac.generated_sources(again) == ac.generated_sources(on)
    x = random_inputs(shape, 1, 1235)[0]
    np.testing.assert_array_equal(run_main(_host(again), x), run_main(_host(on), x))


def _same_constants(a, b) -> bool:
    """The generated code's constants (weights, converters) of two int8 modules are equal."""
    ca, cb = (m.attrs["const_name_to_constant"] for m in (a, b))
    return sorted(ca.keys()) == sorted(cb.keys()) and all(
        np.array_equal(ca[k].numpy(), cb[k].numpy()) for k in ca.keys())
