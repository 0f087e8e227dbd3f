"""The compiler's int8 program as NVDLA register traces (issue 31, item 3).

A model compiled for nv_small in int8 runs one ``accel_run`` per layer; the simulator's recorder
(:mod:`accel_codegen.sim.recorder`) hands over each run's descriptors, input and output. Each
run becomes one NVDLA trace test in the format of nvdla/hw's ``verif/tests/trace_tests``: a
``.cfg`` of register writes (nv_small's register map, :mod:`accel_codegen.sim.nvdla.regs`) and
``.dat`` memory images (input, weights, SDP operands), ending in ``check_crc`` over the output
region. The CRC is the one the front end (:mod:`accel_codegen.sim.nvdla`) computes when it
plays the test, and the export plays every test it writes and checks that the output region
holds the compiled run's bits before it keeps it: a test that would not round trip is never
written.

How the simulator's int8 (accel.h) is programmed on NVDLA's units, exactly:

* CONV: NVDLA's CONV has no input zero point. The padding value is the zero point's code
  (``PAD_VALUE``), so every window sums ``x * w`` over codes, the simulator's sum plus
  ``in_zero * sum(w[k])``, which the SDP's bias takes back. CACC passes the accumulator
  (``CLIP_TRUNCATE`` 0).
* SDP: the simulator's int8 SDP is NVDLA's BS -> BN (accel.h): with S the largest right
  shift, BS ``sat32((v + bias) 2^(S - rshift[c]))``, BN ``sat32(rhaz(t mul[c], S))``. On
  the registers BS's ALU takes the bias' high part (``hi[c] << A``, a 16-bit operand) and its
  multiplier ``2^(S - rshift[c])`` (shift 0); BN's ALU the low part times that power of two,
  its multiplier ``mul[c]``, shift S. ReLU is BN's. The output converter adds the zero point:
  offset ``-out_zero``, scale 1, shift 0. The bias' split is exact when neither BS output
  saturates, which the export proves from the weights' and the data's bounds (else it
  refuses).
* PDP: max pooling (padding never wins on either side) and average pooling, whose int8 is
  NVDLA's in both (accel.h): the reciprocals RECIP_KERNEL_WIDTH / HEIGHT, each padded position
  adding the zero point (``PAD_VALUE_nX = n * zero``).
* A convolution the simulator runs in image-input mode (the first layer, ``pixel_format``) is
  written as a direct convolution of the same codes in feature format: the same result (accel.h
  says so of the mode), which the front end plays (it has no pixel formats).

What it refuses, with :class:`NvdlaInexactError` naming the difference (docs/nvdla_rtl.md):
an element-wise operand or a lookup table (nv_small has neither), PReLU (it would need a third
X unit), a CLIP other than ReLU's (NVDLA has no clip unit), an output multiplier with a zero
point, LRN in int8 (the simulator has none),
Winograd and multi-batch modes, and a layer whose input and weights do not fit CBUF at once
(export_runs splits a CONV -> SDP into slices of kernels and of output rows, as NVDLA's
compiler does, with a pool it feeds as a layer of its own, and a grouped convolution into one
per group: :func:`hardware_layers`).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import AccelInvalidError, AccelUnsupportedError
from ..sim.nvdla import regs
from ..sim.nvdla.layers import ATOM_C, ATOM_K, feature_addresses, read_int8, whole_atoms
from ..sim.nvdla.cycles import estimate_cycles
from ..sim.nvdla.runner import play
from ..sim.ops import Conv, Pool, Sdp
from ..sim.recorder import OtherOp, RecordedRun
from ..sim.reference import pdp_reciprocal

#: nv_small's CBUF: 32 banks of 4 KiB (NVDLA's nv_small spec; the preset has the same).
CBUF_BANKS = 32
CBUF_BANK_BYTES = 4096
#: The unit of CDMA's and CSC's WEIGHT_BYTES.
WEIGHT_UNIT = 128
#: Where a test's regions start, and their alignment.
BASE_ADDRESS = 0x80000000
REGION_ALIGN = 0x1000
#: Bytes per .dat entry line.
DAT_LINE = 32
INT32_MAX = 2 ** 31 - 1


class NvdlaInexactError(AccelUnsupportedError):
    """A run whose int8 arithmetic NVDLA's units cannot reproduce bit for bit (the message names
    the difference), or that the export does not program."""


@dataclasses.dataclass
class ExportedTest:
    """One trace test written: its name, .cfg path, the CRC of its output region and the
    compiled run's output (C, H, W) that the region holds."""
    name: str
    cfg: str
    crc: int
    region: Tuple[int, int]
    output: np.ndarray
    units: Tuple[str, ...]
    cycles: int = 0    # the cost model's estimate under NVDLA's testbench memory (cycles.py)


@dataclasses.dataclass
class Refused:
    """A run the export left out, and why."""
    label: str
    reason: str


# --------------------------------------------------------------------------- register writes

def compose(unit: str, name: str, **fields: int) -> int:
    """A register's 32-bit value from its named fields (each checked against its width)."""
    reg = regs.REGISTERS[(unit, name)]
    value = 0
    for field, v in fields.items():
        hi, lo = reg.fields[field]
        v = int(v)
        width = hi - lo + 1
        if v < 0:
            v &= (1 << width) - 1
        if v >> width:
            raise NvdlaInexactError(f"{unit}.{name}.{field} = {v} does not fit its {width} bits")
        value |= v << lo
    return value


class _Cfg:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def comment(self, text: str) -> None:
        self.lines.append(f"//{text}")

    def reg(self, unit: str, name: str, value: Optional[int] = None, **fields: int) -> None:
        if value is None:
            value = compose(unit, name, **fields)
        self.lines.append(f"reg_write(NVDLA_{unit}.{name}_0, {value & 0xFFFFFFFF:#x});")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _addr(cfg: _Cfg, unit: str, low: str, high: str, address: int) -> None:
    cfg.reg(unit, low, address & 0xFFFFFFFF)
    cfg.reg(unit, high, address >> 32)


# --------------------------------------------------------------------------- memory images

