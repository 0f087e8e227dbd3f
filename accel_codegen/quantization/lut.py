"""The INT8 SDP's lookup tables for one layer (``accel_lut_int8`` in accel.h), built from the
layer's scales: NVDLA programs its LUT per layer, and so does the compiler.

In int8 an activation only has to be right where its output codes change: beyond some input
the codes are constant (saturated at the ends of the output range, or the code of the
function's limit). So:

- **Where.** The output scale and zero point give the codes of ``f`` on a fine grid; the
  interval where they change, [x_lo, x_hi], is what the LO table (256 steps) covers, with
  ``LO_PAD_STEPS`` of its steps to spare on each side; LE (64 steps of 8 LO steps) spans twice
  that width around it, and beyond LE the codes are constant, so the slopes are 0.
- **Input units.** The LUT reads the int32 value t after the X converters; one LO step is
  2^sel units of t, so t's unit is ``lo_step / 2^sel`` with ``sel`` = 16 (a full 16-bit
  fraction), or less when the converter's multiplier would not fit int16 or the tables' ends
  would not fit int32.
- **Entries.** int16 in 2^-k of the output step: ``round(f(x) / s_out * 2^k)``, clamped 64
  output steps beyond the output range (only saturated codes lie there; the margin keeps every
  interpolation that matters away from a clamped entry), k as large as int16 allows (6 or 7).
  The output converter is then a pure shift: y = sat8(rhaz(LUT(t), k) + zero).

The error against the exact function: the entries round to 2^-(k+1) of an output step, the
interpolation over one LO step adds the function's curvature term, and the output rounds
once; tests/sim/test_lut_int8.py states and checks the bound (at most one output code away
from ``round(f(x) / s_out)`` on every input).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._accel_ffi import lib
from ..errors import AccelInvalidError, AccelUnsupportedError
from ..sim.ops import LutInt8
from ..sim.reference import function64
from ..sim.vocabulary import ACTIVATIONS
from .calibration import TensorQuant
from .encoding import round_half_away

#: The fraction bits NVDLA's interpolation uses: the LO index select that keeps all of them.
FRACTION_BITS = 16
#: LE's step in LO steps (64 LE intervals then span twice the 256 LO intervals).
LE_PER_LO = 8
#: LO steps kept beyond the interval where the codes change, on each side. Without them the
#: outermost changes of the LUT's own codes could fall in LE, whose coarse interpolation moves
#: them past what the 256 intervals of the host's byte tables hold (SiLU's: docs/kernels.md,
#: "Session 21"), so every value paid a compare for a change outside them (sdp_i8_lut.c's
#: bytes_build); with them every change is LO's, and the byte tables keep the
#: margin of a step of v (at most 2^15 units of t, half a step of LO at 16 fraction bits) from
#: their ends. The cost: LO's steps 256 / 252 as wide, which cost the trained recogniser's
#: int8 output 4.3 dB (docs/trained_models.md, "Session 22"), so none are kept: accuracy
#: before the speed of the epilogue's compare.
LO_PAD_STEPS = 0
#: How far beyond the output range the entries go, in output steps.
MARGIN_CODES = 64
#: Points of the grid on which the output codes of the function are read.
GRID_POINTS = 1 << 17
#: The fine part of that grid: [-FINE_REACH, FINE_REACH].
FINE_REACH = 64.0
#: Grid points below which the interval where the codes change is searched again on a finer
#: grid (at most REFINEMENTS times: 2^17 / 64 finer each, 1e-3 to below 1e-38 in 10).
REFINE_BELOW = 64
REFINEMENTS = 12
#: How far from 0 (in LO steps) the tables may reach for an input coarser than int16 LO
#: steps, whose X converter saturates (see layer_lut): below the saturated factor 32767.
SATURATED_REACH = 32000.0


@dataclasses.dataclass(frozen=True)
class LayerLut:
    """A layer's tables and the two scales around them: ``input_step`` is the real value of
    one unit of the LUT's input t (the X converters' target), ``out_shift`` the output
    converter's shift (out_mul 1)."""

    lut: LutInt8
    input_step: float
    out_shift: int


def _codes(act: str, x: np.ndarray, out: TensorQuant) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        steps = function64(act, x) / out.scale
    return np.clip(round_half_away(np.clip(steps, -512, 512)) + out.zero, -128, 127)


