"""NVDLA's CDP (local response normalisation) in int8, bit for bit, with its two lookup tables.

This module only decodes: a trace's CDP registers and tables become the simulator's INT8 CDP
descriptor (``CdpInt8``, accel_cdp_int8 in accel.h) and the layer runs on the simulator's own
CDP engine, the one the compiler's LRN runs on; ``reference.cdp_int8`` defines its arithmetic.
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

from functools import lru_cache
from typing import Dict, List

import numpy as np

from ...errors import AccelInvalidError, AccelUnsupportedError
from ..ops import CdpInt8, Lrn
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


def params(r: RegisterFile, lut: LutMemory) -> CdpInt8:
    """The CDP's registers and tables as the simulator's INT8 CDP descriptor (accel_cdp_int8):
    the arithmetic itself is reference.cdp_int8, the one definition the simulator's C shares."""
    get = lambda name, f=None: r.get("CDP", name, f)  # noqa: E731

    def wide(low, high):
        return arith.signed((get(high) << 32) | get(low), 38)

    fields = {}
    for t in ("LE", "LO"):
        for d in ("UFLOW", "OFLOW"):
            fields[f"{t.lower()}_{d.lower()}_scale"] = arith.signed(
                get(f"S_LUT_{t}_SLOPE_SCALE", f"LUT_{t}_SLOPE_{d}_SCALE"), 16)
            fields[f"{t.lower()}_{d.lower()}_shift"] = get(f"S_LUT_{t}_SLOPE_SHIFT",
                                                           f"LUT_{t}_SLOPE_{d}_SHIFT")
    return CdpInt8(
        le=np.array(lut.tables[0], np.int16), lo=np.array(lut.tables[1], np.int16),
        le_start=wide("S_LUT_LE_START_LOW", "S_LUT_LE_START_HIGH"),
        le_end=wide("S_LUT_LE_END_LOW", "S_LUT_LE_END_HIGH"),
        lo_start=wide("S_LUT_LO_START_LOW", "S_LUT_LO_START_HIGH"),
        lo_end=wide("S_LUT_LO_END_LOW", "S_LUT_LO_END_HIGH"),
        le_index_select=arith.signed(get("S_LUT_INFO", "LUT_LE_INDEX_SELECT"), 6),
        lo_index_select=arith.signed(get("S_LUT_INFO", "LUT_LO_INDEX_SELECT"), 6),
        le_index_offset=arith.signed(get("S_LUT_INFO", "LUT_LE_INDEX_OFFSET"), 8),
        le_exponent=int(get("S_LUT_CFG", "LUT_LE_FUNCTION") == 0),
        uflow_priority=get("S_LUT_CFG", "LUT_UFLOW_PRIORITY"),
        oflow_priority=get("S_LUT_CFG", "LUT_OFLOW_PRIORITY"),
        hybrid_priority=get("S_LUT_CFG", "LUT_HYBRID_PRIORITY"),
        datin_offset=arith.signed(get("D_DATIN_OFFSET"), 8),
        datin_scale=arith.signed(get("D_DATIN_SCALE"), 16),
        datin_shift=get("D_DATIN_SHIFTER"),
        datout_offset=arith.signed(get("D_DATOUT_OFFSET"), 25),
        datout_scale=arith.signed(get("D_DATOUT_SCALE"), 16),
        datout_shift=get("D_DATOUT_SHIFTER"),
        sqsum_bypass=get("D_FUNC_BYPASS", "SQSUM_BYPASS"),
        mul_bypass=get("D_FUNC_BYPASS", "MUL_BYPASS"), **fields)


@lru_cache(maxsize=1)
def _device():
    from ..device import Device
    return Device("nv_small")


def run_int8(x: np.ndarray, size: int, p: CdpInt8) -> np.ndarray:
    """The simulator's own INT8 CDP (the C engine, Lrn with ``p``) on one (C, H, W) cube of
    codes: what the compiler's LRN runs; reference.cdp_int8 defines it, bit for bit."""
    y, _ = _device().run([Lrn(size, precision="int8", int8=p)], x[None].astype(np.int8))
    return y[0]


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
    p = params(r, lut)
    size = 2 * (r.get("CDP", "D_LRN_CFG", "NORMALZ_LEN") + 1) + 1
    # the channels beyond the cube (to the whole atom, written too) read as the input offset,
    # which the input converter takes to 0: as NVDLA's CDP, which fills them with 0
    x = x.astype(np.int64)
    x[c:] = p.datin_offset
    out = run_int8(x, size, p).astype(np.int64)
    sqsum_bypass, mul_bypass = p.sqsum_bypass, p.mul_bypass
    write_int8(mem, _addr(r, "CDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH"),
               r.get("CDP", "D_DST_LINE_STRIDE"), r.get("CDP", "D_DST_SURFACE_STRIDE"), out)
    layer = Layer("cdp", (c, h, w), (c, h, w),
                  {"window": 2 * (r.get("CDP", "D_LRN_CFG", "NORMALZ_LEN") + 1) + 1,
                   "sqsum_bypass": bool(sqsum_bypass), "mul_bypass": bool(mul_bypass)})
    return layer, out
