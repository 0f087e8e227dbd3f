"""int8 on weights as training leaves them (issue 33): output channels whose weights weight
decay left at 1e-34 beside channels of ~1, denormal and all-zero channels, constant channels,
huge biases on tiny weights, tensors that calibration sees constant or zero, a tiny input
scale, depthwise convs and dense layers with such channels, and the int8 LUT activations on
constant inputs. Each goes through the whole flow (partition -> calibrate -> build -> run in
int8) and is compared with PyTorch's fp32 answer in units of the int8 output step: nothing
raises, every output is within one output step of it plus the input's and the weights'
rounding carried through the layer (what int8 promises), and a dead channel's output is its
bias, as fp32 gives it, to half a step. Then the encoders and the tables alone (weight
scales, GPTQ, the converters, the LUTs on the reference and the simulator)."""
import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen import AccelInvalidError, Device, Sdp, frontend
from accel_codegen import reference as ref
from accel_codegen.compiler.codegen import int8
from accel_codegen.quantization import (TensorQuant, covering_quant, quantize_weights,
                                        round_half_away)
from accel_codegen.quantization.calibration import histogram_counts
from accel_codegen.quantization.encoding import WEIGHT_SCALE_FLOOR
from accel_codegen.quantization.gptq import Hessian, gptq_codes
from accel_codegen.quantization.lut import layer_lut
from accel_codegen.sim.reference import function64
from accel_codegen.sim.vocabulary import ACTIVATIONS
from conftest import assert_same, sqnr

#: Calibration inputs per model, also the evaluation inputs (so the calibrated ranges cover
#: every evaluated value and the bound below is int8's own error, not a clipping's).
EXAMPLES = 2


def _int8_outputs(model, inputs):
    """(int8 outputs, PyTorch outputs): lists, one [examples, ...] array per output of
    ``model`` (a tuple of them), "max" calibration on ``inputs`` (tuples of arrays)."""
    model.eval()
    mod, params = frontend.from_pytorch(model, tuple(torch.from_numpy(x) for x in inputs[0]))
    part = ac.partition_for_accel(mod, params, precision="int8", calibration=inputs,
                                  calibration_method="max")
    report = ac.partition_report(part, precision="int8")
    assert report.host == [], str(report)
    vm = ac.virtual_machine(ac.build(part))
    got, expected = [], []
    for example in inputs:
        out = vm["main"](*(tvm.runtime.tensor(x) for x in example))
        got.append([o.numpy() for o in out])
        with torch.no_grad():
            expected.append([y.numpy() for y in model(*(torch.from_numpy(x) for x in example))])
    return [np.stack(o) for o in zip(*got)], [np.stack(o) for o in zip(*expected)]


def _step(expected) -> float:
    """The output step of "max" calibration over the expected outputs (255 steps over the
    range, 0 included)."""
    lo, hi = min(float(expected.min()), 0.0), max(float(expected.max()), 0.0)
    return max(hi - lo, 1e-38) / 254


def _assert_within(got, expected, steps, what, propagated=0.0):
    """Every output within ``steps`` output steps plus ``propagated`` (the input's rounding
    carried through the layer) of PyTorch's."""
    step = _step(expected)
    error = float(np.max(np.abs(got.astype(np.float64) - expected)))
    assert np.all(np.isfinite(got)), what
    assert error <= steps * step + propagated, f"{what}: max error {error:.3g} = " \
        f"{error / step:.2f} output steps > {steps} + {propagated / step:.2f}"


def _layer_error(weights, inputs) -> float:
    """What int8 lets into one conv or dense layer's output besides its own rounding: the
    input's rounding (half a step of "max" calibration) through sum |w| of a channel, and the
    weights' (half a step of amax / 127) through the largest sum |x| a window can hold."""
    w = np.abs(np.asarray(weights, np.float64)).reshape(len(weights), -1)
    lo = min(0.0, min(float(np.min(x)) for x in inputs))
    hi = max(0.0, max(float(np.max(x)) for x in inputs))
    in_step = (hi - lo) / 254
    return float(np.max(w.sum(axis=1) * in_step / 2 +
                        w.max(axis=1) / 254 * max(-lo, hi) * w.shape[1]))


