"""The compiler's int8 program as NVDLA trace tests (issue 31, item 3): single layers run on the
nv_small device and LeNet-5 compiled for nv_small, recorded (sim/recorder.py), exported
(tools/nvdla_export.py) and played back on the NVDLA front end (sim/nvdla): every exported test
gives the run's output bits in its output region and the CRC its check_crc names (a round
trip); what NVDLA cannot compute exactly is refused with NvdlaInexactError naming why."""
import numpy as np
import pytest

from accel_codegen import AccelUnsupportedError
from accel_codegen.sim.device import Device
from accel_codegen.sim.nvdla.layers import read_int8
from accel_codegen.sim.nvdla.runner import play
from accel_codegen.sim.nvdla.trace import parse_cfg
from accel_codegen.sim.ops import Conv, Pool, Sdp
from accel_codegen.sim.recorder import recording
from accel_codegen.tools.nvdla_export import NvdlaInexactError, export_run, export_runs
from conftest import random_inputs, run_cli

RNG = np.random.default_rng(31)


def _codes(shape, low=-128, high=128):
    return RNG.integers(low, high, size=shape).astype(np.int8)


def _sdp(channels, *, in_zero=0, act="relu", out_zero=-128, shifts=(20, 23), **extra):
    return Sdp(precision="int8", bias=RNG.integers(-3000, 3000, channels).astype(np.int32),
               mul=RNG.integers(16384, 32767, channels).astype(np.int16),
               rshift=RNG.integers(shifts[0], shifts[1] + 1, channels).astype(np.uint8),
               in_zero=in_zero, act=act, out_zero=out_zero, **extra)


def _spread_shifts():
    """An SDP whose channels' right shifts are 2 and 20: NVDLA's one shifter per X unit
    cannot share them through a 16-bit multiplier."""
    sdp = _sdp(8, act=None)
    sdp.rshift = np.array([2] + [20] * 7, np.uint8)
    return sdp


def _record(ops, x):
    with recording() as runs:
        y, _ = Device("nv_small").run(ops, x, label="layer")
    assert len(runs) == 1 and np.array_equal(runs[0].output, y)
    return runs[0], y


def assert_round_trip(test):
    """The test plays on the front end: its check_crc holds the CRC of the output region, and
    the region's channels hold the run's output codes."""
    checks = [cmd for cmd in parse_cfg(test.cfg) if cmd.op == "check_crc"]
    assert len(checks) == 1 and int(checks[0].args[4], 0) == test.crc
    played = play(test.cfg)
    assert played.matches and played.crcs == [test.crc]
    c, h, w = test.output.shape
    got = read_int8(played.memory, test.region[0], 8 * w, 8 * w * h, c, h, w)
    assert np.array_equal(got, test.output.astype(np.int64))


