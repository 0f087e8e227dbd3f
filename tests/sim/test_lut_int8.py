"""The SDP's lookup-table activations in INT8 (accel_lut_int8 in accel.h).

The engine equals the NumPy reference bit for bit: on every int8 input code through the tables
the compiler builds (quantization/lut.py), and on random tables and registers (both index
selects below and above the 16 fraction bits, slopes beyond LE, int32 extremes) as a CONV's
fused and independent epilogue and along the channels of a fully connected output. The tables
the compiler builds stay within the stated bound of the exact function: every output code at
most one away from round(f(x) / s_out), and the real error at most BOUND_STEPS output steps.
"""
import numpy as np
import pytest

from accel_codegen import Conv, Device, Sdp, estimate_chain
from accel_codegen import reference as ref
from accel_codegen.quantization import TensorQuant, encode_multipliers, round_half_away
from accel_codegen.quantization.lut import layer_lut
from accel_codegen.sim.ops import LutInt8
from accel_codegen.sim.reference import function64
from accel_codegen.sim.vocabulary import ACTIVATIONS
from conftest import assert_same

DEVICE = Device("nv_full", num_threads=2)
# (int8: the ones the compiler builds int8 tables for; rsqrt and reciprocal stay fp16)
LUT_ACTS = [e.name for e in ACTIVATIONS if e.feature == "lut" and e.int8]
#: The bound of the compiler's tables against the exact function, in output steps: the
#: output's rounding (0.5) and at most 0.1 from the entries and the interpolation (measured:
#: 0.547 at worst, exp).
BOUND_STEPS = 0.6
CODES = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 16, 16)
#: (input scale, input zero point): signed and unsigned inputs, fine to coarse.
INPUTS = [(0.01, 0), (0.01, -128), (0.05, 0), (0.05, -128), (0.2, 0), (0.2, -128)]


def _output_quant(y: np.ndarray) -> TensorQuant:
    """The output's quantisation as calibration makes it (its range, unsigned when >= 0)."""
    unsigned = y.min() >= 0
    amax = float(np.abs(y).max())
    return TensorQuant(float(np.float32(amax / (255 if unsigned else 127))),
                       -128 if unsigned else 0)


def _table_sdp(act, in_scale, in_zero, out):
    """A standalone INT8 SDP that applies ``act`` to codes of scale in_scale, as the code
    generator programs it: X converter to the table's input units, the table, a shift out."""
    table = layer_lut(act, out, in_scale, "test")
    mul, rshift = encode_multipliers([in_scale / table.input_step], "test")
    return Sdp(bias=np.zeros(1, np.int32), mul=mul, rshift=rshift, act=act, precision="int8",
               in_zero=in_zero, out_mul=1, out_shift=table.out_shift, out_zero=out.zero,
               lut=table.lut)


@pytest.mark.parametrize("in_scale,in_zero", INPUTS, ids=[f"s{s}_z{z}" for s, z in INPUTS])
@pytest.mark.parametrize("act", LUT_ACTS)
def test_compiled_tables_are_exact_and_within_the_bound_on_every_code(act, in_scale, in_zero):
    real = (CODES.astype(np.float64) - in_zero) * np.float32(in_scale)
    exact = function64(act, real)
    out = _output_quant(exact)
    op = _table_sdp(act, in_scale, in_zero, out)
    y, _ = DEVICE.run([op], CODES)
    assert_same(y, ref.run_chain([op], CODES))
    ideal = np.clip(round_half_away(exact / np.float32(out.scale)) + out.zero, -128, 127)
    assert np.abs(y.astype(np.int64) - ideal).max() <= 1
    error = np.abs((y.astype(np.float64) - out.zero) * out.scale - exact) / out.scale
    assert error.max() <= BOUND_STEPS


def _random_lut(rng, lo_select, le_select):
    """Random entries and registers; LE may or may not contain LO."""
    lo_start = int(rng.integers(-2**28, 2**28))
    le_start = max(lo_start - int(rng.integers(0, 64)) * (1 << le_select), -2**31)
    return LutInt8(rng.integers(-32768, 32768, 257).astype(np.int16),
                   rng.integers(-32768, 32768, 65).astype(np.int16), lo_start, le_start,
                   lo_select, le_select, int(rng.integers(-32768, 32768)),
                   int(rng.integers(0, 40)), int(rng.integers(-32768, 32768)),
                   int(rng.integers(0, 40)))


SELECTS = [(0, 3), (5, 9), (16, 19), (20, 23), (27, 31)]