def _trained_weights(k, c, r, negligible, seed=0):
    """[k, c, r, r] weights of ~1 with the channels ``negligible`` maps to their magnitude
    (0 for a channel of zeros) set to that magnitude times N(0, 1)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, c, r, r))
    for channel, magnitude in negligible.items():
        w[channel] = rng.standard_normal((c, r, r)) * magnitude
    return w


#: Dead channels as training leaves them: 1e-34, 1e-20, zeros, a float32 denormal.
NEGLIGIBLE = {1: 1e-34, 3: 1e-20, 4: 0.0, 5: 1e-42}


def _conv(weight, bias, groups=1):
    k, c, r = weight.shape[:3]
    conv = torch.nn.Conv2d(c * groups, k, r, groups=groups, padding=r // 2)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(np.asarray(weight, np.float32)))
        conv.bias.copy_(torch.from_numpy(np.asarray(bias, np.float32)))
    return conv


class TrainedLayers(torch.nn.Module):
    """The layers of a trained detector that int8 refused or could get wrong, side by side
    (each output its own tensor, so each has its own calibration):
    0 a 1x1 conv with dead channels, 1 the same with ReLU, 2 a depthwise 3x3 with dead
    channels and ReLU6, 3 a 3x3 conv with dead channels, 4 biases of 1e6 on weights of 1e-3,
    5 a channel whose weights are all equal, 6 a dense layer with dead rows and ReLU (on its
    own input),
    7 ReLU6 on a tensor that is never negative (4 x a max pool of a ReLU) before a conv,
    8 a conv on an input of 1e-20 (an input scale of ~1e-22), 9 a conv of float32 denormal
    weights without bias (its output a tensor of denormals), ReLU, then a conv."""

    def __init__(self):
        super().__init__()
        w = [_trained_weights(8, 6, 1, NEGLIGIBLE, seed=1),
             _trained_weights(8, 6, 1, NEGLIGIBLE, seed=2),
             _trained_weights(6, 1, 3, NEGLIGIBLE, seed=3),
             _trained_weights(8, 6, 3, NEGLIGIBLE, seed=4),
             _trained_weights(4, 6, 1, {}, seed=5) * 1e-3,
             _trained_weights(4, 6, 3, {}, seed=6)]
        w[5][2] = 0.25
        self.weights = w + [_trained_weights(8, 54, 1, NEGLIGIBLE, seed=7).reshape(8, 54)]
        ramp = np.linspace(-2, 2, 8)
        self.convs = torch.nn.ModuleList([
            _conv(w[0], ramp), _conv(w[1], ramp), _conv(w[2], ramp[:6], groups=6),
            _conv(w[3], ramp), _conv(w[4], [1e6, -1e6, 4e5, 2.0]),
            _conv(w[5], [0.5, -0.25, 1.0, 0.0])])
        self.fc = torch.nn.Linear(54, 8)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(self.weights[6].astype(np.float32)))
            self.fc.bias.copy_(torch.linspace(0.5, 3, 8))
        torch.manual_seed(8)
        self.pooled = torch.nn.Conv2d(6, 4, 3, padding=1)
        self.after_relu6 = torch.nn.Conv2d(4, 4, 1)
        self.tiny = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.denormal = torch.nn.Conv2d(6, 4, 1, bias=False)
        with torch.no_grad():
            self.denormal.weight.mul_(1e-42 / self.denormal.weight.abs().max())
        self.after_denormal = torch.nn.Conv2d(4, 4, 1)

    def relu6_input(self, x):
        return 4.0 * torch.nn.functional.max_pool2d(torch.relu(self.pooled(x)), 2)

    def forward(self, x, tiny, flat):
        c = self.convs
        return (c[0](x), torch.relu(c[1](x)), torch.nn.functional.relu6(c[2](x)), c[3](x),
                c[4](x), c[5](x), torch.relu(self.fc(flat)),
                self.after_relu6(torch.nn.functional.relu6(self.relu6_input(x))),
                self.tiny(tiny), self.after_denormal(torch.relu(self.denormal(x))))


def test_trained_layers_in_int8():
    """Nothing raises, every output stays within int8's error of PyTorch's, and a dead
    channel's output is its bias, as fp32 gives it, up to the output's rounding."""
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal((1, 6, 6, 6)).astype(np.float32),
               (rng.standard_normal((1, 3, 5, 5)) * 1e-20).astype(np.float32),
               rng.standard_normal((1, 54)).astype(np.float32))
              for _ in range(EXAMPLES)]
    model = TrainedLayers()
    got, expected = _int8_outputs(model, inputs)
    xs = [x for x, _, _ in inputs]
    for i in range(7):
        _assert_within(got[i], expected[i], 1.0, f"output {i}", _layer_error(
            model.weights[i], xs if i < 6 else [flat for _, _, flat in inputs]))
    for i in (0, 1, 2, 3, 6):  # the dead channels: exactly the bias's code, everywhere
        step = _step(expected[i])
        for channel in NEGLIGIBLE:
            dead = got[i][:, :, channel]
            assert np.ptp(dead) == 0, (i, channel)
            assert np.all(np.abs(dead - expected[i][:, :, channel]) <= 0.5 * step * 1.001), \
                (i, channel)
        assert sqnr(got[i], expected[i]) > 30, i
    # 1e6, -1e6, 4e5 on weights of 1e-3: the bias, to the output's rounding
    assert np.all(np.ptp(got[4][:, :, :3], axis=(0, 1, 3, 4)) == 0)
    assert np.all(np.abs(got[4][:, :, :3] - expected[4][:, :, :3]) <= 0.5 * _step(expected[4]))
    # ReLU6 before a conv: conv1's and the pool's error (4x) through conv2, then conv2's own.
    with torch.no_grad():
        pooled = [model.relu6_input(torch.from_numpy(x)).numpy() for x in xs]
    w2 = model.after_relu6.weight.detach().numpy()
    first = _layer_error(model.pooled.weight.detach().numpy(), xs) + \
        _step(np.stack([p / 4 for p in pooled]))
    carried = float(np.abs(w2).reshape(4, -1).sum(axis=1).max()) * 4 * first
    _assert_within(got[7], expected[7], 1.0, "relu6 on a never-negative tensor",
                   _layer_error(w2, pooled) + carried)
    _assert_within(got[8], expected[8], 1.0, "tiny input scale",
                   _layer_error(model.tiny.weight.detach().numpy(), [t for _, t, _ in inputs]))
    # conv2 reads ~0 (denormals): its output is its bias, whatever the denormals' codes
    _assert_within(got[9], expected[9], 1.0, "after a layer of denormals")


#: A clip and LUT activations (test_lut_tables_on_constant_and_zero_range_inputs has every
#: LUT one alone).
ACTS = {"relu6": torch.nn.functional.relu6, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
        "hardswish": torch.nn.functional.hardswish}
#: Constants a tensor can hold everywhere: zero, 1e-30-ish, negative.
CONSTANTS = [[0.0] * 4, [1e-30, 0.0, 2e-30, 0.0], [-1.0, -2.0, -0.5, -1.0]]


#: (kernel, dilation) of the first conv of each activation's branch: different convs (TVM
#: merges equal ones, and a conv output that several chains read stays on the host).
GEOMETRIES = [(1, 1), (3, 1), (5, 1), (3, 2)]


class ConstantTensors(torch.nn.Module):
    """For each constant (each on its own input) and each activation: a conv of zero weights
    with the constant as its bias (a tensor whose calibration sees no range; zeros: no bias),
    the activation, then a 3x3 conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(9)
        self.first = torch.nn.ModuleList()
        self.second = torch.nn.ModuleList()
        for constant in CONSTANTS:
            for i, (kernel, dilation) in enumerate(GEOMETRIES):
                first = torch.nn.Conv2d(3, 4, kernel, dilation=dilation,
                                        padding=dilation * (kernel // 2), bias=any(constant))
                with torch.no_grad():
                    first.weight.zero_()
                    if any(constant):
                        # its own bias too (a bias reshape several chains read stays on
                        # the host, as convs equal to each other do)
                        first.bias.copy_(torch.tensor(constant) * (1 + i / 64))
                self.first.append(first)
                self.second.append(torch.nn.Conv2d(4, 4, 3, padding=1))

    def activations(self, *xs):
        acts = list(ACTS.values())
        return [acts[i % len(acts)](first(xs[i // len(acts)]))
                for i, first in enumerate(self.first)]

    def forward(self, *xs):
        return tuple(second(a) for second, a in zip(self.second, self.activations(*xs)))


def test_activations_on_constant_tensors():
    """A constant (or all-zero) tensor through each int8 activation, LUT ones included, and
    a conv after it: within the conv's int8 error of PyTorch's."""
    rng = np.random.default_rng(10)
    inputs = [tuple(rng.standard_normal((1, 3, 5, 5)).astype(np.float32) for _ in CONSTANTS)
              for _ in range(EXAMPLES)]
    model = ConstantTensors()
    got, expected = _int8_outputs(model, inputs)
    with torch.no_grad():
        activated = model.activations(*(torch.from_numpy(x) for x in inputs[0]))
    names = [(c, a) for c in CONSTANTS for a in ACTS]
    for i, (constant, act) in enumerate(names):
        _assert_within(got[i], expected[i], 1.0, f"{act} on a constant {constant}",
                       _layer_error(model.second[i].weight.detach().numpy(),
                                    [activated[i].numpy()]))


# --- the encoders alone -------------------------------------------------------------------------

def test_negligible_channels_quantise_to_zero_codes_at_the_coarsest_scale():
    w = _trained_weights(8, 6, 3, NEGLIGIBLE, seed=8)
    w[6] *= 3e-5  # within 2^16 of the largest: its own scale, as before
    w[7] *= 1e-6  # below 2^-16: the floor's scale, codes still non-zero
    codes, scales = quantize_weights(w)
    amax = np.abs(w.reshape(8, -1)).max(axis=1)
    coarsest = amax.max() / 127
    for channel in NEGLIGIBLE:
        assert not codes[channel].any() and scales[channel] == coarsest, channel
    healthy = [0, 2, 6]
    assert np.array_equal(scales[healthy], amax[healthy] / 127)  # bit for bit the old rule
    assert scales[7] == coarsest * WEIGHT_SCALE_FLOOR and 0 < np.abs(codes[7]).max() < 127
    error = np.abs(codes * scales.reshape(-1, 1, 1, 1) - w).reshape(8, -1).max(axis=1)
    assert np.all(error <= scales / 2 * (1 + 1e-12))  # every channel within half its step
    assert np.array_equal(quantize_weights(np.zeros((2, 3)))[1], np.ones(2))
    with pytest.raises(AccelInvalidError, match="output channel 1"):
        quantize_weights(np.array([[1.0, 2.0], [np.inf, 0.0]]))


def test_per_tensor_codes_are_kept():
    """Weights that are codes of one step for the layer (a model quantised per tensor, in
    float32) keep those codes, every channel at that step; float weights and a grid that
    is only nearly one stay per channel."""
    rng = np.random.default_rng(11)
    q = rng.integers(-127, 128, (6, 3, 3, 3))
    q[2] //= 8  # a channel of small codes: per channel it would be re-rounded finer
    q[4] = 0
    q[0, 0, 0, 0] = -127
    step = np.float32(0.0173)
    codes, scales = quantize_weights((q * step).astype(np.float32))
    assert np.array_equal(codes, q) and np.all(scales == np.float64(np.float32(127 * step)) / 127)
    float_weights = rng.standard_normal((6, 3, 3, 3))
    amax = np.abs(float_weights.reshape(6, -1)).max(axis=1)
    assert np.array_equal(quantize_weights(float_weights)[1], amax / 127)
    nearly = (q * step).astype(np.float64)
    nearly[1, 0, 0, 0] += 0.01 * step  # one weight off the grid
    scales = quantize_weights(nearly)[1]
    assert not np.all(scales == scales[0])


def test_per_tensor_codes_with_a_zero_point_are_kept_where_they_fit():
    """Weights (q - zero) * step of a model quantised per tensor with a zero point (uint8,
    zero 113: codes -113..142) keep the model's codes and step in every channel whose codes
    lie within -128..127; a channel with a code beyond is re-quantised on its own, amax /
    127 (no int8 code is 142)."""
    rng = np.random.default_rng(12)
    q = rng.integers(0, 256, (5, 4, 3, 3)).astype(np.int64)
    q[:, 0, 0, 0] = 113 + 1  # a code of +-1 in the layer
    q[1:] = np.clip(q[1:], 113 - 127, 113 + 127)
    q[0, 0, 0, 1] = 255  # channel 0 reaches 142
    step = np.float32(0.0037)
    w = ((q - 113).astype(np.float32) * step).astype(np.float32)
    codes, scales = quantize_weights(w)
    assert np.array_equal(codes[1:], q[1:] - 113)
    assert np.all(scales[1:] == np.float64(step))
    assert scales[0] == pytest.approx(142 * float(step) / 127) and codes[0].max() == 127
    float_weights = rng.standard_normal((5, 4, 3, 3))  # no grid: per channel, as before
    amax = np.abs(float_weights.reshape(5, -1)).max(axis=1)
    assert np.array_equal(quantize_weights(float_weights)[1], amax / 127)


def test_a_models_code_of_minus_128_is_kept():
    """NVDLA's CONV multiplies signed bytes: a model's code -128 (a per-tensor quantisation
    with a zero point: q - zero = -128) is kept, with the model's step, in its channel, not
    re-quantised at 128 / 127 of it; the project's own quantisation stays -127..127."""
    rng = np.random.default_rng(13)
    q = rng.integers(-128, 128, (4, 3, 3, 3))
    q[:, 0, 0, 0] = 1  # a code of +-1 in the layer
    q[1, 0, 0, 1], q[2, 0, 0, 1] = -128, 127
    q[3] = np.clip(q[3], -127, 127)
    q[3, 0, 0, 1] = -127
    step = np.float32(0.0041)
    codes, scales = quantize_weights(((q.astype(np.float32)) * step).astype(np.float32))
    assert np.array_equal(codes, q) and np.all(scales == np.float64(step))
    assert codes[1].min() == -128
    float_weights = rng.standard_normal((4, 3, 3, 3))
    assert quantize_weights(float_weights)[0].min() >= -127


def test_gptq_keeps_negligible_channels_at_zero():
    rng = np.random.default_rng(9)
    w = _trained_weights(4, 2, 3, {1: 1e-34, 3: 0.0}, seed=9)
    x = rng.standard_normal((64, 18))
    hessian = Hessian(np.stack([x.T @ x]), np.stack([x.sum(axis=0)]), 64)
    codes, scales = gptq_codes(w, hessian)
    assert np.array_equal(scales, quantize_weights(w)[1])
    assert not codes[1].any() and not codes[3].any() and codes[0].any()


def test_histogram_of_denormals():
    """The calibration's histogram of a tensor of float32 denormals (its bin factor is beyond
    float32)."""
    x = np.array([0.0, 5e-43, 1e-42, -1e-42], np.float32)
    counts = histogram_counts(np.abs(x), 1e-42)
    assert counts.sum() == 4 and counts[0] == 1 and counts[-1] == 2


def _converted(conv, v):
    return ref.sdp_int8(v, bias=conv["bias"], mul=conv["mul"], rshift=conv["rshift"])


def test_channel_converters_for_shifts_beyond_int32_and_factors_beyond_int16():
    """Against the exact g * v * unit + h in output steps, on every v an SDP reading int8
    codes can see (|v| <= 255): a scale of 0 or 1e-34 with a shift (the output is the
    shift), a shift of 1e6 on a tiny factor, a shift far beyond the output range, a factor
    of 1e9 (the calibrated range narrower than one input step), and an ordinary channel,
    whose converter is the unchanged rule's."""
    g = np.array([0.0, 1e-34, 1e-9, 1.0, 1e9, 1.0, -1e-34])
    h = np.array([1.25, -3.0, 1e6 * 1e-4, -1e9, 0.0, 0.5, 2.0])
    unit, target = np.full(7, 0.02), 1e-4 * 8000 / 127 / 63  # an output step of ~1e-4
    conv = int8.channel_converters(g, h, unit, target, "layer")
    v = np.arange(-255, 256).reshape(1, 1, -1).repeat(7, axis=1)
    got = _converted(conv, v)
    exact = (g.reshape(1, -1, 1) * v * unit.reshape(1, -1, 1) + h.reshape(1, -1, 1)) / target
    ideal = np.clip(round_half_away(exact), -128, 127)
    assert np.abs(got - ideal).max() <= 1
    for channel in (0, 1, 6):  # no part of the input: exactly the shift's code
        assert np.all(got[0, channel] == ideal[0, channel, 0]), channel
    assert np.all(got[0, 3] == -128) and got[0, 4, 255] == 0 and got[0, 4, 256] == 127
    old_bias = round_half_away(h[5] / (g[5] * unit[5]))
    assert conv["bias"][5] == old_bias
    assert (conv["mul"][5], conv["rshift"][5]) == tuple(
        x[0] for x in ac.quantization.encode_multipliers([g[5] * unit[5] / target], "t"))


# (int8: the ones the compiler builds int8 tables for; rsqrt and reciprocal stay fp16)
LUT_ACTS = [e.name for e in ACTIVATIONS if e.feature == "lut" and e.int8]
#: Activations whose codes also change far from 0 in a signed output range far below 1e-3
#: (silu's, mish's and gelu's tails near x = -70, gelu in either form; hardswish's return to 0 at
#: -3): one 256-entry table cannot resolve both places, and layer_lut does not know which one the input
#: reaches (not fixed: issue 33's report).
NON_MONOTONE = ("silu", "hardswish", "gelu", "gelu_tanh", "mish")
DEVICE = Device("nv_full", num_threads=1)


def _calibrated(values) -> TensorQuant:
    """The "max" quantisation of a tensor holding ``values`` (unsigned without negatives)."""
    values = np.asarray(values, np.float64)
    if values.min() >= 0:
        top = float(values.max())
        return TensorQuant(float(np.float32((top if top > 0 else 1.0) / 255)), -128)
    return covering_quant(float(values.min()), float(values.max()))


@pytest.mark.parametrize("act", LUT_ACTS)
def test_lut_tables_on_constant_and_zero_range_inputs(act):
    """A standalone int8 LUT SDP as the code generator programs it (channel_converters to
    the table's input units), on inputs calibration saw constant (0, 1e-30, -2, 1e6) or of a
    tiny or huge step: every one of the 256 input codes within one code of
    round(f(x) / s_out), and the constant's own code exact."""
    codes = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 16, 16)
    cases = [(_calibrated([c]), c) for c in (0.0, 1e-30, -2.0, 1e6, -1e6)]
    cases += [(TensorQuant(1e4, 0), None)]
    if act not in NON_MONOTONE:
        cases += [(_calibrated([-1e-30]), -1e-30), (TensorQuant(1e-32, 0), None)]
    for in_quant, constant in cases:
        real = in_quant.dequantize(codes).astype(np.float64)
        with np.errstate(over="ignore"):
            exact = function64(act, real if constant is None else np.array([constant]))
        if not np.all(np.isfinite(exact)):
            continue  # exp(1e6): fp32 itself has no answer
        out = _calibrated(exact)
        table = layer_lut(act, out, in_quant.scale, "test")
        conv = int8.channel_converters(np.ones(1), np.zeros(1), np.full(1, in_quant.scale),
                                       table.input_step, "test")
        op = Sdp(bias=conv["bias"], mul=conv["mul"], rshift=conv["rshift"], act=act,
                 precision="int8", in_zero=in_quant.zero, out_mul=1,
                 out_shift=table.out_shift, out_zero=out.zero, lut=table.lut)
        y, _ = DEVICE.run([op], codes)
        assert_same(y, ref.run_chain([op], codes))
        with np.errstate(over="ignore"):
            ideal = np.clip(round_half_away(function64(act, real) / np.float32(out.scale)) +
                            out.zero, -128, 127)
        what = f"{act} on {constant if constant is not None else in_quant}"
        assert np.abs(y.astype(np.int64) - ideal).max() <= 1, what
        if constant is not None:
            at = codes == in_quant.quantize(np.array(constant))
            assert np.all(y[at] == ideal[at]), what