LAYERS = {
    # conv 3x3 'same', 3 -> 10 channels (neither a whole atom), a zero point, per-channel
    # shifts 20..23, ReLU, then 2x2 max pooling on the fly
    "conv_relu_pool": lambda: ([Conv(weights=_codes((10, 3, 3, 3), -127), padding=(1, 1, 1, 1),
                                     precision="int8", in_zero=-5),
                                _sdp(10), Pool(kind="max", kernel=2, stride=2, precision="int8")],
                               _codes((1, 3, 9, 12))),
    # strided, dilated, asymmetrically padded 5x3 conv, no activation, an output zero point
    "conv_strided_dilated": lambda: ([Conv(weights=_codes((16, 12, 5, 3), -127), stride=(2, 1),
                                           dilation=(1, 2), padding=(2, 0, 1, 3),
                                           precision="int8", in_zero=17),
                                      _sdp(16, act=None, out_zero=7)], _codes((1, 12, 11, 9))),
    # a fully connected layer (1x1 conv on a 1x1 input)
    "dense": lambda: ([Conv(weights=_codes((12, 40, 1, 1), -127), precision="int8",
                            in_zero=-128), _sdp(12, act="clip", clip_lo=-128, clip_hi=127)],
                      _codes((1, 40, 1, 1))),
    # an SDP reading memory (its input zero point) and a 3x3 stride-2 padded max pool
    "sdp_pool": lambda: ([_sdp(20, in_zero=3, shifts=(14, 16)),
                          Pool(kind="max", kernel=3, stride=2, padding=1, precision="int8")],
                         _codes((1, 20, 7, 10))),
    "pool": lambda: ([Pool(kind="max", kernel=(2, 3), stride=(2, 1), precision="int8")],
                     _codes((1, 9, 6, 7))),
    # average pooling (NVDLA's reciprocals in the simulator's int8 too), padded positions
    # reading as the zero point, on the fly after a convolution and alone
    "conv_avg_pool": lambda: ([Conv(weights=_codes((8, 5, 3, 3), -127), precision="int8",
                                    in_zero=4), _sdp(8, out_zero=-20),
                               Pool(kind="avg", kernel=3, stride=1, padding=1,
                                    count_include_pad=True, precision="int8", zero=-20)],
                              _codes((1, 5, 8, 9))),
    "avg_pool": lambda: ([Pool(kind="avg", kernel=(2, 5), stride=(2, 3), padding=(1, 2, 0, 1),
                               count_include_pad=True, precision="int8", zero=-7)],
                         _codes((1, 11, 7, 13))),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_round_trip(tmp_path, name):
    run, y = _record(*LAYERS[name]())
    test = export_run(run, str(tmp_path), name)
    assert np.array_equal(test.output, y[0])
    assert_round_trip(test)


def test_dense_over_rows_is_one_feature_map(tmp_path):
    """A dense layer over 5 rows (a batch of 1x1 positions, as a matmul is lowered) is written
    as one 1x1 convolution over a 1 x 5 feature map: the same codes, row r at column r."""
    ops = [Conv(weights=_codes((12, 24, 1, 1), -127), precision="int8", in_zero=9), _sdp(12)]
    run, y = _record(ops, _codes((5, 24, 1, 1)))
    test = export_run(run, str(tmp_path), "rows")
    assert test.output.shape == (12, 1, 5)
    assert np.array_equal(test.output[:, 0, :], y[:, :, 0, 0].T)
    assert_round_trip(test)


def test_a_convolution_cbuf_cannot_hold_is_written_in_row_slices(tmp_path):
    """64 channels of 64 x 40 (40 banks of input) beside 3x3x64x16 weights (3 banks): written,
    as NVDLA's compiler splits it, as slices of output rows that each fit CBUF, the rows their
    windows share read by both; together they hold the run's output."""
    from accel_codegen.tools.nvdla_export import export_runs

    ops = [Conv(weights=_codes((16, 64, 3, 3), -127), stride=(2, 1), padding=(1, 1, 2, 1),
                precision="int8", in_zero=-3), _sdp(16, act=None, out_zero=5)]
    x = _codes((1, 64, 40, 64))
    run, y = _record(ops, x)
    with pytest.raises(NvdlaInexactError, match="do not fit CBUF"):
        export_run(run, str(tmp_path), "whole")
    tests, refused = export_runs([run], str(tmp_path), "big")
    assert refused == [] and [t.name for t in tests] == ["big_00_s0", "big_00_s1"]
    for test in tests:
        assert_round_trip(test)
    assert np.array_equal(np.concatenate([t.output for t in tests], axis=1), y[0])
    # with a max pool on the fly: the pool becomes a layer of its own after the slices
    pooled, z = _record(ops + [Pool(kind="max", kernel=2, stride=2, precision="int8")], x)
    tests, refused = export_runs([pooled], str(tmp_path), "pooled")
    assert refused == [] and [t.units[0] for t in tests] == ["SDP", "SDP", "PDP"]
    assert np.array_equal(tests[-1].output, z[0])
    for test in tests:
        assert_round_trip(test)


def test_weights_beyond_cbuf_are_written_in_kernel_slices(tmp_path):
    """3x3x256x64 weights (36 banks) are more than CBUF: written as slices of whole kernel
    groups (48 and 16 kernels), each with its channels' SDP converters and output channels."""
    from accel_codegen.tools.nvdla_export import export_runs

    ops = [Conv(weights=_codes((64, 256, 3, 3), -127), padding=1, precision="int8",
                in_zero=11), _sdp(64, act=None, out_zero=-2)]
    run, y = _record(ops, _codes((1, 256, 6, 5)))
    tests, refused = export_runs([run], str(tmp_path), "deep")
    assert refused == [] and [t.output.shape[0] for t in tests] == [48, 16]
    for test in tests:
        assert_round_trip(test)
    assert np.array_equal(np.concatenate([t.output for t in tests]), y[0])


def test_a_depthwise_convolution_is_one_layer_per_group(tmp_path):
    """A depthwise 3x3 conv with its ReLU and a max pool, 6 channels: six tests, group g
    reading channel g and writing its output channel, pooled on the fly."""
    from accel_codegen.tools.nvdla_export import export_runs

    ops = [Conv(weights=_codes((6, 1, 3, 3), -127), groups=6, padding=1, precision="int8",
                in_zero=-8), _sdp(6), Pool(kind="max", kernel=2, stride=2, precision="int8")]
    run, y = _record(ops, _codes((1, 6, 8, 10)))
    tests, refused = export_runs([run], str(tmp_path), "dw")
    assert refused == [] and len(tests) == 6
    for test in tests:
        assert_round_trip(test)
    assert np.array_equal(np.concatenate([t.output for t in tests]), y[0])


def test_the_recorder_reads_an_operand_of_the_convolutions_output_shape():
    """The recorder copies an SDP's element-wise operand at the shape the SDP sees (here a
    padded 1x1 convolution's output, larger than its input), and the export refuses it (nv_small
    has no EW unit) naming it."""
    operand = _codes((1, 8, 6, 7))
    ops = [Conv(weights=_codes((8, 3, 1, 1), -127), padding=1, precision="int8"),
           _sdp(8, act=None, ew_op="add", operand=operand, ew_mul=1)]
    with recording() as runs:
        Device("nv_full").run(ops, _codes((1, 3, 4, 5)))
    assert np.array_equal(runs[0].ops[1].operand, operand)
    with pytest.raises(NvdlaInexactError, match="element-wise add"):
        export_run(runs[0], "/nonexistent", "ew")


@pytest.mark.parametrize("ops, message", [
    (lambda: [_sdp(8, act="prelu", prelu_mul=np.full(8, 3000, np.int16), prelu_shift=14)],
     "PReLU"),
    (lambda: [_sdp(8, act="clip", clip_lo=-128, clip_hi=90)], "no clip unit"),
    (lambda: [Conv(weights=_codes((8, 4, 3, 3), -127), groups=2, precision="int8"), _sdp(8)],
     "groups"),   # export_run alone: export_runs writes one layer per group (below)
    (lambda: [_spread_shifts()], "span 18 bits"),
], ids=["prelu", "clip", "groups", "shift-spread"])
def test_refused_with_the_difference_named(tmp_path, ops, message):
    run, _ = _record(ops(), _codes((1, 8, 6, 6)))
    with pytest.raises(NvdlaInexactError, match=message) as error:
        export_run(run, str(tmp_path), "refused")
    assert isinstance(error.value, AccelUnsupportedError)
    assert not (tmp_path / "refused" / "refused.cfg").exists()


def test_lenet5_round_trip(tmp_path, zoo):
    """LeNet-5 compiled for nv_small in int8: every accelerator run exported, each test plays
    back to the run's bits, and the last test's output region holds the logits' codes."""
    import accel_codegen as ac

    lenet = zoo("lenet5")
    calibration = random_inputs(tuple(lenet.x.shape), 4, 1234)
    part = ac.partition_for_accel(lenet.mod, config="nv_small", precision="int8",
                                  calibration=calibration)
    vm = ac.virtual_machine(ac.build(part))
    with recording() as runs:
        vm["main"](calibration[0])
    assert [len(r.ops) for r in runs] == [3, 3, 2, 2, 2]
    tests, refused = export_runs(runs, str(tmp_path), "lenet5")
    assert refused == [] and len(tests) == 5
    for test, run in zip(tests, runs):
        assert np.array_equal(test.output, run.output[0])
        assert_round_trip(test)
        assert test.cycles > 100   # at least the SDP's pipeline (cycles.py's testbench memory)
    # the layers chain: each test's input image is the previous run's output
    for before, run in zip(runs, runs[1:]):
        assert np.array_equal(before.output.reshape(-1), run.input.reshape(-1))


def test_cli_refuses_other_configurations(capsys, tmp_path):
    status, _, err = run_cli(capsys, "export-nvdla", "lenet5", "--config", "nv_full",
                             "--precision", "int8", "-o", tmp_path)
    assert status != 0 and "nv_small" in err