@pytest.mark.parametrize("mode", ["fused", "independent"])
@pytest.mark.parametrize("lo_select,le_select", SELECTS, ids=[f"sel{a}_{b}" for a, b in SELECTS])
def test_random_tables_as_a_conv_epilogue_equal_the_reference(lo_select, le_select, mode):
    rng = np.random.default_rng(lo_select * 100 + le_select)
    x = rng.integers(-128, 128, (2, 5, 9, 9)).astype(np.int8)
    w = rng.integers(-127, 128, (6, 5, 3, 3)).astype(np.int8)
    lut = _random_lut(rng, lo_select, le_select)
    # Multipliers that spread the accumulators over the tables and far beyond them.
    mul = rng.integers(-32768, 32768, 6).astype(np.int16)
    rshift = rng.integers(0, 12, 6).astype(np.uint8)
    bias = (rng.integers(-2**20, 2**20, 6) + lut.lo_start // max(int(mul.mean()), 1)).astype(
        np.int32)
    chain = [Conv(w, padding=1, precision="int8", in_zero=3),
             Sdp(bias=bias, mul=mul, rshift=rshift, act="tanh", lut=lut, precision="int8",
                 out_mul=int(rng.integers(1, 32768)), out_shift=int(rng.integers(8, 30)),
                 out_zero=-7)]
    y, _ = DEVICE.run(chain, x, mode=mode)
    assert_same(y, ref.run_chain(chain, x))


def test_every_branch_of_the_table_is_taken_and_matches():
    """LO hits, LE hits, underflow, overflow and the int32 extremes, one input value each."""
    rng = np.random.default_rng(7)
    lut = _random_lut(rng, 4, 8)
    le_end = lut.le_start + (64 << 8)
    values = np.array([lut.lo_start, lut.lo_start + 17, lut.lo_start + (256 << 4) - 1,
                       lut.le_start, lut.le_start + 300, le_end - 1, le_end, le_end + 5000,
                       lut.le_start - 1, lut.le_start - 99999, 2**31 - 1, -2**31], np.int64)
    # A standalone SDP reads codes; an identity-free route to arbitrary int32: bias + mul.
    x = np.zeros((1, values.size, 1, 1), np.int8)
    op = Sdp(bias=np.clip(values, -2**31, 2**31 - 1).astype(np.int32), act="exp", lut=lut,
             precision="int8", out_mul=1, out_shift=9)
    y, _ = DEVICE.run([op], x)  # one position per channel: the channel-wise path
    assert_same(y, ref.run_chain([op], x))
    looked_up = ref.lut_int8(values, lut)
    assert looked_up[0] == lut.lo[0] and looked_up[6] == lut.le[64]
    assert looked_up[8] == lut.le[0] + ref.rhaz(-1 * lut.underflow_scale, lut.underflow_shift)


@pytest.mark.parametrize("act", LUT_ACTS)
def test_int8_lut_runs_on_the_y_unit(act):
    """The cost is the Y unit's rate (sdp_ew_throughput), as in the other precisions, over the
    whole 32-byte atoms the engine works on: 8 int8 channels pad to 32."""
    op = Sdp(bias=np.zeros(8, np.int32), act=act, lut=_random_lut(np.random.default_rng(1), 4, 7),
             precision="int8")
    stats = estimate_chain("nv_full", [op], (1, 8, 16, 16), precision="int8")
    cfg = DEVICE.config
    atom_channels = cfg.memory_atom_bytes  # int8: one byte per channel
    assert stats.ops[0].compute_cycles == -(-atom_channels * 16 * 16 // cfg.sdp_ew_throughput)


@pytest.mark.parametrize("table", ["lo", "le"])
def test_a_lut_table_of_the_wrong_size_is_a_shape_error_naming_it(table):
    """Each table must have accel.h's count of entries (LO 257, LE 65): one short is refused
    before the descriptor points at it."""
    from accel_codegen.errors import AccelShapeError
    sizes = {"lo": 257, "le": 65}
    tables = {name: np.zeros(size - (name == table), np.int16) for name, size in sizes.items()}
    fields = dict(lo_start=0, le_start=0, lo_index_select=0, le_index_select=0)
    with pytest.raises(AccelShapeError, match=f"sdp lut {table} has {sizes[table] - 1} "
                                              f"entries, not {sizes[table]}"):
        LutInt8(**tables, **fields).words()
    assert LutInt8(**{n: np.zeros(s, np.int16) for n, s in sizes.items()},
                   **fields).words().size > 0
