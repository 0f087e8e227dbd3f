"""The INT8 LUT activations on vector lanes (sdp_i8_lut.c) against the
scalar definition and the NumPy reference, bit for bit.

Random tables and converters for every LUT activation: index selects from 0 to 31, tables near
and far from 0, LE around or beside LO, slopes beyond LE, per-channel converters (multipliers of
both signs and 0, shifts 0..40, biases that saturate int32), the element-wise ops, output
converters of both forms (out_mul 0 / 1 with a small shift: int32 lanes; others: int64 lanes),
lengths that are not multiples of 16, and every input code from -128 to 127. Each case checks
that the LUT inputs t reach LO, LE, and both slopes. ACCEL_SDP_I8_LUT=scalar (read once per
process) forces the scalar definition: a subprocess runs the same cases through it.
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from accel_codegen import Conv, Device, Sdp
from accel_codegen import reference as ref
from accel_codegen.sim.ops import LutInt8
from accel_codegen.sim.vocabulary import ACTIVATIONS

LUT_ACTS = [e.name for e in ACTIVATIONS if e.feature == "lut"]
SELECTS = [(0, 3), (4, 7), (9, 12), (16, 19), (21, 24), (27, 31), (31, 31)]
#: output converters: (out_mul, out_shift, out_zero)
OUTPUTS = [(1, 7, -128), (1, 8, 0), (0, 0, 5), (1, 0, -3), (-23170, 22, 9), (32767, 23, -128)]
CHANNELS = 37


def _t_of(op: Sdp, x: np.ndarray) -> np.ndarray:
    """The LUT's input t of an INT8 SDP with no element-wise op (accel.h's first two steps)."""
    return ref.sdp_int8_bs_bn(x.astype(np.int64) - op.in_zero, op.bias, op.mul, op.rshift)


def _case(index: int, act: str, spatial: tuple):
    """An INT8 SDP with a LUT activation whose per-channel converters spread t over the tables
    and beyond them, and its input (every code, in every channel)."""
    rng = np.random.default_rng(1000 + index)
    lo_sel, le_sel = SELECTS[index % len(SELECTS)]
    out_mul, out_shift, out_zero = OUTPUTS[index % len(OUTPUTS)]
    width = 256 << lo_sel
    if width <= 2**28:
        lo_start = int(rng.integers(-4 * width, 4 * width))
        beside = index % 4 == 1  # LE next to LO, not around it
        le_start = lo_start - (64 << le_sel) // (1 if beside else 2)
        le_start += int(rng.integers(0, 1 << le_sel))
    else:  # LO reaches INT32_MAX: LE below it, then the underflow slope
        lo_start = int(rng.integers(-2**29, 2**29))
        le_start = lo_start - int(rng.integers(1, 2**30))
    # entries of about +-256 output steps after the output converter
    amplitude = 32768 if out_shift >= 7 else 300
    lut = LutInt8(rng.integers(-amplitude, amplitude, 257).astype(np.int16),
                  rng.integers(-amplitude, amplitude, 65).astype(np.int16), lo_start, le_start,
                  lo_sel, le_sel, int(rng.integers(-32768, 32768)), int(rng.integers(0, 40)),
                  int(rng.integers(-32768, 32768)), int(rng.integers(0, 40)))
    # Per channel: t = (v + bias) * k with k = mul / 2^s, centred somewhere on
    # [le_start - span / 2, le_end + span / 2], v spanning a few LO steps to all of LE.
    le_end = le_start + (64 << le_sel)
    span = min(le_end - min(le_start, lo_start), 2**32)
    centres = rng.uniform(max(min(le_start, lo_start) - span / 2, -2**31 - 2**28),
                          min(le_end + span / 2, 2**31 + 2**28), CHANNELS)
    reach = span * 2.0 ** rng.uniform(-7, 0, CHANNELS)  # t's range over v in [-255, 255]
    # one right shift for the layer (each channel's own would make NVDLA's BS multiply the
    # others by 2^(S - shift), accel.h: a shift across channels is test_sdp_engine's), the
    # one that gives the widest reach 2^15 multiplier steps; the multipliers spread the reach
    k = reach / 510
    shift = np.full(CHANNELS, int(np.clip(np.floor(np.log2(510 * 32767 / span)), 0, 40)))
    mul = np.clip(np.round(k * 2.0 ** shift), 1, 32767)
    mul = np.where(rng.random(CHANNELS) < 0.15, -mul, mul)  # negative multipliers
    bias = np.clip(np.round(centres / (mul / 2.0 ** shift)), -2**31, 2**31 - 1)
    mul[3], bias[3] = 0, 77  # t = 0 throughout
    mul[5], bias[5] = 32767, 2**31 - 1  # BS saturates at INT32_MAX
    mul[6], bias[6] = 32767, -2**31  # and at INT32_MIN
    op = Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16),
             rshift=shift.astype(np.uint8), act=act, lut=lut, precision="int8",
             in_zero=int(rng.integers(-128, 128)), out_mul=out_mul, out_shift=out_shift,
             out_zero=out_zero)
    codes = np.arange(-128, 128, dtype=np.int8)
    count = int(np.prod(spatial))
    x = np.stack([np.resize(np.roll(codes, 7 * c), count) for c in range(CHANNELS)])
    x = rng.permuted(x, axis=1).reshape((1, CHANNELS) + spatial)
    return op, x


def _reaches_every_branch(op: Sdp, x: np.ndarray):
    lut = op.lut
    t = _t_of(op, x).reshape(-1)
    lo = (t >= lut.lo_start) & (t < lut.lo_start + (256 << lut.lo_index_select))
    le = ~lo & (t >= lut.le_start) & (t < lut.le_start + (64 << lut.le_index_select))
    under = ~lo & ~le & (t < lut.le_start)
    over = ~lo & ~le & ~under
    return [int(n) for n in (lo.sum(), le.sum(), under.sum(), over.sum())]


#: (case index, activation, spatial shape): lengths 35, 2100 (two chunks of the independent
#: run: 2048 + 52) and 1 (one value per channel: the channel-wise path, 37 = 2 x 16 + 5)
CASES = [(i, LUT_ACTS[i % len(LUT_ACTS)], [(5, 7), (30, 70), (1, 1)][i % 3])
         for i in range(2 * len(SELECTS))]


def _run_cases(device):
    out = []
    for index, act, spatial in CASES:
        op, x = _case(index, act, spatial)
        out.append(device.run([op], x)[0])
    return out


@pytest.mark.parametrize("index,act,spatial", CASES,
                         ids=[f"{i}-{a}-{'x'.join(map(str, s))}" for i, a, s in CASES])
def test_random_tables_equal_the_reference(index, act, spatial):
    op, x = _case(index, act, spatial)
    y = Device("nv_full", num_threads=1).run([op], x)[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))
    if spatial != (1, 1):
        lo, le, under, over = _reaches_every_branch(op, x)
        # with LO reaching INT32_MAX (large selects) nothing lies beyond LE
        reach_max = op.lut.lo_start + (256 << op.lut.lo_index_select) > 2**31
        assert lo > 0 and le > 0 and under > 0 and (over > 0 or reach_max), \
            (lo, le, under, over)
        # not only saturated codes
        assert len(np.unique(y)) > 4


@pytest.mark.parametrize("ew_op", ["add", "mul", "max", "min"])
def test_element_wise_ops_before_the_table(ew_op):
    """An element-wise operand takes t through the int64 steps (front8) on both paths."""
    op, x = _case(4, "silu", (9, 11))
    rng = np.random.default_rng(5)
    operand = rng.integers(-128, 128, x.shape).astype(np.int8)
    operand.flat[:2] = [-128, 127]
    op = Sdp(**{**op.__dict__, "ew_op": ew_op, "operand": operand, "ew_zero": 3,
                "ew_mul": int(rng.integers(1, 32768)), "ew_shift": 4})
    device = Device("nv_full", num_threads=1)
    np.testing.assert_array_equal(device.run([op], x)[0], ref.run_chain([op], x))


@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_a_conv_epilogue_with_large_accumulators(mode):
    """A CONV's accumulators (|v| up to 2^20 here) through converters with shifts below and
    above 16: the int32 front's limit and its int64 fallback."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 24, 9, 13)).astype(np.int8)
    x[0, :, 0, :] = 127
    x[0, :, 1, :] = -128
    w = rng.integers(-127, 128, (20, 24, 3, 3)).astype(np.int8)
    w[0], w[1] = 127, -127  # accumulators near the extremes
    op, _ = _case(3, "gelu", (1, 1))
    shift = rng.integers(0, 30, 20)
    mul = rng.integers(0, 32768, 20)
    lut = op.lut
    centre = lut.lo_start + (128 << lut.lo_index_select)
    bias = np.clip(np.round(centre * 2.0 ** shift / np.maximum(mul, 1)) // 8, -2**31, 2**31 - 1)
    chain = [Conv(w, padding=1, precision="int8", in_zero=-2),
             Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16),
                 rshift=shift.astype(np.uint8), act="gelu", lut=lut, precision="int8",
                 out_mul=1, out_shift=7, out_zero=-128)]
    y, _ = Device("nv_full", num_threads=2).run(chain, x, mode=mode)
    np.testing.assert_array_equal(y, ref.run_chain(chain, x))


