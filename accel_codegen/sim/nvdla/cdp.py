"""NVDLA's CDP (local response normalisation) in int8, bit for bit, with its two lookup tables.

The datapath (nvdla/doc ``unit_description.rst`` and ``lut-programming.rst``; the C model's
``cmod/cdp`` and ``cmod/hls/cdp_libs``):

1. input converter: ``(x - DATIN_OFFSET[7:0]) * DATIN_SCALE``, shifted right by DATIN_SHIFTER
   with rounding, saturated to 9 bits; channels outside the cube count as 0;
2. square sum over a window of 3, 5, 7 or 9 channels (NORMALZ_LEN), or the value itself when
   SQSUM is bypassed;
3. two tables: LE (65 entries, linear or exponential index) and LO (257 entries, linear index),
   each with linear interpolation between entries (16 fraction bits, rounded) and with a
   slope-and-shift extrapolation below the start / above the end; the hit / miss rules pick one
   (the priorities of S_LUT_CFG break ties), the result saturated to 16 bits;
4. multiplier: the table's value times the converted input (unless MUL is bypassed);
5. output converter: ``(y - DATOUT_OFFSET[24:0]) * DATOUT_SCALE``, shifted right by
   DATOUT_SHIFTER with rounding, saturated to int8.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ...errors import AccelInvalidError, AccelUnsupportedError
from . import arith
from .layers import Layer, _addr, read_int8, whole_atoms, write_int8
from .trace import RegisterFile, Memory

LE_ENTRIES, LO_ENTRIES = 65, 257


class LutMemory:
    """The CDP's two tables as the trace programs them: S_LUT_ACCESS_CFG selects the table
    (LUT_TABLE_ID: 0 = LE, 1 = LO) and the first address; each S_LUT_ACCESS_DATA write stores
    one 16-bit entry and moves to the next address."""

    def __init__(self) -> None:
        self.tables: Dict[int, List[int]] = {0: [0] * LE_ENTRIES, 1: [0] * LO_ENTRIES}
        self.table, self.addr = 0, 0

    def access_cfg(self, value: int) -> None:
        self.table = (value >> 16) & 1
        self.addr = value & 0x3FF

    def data(self, value: int) -> None:
        table = self.tables[self.table]
        if self.addr >= len(table):
            raise AccelInvalidError(f"CDP LUT write past the end of table {self.table} "
                                    f"(address {self.addr}, {len(table)} entries)")
        table[self.addr] = arith.signed(value, 16)
        self.addr += 1


def _interp(table: np.ndarray, index: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """table[i] + (table[i+1] - table[i]) * frac / 2^16 (rounded), saturated to 16 bits."""
    y0 = table[index]
    y1 = table[index + 1]
    return arith.saturate(y0 + arith.shift_right_sat((y1 - y0) * frac, 16, 56), 16)


def _frac16(rem: np.ndarray, bits: int) -> np.ndarray:
    """A remainder of ``bits`` fraction bits as a 16-bit fraction."""
    return rem >> (bits - 16) if bits > 16 else rem << (16 - bits)


def lookup(s: np.ndarray, r: RegisterFile, lut: LutMemory) -> np.ndarray:
    """The tables' result for square sums ``s`` (int64 array)."""
    get = lambda name, f=None: r.get("CDP", name, f)  # noqa: E731

    def wide(low, high):
        return arith.signed((get(high) << 32) | get(low), 38)

    le = np.array(lut.tables[0], np.int64)
    lo = np.array(lut.tables[1], np.int64)
    le_start = wide("S_LUT_LE_START_LOW", "S_LUT_LE_START_HIGH")
    le_end = wide("S_LUT_LE_END_LOW", "S_LUT_LE_END_HIGH")
    lo_start = wide("S_LUT_LO_START_LOW", "S_LUT_LO_START_HIGH")
    lo_end = wide("S_LUT_LO_END_LOW", "S_LUT_LO_END_HIGH")
    le_sel = arith.signed(get("S_LUT_INFO", "LUT_LE_INDEX_SELECT"), 6)
    lo_sel = arith.signed(get("S_LUT_INFO", "LUT_LO_INDEX_SELECT"), 6)
    le_off = arith.signed(get("S_LUT_INFO", "LUT_LE_INDEX_OFFSET"), 8)
    exponent = get("S_LUT_CFG", "LUT_LE_FUNCTION") == 0
    slope = {k: arith.signed(get(f"S_LUT_{t}_SLOPE_SCALE", f"LUT_{t}_SLOPE_{d}_SCALE"), 16)
             for t in ("LE", "LO") for d in ("UFLOW", "OFLOW") for k in [(t, d)]}
    shift = {k: get(f"S_LUT_{t}_SLOPE_SHIFT", f"LUT_{t}_SLOPE_{d}_SHIFT")
             for t in ("LE", "LO") for d in ("UFLOW", "OFLOW") for k in [(t, d)]}

    def extrapolate(base, delta, key):
        return arith.saturate(base + arith.shift_right_sat(delta * slope[key], shift[key], 56), 16)

    s = np.asarray(s, np.int64)
    # ---- LE table
    d = s - le_start
    if exponent:
        log = np.where(d > 0, np.floor(np.log2(np.maximum(d, 1).astype(np.float64))), 0)
        log = log.astype(np.int64)
        # floor(log2) from floats can be one too high just below a power of two
        log = np.where((d > 0) & ((np.int64(1) << np.clip(log, 0, 62)) > d), log - 1, log)
        index = log - le_off
        le_under = (index < 0) | (d <= 0)
        le_over = ~le_under & (index >= LE_ENTRIES - 1)
        le_hit = ~le_under & ~le_over
        idx = np.clip(index, 0, LE_ENTRIES - 2)
        e = np.clip(idx + le_off, 0, 62)
        rem = d - (np.int64(1) << e)
        frac = np.where(e > 16, rem >> np.maximum(e - 16, 0), rem << np.maximum(16 - e, 0))
        uflow_base = 0 if le_off < 0 else (1 << le_off)
        le_u = extrapolate(le[0], s - le_start - uflow_base, ("LE", "UFLOW"))
    else:
        index = d << -le_sel if le_sel < 0 else d >> le_sel
        le_under = (index < 0) | (d <= 0)
        le_over = ~le_under & (index >= LE_ENTRIES - 1)
        le_hit = ~le_under & ~le_over
        idx = np.clip(index, 0, LE_ENTRIES - 2)
        frac = np.zeros_like(d) if le_sel < 0 else _frac16(d & ((1 << le_sel) - 1), le_sel)
        le_u = extrapolate(le[0], s - le_start, ("LE", "UFLOW"))
    le_o = extrapolate(le[LE_ENTRIES - 1], s - le_end, ("LE", "OFLOW"))
    le_val = np.where(le_under, le_u, np.where(le_over, le_o, _interp(le, idx, frac)))
    # ---- LO table (always linear)
    d = s - lo_start
    index = d << -lo_sel if lo_sel < 0 else d >> lo_sel
    lo_under = (index < 0) | (d <= 0)
    lo_over = ~lo_under & (index >= LO_ENTRIES - 1)
    lo_hit = ~lo_under & ~lo_over
    idx = np.clip(index, 0, LO_ENTRIES - 2)
    frac = np.zeros_like(d) if lo_sel < 0 else _frac16(d & ((1 << lo_sel) - 1), lo_sel)
    lo_val = np.where(lo_under, extrapolate(lo[0], s - lo_start, ("LO", "UFLOW")),
                      np.where(lo_over, extrapolate(lo[LO_ENTRIES - 1], s - lo_end,
                                                    ("LO", "OFLOW")),
                               _interp(lo, idx, frac)))
    # ---- choose
    uflow_lo = bool(get("S_LUT_CFG", "LUT_UFLOW_PRIORITY"))
    oflow_lo = bool(get("S_LUT_CFG", "LUT_OFLOW_PRIORITY"))
    hybrid_lo = bool(get("S_LUT_CFG", "LUT_HYBRID_PRIORITY"))
    both_under = le_under & lo_under
    both_over = le_over & lo_over
    one_hit = le_hit ^ lo_hit
    out = np.where(both_under, lo_val if uflow_lo else le_val,
                   np.where(both_over, lo_val if oflow_lo else le_val,
                            np.where(one_hit, np.where(le_hit, le_val, lo_val),
                                     lo_val if hybrid_lo else le_val)))
    return out