def feature_image(x: np.ndarray) -> Tuple[bytes, int, int]:
    """A (C, H, W) int8 cube in NVDLA's feature layout (surfaces of 8 channels, 8-byte atoms,
    padding channels 0): (bytes, line stride, surface stride)."""
    c, h, w = x.shape
    line = w * ATOM_C
    surf = h * line
    image = np.zeros(whole_atoms(c) // ATOM_C * surf, np.uint8)
    image[feature_addresses(0, line, surf, c, h, w)] = x.astype(np.int8).view(np.uint8)
    return image.tobytes(), line, surf


def weight_image(w: np.ndarray) -> bytes:
    """Direct-convolution weights (K, C, R, S) in NVDLA's uncompressed layout (format.rst with
    nv_small's atomic C and K of 8): kernel groups of 8, in each 1x1x8-channel pieces scanned
    C' -> K -> S -> R -> C."""
    k, c, kh, kw = w.shape
    pieces = []
    for k0 in range(0, k, ATOM_K):
        for c0 in range(0, c, ATOM_C):
            block = w[k0:k0 + ATOM_K, c0:c0 + ATOM_C]          # (kn, cn, R, S)
            pieces.append(np.ascontiguousarray(block.transpose(2, 3, 0, 1)).reshape(-1))
    return np.concatenate(pieces).astype(np.int8).tobytes()


def operand_image(columns: Sequence[np.ndarray], channels: int) -> Tuple[bytes, int]:
    """Per-kernel SDP operands (a 1x1xC cube of int16 components, interleaved in the order
    given): (bytes, the cube's line = surface stride)."""
    comps = len(columns)
    elem = 2 * comps
    stride = ATOM_C * elem
    c = whole_atoms(channels)
    image = np.zeros(c // ATOM_C * stride, np.uint8)
    addresses = feature_addresses(0, stride, stride, channels, 1, 1, elem=elem).reshape(-1)
    for k, col in enumerate(columns):
        v = np.asarray(col, np.int64).astype(np.int16).view(np.uint16).astype(np.int64)
        image[addresses + 2 * k] = v & 0xFF
        image[addresses + 2 * k + 1] = v >> 8
    return image.tobytes(), stride


def write_dat(path: str, data: bytes) -> None:
    """A .dat image: ``{offset:.., size:N, payload:0x.. ...}`` entries of DAT_LINE bytes."""
    with open(path, "w") as f:
        f.write("{\n")
        for offset in range(0, len(data), DAT_LINE):
            chunk = data[offset:offset + DAT_LINE]
            payload = " ".join(f"0x{b:02x}" for b in chunk)
            f.write(f"{{offset:{offset:#x}, size:{len(chunk)}, payload:{payload}}} ,\n")
        f.write("}\n")


class _Regions:
    """The test's memory regions, laid out one after another from BASE_ADDRESS."""

    def __init__(self) -> None:
        self.next = BASE_ADDRESS
        self.items: List[Tuple[str, int, int, Optional[bytes]]] = []

    def add(self, what: str, size: int, data: Optional[bytes] = None) -> int:
        base = self.next
        size = max(-(-size // REGION_ALIGN) * REGION_ALIGN, REGION_ALIGN)
        self.items.append((what, base, size, data))
        self.next = base + size
        return base


# --------------------------------------------------------------------------- the SDP's program

@dataclasses.dataclass
class _XUnit:
    """One X unit's settings (BS or BN); operands per kernel (arrays) or None (bypassed)."""
    alu: Optional[np.ndarray] = None
    alu_shift: int = 0
    mul: Optional[np.ndarray] = None
    shift: int = 0
    relu: bool = False

    @property
    def bypass(self) -> bool:
        return self.alu is None and self.mul is None and self.shift == 0 and not self.relu


def _inexact(label: str, what: str) -> NvdlaInexactError:
    return NvdlaInexactError(f"{label}: {what}")


def _split_bias(total: np.ndarray, a: int) -> Tuple[np.ndarray, np.ndarray]:
    """total = hi * 2^a + lo with lo in [-2^(a-1), 2^(a-1)) (a >= 1) or lo = 0 (a = 0)."""
    total = np.asarray(total, np.int64)
    if a == 0:
        return total, np.zeros_like(total)
    lo = ((total + (1 << (a - 1))) & ((1 << a) - 1)) - (1 << (a - 1))
    return (total - lo) >> a, lo


def sdp_program(sdp: Sdp, channels: int, acc_bound: np.ndarray, zero_sum: np.ndarray,
                label: str) -> Tuple[_XUnit, _XUnit, int]:
    """BS, BN and the output converter's offset for an int8 SDP whose NVDLA input is
    ``v + zero_sum[c]`` (v the simulator's input: a CONV's accumulator or ``x - in_zero``),
    ``|v| <= acc_bound[c]``. Raises NvdlaInexactError where the bits would differ."""
    if sdp.precision != "int8" or sdp.convert:
        raise _inexact(label, f"an SDP in {sdp.precision}{' converting' if sdp.convert else ''}: "
                       "the export writes int8 layers only (nv_small is int8)")
    if sdp.ew_op is not None:
        raise _inexact(label, f"the SDP's element-wise {sdp.ew_op} (nv_small has no SDP EW unit)")
    if sdp.lut is not None:
        raise _inexact(label, f"the SDP's {sdp.act} lookup table (nv_small has no SDP LUT)")
    act = sdp.act
    if act == "prelu":
        raise _inexact(label, "PReLU: NVDLA computes it in an X unit's multiplier, and both X "
                       "units are taken by the bias and the per-channel multiplier")
    z = int(sdp.out_zero)
    if act == "clip":
        lo, hi = int(sdp.clip_lo), int(sdp.clip_hi)
        if hi < 127 or lo not in (-128, z):
            raise _inexact(label, f"CLIP to codes [{lo}, {hi}]: NVDLA's SDP has no clip unit "
                           "(only ReLU, at the zero point, and the int8 saturation)")
        act = "relu" if lo == z and lo > -128 else None
    if act not in (None, "relu"):
        raise _inexact(label, f"activation {act!r} has no NVDLA int8 form on nv_small")
    if sdp.out_mul:
        raise _inexact(label, f"an output multiplier ({sdp.out_mul} >> {sdp.out_shift}): "
                       "NVDLA's converter subtracts its offset before the multiply, the "
                       "simulator adds its zero point after the shift")
    bias = (np.zeros(channels, np.int64) if sdp.bias is None
            else np.asarray(sdp.bias, np.int64).reshape(-1))
    mul = None if sdp.mul is None else np.asarray(sdp.mul, np.int64).reshape(-1)
    rshift = (np.zeros(channels, np.int64) if sdp.rshift is None
              else np.asarray(sdp.rshift, np.int64).reshape(-1))
    total = bias - zero_sum                       # NVDLA's input is v + zero_sum
    reach = acc_bound + np.abs(bias)              # |v + bias|: BS never saturates
    if np.any(reach > INT32_MAX):
        c = int(np.argmax(reach))
        raise _inexact(label, f"channel {c}'s accumulator plus bias may reach {int(reach[c])}, "
                       "beyond int32: BS saturates there, on the bias' high part alone "
                       "(NVDLA's registers) or on the whole bias (the simulator)")
    if mul is None:
        mul = np.ones(channels, np.int64)
    s_max = int(rshift.max())
    p = s_max - rshift                            # BS multiplies by 2^p, BN shifts by s_max
    k = int(p.max())
    if k > 14:
        raise _inexact(label, f"the per-channel right shifts span {k} bits: NVDLA's shifter "
                       "is one per X unit and 2^{k} does not fit its 16-bit multiplier")
    scaled = (acc_bound + np.abs(bias)) << p
    if np.any(scaled > INT32_MAX):
        c = int(np.argmax(scaled))
        raise _inexact(label, f"channel {c}'s value times 2^{int(p[c])} (to share one right "
                       f"shift of {s_max} across channels whose shifts differ) may reach "
                       f"{int(scaled[c])}, beyond NVDLA's 32-bit X unit output")
    a = 16 - k
    hi, lo = _split_bias(total, a)
    if np.any(np.abs(hi) > 32767):
        raise _inexact(label, "the bias does not fit a 16-bit ALU operand shifted by "
                       f"{a} plus a remainder")
    first = (np.abs(np.asarray(acc_bound, np.int64) + np.abs(zero_sum)) + (np.abs(hi) << a)) << p
    if np.any(first > INT32_MAX):
        raise _inexact(label, "the bias' high part may take BS's output beyond 32 bits")
    lo_scaled = lo << p
    if np.any(np.abs(lo_scaled) > 32767):
        raise _inexact(label, "the bias' remainder does not fit BN's 16-bit ALU operand")
    bs = _XUnit(alu=hi if np.any(hi) else None, alu_shift=a if np.any(hi) else 0,
                mul=(1 << p) if k else None)
    bn = _XUnit(alu=lo_scaled if np.any(lo_scaled) else None, mul=mul, shift=s_max,
                relu=act == "relu")
    return bs, bn, -z


# --------------------------------------------------------------------------- one test

def _check_conv(conv: Conv, label: str) -> None:
    if conv.groups != 1:
        raise _inexact(label, f"a convolution of {conv.groups} groups (NVDLA's CONV has no "
                       "groups: export_runs writes one layer per group, export_run none)")
    if conv.mode != "direct" or conv.multi_batch:
        raise _inexact(label, f"a convolution in {'multi-batch' if conv.multi_batch else conv.mode} mode "
                       "(the export writes direct convolutions)")
    if conv.weight_format != "dense":
        raise _inexact(label, "sparse weights (the export writes uncompressed weights)")


def _sdp_registers(cfg: _Cfg, regions: _Regions, bs: _XUnit, bn: _XUnit, offset: int,
                   shape: Tuple[int, int, int], flying: bool, to_pdp: bool,
                   src: Optional[Tuple[int, int, int]], dst: Optional[Tuple[int, int, int]]):
    c, h, w = shape
    cfg.comment("SDP")
    for which, unit, dma in (("BS", bs, "BRDMA"), ("BN", bn, "NRDMA")):
        cfg.reg("SDP", f"D_DP_{which}_CFG", **{
            f"{which}_BYPASS": int(unit.bypass), f"{which}_ALU_BYPASS": int(unit.alu is None),
            f"{which}_ALU_ALGO": 2, f"{which}_MUL_BYPASS": int(unit.mul is None),
            f"{which}_MUL_PRELU": 0, f"{which}_RELU_BYPASS": int(not unit.relu)})
        cfg.reg("SDP", f"D_DP_{which}_ALU_CFG", **{f"{which}_ALU_SRC": int(unit.alu is not None),
                                                   f"{which}_ALU_SHIFT_VALUE": unit.alu_shift})
        cfg.reg("SDP", f"D_DP_{which}_ALU_SRC_VALUE", 0)
        cfg.reg("SDP", f"D_DP_{which}_MUL_CFG", **{f"{which}_MUL_SRC": int(unit.mul is not None),
                                                   f"{which}_MUL_SHIFT_VALUE": unit.shift})
        cfg.reg("SDP", f"D_DP_{which}_MUL_SRC_VALUE", 0)
        columns = [v for v in (unit.alu, unit.mul) if v is not None]
        if columns:
            data, stride = operand_image(columns, c)
            base = regions.add(f"{which} operands", len(data), data)
            use = 2 if len(columns) == 2 else (1 if unit.alu is not None else 0)
            cfg.reg("SDP_RDMA", f"D_{dma}_CFG", **{
                f"{dma}_DISABLE": 0, f"{dma}_DATA_USE": use, f"{dma}_DATA_SIZE": 1,
                f"{dma}_DATA_MODE": 0, f"{dma}_RAM_TYPE": 1})
            _addr(cfg, "SDP_RDMA", f"D_{which}_BASE_ADDR_LOW", f"D_{which}_BASE_ADDR_HIGH", base)
            cfg.reg("SDP_RDMA", f"D_{which}_LINE_STRIDE", stride)
            cfg.reg("SDP_RDMA", f"D_{which}_SURFACE_STRIDE", stride)
            cfg.reg("SDP_RDMA", f"D_{which}_BATCH_STRIDE", 0)
        else:
            cfg.reg("SDP_RDMA", f"D_{dma}_CFG", **{f"{dma}_DISABLE": 1})
    cfg.reg("SDP", "D_DP_EW_CFG", EW_BYPASS=1, EW_ALU_BYPASS=1, EW_MUL_BYPASS=1, EW_LUT_BYPASS=1)
    cfg.reg("SDP_RDMA", "D_ERDMA_CFG", ERDMA_DISABLE=1)
    cfg.reg("SDP", "D_DATA_CUBE_WIDTH", w - 1)
    cfg.reg("SDP", "D_DATA_CUBE_HEIGHT", h - 1)
    cfg.reg("SDP", "D_DATA_CUBE_CHANNEL", c - 1)
    cfg.reg("SDP_RDMA", "D_DATA_CUBE_WIDTH", w - 1)
    cfg.reg("SDP_RDMA", "D_DATA_CUBE_HEIGHT", h - 1)
    cfg.reg("SDP_RDMA", "D_DATA_CUBE_CHANNEL", c - 1)
    cfg.reg("SDP", "D_FEATURE_MODE_CFG", FLYING_MODE=int(flying), OUTPUT_DST=int(to_pdp),
            WINOGRAD=0, NAN_TO_ZERO=0, BATCH_NUMBER=0)
    cfg.reg("SDP_RDMA", "D_FEATURE_MODE_CFG", FLYING_MODE=int(flying), WINOGRAD=0,
            IN_PRECISION=0, PROC_PRECISION=0, OUT_PRECISION=0, BATCH_NUMBER=0)
    if src is not None:
        _addr(cfg, "SDP_RDMA", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH", src[0])
        cfg.reg("SDP_RDMA", "D_SRC_LINE_STRIDE", src[1])
        cfg.reg("SDP_RDMA", "D_SRC_SURFACE_STRIDE", src[2])
        cfg.reg("SDP_RDMA", "D_SRC_DMA_CFG", SRC_RAM_TYPE=1)
    if dst is not None:
        _addr(cfg, "SDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH", dst[0])
        cfg.reg("SDP", "D_DST_LINE_STRIDE", dst[1])
        cfg.reg("SDP", "D_DST_SURFACE_STRIDE", dst[2])
        cfg.reg("SDP", "D_DST_BATCH_STRIDE", 0)
    cfg.reg("SDP", "D_DST_DMA_CFG", DST_RAM_TYPE=1)
    cfg.reg("SDP", "D_DATA_FORMAT", PROC_PRECISION=0, OUT_PRECISION=0)
    cfg.reg("SDP", "D_CVT_OFFSET", offset & 0xFFFFFFFF)
    cfg.reg("SDP", "D_CVT_SCALE", 1)
    cfg.reg("SDP", "D_CVT_SHIFT", 0)
    return any(v is not None for v in (bs.alu, bs.mul, bn.alu, bn.mul)) or src is not None


def cbuf_banks(c: int, h: int, w: int, weight_bytes: int) -> Tuple[int, int, int]:
    """(CBUF entries per input row, data banks, weight banks) of a direct convolution on nv_small:
    a row of W positions takes W x ceil(C/8) 8-byte entries, a bank 512 of them."""
    entries = w * whole_atoms(c) // ATOM_C
    return (entries, -(-entries * h // (CBUF_BANK_BYTES // ATOM_C)),
            -(-weight_bytes // CBUF_BANK_BYTES))


def _conv_registers(cfg: _Cfg, conv: Conv, x_shape, out_shape, src, weights: int,
                    weight_bytes: int, dst_strides: Tuple[int, int], label: str) -> None:
    c, h, w = x_shape
    k, oh, ow = out_shape
    _, _, kh, kw = conv.weights.shape
    pt, pl, pb, pr = (int(v) for v in conv.padding)
    sy, sx = (int(v) for v in conv.stride)
    dy, dx = (int(v) for v in conv.dilation)
    entries, data_banks, weight_banks = cbuf_banks(c, h, w, weight_bytes)
    if data_banks + weight_banks > CBUF_BANKS:
        raise _inexact(label, f"the input ({data_banks} banks) and weights ({weight_banks} "
                       f"banks) do not fit CBUF's {CBUF_BANKS} together (export_runs writes a "
                       "CONV -> SDP in slices of output rows when its weights leave room for "
                       "one; not this layer)")
    pad_code = int(conv.in_zero) & 0xFF
    cfg.comment("CDMA")
    cfg.reg("CDMA", "D_MISC_CFG", CONV_MODE=0, IN_PRECISION=0, PROC_PRECISION=0,
            DATA_REUSE=0, WEIGHT_REUSE=0, SKIP_DATA_RLS=0, SKIP_WEIGHT_RLS=0)
    cfg.reg("CDMA", "D_DATAIN_FORMAT", DATAIN_FORMAT=0, PIXEL_FORMAT=0, PIXEL_MAPPING=0,
            PIXEL_SIGN_OVERRIDE=0)
    cfg.reg("CDMA", "D_DATAIN_SIZE_0", DATAIN_WIDTH=w - 1, DATAIN_HEIGHT=h - 1)
    cfg.reg("CDMA", "D_DATAIN_SIZE_1", DATAIN_CHANNEL=c - 1)
    cfg.reg("CDMA", "D_DATAIN_SIZE_EXT_0", DATAIN_WIDTH_EXT=w - 1, DATAIN_HEIGHT_EXT=h - 1)
    cfg.reg("CDMA", "D_PIXEL_OFFSET", 0)
    cfg.reg("CDMA", "D_DAIN_RAM_TYPE", DATAIN_RAM_TYPE=1)
    _addr(cfg, "CDMA", "D_DAIN_ADDR_LOW_0", "D_DAIN_ADDR_HIGH_0", src[0])
    _addr(cfg, "CDMA", "D_DAIN_ADDR_LOW_1", "D_DAIN_ADDR_HIGH_1", 0)
    cfg.reg("CDMA", "D_LINE_STRIDE", src[1])
    cfg.reg("CDMA", "D_LINE_UV_STRIDE", 0)
    cfg.reg("CDMA", "D_SURF_STRIDE", src[2])
    cfg.reg("CDMA", "D_DAIN_MAP", LINE_PACKED=0, SURF_PACKED=0)
    cfg.reg("CDMA", "D_BATCH_NUMBER", BATCHES=0)
    cfg.reg("CDMA", "D_BATCH_STRIDE", 0)
    cfg.reg("CDMA", "D_ENTRY_PER_SLICE", ENTRIES=entries - 1)
    cfg.reg("CDMA", "D_FETCH_GRAIN", GRAINS=0)
    cfg.reg("CDMA", "D_WEIGHT_FORMAT", WEIGHT_FORMAT=0)
    cfg.reg("CDMA", "D_WEIGHT_SIZE_0", BYTE_PER_KERNEL=c * kh * kw - 1)
    cfg.reg("CDMA", "D_WEIGHT_SIZE_1", WEIGHT_KERNEL=k - 1)
    cfg.reg("CDMA", "D_WEIGHT_RAM_TYPE", WEIGHT_RAM_TYPE=1)
    _addr(cfg, "CDMA", "D_WEIGHT_ADDR_LOW", "D_WEIGHT_ADDR_HIGH", weights)
    cfg.reg("CDMA", "D_WEIGHT_BYTES", weight_bytes)
    cfg.reg("CDMA", "D_MEAN_FORMAT", MEAN_FORMAT=0)
    cfg.reg("CDMA", "D_CVT_CFG", 0)
    cfg.reg("CDMA", "D_CVT_OFFSET", 0)
    cfg.reg("CDMA", "D_CVT_SCALE", 0)
    cfg.reg("CDMA", "D_CONV_STRIDE", CONV_X_STRIDE=sx - 1, CONV_Y_STRIDE=sy - 1)
    cfg.reg("CDMA", "D_ZERO_PADDING", PAD_LEFT=pl, PAD_RIGHT=pr, PAD_TOP=pt, PAD_BOTTOM=pb)
    cfg.reg("CDMA", "D_ZERO_PADDING_VALUE", PAD_VALUE=pad_code)
    cfg.reg("CDMA", "D_BANK", DATA_BANK=data_banks - 1, WEIGHT_BANK=weight_banks - 1)
    cfg.reg("CDMA", "D_NAN_FLUSH_TO_ZERO", 0)
    cfg.comment("CSC")
    cfg.reg("CSC", "D_MISC_CFG", CONV_MODE=0, IN_PRECISION=0, PROC_PRECISION=0,
            DATA_REUSE=0, WEIGHT_REUSE=0, SKIP_DATA_RLS=0, SKIP_WEIGHT_RLS=0)
    cfg.reg("CSC", "D_DATAIN_FORMAT", DATAIN_FORMAT=0)
    cfg.reg("CSC", "D_DATAIN_SIZE_EXT_0", DATAIN_WIDTH_EXT=w - 1, DATAIN_HEIGHT_EXT=h - 1)
    cfg.reg("CSC", "D_DATAIN_SIZE_EXT_1", DATAIN_CHANNEL_EXT=c - 1)
    cfg.reg("CSC", "D_BATCH_NUMBER", BATCHES=0)
    cfg.reg("CSC", "D_POST_Y_EXTENSION", Y_EXTENSION=0)
    cfg.reg("CSC", "D_ENTRY_PER_SLICE", ENTRIES=entries - 1)
    cfg.reg("CSC", "D_WEIGHT_FORMAT", WEIGHT_FORMAT=0)
    cfg.reg("CSC", "D_WEIGHT_SIZE_EXT_0", WEIGHT_WIDTH_EXT=kw - 1, WEIGHT_HEIGHT_EXT=kh - 1)
    cfg.reg("CSC", "D_WEIGHT_SIZE_EXT_1", WEIGHT_CHANNEL_EXT=c - 1, WEIGHT_KERNEL=k - 1)
    cfg.reg("CSC", "D_WEIGHT_BYTES", weight_bytes)
    cfg.reg("CSC", "D_WMB_BYTES", 0)
    cfg.reg("CSC", "D_DATAOUT_SIZE_0", DATAOUT_WIDTH=ow - 1, DATAOUT_HEIGHT=oh - 1)
    cfg.reg("CSC", "D_DATAOUT_SIZE_1", DATAOUT_CHANNEL=k - 1)
    cfg.reg("CSC", "D_ATOMICS", ATOMICS=ow * oh - 1)
    cfg.reg("CSC", "D_RELEASE", RLS_SLICES=h - 1)
    cfg.reg("CSC", "D_CONV_STRIDE_EXT", CONV_X_STRIDE_EXT=sx - 1, CONV_Y_STRIDE_EXT=sy - 1)
    cfg.reg("CSC", "D_DILATION_EXT", X_DILATION_EXT=dx - 1, Y_DILATION_EXT=dy - 1)
    cfg.reg("CSC", "D_ZERO_PADDING", PAD_LEFT=pl, PAD_TOP=pt)
    cfg.reg("CSC", "D_ZERO_PADDING_VALUE", PAD_VALUE=pad_code)
    cfg.reg("CSC", "D_BANK", DATA_BANK=data_banks - 1, WEIGHT_BANK=weight_banks - 1)
    cfg.reg("CSC", "D_PRA_CFG", PRA_TRUNCATE=0)
    cfg.comment("CMAC")
    cfg.reg("CMAC_A", "D_MISC_CFG", CONV_MODE=0, PROC_PRECISION=0)
    cfg.reg("CMAC_B", "D_MISC_CFG", CONV_MODE=0, PROC_PRECISION=0)
    cfg.comment("CACC")
    cfg.reg("CACC", "D_MISC_CFG", CONV_MODE=0, PROC_PRECISION=0)
    cfg.reg("CACC", "D_DATAOUT_SIZE_0", DATAOUT_WIDTH=ow - 1, DATAOUT_HEIGHT=oh - 1)
    cfg.reg("CACC", "D_DATAOUT_SIZE_1", DATAOUT_CHANNEL=k - 1)
    cfg.reg("CACC", "D_DATAOUT_ADDR", 0)
    cfg.reg("CACC", "D_BATCH_NUMBER", BATCHES=0)
    cfg.reg("CACC", "D_LINE_STRIDE", dst_strides[0])
    cfg.reg("CACC", "D_SURF_STRIDE", dst_strides[1])
    cfg.reg("CACC", "D_DATAOUT_MAP", LINE_PACKED=0, SURF_PACKED=0)
    cfg.reg("CACC", "D_CLIP_CFG", CLIP_TRUNCATE=0)


def _pdp_registers(cfg: _Cfg, pool: Pool, in_shape, out_shape, flying: bool, src, dst,
                   label: str) -> None:
    c, h, w = in_shape
    _, oh, ow = out_shape
    kh, kw = (int(v) for v in pool.kernel)
    sy, sx = (int(v) for v in pool.stride)
    pt, pl, pb, pr = (int(v) for v in pool.padding)
    if kh > 8 or kw > 8 or sy > 16 or sx > 16 or max(pt, pl, pb, pr) > 7:
        raise _inexact(label, f"pooling window {kh}x{kw} stride {sy}x{sx} padding "
                       f"{(pt, pl, pb, pr)} beyond the PDP's registers (8x8, 16, 7)")
    cfg.comment("PDP")
    for unit in ("PDP", "PDP_RDMA"):
        cfg.reg(unit, "D_DATA_CUBE_IN_WIDTH", w - 1)
        cfg.reg(unit, "D_DATA_CUBE_IN_HEIGHT", h - 1)
        cfg.reg(unit, "D_DATA_CUBE_IN_CHANNEL", c - 1)
        cfg.reg(unit, "D_DATA_FORMAT", INPUT_DATA=0)
        cfg.reg(unit, "D_PARTIAL_WIDTH_IN", 0)
    cfg.reg("PDP", "D_DATA_CUBE_OUT_WIDTH", ow - 1)
    cfg.reg("PDP", "D_DATA_CUBE_OUT_HEIGHT", oh - 1)
    cfg.reg("PDP", "D_DATA_CUBE_OUT_CHANNEL", c - 1)
    cfg.reg("PDP", "D_OPERATION_MODE_CFG", POOLING_METHOD={"avg": 0, "max": 1}[pool.kind],
            FLYING_MODE=int(not flying),
            SPLIT_NUM=0)
    cfg.reg("PDP_RDMA", "D_FLYING_MODE", FLYING_MODE=int(not flying))
    cfg.reg("PDP_RDMA", "D_OPERATION_MODE_CFG", SPLIT_NUM=0)
    cfg.reg("PDP", "D_NAN_FLUSH_TO_ZERO", 0)
    cfg.reg("PDP", "D_PARTIAL_WIDTH_OUT", 0)
    cfg.reg("PDP", "D_POOLING_KERNEL_CFG", KERNEL_WIDTH=kw - 1, KERNEL_HEIGHT=kh - 1,
            KERNEL_STRIDE_WIDTH=sx - 1, KERNEL_STRIDE_HEIGHT=sy - 1)
    cfg.reg("PDP_RDMA", "D_POOLING_KERNEL_CFG", KERNEL_WIDTH=kw - 1, KERNEL_STRIDE_WIDTH=sx - 1)
    cfg.reg("PDP", "D_RECIP_KERNEL_WIDTH", RECIP_KERNEL_WIDTH=pdp_reciprocal(kw))
    cfg.reg("PDP", "D_RECIP_KERNEL_HEIGHT", RECIP_KERNEL_HEIGHT=pdp_reciprocal(kh))
    cfg.reg("PDP", "D_POOLING_PADDING_CFG", PAD_LEFT=pl, PAD_TOP=pt, PAD_RIGHT=pr,
            PAD_BOTTOM=pb)
    cfg.reg("PDP_RDMA", "D_POOLING_PADDING_CFG", PAD_WIDTH=pl)
    for i in range(1, 8):  # i padded positions add i times the zero point (the average's)
        value = i * int(pool.zero) if pool.kind == "avg" else 0
        cfg.reg("PDP", f"D_POOLING_PADDING_VALUE_{i}_CFG", **{f"PAD_VALUE_{i}X": value})
    if src is not None:
        _addr(cfg, "PDP_RDMA", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH", src[0])
        cfg.reg("PDP_RDMA", "D_SRC_LINE_STRIDE", src[1])
        cfg.reg("PDP_RDMA", "D_SRC_SURFACE_STRIDE", src[2])
        cfg.reg("PDP_RDMA", "D_SRC_RAM_CFG", SRC_RAM_TYPE=1)
        _addr(cfg, "PDP", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH", src[0])
        cfg.reg("PDP", "D_SRC_LINE_STRIDE", src[1])
        cfg.reg("PDP", "D_SRC_SURFACE_STRIDE", src[2])
    _addr(cfg, "PDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH", dst[0])
    cfg.reg("PDP", "D_DST_LINE_STRIDE", dst[1])
    cfg.reg("PDP", "D_DST_SURFACE_STRIDE", dst[2])
    cfg.reg("PDP", "D_DST_RAM_CFG", DST_RAM_TYPE=1)


def _out_size(n: int, k: int, s: int, pads: int, dilation: int = 1) -> int:
    return (n + pads - dilation * (k - 1) - 1) // s + 1


def _one_image(run: RecordedRun, label: str) -> Tuple[np.ndarray, np.ndarray]:
    """The run's input and output as one (C, H, W) cube each. A batch of N 1x1 positions through
    1x1 convolutions and SDPs alone (a dense layer over N rows, as the compiler lowers a
    matmul) is the same arithmetic on one 1 x N feature map, as NVDLA's compiler runs it."""
    n = run.input.shape[0]
    if n == 1:
        return run.input[0], run.output[0]
    pointwise = all(isinstance(op, Sdp) or (
        isinstance(op, Conv) and op.weights.shape[2:] == (1, 1) and not any(op.padding)
        and tuple(op.stride) == (1, 1)) for op in run.ops)
    if run.input.shape[2:] == (1, 1) and run.output.shape[2:] == (1, 1) and pointwise:
        as_row = lambda t: np.ascontiguousarray(t[:, :, 0, 0].T[:, None, :])  # noqa: E731
        return as_row(run.input), as_row(run.output)
    raise _inexact(label, f"a batch of {n} (the export writes one image per test: run the "
                   "model on one input)")


def export_run(run: RecordedRun, directory: str, name: str) -> ExportedTest:
    """Write one recorded int8 run as the trace test ``directory/name/name.cfg`` (with its .dat
    files), play it on the front end and check it gives the run's output bits. Raises
    NvdlaInexactError for what NVDLA cannot compute exactly (nothing is written then)."""
    label = run.label or name
    ops = list(run.ops)
    kinds = _exportable_chain(run, ops, label)
    x, expected = _one_image(run, label)
    c, h, w = x.shape
    cfg = _Cfg()
    regions = _Regions()
    image, line, surf = feature_image(x)
    src = (regions.add("input", len(image), image), line, surf)
    out_c, out_h, out_w = expected.shape
    out_image_len = whole_atoms(out_c) // ATOM_C * out_h * out_w * ATOM_C
    units: List[str] = []
    conv = ops[0] if isinstance(ops[0], Conv) else None
    sdp = next((op for op in ops if isinstance(op, Sdp)), None)
    pool = ops[-1] if isinstance(ops[-1], Pool) else None
    if conv is not None:
        _check_conv(conv, label)
        wt = np.asarray(conv.weights, np.int8)
        k, _, kh, kw = wt.shape
        pt, pl, pb, pr = (int(v) for v in conv.padding)
        sy, sx = (int(v) for v in conv.stride)
        dy, dx = (int(v) for v in conv.dilation)
        sdp_shape = (k, _out_size(h, kh, sy, pt + pb, dy), _out_size(w, kw, sx, pl + pr, dx))
        w64 = wt.astype(np.int64).reshape(k, -1)
        zero_sum = int(conv.in_zero) * w64.sum(axis=1)
        acc_bound = (128 + abs(int(conv.in_zero))) * np.abs(w64).sum(axis=1)
    elif sdp is not None:
        sdp_shape = (c, h, w)
        zero_sum = np.full(c, int(sdp.in_zero), np.int64)
        acc_bound = np.full(c, 128 + abs(int(sdp.in_zero)), np.int64)
    out_line = out_w * ATOM_C
    out_surf = out_h * out_line
    if sdp is not None:
        bs, bn, offset = sdp_program(sdp, sdp_shape[0], acc_bound, zero_sum, label)
    if conv is not None:
        wimage = weight_image(wt)
        weights = regions.add("weights", len(wimage), wimage)
    dst = (regions.add("output", out_image_len), out_line, out_surf)
    needs_rdma = False
    if sdp is not None:
        needs_rdma = _sdp_registers(cfg, regions, bs, bn, offset, sdp_shape,
                                    flying=conv is not None, to_pdp=pool is not None,
                                    src=None if conv is not None else src,
                                    dst=None if pool is not None else dst)
        units += ["SDP"] + (["SDP_RDMA"] if needs_rdma else [])
    if conv is not None:
        # NVDLA's weight byte counts are whole 128-byte units (every trace rounds them up:
        # dc_1x1x8_1x1x8x1's 8 bytes are 128); the region's tail is zero
        weight_bytes = -(-len(wimage) // WEIGHT_UNIT) * WEIGHT_UNIT
        _conv_registers(cfg, conv, (c, h, w), sdp_shape, src, weights, weight_bytes,
                        (out_line, out_surf), label)
        units += ["CACC", "CMAC_A", "CMAC_B", "CSC", "CDMA"]
    if pool is not None:
        pool_in = sdp_shape if sdp is not None else (c, h, w)
        _pdp_registers(cfg, pool, pool_in, expected.shape, flying=sdp is not None,
                       src=None if sdp is not None else src, dst=dst, label=label)
        units = ["PDP"] + ([] if sdp is not None else ["PDP_RDMA"]) + units
    head = _memory_head(directory, name, label, kinds, regions)
    last = "PDP" if pool is not None else "SDP"
    if conv is not None:  # as NVDLA's convolution tests: CDMA's and CACC's done masked too
        mask = 0x3F03FF & ~(0b11 << {"SDP": 0, "PDP": 4}[last])
        head.append("//only the last unit's done interrupts")
        head.append(f"reg_write(NVDLA_GLB.S_INTR_MASK_0, {mask:#x});")
    tail = []
    if conv is not None:
        tail.append("poll_reg_equal(NVDLA_CDMA.S_CBUF_FLUSH_STATUS_0, 0x1);")
    enables = tuple(units)
    tail += [f"reg_write(NVDLA_{u}.D_OP_ENABLE_0, 0x1);" for u in enables]
    tail.append(f"intr_notify({last}_0, sync_id_0);")
    cfg_path = os.path.join(directory, name, f"{name}.cfg")
    region = (dst[0], out_image_len)
    body = "\n".join(head) + "\n" + cfg.text() + "\n".join(tail) + "\n"
    with open(cfg_path, "w") as f:
        f.write(body + f"check_crc(sync_id_0, 1, {region[0]:#x}, {region[1]:#x}, 0x0);\n")
    played, crc = _play_checked(cfg_path, dst[0], out_line, out_surf, expected, label)
    with open(cfg_path, "w") as f:
        f.write(body + f"check_crc(sync_id_0, 1, {region[0]:#x}, {region[1]:#x}, {crc:#010x});\n")
    return ExportedTest(name=name, cfg=cfg_path, crc=crc, region=region,
                        output=expected.copy(), units=enables,
                        cycles=estimate_cycles(played.layers))


def _exportable_chain(run: RecordedRun, ops: list, label: str) -> Tuple[str, ...]:
    """The run's chain of op kinds, when it is one int8 NVDLA hardware layer (else
    NvdlaInexactError, naming what is not)."""
    other = [op for op in ops if isinstance(op, OtherOp)]
    if other:
        raise _inexact(label, f"a {other[0].engine} op in {other[0].precision} (the export "
                       "writes int8 CONV, SDP and PDP layers)")
    kinds = tuple(type(op).__name__ for op in ops)
    if kinds not in (("Conv", "Sdp"), ("Conv", "Sdp", "Pool"), ("Sdp",), ("Sdp", "Pool"),
                     ("Pool",)):
        raise _inexact(label, f"the chain {' -> '.join(kinds)} is not one NVDLA hardware "
                       "layer (CONV -> SDP [-> PDP], SDP [-> PDP] or PDP)")
    if run.input is None or run.output is None or run.input.dtype != np.int8:
        raise _inexact(label, "the run's tensors are not int8 NCHW")
    return kinds


def _memory_head(directory: str, name: str, label: str, kinds: Tuple[str, ...],
                 regions: _Regions) -> List[str]:
    """The test's opening lines: what it is and each memory region's initialisation, its
    data written to ``directory/name/`` as .dat files."""
    os.makedirs(os.path.join(directory, name), exist_ok=True)
    head: List[str] = [f"// {name}: {label} ({' -> '.join(kinds)}), written by accel-codegen "
                       "export-nvdla from the simulator's int8 run"]
    for what, base, size, data in regions.items:
        head.append(f"//{what}")
        head.append(f"mem_init(pri_mem, {base:#x}, {size:#x}, ALL_ZERO);")
        if data is not None:
            dat = f"{name}_{what.split()[0].lower()}.dat"
            write_dat(os.path.join(directory, name, dat), data)
            head.append(f'mem_load(pri_mem, {base:#x}, "{dat}");')
    return head


def _play_checked(cfg_path: str, base: int, line: int, surface: int, expected: np.ndarray,
                  label: str) -> tuple:
    """Play the test on the front end: the playing and its first CRC. Its output must be the
    run's bits (else AccelInvalidError: an export error)."""
    out_c, out_h, out_w = expected.shape
    played = play(cfg_path)
    crc = played.crcs[0]
    got = read_int8(played.memory, base, line, surface, out_c, out_h, out_w)
    if not np.array_equal(got, expected.astype(np.int64)):
        bad = np.argwhere(got != expected)[0]
        raise AccelInvalidError(
            f"{label}: the exported test computes {int(got[tuple(bad)])} at (c, h, w) = "
            f"{tuple(int(v) for v in bad)} where the simulator's run gave "
            f"{int(expected[tuple(bad)])} (an export error: please report it)")
    return played, crc


def row_slices(run: RecordedRun) -> List[RecordedRun]:
    """A CONV -> SDP run whose input and weights do not fit CBUF together, as NVDLA's compiler
    splits it: slices of output rows, each reading the input rows its windows cover (the
    kernel's overlap read twice) with the top padding on the first slice and the bottom
    padding on the last, each a hardware layer of its own. The run itself when it fits or is
    not such a run (export_run then says why not)."""
    ops = run.ops
    if (len(ops) != 2 or not isinstance(ops[0], Conv) or not isinstance(ops[1], Sdp)
            or run.input is None or run.output is None or run.input.shape[0] != 1
            or getattr(ops[0].weights, "ndim", 0) != 4):
        return [run]
    conv = ops[0]
    _, c, h, w = run.input.shape
    k, _, kh, _ = conv.weights.shape
    weight_bytes = -(-int(conv.weights.size) // WEIGHT_UNIT) * WEIGHT_UNIT
    entries, data_banks, weight_banks = cbuf_banks(c, h, w, weight_bytes)
    if data_banks + weight_banks <= CBUF_BANKS or weight_banks >= CBUF_BANKS:
        return [run]
    pt, pl, pb, pr = (int(v) for v in conv.padding)
    sy, dy = int(conv.stride[0]), int(conv.dilation[0])
    rows_fit = (CBUF_BANKS - weight_banks) * (CBUF_BANK_BYTES // ATOM_C) // entries
    span = dy * (kh - 1) + 1                      # input rows one output row reads
    per_slice = (rows_fit - span) // sy + 1       # output rows whose windows fit
    if per_slice < 1:
        return [run]
    out_h = run.output.shape[2]
    slices = []
    for o0 in range(0, out_h, per_slice):
        o1 = min(o0 + per_slice, out_h)
        top, bottom = o0 * sy - pt, (o1 - 1) * sy - pt + span    # input rows [top, bottom)
        part = dataclasses.replace(conv, padding=(max(-top, 0), pl, max(bottom - h, 0), pr))
        slices.append(RecordedRun(
            label=f"{run.label} rows {o0}-{o1 - 1}", ops=[part, ops[1]], mode=run.mode,
            input=run.input[:, :, max(top, 0):min(bottom, h)], output=run.output[:, :, o0:o1]))
    return slices


def kernel_slices(run: RecordedRun) -> List[RecordedRun]:
    """A CONV -> SDP run whose weights leave too little of CBUF for its input, as NVDLA's
    compiler splits it: slices of kernels (whole groups of 8), each with the SDP's per-channel
    converters of its channels, writing its channels of the output; each a hardware layer of
    its own (then split in rows by :func:`row_slices` where its input still does not fit).
    The run itself when it fits or is not such a run."""
    ops = run.ops
    if (len(ops) != 2 or not isinstance(ops[0], Conv) or not isinstance(ops[1], Sdp)
            or run.input is None or run.output is None or run.input.shape[0] != 1
            or getattr(ops[0].weights, "ndim", 0) != 4 or ops[1].ew_op is not None):
        return [run]
    conv, sdp = ops
    _, c, h, w = run.input.shape
    k = conv.weights.shape[0]
    per_kernel = int(conv.weights[0].size)
    units = lambda n: -(-n * per_kernel // WEIGHT_UNIT) * WEIGHT_UNIT  # noqa: E731
    _, data_banks, weight_banks = cbuf_banks(c, h, w, units(k))
    if data_banks + weight_banks <= CBUF_BANKS or weight_banks <= CBUF_BANKS // 2:
        return [run]   # fits, or the weights take at most half: slices of rows (as accel.h's
        #                accel_conv_banks lists NVDLA's compiler's choices)
    room = CBUF_BANKS - min(data_banks, CBUF_BANKS // 2)   # the input keeps up to half
    per_slice = ATOM_K
    while per_slice + ATOM_K < k and cbuf_banks(c, h, w, units(per_slice + ATOM_K))[2] <= room:
        per_slice += ATOM_K
    if per_slice >= k:
        return [run]
    slices = []
    for k0 in range(0, k, per_slice):
        k1 = min(k0 + per_slice, k)
        cut = {f: getattr(sdp, f)[k0:k1] for f in ("bias", "mul", "rshift", "prelu_mul")
               if isinstance(getattr(sdp, f), np.ndarray)}
        slices.append(RecordedRun(
            label=f"{run.label} kernels {k0}-{k1 - 1}",
            ops=[dataclasses.replace(conv, weights=conv.weights[k0:k1]),
                 dataclasses.replace(sdp, **cut)],
            mode=run.mode, input=run.input, output=run.output[:, k0:k1]))
    return slices


def _pool_apart(run: RecordedRun) -> List[RecordedRun]:
    """A CONV -> SDP -> PDP run that CBUF cannot hold as two runs, the CONV -> SDP writing its
    output to memory and the PDP reading it (NVDLA's compiler does the same when it splits
    such a layer): the intermediate codes are the simulator's own, from the same ops run apart
    (a fused run and an independent one give the same bits)."""
    ops = run.ops
    if (len(ops) != 3 or not isinstance(ops[0], Conv) or run.input is None
            or getattr(ops[0].weights, "ndim", 0) != 4 or run.input.shape[0] != 1):
        return [run]
    _, c, h, w = run.input.shape
    weight_bytes = -(-int(ops[0].weights.size) // WEIGHT_UNIT) * WEIGHT_UNIT
    _, data_banks, weight_banks = cbuf_banks(c, h, w, weight_bytes)
    if data_banks + weight_banks <= CBUF_BANKS:
        return [run]
    from ..sim.device import Device

    middle, _ = Device("nv_small").run(list(ops[:2]), run.input)
    return [RecordedRun(f"{run.label} conv", list(ops[:2]), run.mode, run.input, middle),
            RecordedRun(f"{run.label} pool", [ops[2]], run.mode, middle, run.output)]


def group_slices(run: RecordedRun) -> List[RecordedRun]:
    """A grouped (or depthwise) convolution as NVDLA's compiler runs it, one convolution per
    group: group g reads its input channels and writes its output channels, with the SDP's
    converters of those channels and the pool that follows (pooling is per channel). The run
    itself when its convolution has one group."""
    ops = run.ops
    if (not ops or not isinstance(ops[0], Conv) or int(ops[0].groups) == 1
            or run.input is None or run.output is None
            or getattr(ops[0].weights, "ndim", 0) != 4
            or any(isinstance(op, Sdp) and op.ew_op is not None for op in ops)):
        return [run]
    conv = ops[0]
    groups = int(conv.groups)
    kg = conv.weights.shape[0] // groups
    cg = run.input.shape[1] // groups
    slices = []
    for g in range(groups):
        k0, k1 = g * kg, (g + 1) * kg
        parts = [dataclasses.replace(conv, weights=conv.weights[k0:k1], groups=1)]
        for op in ops[1:]:
            if isinstance(op, Sdp):
                op = dataclasses.replace(op, **{
                    f: getattr(op, f)[k0:k1] for f in ("bias", "mul", "rshift", "prelu_mul")
                    if isinstance(getattr(op, f), np.ndarray)})
            parts.append(op)
        slices.append(RecordedRun(f"{run.label} group {g}", parts, run.mode,
                                  run.input[:, g * cg:(g + 1) * cg], run.output[:, k0:k1]))
    return slices


def hardware_layers(run: RecordedRun) -> List[RecordedRun]:
    """The hardware layers NVDLA's compiler would make of a run: one convolution per group, a
    pool apart from the convolution it follows when that must be split, kernel slices where
    the weights crowd CBUF, row slices where the input does not fit beside them."""
    return [part for group in group_slices(run) for whole in _pool_apart(group)
            for kernels in kernel_slices(whole) for part in row_slices(kernels)]


def export_runs(runs: Sequence[RecordedRun], directory: str, prefix: str = "layer"
                ) -> Tuple[List[ExportedTest], List[Refused]]:
    """Export every run that NVDLA computes exactly, one test per hardware layer
    (``prefix_NN``, ``prefix_NN_sM`` for the slices of a convolution CBUF cannot hold at once:
    :func:`hardware_layers`); the others are returned as Refused with the reason."""
    tests, refused = [], []
    for i, run in enumerate(runs):
        parts = hardware_layers(run)
        try:
            written = [export_run(part, directory, f"{prefix}_{i:02d}" + (
                f"_s{j}" if len(parts) > 1 else "")) for j, part in enumerate(parts)]
        except NvdlaInexactError as error:
            refused.append(Refused(run.label, str(error)))
            continue
        tests.extend(written)
    return tests, refused