def _channel_wise(index: int):
    """_case's converters and table with every input code in every channel, one position
    per image: 256 images of [CHANNELS] outputs (a fully connected layer's shape: each SDP
    step takes the channels along, sdp_i8_channels)."""
    op, _ = _case(index, LUT_ACTS[index % len(LUT_ACTS)], (1, 1))
    codes = np.arange(-128, 128, dtype=np.int8)
    x = np.stack([np.roll(codes, 7 * c) for c in range(CHANNELS)], axis=1)
    return op, x.reshape(256, CHANNELS, 1, 1)


@pytest.mark.parametrize("index", range(len(SELECTS)))
def test_one_value_per_channel_reaches_every_branch(index):
    """Along the channels (AVX2: t in int64 lanes with each lane's converter, the table in
    int32 lanes, the slopes through lut_int8_eval; 37 channels: a step of 32 and a padded tail
    of 5), t in LO, LE and both slopes, against the reference."""
    op, x = _channel_wise(index)
    y = Device("nv_full", num_threads=1).run([op], x)[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))
    lo, le, under, over = _reaches_every_branch(op, x)
    reach_max = op.lut.lo_start + (256 << op.lut.lo_index_select) > 2**31
    assert lo > 0 and le > 0 and under > 0 and (over > 0 or reach_max), (lo, le, under, over)
    assert len(np.unique(y)) > 4


@pytest.mark.parametrize("ew_op", ["add", "mul", "max", "min"])
def test_one_value_per_channel_with_an_element_wise_op(ew_op):
    op, x = _channel_wise(4)
    rng = np.random.default_rng(6)
    operand = rng.integers(-128, 128, x.shape).astype(np.int8)
    operand.flat[:2] = [-128, 127]
    op = Sdp(**{**op.__dict__, "ew_op": ew_op, "operand": operand, "ew_zero": -3,
                "ew_mul": int(rng.integers(1, 32768)), "ew_shift": 6})
    y = Device("nv_full", num_threads=1).run([op], x)[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))


@pytest.mark.parametrize("act", ["sigmoid", "silu", "hardswish", "hardsigmoid"])
def test_a_fully_connected_epilogue_through_the_compiler_tables(act):
    """Squeeze-excite's FC layers: a 1x1 CONV on one position per image, its accumulators
    converted along the channels, through the compiler's table."""
    from accel_codegen.quantization import TensorQuant, encode_multipliers
    from accel_codegen.quantization.lut import layer_lut

    rng = np.random.default_rng(31)
    cin, cout = 48, 200
    out = TensorQuant(1 / 255, -128) if act in ("sigmoid", "hardsigmoid") else TensorQuant(0.05, -20)
    acc_scale = rng.uniform(0.5e-4, 2e-4, cout)
    table = layer_lut(act, out, float(acc_scale.max()), "test")
    mul, rshift = encode_multipliers(acc_scale / table.input_step, "test")
    w = rng.integers(-127, 128, (cout, cin, 1, 1)).astype(np.int8)
    chain = [Conv(w, precision="int8", in_zero=-7),
             Sdp(bias=rng.integers(-20000, 20000, cout).astype(np.int32), mul=mul,
                 rshift=rshift, act=act, precision="int8", out_mul=1,
                 out_shift=table.out_shift, out_zero=out.zero, lut=table.lut)]
    x = rng.integers(-128, 128, (5, cin, 1, 1)).astype(np.int8)
    y, _ = Device("nv_full", num_threads=1).run(chain, x)
    np.testing.assert_array_equal(y, ref.run_chain(chain, x))
    assert len(np.unique(y)) > 20


