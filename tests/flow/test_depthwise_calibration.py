"""int8 calibration weighs a tensor that a depthwise convolution alone reads by that
convolution's weights (compiler/sensitivity.py): trained depthwise kernels multiply a channel
whose whole range is one step of the tensor's int8 scale by up to 70 (PP-PicoDet's first
block), so the plain least-error threshold, set by the widest channel, leaves the amplified
channel constant and the convolution's output at about 11 dB. Where the plain threshold
erases such a channel, calibration takes the convolution's least-error threshold instead."""
import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import match_composites
from accel_codegen.compiler.sensitivity import depthwise_weights
from accel_codegen.quantization.calibration import Calibration, Observer
from conftest import build_and_run, sqnr, torch_forward


def test_weighted_histogram_trades_the_wide_channel_for_the_amplified_one():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(0, 40, (1, 1, 32, 32)),     # wide, weighed little
                        rng.uniform(0, 0.2, (1, 1, 32, 32))], 1).astype(np.float32)
    quants = []
    for weights in (None, {("f0.0", 1): np.array([1e-6, 2.0])}):
        observer = Observer(weights)
        observer.add("f0.0 conv", 1, x.copy())
        quants.append(Calibration.from_observer(observer, "mse", 1).tensors[("f0.0", 1)])
    plain, weighted = quants
    assert plain.scale * 255 > 30           # the wide channel's range
    assert weighted.scale * 255 < 10         # the wide channel clipped
    # a channel the plain threshold keeps (many codes over its range): the plain search
    x[:, 1] *= 100
    observer = Observer({("f0.0", 1): np.array([1e-6, 2.0])})
    observer.add("f0.0 conv", 1, x.copy())
    kept = Calibration.from_observer(observer, "mse", 1).tensors[("f0.0", 1)]
    observer = Observer()
    observer.add("f0.0 conv", 1, x.copy())
    assert kept == Calibration.from_observer(observer, "mse", 1).tensors[("f0.0", 1)]


class Block(torch.nn.Module):
    """conv + hardswish (not positively homogeneous: no cross-layer equalisation) then a
    depthwise conv whose second channel amplifies a channel of small range."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.dw = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)
        with torch.no_grad():
            self.conv.weight[0] *= 20
            self.conv.bias[0] = 20.0
            self.conv.weight[1] *= 0.02
            self.dw.weight[0] *= 0.02
            self.dw.weight[1] *= 60

    def forward(self, x):
        return self.dw(torch.nn.functional.hardswish(self.conv(x)))


def _input(seed):
    return np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)


def test_depthwise_reader_sets_the_threshold():
    torch.manual_seed(0)
    model = Block().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_input(0)),))
    weights = depthwise_weights(match_composites(mod, params, precision="int8"))
    assert list(weights) == [("f0.0", 1)] and int(np.argmax(weights["f0.0", 1])) == 1
    part = ac.partition_for_accel(mod, params, precision="int8",
                                  calibration=[(_input(s),) for s in range(10, 14)])
    x = _input(1)
    got, want = build_and_run(part, x), torch_forward(model, x)
    # the amplified channel alone, and the whole output: 25.7 and 19.0 dB (1.9 and 2.4 dB
    # with the plain threshold, which the wide channel, multiplied by 0.02, set)
    assert sqnr(got[:, 1], want[:, 1]) >= 20
    assert sqnr(got, want) >= 15


def test_mixed_precision_calibrates_as_int8_does():
    """The mixed search and a mixed build given its layers' precisions calibrate through the
    int8 flow's path (compiler.partition.calibrate_reference): the same depthwise-weighted
    threshold for the tensor the depthwise conv alone reads."""
    from accel_codegen.compiler.partition import calibration_of
    from accel_codegen.flows.mixed import search_mixed_precision

    torch.manual_seed(0)
    mod, params = from_pytorch(Block().eval(), (torch.from_numpy(_input(0)),))
    examples = [(_input(s),) for s in range(10, 14)]
    key = ("f0.0", 1)
    int8 = calibration_of(ac.partition_for_accel(mod, params, precision="int8", equalize=False,
                                                 calibration=examples)).tensors[key]
    assert int8.scale * 255 < 20  # weighted: the plain threshold keeps the wide channel, ~45
    given = ac.partition_for_accel(mod, params, precision="mixed", calibration=examples,
                                   layer_precisions={"f0.0": "int8", "f0.1": "fp16"})
    assert calibration_of(given).tensors[key] == int8
    search = search_mixed_precision(mod, params, examples, 10.0, config="nv_full",
                                    held_back=[(_input(20),)])
    assert search.calibration.tensors[key] == int8


def test_mse_positions_hands_each_example_to_the_caller_once():
    """mse_positions runs the examples twice (mse, then the positions' clipping count); the
    caller's ``each`` of calibrate_reference sees each example once all the same: the
    mixed-precision search keeps the outputs it records there as its reference and sums their
    power, which a second pass doubled (every SQNR 3 dB too high), and the same calibration
    as without ``each``."""
    from accel_codegen.compiler.partition import calibrate_reference, run_main
    from accel_codegen.sim.config import AccelConfig

    torch.manual_seed(0)
    mod, params = from_pytorch(Block().eval(), (torch.from_numpy(_input(0)),))
    examples = [(_input(s),) for s in range(10, 13)]
    seen = []

    def each(vm, inputs):
        seen.append(inputs[0])
        return run_main(vm, inputs)

    config = AccelConfig.preset("nv_full")
    recorded, _ = calibrate_reference(mod, params, config, True, False, examples,
                                      "mse_positions", each=each)
    assert [id(x) for x in seen] == [id(x) for (x,) in examples]
    plain, _ = calibrate_reference(mod, params, config, True, False, examples,
                                   "mse_positions")
    assert recorded.tensors == plain.tensors