def run_cdp(r: RegisterFile, mem: Memory, lut: LutMemory):
    """A CDP layer (CDP_RDMA reads, CDP computes and writes). Returns (Layer, output)."""
    if r.get("CDP", "D_DATA_FORMAT", "INPUT_DATA_TYPE") != 0:
        raise AccelUnsupportedError("only int8 LRN is modelled for nv_small")
    w = r.get("CDP_RDMA", "D_DATA_CUBE_WIDTH") + 1
    h = r.get("CDP_RDMA", "D_DATA_CUBE_HEIGHT") + 1
    c = r.get("CDP_RDMA", "D_DATA_CUBE_CHANNEL") + 1
    cw = whole_atoms(c)
    base = _addr(r, "CDP_RDMA", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH")
    x = read_int8(mem, base, r.get("CDP_RDMA", "D_SRC_LINE_STRIDE"),
                  r.get("CDP_RDMA", "D_SRC_SURFACE_STRIDE"), cw, h, w)
    # input converter; channels beyond the cube are replaced by the offset, i.e. 0 after it
    xc = arith.shift_right_sat(
        (x - arith.signed(r.get("CDP", "D_DATIN_OFFSET"), 8))
        * arith.signed(r.get("CDP", "D_DATIN_SCALE"), 16),
        r.get("CDP", "D_DATIN_SHIFTER"), 9)
    xc[c:] = 0
    sqsum_bypass = r.get("CDP", "D_FUNC_BYPASS", "SQSUM_BYPASS")
    mul_bypass = r.get("CDP", "D_FUNC_BYPASS", "MUL_BYPASS")
    if sqsum_bypass:
        s = xc.copy()
    else:
        half = r.get("CDP", "D_LRN_CFG", "NORMALZ_LEN") + 1
        sq = np.concatenate([np.zeros((half,) + xc.shape[1:], np.int64), xc * xc,
                             np.zeros((half,) + xc.shape[1:], np.int64)])
        s = sum(sq[k:k + cw] for k in range(2 * half + 1))
    y = lookup(s, r, lut)
    if not mul_bypass:
        y = y * xc
    y = arith.wrap(y, 25)
    out = arith.shift_right_sat(
        (y - arith.signed(r.get("CDP", "D_DATOUT_OFFSET"), 25))
        * arith.signed(r.get("CDP", "D_DATOUT_SCALE"), 16),
        r.get("CDP", "D_DATOUT_SHIFTER"), 8)
    write_int8(mem, _addr(r, "CDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH"),
               r.get("CDP", "D_DST_LINE_STRIDE"), r.get("CDP", "D_DST_SURFACE_STRIDE"), out)
    layer = Layer("cdp", (c, h, w), (c, h, w),
                  {"window": 2 * (r.get("CDP", "D_LRN_CFG", "NORMALZ_LEN") + 1) + 1,
                   "sqsum_bypass": bool(sqsum_bypass), "mul_bypass": bool(mul_bypass)})
    return layer, out