def test_the_scalar_path_gives_the_same_codes(tmp_path):
    """ACCEL_SDP_I8_LUT=scalar: the portable definition (what a build without AVX-512 runs)
    gives the codes of the vector path and of the reference."""
    script = (
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "import test_lut_int8_lanes as m\n"
        "from accel_codegen import Device\n"
        "ys = m._run_cases(Device('nv_full', num_threads=1))\n"
        f"np.savez({str(tmp_path / 'scalar.npz')!r}, *ys)\n")
    env = {**os.environ, "ACCEL_SDP_I8_LUT": "scalar"}
    # cwd away from the repository root: `python -c` puts the working directory first on
    # sys.path, and the source tree there has no compiled extension when the package is installed
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    scalar = np.load(tmp_path / "scalar.npz")
    vector = _run_cases(Device("nv_full", num_threads=1))
    for i, (y, (index, act, spatial)) in enumerate(zip(vector, CASES)):
        op, x = _case(index, act, spatial)
        np.testing.assert_array_equal(scalar[f"arr_{i}"], y, err_msg=json.dumps([index, act]))
        np.testing.assert_array_equal(y, ref.run_chain([op], x))


# --- the per-layer plan: codes by input ranges (sdp_i8_lut.c, sdp_i8_lut_plan) -----------------
#: Layer runs of at least this many elements get a plan (LUT_PLAN_MIN_ELEMENTS, sdp_i8_internal.h).
PLAN_ELEMENTS = 1 << 12


def _compiler_case(act: str, seed: int):
    """A standalone INT8 SDP through the compiler's tables (quantization/lut.py: every code
    change inside LO), per-channel converters whose inputs reach below and above LO, on
    16 x 64 x 65 values: enough for a plan."""
    from accel_codegen.quantization import TensorQuant, encode_multipliers
    from accel_codegen.quantization.lut import layer_lut

    rng = np.random.default_rng(seed)
    channels = 16
    out = TensorQuant(0.05, -20) if act != "sigmoid" else TensorQuant(1 / 255, -128)
    in_scale = rng.uniform(0.03, 0.09, channels)
    table = layer_lut(act, out, float(in_scale.max()), "test")
    mul, rshift = encode_multipliers(in_scale / table.input_step, "test")
    op = Sdp(bias=rng.integers(-40, 40, channels).astype(np.int32), mul=mul, rshift=rshift,
             act=act, precision="int8", in_zero=int(rng.integers(-5, 5)), out_mul=1,
             out_shift=table.out_shift, out_zero=out.zero, lut=table.lut)
    codes = np.arange(-128, 128, dtype=np.int8)
    x = np.stack([np.resize(np.roll(codes, 11 * c), 64 * 65) for c in range(channels)])
    return op, rng.permuted(x, axis=1).reshape(1, channels, 64, 65)


def _jumping_case(seed: int):
    """Random LO entries (several code changes in one bin: those bins' lanes take the table
    arithmetic) inside a flat LE with flat slopes (constant codes outside LO)."""
    rng = np.random.default_rng(seed)
    sel, channels = 12, 16
    lo_start = int(rng.integers(-2**22, 2**22))
    lut = LutInt8(rng.integers(-8000, 8000, 257).astype(np.int16),
                  np.full(65, 1234, np.int16), lo_start, lo_start - (32 << (sel + 3)), sel,
                  sel + 3, 0, 0, 0, 0)
    centre = lo_start + (128 << sel)
    mul = rng.integers(20000, 32767, channels)
    shift = np.zeros(channels, np.int64)  # t = (v + bias) mul: +-128 mul reaches past LO
    k = mul / 2.0 ** shift
    bias = np.round(centre / k + rng.integers(-20, 20, channels))
    op = Sdp(bias=bias.astype(np.int32), mul=mul.astype(np.int16), rshift=shift.astype(np.uint8),
             act="silu", lut=lut, precision="int8", in_zero=0, out_mul=1, out_shift=5,
             out_zero=3)
    x = rng.integers(-128, 128, (1, channels, 64, 65)).astype(np.int8)
    return op, x


# A standalone run converts each channel's 256 codes once per chunk of 2048 values and looks the
# chunk up in them (sdp_i8.c, run_table): 16 x 2 x 256 values a run of these cases. The plan is
# kept between runs (sdp_i8_lut.c) and made once the runs of its table reach 2^12 values.
PLAN_RUNS = 6

PLAN_CASES = ([("compiler", act, 70 + i) for i, act in enumerate(
    [a for a in LUT_ACTS if ACTIVATIONS[a].int8])] + [("jumping", None, 90)])


def _plan_case(kind, act, seed):
    return _compiler_case(act, seed) if kind == "compiler" else _jumping_case(seed)


@pytest.mark.parametrize("kind,act,seed", PLAN_CASES, ids=[f"{k}-{a}" for k, a, _ in PLAN_CASES])
def test_the_plan_gives_the_codes_of_the_table(kind, act, seed, monkeypatch):
    """Codes by input ranges (a layer run of >= 2^12 values) equal the reference and the
    table arithmetic in lanes (ACCEL_SDP_I8_LUT=gather: no plan), with inputs below, inside
    and above LO."""
    op, x = _plan_case(kind, act, seed)
    assert x.size >= PLAN_ELEMENTS
    t = _t_of(op, x)
    lo_end = op.lut.lo_start + (256 << op.lut.lo_index_select)
    assert (t < op.lut.lo_start).any() and (t >= lo_end).any()
    device = Device("nv_full", num_threads=2)
    expected = ref.run_chain([op], x)
    for _ in range(PLAN_RUNS):  # the last runs through the kept plan
        y = device.run([op], x)[0]
        np.testing.assert_array_equal(y, expected)
    assert len(np.unique(y)) > 15
    monkeypatch.setenv("ACCEL_SDP_I8_LUT", "gather")
    np.testing.assert_array_equal(device.run([op], x)[0], y)