def changing_interval(act: str, out: TensorQuant) -> tuple:
    """[x_lo, x_hi]: where the output codes of ``act`` change (constant outside, up to one
    grid step)."""
    bound = max(abs(-128 - out.zero), abs(127 - out.zero)) * out.scale
    # Fine steps where every function bends, then geometric steps out to twice the output's
    # bound (silu, hardswish and gelu saturate near it; exp's codes change near its log).
    fine = np.linspace(-FINE_REACH, FINE_REACH, GRID_POINTS)
    reach = max(2.0 * bound, 2.0 * FINE_REACH)
    far = np.geomspace(FINE_REACH, reach, GRID_POINTS // 32)[1:]
    x = np.concatenate([-far[::-1], fine, far])
    codes = _codes(act, x, out)
    changes = np.flatnonzero(codes[1:] != codes[:-1])
    if changes.size == 0:
        return -1.0, 1.0
    first, last = changes[0], changes[-1] + 1
    # An output step far below the grid's (calibration saw a constant of 1e-30: the codes of
    # tanh change over [0, 1e-30], between two grid points): the grid again over the few
    # steps that hold every change, until they span REFINE_BELOW points or float64's own
    # resolution. Where they already span that many, as every table of an output range
    # above ~1e-3 does, nothing changes.
    for _ in range(REFINEMENTS):
        lo, hi = float(x[first]), float(x[last])
        if last - first >= REFINE_BELOW or \
                hi - lo <= GRID_POINTS * 4 * np.spacing(max(abs(lo), abs(hi))):
            break
        x = np.linspace(lo, hi, GRID_POINTS)
        codes = _codes(act, x, out)
        changes = np.flatnonzero(codes[1:] != codes[:-1])
        first, last = changes[0], changes[-1] + 1
    return float(2 * x[first] - x[first + 1]), float(2 * x[last] - x[last - 1])


def layer_lut(act: str, out: TensorQuant, factor_max: float, what: str) -> LayerLut:
    """The tables of activation ``act`` for an output quantised as ``out``, for X converters
    whose largest factor into the LUT's input units is ``factor_max`` / input_step (the real
    value of the largest per-channel input step: accumulator or input code)."""
    if act in ACTIVATIONS and not ACTIVATIONS[act].int8:
        raise AccelUnsupportedError(
            f"{what}: no int8 tables for act = {act}: its pole at 0 needs more range than one "
            f"int8 scale and a linear table give; the pass stays in fp16 (sim/decompose.py)")
    x_lo, x_hi = changing_interval(act, out)
    lo_step = (x_hi - x_lo) / (lib.ACCEL_LUT_LO_ENTRIES - 1 - 2 * LO_PAD_STEPS)
    x_lo, x_hi = x_lo - LO_PAD_STEPS * lo_step, x_hi + LO_PAD_STEPS * lo_step
    width = x_hi - x_lo
    le_start_real = x_lo - width / 2
    le_end_real = x_hi + width / 2
    # The most fraction bits that keep the multiplier in int16 and the table ends in int32.
    fits_mul = math.floor(math.log2(lo_step * 32767.0 / factor_max)) if factor_max > 0 \
        else FRACTION_BITS
    far = max(abs(le_start_real), abs(le_end_real))
    fits_range = math.floor(math.log2(lo_step * (2**31 - 2**28) / far)) if far > 0 \
        else FRACTION_BITS
    select = min(FRACTION_BITS, fits_mul, fits_range)
    if select < 0 and fits_range >= 0 and far < SATURATED_REACH * lo_step:
        # An input coarser than SATURATED_REACH table steps (calibration saw the input with a
        # range thousands of times the table's: a constant of 1e6 before a sigmoid): every
        # input but 0 lies beyond the tables, where the codes are constant. With one t unit
        # per LO step the X converter's factor is beyond int16 and channel_converters
        # saturates it at 32767: an input of 0 still reads the table at 0, and any other
        # lands at least 32767 steps out on its own side, beyond LE (which lies within
        # SATURATED_REACH steps of 0), where the exact input lands too: the same code.
        select = 0
    if select < 0:
        raise AccelInvalidError(f"{what}: the {act} table's step {lo_step:g} is finer than the "
                                f"input's step {factor_max:g}: no int8 LUT for it")
    input_step = lo_step / 2.0 ** select
    lo_start = int(round(x_lo / input_step))
    le_select = select + int(math.log2(LE_PER_LO))
    le_start = int(round(le_start_real / input_step))

    low = (-128 - out.zero) - MARGIN_CODES
    high = (127 - out.zero) + MARGIN_CODES
    out_shift = int(math.floor(math.log2(32767.0 / max(abs(low), abs(high)))))

    def entries(start: int, select: int, count: int) -> np.ndarray:
        grid = (start + np.arange(count, dtype=np.float64) * 2.0 ** select) * input_step
        with np.errstate(over="ignore", invalid="ignore"):
            steps = np.clip(function64(act, grid) / out.scale, low, high)
        return round_half_away(steps * 2.0 ** out_shift).astype(np.int16)

    lut = LutInt8(lo=entries(lo_start, select, lib.ACCEL_LUT_LO_ENTRIES),
                  le=entries(le_start, le_select, lib.ACCEL_LUT_LE_ENTRIES),
                  lo_start=lo_start, le_start=le_start, lo_index_select=select,
                  le_index_select=le_select)
    return LayerLut(lut, input_step, out_shift)