def test_a_conv_epilogue_through_the_plan():
    """A fused CONV + LUT SDP of 16 x 64 x 64 outputs: the epilogue's codes by input ranges
    equal the reference."""
    rng = np.random.default_rng(13)
    op, _ = _compiler_case("hardswish", 71)
    x = rng.integers(-128, 128, (1, 8, 64, 64)).astype(np.int8)
    w = rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    # accumulators of about +-2^15: the converters scaled down to reach the same t
    sdp = Sdp(**{**op.__dict__, "in_zero": 0,
                 "rshift": (op.rshift.astype(np.int64) + 7).astype(np.uint8)})
    chain = [Conv(w, padding=1, precision="int8", in_zero=-2), sdp]
    y, _ = Device("nv_full", num_threads=2).run(chain, x)
    np.testing.assert_array_equal(y, ref.run_chain(chain, x))
    assert len(np.unique(y)) > 40


#: (input channels, output channels, kernel, stride, groups, size): the CONV paths whose epilogue
#: takes the plan in lanes (conv/i8.h: panel_step_lut): a flat 1x1 (codes per panel), a padded
#: 3x3 (a tile's rows), a small grid (small_vnni); and depthwise rows and a small depthwise plane
#: (dw_rows_vbmi, through sdp_i8_span: the same plan)
PLAN_LANE_CONVS = [(16, 48, 1, 1, 1, 40), (8, 16, 3, 1, 1, 33), (64, 40, 1, 1, 1, 7),
                   (24, 24, 3, 1, 24, 60), (48, 48, 5, 2, 48, 14)]


@pytest.mark.parametrize("geometry", PLAN_LANE_CONVS, ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("extra", [4, 20], ids=["shift-below-17", "shift-above-16"])
def test_conv_epilogues_in_lanes_through_the_plan(geometry, extra):
    """The CONV epilogue's LUT in lanes (sdp_i8_lanes_lut: v clamped where t passes the plan's
    ends, t in int32 lanes by the small-shift or the split form) gives the reference's codes,
    with per-channel shifts (BS's pre), biases and accumulators reaching both plan ends."""
    cin, cout, k, stride, groups, size = geometry
    rng = np.random.default_rng(cin * cout + extra)
    op, _ = _compiler_case("silu", 72)
    x = rng.integers(-128, 128, (1, cin, size, size)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
    # the accumulators' unit: t near the table's range at the shifts below 17, and at the
    # split form's shifts a bias that moves it there
    base = np.resize(op.rshift.astype(np.int64), cout) + extra
    bias = np.resize(op.bias, cout).astype(np.int64) * (1 << (extra - 4))
    if extra > 16:
        bias += (op.lut.lo_start + (rng.integers(0, 256, cout) << op.lut.lo_index_select)
                 ).astype(np.int64) * (1 << int(base.max())) // np.resize(op.mul, cout)
    sdp = Sdp(**{**op.__dict__, "in_zero": 0, "rshift": base.astype(np.uint8),
                 "mul": np.resize(op.mul, cout),
                 "bias": np.clip(bias, -2**31, 2**31 - 1).astype(np.int32)})
    chain = [Conv(w, stride=stride, padding=k // 2, groups=groups, precision="int8",
                  in_zero=-2), sdp]
    expected = ref.run_chain(chain, x)
    device = Device("nv_full", num_threads=2)
    runs = 1 + -(-PLAN_ELEMENTS // expected.size)  # the last ones through the kept plan
    for _ in range(runs):
        np.testing.assert_array_equal(device.run(chain, x)[0], expected)
    assert len(np.unique(expected)) > 8


@pytest.mark.parametrize("geometry", [PLAN_LANE_CONVS[0], PLAN_LANE_CONVS[3]],
                         ids=["1x1", "depthwise"])
def test_the_byte_tables_and_the_bins_give_the_same_codes(geometry, monkeypatch):
    """A plan's byte tables (VBMI builds: vpermi2b lookups, sdp_i8_lanes.h's sdp_i8_lut_bytes)
    and its bins (ACCEL_SDP_I8_LUT=bins, read per run: a plan without byte tables, a gather
    per 16 values) give the reference's codes, in a conv's panel epilogue and through
    sdp_i8_span (depthwise), with accumulators whose t spans the table (154 codes)."""
    cin, cout, k, stride, groups, size = geometry
    rng = np.random.default_rng(31)
    op, _ = _compiler_case("silu", 73)
    x = rng.integers(-128, 128, (1, cin, size, size)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
    base = np.resize(op.rshift.astype(np.int64), cout) + 6
    bias = np.resize(op.bias, cout).astype(np.int64) * (1 << 6)
    sdp = Sdp(**{**op.__dict__, "in_zero": 0, "rshift": base.astype(np.uint8),
                 "mul": np.resize(op.mul, cout),
                 "bias": np.clip(bias, -2**31, 2**31 - 1).astype(np.int32)})
    chain = [Conv(w, stride=stride, padding=k // 2, groups=groups, precision="int8",
                  in_zero=-2), sdp]
    expected = ref.run_chain(chain, x)
    _assert_planned_and_bins(chain, x, expected, monkeypatch)
    assert len(np.unique(expected)) > 100


def _assert_planned_and_bins(chain, x, expected, monkeypatch) -> None:
    """The reference's codes from the library's path and from the bins (ACCEL_SDP_I8_LUT=bins),
    the last runs of each through the plan it keeps (planned after PLAN_ELEMENTS values)."""
    device = Device("nv_full", num_threads=1)
    runs = 1 + -(-PLAN_ELEMENTS // expected.size)
    for path in ("", "bins"):
        monkeypatch.setenv("ACCEL_SDP_I8_LUT", path)
        for _ in range(runs):
            np.testing.assert_array_equal(device.run(chain, x)[0], expected)


def _has_vbmi() -> bool:
    try:
        return " avx512vbmi " in pathlib.Path("/proc/cpuinfo").read_text() + " "
    except OSError:
        return False


def test_verbose_names_the_plan(tmp_path):
    """ACCEL_VERBOSE prints the plan of a LUT layer (bins, changes, bins of several changes):
    the cases above take it, once each: the plan is kept from run to run."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
        "import test_lut_int8_lanes as m\n"
        "from accel_codegen import Device\n"
        "for case in m.PLAN_CASES:\n"
        "    op, x = m._plan_case(*case)\n"
        f"    for _ in range({PLAN_RUNS}):\n"
        "        Device('nv_full', num_threads=1).run([op], x)\n")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "ACCEL_VERBOSE": "1"},
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ",lut_plan," in ln]
    assert len(lines) == len(PLAN_CASES), done.stderr[-2000:]
    multi = [int(ln.rsplit("_multi", 1)[1]) for ln in lines]
    assert multi[-1] > 0 and all(m == 0 for m in multi[:-1])  # only the jumping table's
    # the byte tables' changes per interval (-1: none): the compiler's tables have them where
    # the library was built for a VBMI host (-march=native), the jumping table never
    per = [int(ln.split("_bytes", 1)[1].split("_", 1)[0]) for ln in lines]
    assert per[-1] == -1
    if _has_vbmi():
        assert all(1 <= m <= 4 for m in per[:-1]), lines


def test_kept_lane_constants_follow_the_channels():
    """The conv epilogue's per-channel lane constants are kept between calls keyed by the
    channels' bias, mul and rshift (sdp_i8_lanes.c's lanes cache): the same layer with one
    channel's bias changed, under the same kept plan, still gives the reference's codes."""
    rng = np.random.default_rng(29)
    op, _ = _compiler_case("silu", 72)
    cout = 16
    x = rng.integers(-128, 128, (1, 16, 40, 40)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, 16, 1, 1)).astype(np.int8)
    base = np.resize(op.rshift.astype(np.int64), cout) + 4
    fields = {**op.__dict__, "in_zero": 0, "rshift": base.astype(np.uint8),
              "mul": np.resize(op.mul, cout), "bias": np.resize(op.bias, cout)}
    device = Device("nv_full", num_threads=1)
    chain = [Conv(w, precision="int8", in_zero=-2), Sdp(**fields)]
    runs = 1 + -(-PLAN_ELEMENTS // (cout * 40 * 40))
    for _ in range(runs):
        y = device.run(chain, x)[0]
    np.testing.assert_array_equal(y, ref.run_chain(chain, x))
    bias = fields["bias"].astype(np.int64)
    bias[5] += 1 << (int(base[5]) + 2)  # t moves by about 4 units: other codes in channel 5
    moved = [Conv(w, precision="int8", in_zero=-2),
             Sdp(**{**fields, "bias": bias.astype(np.int32)})]
    expected = ref.run_chain(moved, x)
    assert not np.array_equal(expected[:, 5], y[:, 5])
    np.testing.assert_array_equal(device.run(moved, x)[0], expected)
    np.testing.assert_array_equal(device.run(chain, x)[0], y)


def test_the_direct_form_rounds_ties_away_from_zero():
    """The conv epilogue's direct form (sdp_i8_lanes.h, exact = 1: u = (x mul + 2^(s-1) - base
    2^s + (x >> 31)) >> s) rounds a negative tie away from zero as rhaz does: with mul 1 and
    shift 1 every odd negative x = v + bias is a tie, and the bias puts x = 2T - 1 (input code 0)
    on a threshold T of the table's codes, where floor rounding would give code(T)."""
    from accel_codegen.sim.reference import lut_int8, rhaz

    op, _ = _compiler_case("silu", 72)
    lut = op.lut
    start = max(lut.lo_start, -(1 << 18))  # silu's codes change every few thousand t near 0
    t = np.arange(start, 0, dtype=np.int64)
    codes = np.clip(rhaz(lut_int8(t, lut).astype(np.int64), op.out_shift) + op.out_zero,
                    -128, 127)
    T = int(t[1:][codes[1:] != codes[:-1]][-1])  # the last change below 0: code(T - 1) != code(T)
    cout, size = 16, 64
    w = np.zeros((cout, 4, 1, 1), np.int8)
    w[:, 0] = 1  # v = input channel 0's code (in_zero 0)
    sdp = Sdp(bias=np.full(cout, 2 * T - 1, np.int32), mul=np.ones(cout, np.int16),
              rshift=np.ones(cout, np.uint8), act="silu", precision="int8", out_mul=1,
              out_shift=op.out_shift, out_zero=op.out_zero, lut=lut)
    x = np.resize(np.arange(-128, 128, dtype=np.int8), (1, 4, size, size))
    chain = [Conv(w, precision="int8", in_zero=0), sdp]
    expected = ref.run_chain(chain, x)
    at_zero = expected[0, 0][x[0, 0] == 0]
    assert at_zero.size and (at_zero == codes[T - 1 - start]).all()
    assert codes[T - 1 - start] != codes[T - start]
    device = Device("nv_full", num_threads=1)
    for _ in range(1 + -(-PLAN_ELEMENTS // expected.size)):  # the last ones through the plan
        np.testing.assert_array_equal(device.run(chain, x)[0], expected)


def test_a_channel_whose_bs_saturates_every_value():
    """Bias -2^31 on a channel whose BS power pre = shift_max - rshift is 31 or more: NVDLA's
    BS saturates every t = v + bias != 0, so no v has the int32 form of t (its range of v was
    empty, and cast to int32 it had read as all of int32: v + bias wrapped, sdp_i8_lut.c's
    lut_front_plan, sdp_i8_avx2.c's lut_v8_plan). Through the plan (runs past 2^12 values) and
    without it, every code, against the reference."""
    op, x = _compiler_case("silu", 76)
    rshift = op.rshift.astype(np.int64)
    rshift[:4] = 0
    rshift[4] = 32  # shift_max: pre = 32 for channels 0-3, 31 beside a shift of 1
    rshift[5] = 1
    bias = op.bias.astype(np.int64)
    bias[[0, 2, 5]] = -2**31
    bias[[1, 3]] = 2**31 - 1
    sdp = Sdp(**{**op.__dict__, "in_zero": 0, "rshift": rshift.astype(np.uint8),
                 "bias": bias.astype(np.int32)})
    expected = ref.run_chain([sdp], x)
    device = Device("nv_full", num_threads=1)
    for _ in range(PLAN_RUNS):  # the last ones through the kept plan
        np.testing.assert_array_equal(device.run([sdp], x)[0], expected)
    # BS saturates channels 0-5 whatever v: one code each
    assert all(len(np.unique(expected[0, c])) == 1 for c in range(6))


INT8_LUT_ACTS = [a for a in LUT_ACTS if ACTIVATIONS[a].int8]


@pytest.mark.parametrize("act", INT8_LUT_ACTS)
@pytest.mark.parametrize("reach", ["clamped", "unclamped", "deep"])
def test_the_folded_form_through_the_compiler_tables(act, reach):
    """The conv epilogue's folded forms (sdp_i8_lanes.h, exact 2: u = ((v mul + add) >> s) -
    low, the bias in add modulo 2^32, no rhaz sign term, v clamped where t passes the plan's
    ends; exact 3: no clamp, where |v| <= the kernel's bound 4 x 255 x 128 keeps t inside
    them) on a 1x1 conv from 4 channels, and the 16-bit split form (exact 4: no clamp, the
    product from vpdpwssd / vpmulhuw / vpmullw) on a 3x3 conv from 32 channels whose shift 11
    makes the plan's span of t times 2^s more than 2^32 (deep), through the compiler's tables
    for every int8 LUT activation: the reference's codes, the accumulators reaching both plan
    ends (clamped), or t centred on LO within 2^21 of its middle (unclamped, deep)."""
    rng = np.random.default_rng(41 + INT8_LUT_ACTS.index(act))
    op, _ = _compiler_case(act, 77)
    cin, cout, size, k = (32, 16, 40, 3) if reach == "deep" else (4, 16, 48, 1)
    x = rng.integers(-128, 128, (1, cin, size, size)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
    w[:2] = 127  # the largest accumulators: cin x k^2 x 127 x 127 on both sides
    mul = np.resize(op.mul, cout).astype(np.int64)
    lut = op.lut
    centre = lut.lo_start + (128 << lut.lo_index_select) + rng.integers(-2**20, 2**20, cout)
    if reach == "clamped":
        shift = np.resize(op.rshift.astype(np.int64), cout) + 4
    elif reach == "deep":
        shift = np.full(cout, 11)
        centre = lut.lo_start + (128 << lut.lo_index_select) + rng.integers(-2**21, 2**21, cout)
    else:  # |v| mul / 2^s <= 2^21 for every |v| <= 4 x 255 x 128, and 2 x that bound times
        # mul below 2^32 (q's range without the clamp)
        mul = np.maximum(mul // 4, 1)
        centre = lut.lo_start + (128 << lut.lo_index_select) + rng.integers(-2**19, 2**19, cout)
        shift = np.ceil(np.log2(mul * (4 * 255 * 128) / 2.0**21)).astype(np.int64)
    # one BS shift for the layer (its largest): a channel of a smaller shift scales by 2^pre
    shift[:] = shift.max()
    bias = np.round(centre * 2.0**shift / mul).astype(np.int64)
    sdp = Sdp(**{**op.__dict__, "in_zero": 0, "rshift": shift.astype(np.uint8),
                 "mul": mul.astype(np.int16),
                 "bias": np.clip(bias, -2**31, 2**31 - 1).astype(np.int32)})
    chain = [Conv(w, precision="int8", in_zero=-3, padding=k // 2), sdp]
    expected = ref.run_chain(chain, x)
    device = Device("nv_full", num_threads=1)
    for _ in range(1 + -(-PLAN_ELEMENTS // expected.size)):  # the last ones through the plan
        np.testing.assert_array_equal(device.run(chain, x)[0], expected)
    assert len(np.unique(expected)) > (20 if reach == "clamped" else 4)


def _compiler_table(act: str):
    """The compiler's table for ``act`` at a shift <= 8 (lut_vs_relu.py's layer: mul
    16913-29301, shift 7): (table, out, mul, rshift, every t where its output code changes)."""
    from accel_codegen.quantization import TensorQuant, encode_multipliers
    from accel_codegen.quantization.lut import layer_lut
    from accel_codegen.sim.reference import lut_int8, rhaz

    out = TensorQuant(0.05, -20 if act == "silu" else -10)
    acc_scale = 0.05 * 0.002
    table = layer_lut(act, out, acc_scale, "test")
    mul, rshift = encode_multipliers(np.full(1, acc_scale / table.input_step), "test")
    assert int(rshift[0]) <= 8
    lut = table.lut
    t = np.arange(lut.lo_start - (1 << 22), lut.lo_start + (257 << lut.lo_index_select) + (1 << 22),
                  dtype=np.int64)
    codes = np.clip(rhaz(lut_int8(t, lut).astype(np.int64), table.out_shift) + out.zero,
                    -128, 127)
    return table, out, mul, rshift, t[1:][codes[1:] != codes[:-1]]


def _byte_form_case(act: str):
    """A 1x1 conv from 4 channels with the compiler's tables at a shift <= 8 (lut_vs_relu.py's
    layer: mul 16913-29301, shift 7), whose accumulators v = a + 127 b (input channels 0 and 1
    on a 256 x 256 grid: every pair of codes once, so every v in [-16384, 16383] but a few)
    cross each of the table's code changes on some channel (its bias puts the change at v = 0),
    and on other channels pass both ends of the byte tables (where the byte form clamps v) by
    more than a margin of 2^15 values of t."""
    table, out, mul, rshift, changes = _compiler_table(act)
    s, m, lut = int(rshift[0]), int(mul[0]), table.lut
    # targets: every change, then at least 8 points spread below the first and above the last;
    # channels 3 past a multiple of 8 (a block of 3 rows at the end)
    cout = len(changes) + 8 + (3 - len(changes)) % 8
    spread = np.linspace(changes[0] - (1 << 21), changes[-1] + (1 << 21), cout - len(changes))
    target = np.concatenate([changes, spread.astype(np.int64)])
    bias = np.round(target * 2.0**s / m).astype(np.int64)
    mul, rshift = np.resize(mul, cout), np.resize(rshift, cout)
    w = np.zeros((cout, 4, 1, 1), np.int8)
    w[:, 0], w[:, 1] = 1, 127
    a = np.arange(-128, 128, dtype=np.int8)
    x = np.zeros((1, 4, 256, 256), np.int8)
    x[0, 0] = a[:, None]
    x[0, 1] = a[None, :]
    sdp = Sdp(bias=bias.astype(np.int32), mul=mul, rshift=rshift, act=act, precision="int8",
              out_mul=1, out_shift=table.out_shift, out_zero=out.zero, lut=lut)
    return [Conv(w, precision="int8", in_zero=0), sdp], x, len(changes)


@pytest.mark.parametrize("act, pad", [("silu", None), ("hardswish", None), ("sigmoid", None),
                                      ("silu", 0)])
def test_the_byte_form_through_the_compiler_tables(act, pad, monkeypatch):
    """The conv panel epilogue's byte form (sdp_i8_lanes.h's sdp_i8_lanes_lut_q, every channel
    lq: Q = clamp(v) mul 2^(8-s) + add holds u in bytes 1-3, the tables' outside thresholds
    compared on v) and its panels' rows four at a time (conv/i8.h's panel_step_lut_bytes: blocks
    of 8 rows and one of 3; 65536 outputs, so panels of 48 and a last one of 16): every code change of the table crossed at its exact v on some channel, both ends
    of the tables passed, against the reference and the bins (ACCEL_SDP_I8_LUT=bins). pad 0:
    SiLU's tables without LO's spare steps (quantization/lut.py's LO_PAD_STEPS), whose outermost
    change lies beyond the byte tables' 256 intervals (as a user's own tables may): a threshold
    outside them, compared on v."""
    if pad is not None:
        from accel_codegen.quantization import lut as lut_module
        monkeypatch.setattr(lut_module, "LO_PAD_STEPS", pad)
    chain, x, changes = _byte_form_case(act)
    expected = ref.run_chain(chain, x)
    assert len(np.unique(expected)) > (15 if act == "sigmoid" else 100)
    device = Device("nv_full", num_threads=1)
    for path in ("", "bins"):
        monkeypatch.setenv("ACCEL_SDP_I8_LUT", path)
        for _ in range(2):  # the second through the kept plan
            np.testing.assert_array_equal(device.run(chain, x)[0], expected)


def _verbose(tmp_path, body: str, kind: str) -> list:
    """ACCEL_VERBOSE's ``kind`` lines (read once per process: a child) of ``body``, run with this
    module imported as m and Device, np at hand."""
    script = ("import sys\n"
              f"sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})\n"
              "import numpy as np\n"
              "import test_lut_int8_lanes as m\n"
              "from accel_codegen import Device\n" + body)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "ACCEL_VERBOSE": "1"},
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if f",{kind}," in ln]
    assert lines, done.stderr[-2000:]
    return lines


def test_verbose_names_the_byte_form(tmp_path):
    """ACCEL_VERBOSE's lut_lanes line: every channel of the byte-form cases takes the byte form
    (on a VBMI host; elsewhere the plan has no byte tables and none does)."""
    lines = _verbose(tmp_path, "for act in ('silu', 'hardswish', 'sigmoid'):\n"
                               "    chain, x, _ = m._byte_form_case(act)\n"
                               "    for _ in range(2):\n"
                               "        Device('nv_full', num_threads=1).run(chain, x)\n",
                     "lut_lanes")
    counts = [(int(ln.split(",channels", 1)[1].split("_", 1)[0]), int(ln.rsplit("_byte_form", 1)[1]))
              for ln in lines]
    assert all(f == (c if _has_vbmi() else 0) for c, f in counts), lines


def _depthwise_byte_form_case(act: str, size: int):
    """A 3x3 depthwise conv whose only tap is the centre (weight 1, so v = the input code:
    every v in [-128, 127] on each plane of 16x16 or more) with the compiler's tables at a shift
    <= 8 (lut_vs_relu.py's converter), one channel per code change of the table with the change
    at v = 0 (its bias), and eight channels past both ends of the tables (as _byte_form_case)."""
    table, out, mul, rshift, changes = _compiler_table(act)
    s, m, lut = int(rshift[0]), int(mul[0]), table.lut
    spread = np.linspace(changes[0] - (1 << 21), changes[-1] + (1 << 21), 8)
    target = np.concatenate([changes, spread.astype(np.int64)])
    cout = len(target)
    bias = np.round(target * 2.0**s / m).astype(np.int64)
    w = np.zeros((cout, 1, 3, 3), np.int8)
    w[:, 0, 1, 1] = 1
    rng = np.random.default_rng(size)
    x = np.stack([rng.permutation(np.resize(np.arange(-128, 128, dtype=np.int8), size * size))
                  for _ in range(cout)]).reshape(1, cout, size, size)
    sdp = Sdp(bias=bias.astype(np.int32), mul=np.resize(mul, cout), rshift=np.resize(rshift, cout),
              act=act, precision="int8", out_mul=1, out_shift=table.out_shift, out_zero=out.zero,
              lut=lut)
    return [Conv(w, precision="int8", in_zero=0, padding=1, groups=cout), sdp], x


@pytest.mark.parametrize("size", [16, 40], ids=["small-planes", "bands"])
@pytest.mark.parametrize("act", ["silu", "hardswish", "sigmoid"])
def test_the_byte_form_in_depthwise_layers(act, size, monkeypatch):
    """The depthwise rows kernel's LUT epilogue through the byte form (i8_dw_rows_vbmi.c's
    codes_of_run_lut over bands and dws_lut_body over planes of at most 256 outputs, both by
    conv/i8.h's lut_bytes_of with every channel lq): each code change of the compiler's table
    crossed at its exact v on a channel of its own, both ends of the tables passed, against the
    reference and the bins (ACCEL_SDP_I8_LUT=bins)."""
    chain, x = _depthwise_byte_form_case(act, size)
    expected = ref.run_chain(chain, x)
    assert len(np.unique(expected)) > (15 if act == "sigmoid" else 100)
    _assert_planned_and_bins(chain, x, expected, monkeypatch)


#: (act, output scale, output zero): the compiler's tables at scales whose byte tables take each
#: of the kernels' unrolled shapes (conv/i8.h's LUT_SHAPES: sigmoid's slot of one size,
#: hardswish's slot with D in two regions of j, SiLU's two slots, the second in a window of 128
#: intervals and hashed by j mod 64, or not hashed; each with and without the borrow's compare)
#: and some that do not (the loops over the slots)
SHAPE_CASES = [("silu", 0.05, -20), ("silu", 0.03, -10), ("silu", 0.1, -5), ("silu", 0.02, -40),
               ("hardswish", 0.05, -10), ("hardswish", 0.02, -20), ("sigmoid", 0.05, -10),
               ("sigmoid", 0.004, -128), ("mish", 0.05, -20)]


def _shape_case(act: str, scale: float, zero: int, kind: str, rng):
    """A conv (kind "1x1-4": 1x1 from 4 channels, the VNNI GEMM's panels; "1x1-64": from 64, AMX
    tiles on an AMX host; "dw": 3x3 depthwise) with the compiler's table for act at that output
    scale and the converter of lut_vs_relu.py's layers (shift <= 8: the byte form), each
    channel's bias centring its t somewhere over the table's LO range (and a few past its
    ends)."""
    from accel_codegen.quantization import TensorQuant, encode_multipliers
    from accel_codegen.quantization.lut import layer_lut

    out = TensorQuant(scale, zero)
    acc_scale = 0.05 * 0.002
    table = layer_lut(act, out, acc_scale, "test")
    mul, rshift = encode_multipliers(np.full(1, acc_scale / table.input_step), "test")
    lut = table.lut
    cout, size = 48, 24
    cin = {"1x1-4": 4, "1x1-64": 64, "dw": 1}[kind]
    span = 256 << lut.lo_index_select
    centre = lut.lo_start + rng.integers(-span // 8, span + span // 8, cout)
    bias = np.round(centre * 2.0 ** int(rshift[0]) / int(mul[0])).astype(np.int64)
    w = rng.integers(-127, 128, (cout, cin, 1 if kind != "dw" else 3, 1 if kind != "dw" else 3))
    x = rng.integers(-128, 128, (1, cin if kind != "dw" else cout, size, size)).astype(np.int8)
    sdp = Sdp(bias=np.clip(bias, -2**31, 2**31 - 1).astype(np.int32), mul=np.resize(mul, cout),
              rshift=np.resize(rshift, cout), act=act, precision="int8", out_mul=1,
              out_shift=table.out_shift, out_zero=out.zero, lut=lut)
    conv = Conv(w.astype(np.int8), precision="int8", in_zero=-3,
                **({"padding": 1, "groups": cout} if kind == "dw" else {}))
    return [conv, sdp], x


@pytest.mark.parametrize("kind", ["1x1-4", "1x1-64", "dw"])
@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_the_byte_table_shapes_through_the_conv_epilogues(case, kind, monkeypatch):
    """Every shape of byte tables (sdp_i8_lut_bytes.shape: region D, windows, slots of one
    size, and tables with none) through the conv epilogues that read them (conv/i8.h's
    panel_step_lut_bytes from the VNNI GEMM's panels and AMX's tiles, the depthwise rows'
    codes_of_run_lut), against the reference and the bins (ACCEL_SDP_I8_LUT=bins)."""
    chain, x = _shape_case(*case, kind, np.random.default_rng(len(kind) + int(case[1] * 1000)))
    expected = ref.run_chain(chain, x)
    assert len(np.unique(expected)) > 8
    _assert_planned_and_bins(chain, x, expected, monkeypatch)


def test_the_shapes_cases_reach_every_unrolled_shape(tmp_path):
    """SHAPE_CASES' tables (ACCEL_VERBOSE's lut_plan lines, _sS: sdp_i8_lut_bytes.shape) take
    the compiler's unrolled shapes with their shortcuts on a VBMI host (hashed slots and
    borrows since session 27), some lack one or the other, and some take none; without VBMI no
    plan has byte tables (_bytes-1)."""
    lines = _verbose(tmp_path, "for case in m.SHAPE_CASES:\n"
                               "    chain, x = m._shape_case(*case, '1x1-4', np.random.default_rng(0))\n"
                               "    for _ in range(3):\n"
                               "        Device('nv_full', num_threads=1).run(chain, x)\n",
                     "lut_plan")
    shapes = [(int(ln.split("_bytes", 1)[1].split("_", 1)[0]),
               int(ln.split("_g", 1)[1].split("_", 1)[0]),
               int(ln.split("_s", 1)[1].split("_", 1)[0], 16)) for ln in lines]
    if not _has_vbmi():
        assert all(m == -1 for m, _, _ in shapes), lines
        return
    # SiLU's: region D, then a slot of one size in a window and hashed; both slots' borrows
    assert (2, 1, 0x32212) in shapes, lines
    assert (1, 1, 0x10010) in shapes, lines  # hardswish's: region D, the borrow
    assert (1, 1, 0x10001) in shapes, lines  # sigmoid's: one size, the borrow
    assert any(s & 0x100 == 0 and m == 2 for m, _, s in shapes), lines  # two slots, no window
    # a window whose entries collide in j mod 64 (not hashed: the 0x212 shape), a slot with a
    # threshold in [1, 255] (no borrow)
    assert any(m == 2 and s & 0x2200 == 0x200 for m, _, s in shapes), lines
    assert any(m >= 1 and s & 0x10000 == 0 for m, _, s in shapes), lines
