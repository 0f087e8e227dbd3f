"""Decode NVDLA's hardware layers from their register values and run them with NVDLA's int8
arithmetic (:mod:`.arith`) on a sparse memory (:class:`.trace.Memory`), writing outputs in
NVDLA's memory layout.

nv_small's feature layout (nvdla/doc ``format.rst``, with nv_small's 8-byte atom): channels in
surfaces of 8; element (c, h, w) of an int8 cube sits at
``base + surface_stride * (c // 8) + line_stride * h + 8 * w + c % 8``.

Weights for direct convolution (``format.rst``, nv_small's atomic K = 8 and atomic C = 8):
kernels in groups of 8; inside a group, 1x1x8-channel pieces scanned C' -> K -> W -> H -> C
(the last channel piece and the last group may be shorter), groups packed one after another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

from ...errors import AccelInvalidError, AccelUnsupportedError
from . import arith
from .trace import Memory, RegisterFile

ATOM_C = 8    # nv_small: channels per surface (8-byte atom of int8)
ATOM_K = 8    # nv_small: kernels per weight group


def whole_atoms(c: int) -> int:
    """Channels rounded up to whole atoms: the engines read and write whole 8-byte atoms, so a
    cube of 3 channels is processed (and written back) as 8, the padding channels included."""
    return -(-c // ATOM_C) * ATOM_C


@dataclass
class Layer:
    """What one hardware layer did: the engines, shapes and traffic a cost estimate needs."""
    kind: str                                   # "conv", "sdp", "pdp", "cdp"
    in_shape: tuple                             # (C, H, W)
    out_shape: tuple
    params: Dict[str, object] = field(default_factory=dict)


def feature_addresses(base: int, line: int, surf: int, c: int, h: int, w: int,
                      elem: int = 1) -> np.ndarray:
    """Byte addresses of a (C, H, W) cube's elements (the first byte of each element)."""
    cc = np.arange(c, dtype=np.int64)[:, None, None]
    hh = np.arange(h, dtype=np.int64)[None, :, None]
    ww = np.arange(w, dtype=np.int64)[None, None, :]
    return (base + surf * (cc // ATOM_C) + line * hh + ATOM_C * elem * ww
            + (cc % ATOM_C) * elem)


def read_int8(mem: Memory, base, line, surf, c, h, w) -> np.ndarray:
    return mem.gather(feature_addresses(base, line, surf, c, h, w)).view(np.int8).astype(np.int64)


def write_int8(mem: Memory, base, line, surf, data: np.ndarray) -> None:
    c, h, w = data.shape
    mem.scatter(feature_addresses(base, line, surf, c, h, w),
                arith.saturate(data, 8).astype(np.int64) & 0xFF)


def _addr(r: RegisterFile, unit: str, low: str, high: str) -> int:
    return (r.get(unit, high) << 32) | r.get(unit, low)


# ---------------------------------------------------------------- SDP

def _sdp_operands(r: RegisterFile, mem: Memory, which: str, shape) -> Dict[str, object]:
    """The ALU and multiplier operands of X unit ``which`` ("BS" or "BN"): a register value or
    data read by the SDP's BRDMA/NRDMA (per kernel or per element; 1 or 2 bytes; ALU, MUL or
    both interleaved ALU-first)."""
    f = lambda name: r.get("SDP", f"D_DP_{which}_CFG", f"{which}_{name}")  # noqa: E731
    alu_src = r.get("SDP", f"D_DP_{which}_ALU_CFG", f"{which}_ALU_SRC")
    mul_src = r.get("SDP", f"D_DP_{which}_MUL_CFG", f"{which}_MUL_SRC")
    ops = {
        "bypass": bool(f("BYPASS")), "alu_bypass": bool(f("ALU_BYPASS")),
        "alu_algo": f("ALU_ALGO"), "mul_bypass": bool(f("MUL_BYPASS")),
        "mul_prelu": bool(f("MUL_PRELU")), "relu_bypass": bool(f("RELU_BYPASS")),
        "alu_shift": r.get("SDP", f"D_DP_{which}_ALU_CFG", f"{which}_ALU_SHIFT_VALUE"),
        "mul_shift": r.get("SDP", f"D_DP_{which}_MUL_CFG", f"{which}_MUL_SHIFT_VALUE"),
        "alu_op": arith.signed(r.get("SDP", f"D_DP_{which}_ALU_SRC_VALUE"), 16),
        "mul_op": arith.signed(r.get("SDP", f"D_DP_{which}_MUL_SRC_VALUE"), 16),
    }
    need_alu = not ops["bypass"] and not ops["alu_bypass"] and alu_src == 1
    need_mul = not ops["bypass"] and not ops["mul_bypass"] and mul_src == 1
    if need_alu or need_mul:
        dma = {"BS": "BRDMA", "BN": "NRDMA"}[which]
        cfg = r.get("SDP_RDMA", f"D_{dma}_CFG")
        g = lambda name: r.get("SDP_RDMA", f"D_{dma}_CFG", f"{dma}_{name}")  # noqa: E731
        if g("DISABLE"):
            raise AccelInvalidError(f"SDP {which} reads its operands from memory but {dma} is "
                                    f"disabled (D_{dma}_CFG = {cfg:#x})")
        use, two_bytes, per_element = g("DATA_USE"), g("DATA_SIZE"), g("DATA_MODE")
        comps = 2 if use == 2 else 1
        size = 2 if two_bytes else 1
        base = _addr(r, "SDP_RDMA", f"D_{which}_BASE_ADDR_LOW", f"D_{which}_BASE_ADDR_HIGH")
        line = r.get("SDP_RDMA", f"D_{which}_LINE_STRIDE")
        surf = r.get("SDP_RDMA", f"D_{which}_SURFACE_STRIDE")
        c, h, w = shape if per_element else (shape[0], 1, 1)
        addrs = feature_addresses(base, line, surf, c, h, w, elem=comps * size)
        values = []
        for k in range(comps):
            lo = mem.gather(addrs + k * size).astype(np.int64)
            if size == 2:
                lo = lo | (mem.gather(addrs + k * size + 1).astype(np.int64) << 8)
            values.append(arith.wrap(lo, 8 * size))
        alu_vals = mul_vals = values[0]
        if comps == 2:
            alu_vals, mul_vals = values
        if need_alu and use in (1, 2):
            ops["alu_op"] = alu_vals
        if need_mul and use in (0, 2):
            ops["mul_op"] = mul_vals if comps == 2 else values[0]
    return ops


def sdp_reads_operands(r: RegisterFile) -> bool:
    """Whether BS or BN takes an operand from memory (BRDMA/NRDMA) rather than a register:
    an SDP that does reads them beside its data."""
    for which in ("BS", "BN"):
        f = lambda name: r.get("SDP", f"D_DP_{which}_CFG", f"{which}_{name}")  # noqa: E731
        if f("BYPASS"):
            continue
        if (not f("ALU_BYPASS") and r.get("SDP", f"D_DP_{which}_ALU_CFG", f"{which}_ALU_SRC")) or \
                (not f("MUL_BYPASS") and r.get("SDP", f"D_DP_{which}_MUL_CFG", f"{which}_MUL_SRC")):
            return True
    return False


def sdp_compute(r: RegisterFile, mem: Memory, data: np.ndarray) -> np.ndarray:
    """The SDP's datapath on a (C, H, W) int32 cube: BS, BN (EW and its LUT are absent on
    nv_small), then the output converter."""
    shape = data.shape
    x = data.astype(np.int64)
    for which in ("BS", "BN"):
        x = arith.sdp_x(x, **_sdp_operands(r, mem, which, shape))
    if not r.get("SDP", "D_DP_EW_CFG", "EW_BYPASS"):
        raise AccelUnsupportedError("the trace programs the SDP's EW unit (D_DP_EW_CFG "
                                    "EW_BYPASS = 0), which nv_small does not have")
    out_precision = r.get("SDP", "D_DATA_FORMAT", "OUT_PRECISION")
    if out_precision != 0:
        raise AccelUnsupportedError(f"SDP output precision {out_precision} is not int8 "
                                    "(only int8 is modelled for nv_small)")
    return arith.sdp_cvt(x, arith.signed(r.get("SDP", "D_CVT_OFFSET"), 32),
                         arith.signed(r.get("SDP", "D_CVT_SCALE"), 16),
                         r.get("SDP", "D_CVT_SHIFT"))


def sdp_shape(r: RegisterFile):
    return (r.get("SDP", "D_DATA_CUBE_CHANNEL") + 1, r.get("SDP", "D_DATA_CUBE_HEIGHT") + 1,
            r.get("SDP", "D_DATA_CUBE_WIDTH") + 1)


def run_sdp(r: RegisterFile, mem: Memory, data: Optional[np.ndarray] = None):
    """An SDP layer: from CACC (``data``, on the fly) or read by SDP_RDMA from memory; writes
    its output to memory or returns it for the PDP (OUTPUT_DST). Returns (Layer, output)."""
    c, h, w = sdp_shape(r)
    if r.get("SDP", "D_FEATURE_MODE_CFG", "BATCH_NUMBER"):
        raise AccelUnsupportedError("SDP batches > 1 are not modelled")
    if data is not None and data.shape[1:] != (h, w):
        raise AccelInvalidError(f"the SDP's cube {c}x{h}x{w} (CxHxW) does not match the "
                                f"convolution's output {data.shape[0]}x{data.shape[1]}x"
                                f"{data.shape[2]}")
    c = whole_atoms(c)
    if data is None:
        if r.get("SDP_RDMA", "D_FEATURE_MODE_CFG", "IN_PRECISION") != 0:
            raise AccelUnsupportedError("the SDP's input from memory is not int8 (only int8 "
                                        "is modelled for nv_small)")
        if r.get("SDP", "D_FEATURE_MODE_CFG", "FLYING_MODE"):
            raise AccelInvalidError("the SDP is set on the fly (from CACC) but no convolution ran")
        base = _addr(r, "SDP_RDMA", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH")
        data = read_int8(mem, base, r.get("SDP_RDMA", "D_SRC_LINE_STRIDE"),
                         r.get("SDP_RDMA", "D_SRC_SURFACE_STRIDE"), c, h, w)
    if data.shape[0] < c:
        data = np.concatenate([data, np.zeros((c - data.shape[0],) + data.shape[1:], np.int64)])
    out = sdp_compute(r, mem, data)
    to_pdp = bool(r.get("SDP", "D_FEATURE_MODE_CFG", "OUTPUT_DST"))
    if not to_pdp:
        write_int8(mem, _addr(r, "SDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH"),
                   r.get("SDP", "D_DST_LINE_STRIDE"), r.get("SDP", "D_DST_SURFACE_STRIDE"), out)
    bs = r.get("SDP", "D_DP_BS_CFG", "BS_BYPASS") == 0
    bn = r.get("SDP", "D_DP_BN_CFG", "BN_BYPASS") == 0
    return Layer("sdp", (c, h, w), out.shape, {"bs": bs, "bn": bn, "to_pdp": to_pdp,
                                              "operands": sdp_reads_operands(r)}), out


# ---------------------------------------------------------------- CONV

def read_weights(mem: Memory, base: int, k: int, c: int, kh: int, kw: int) -> np.ndarray:
    """Direct-convolution int8 weights (K, C, R, S) from NVDLA's uncompressed layout."""
    flat = mem.read(base, k * c * kh * kw).view(np.int8).astype(np.int64)
    out = np.zeros((k, c, kh, kw), np.int64)
    pos = 0
    for k0 in range(0, k, ATOM_K):
        kn = min(ATOM_K, k - k0)
        for c0 in range(0, c, ATOM_C):
            cn = min(ATOM_C, c - c0)
            n = kh * kw * kn * cn
            block = flat[pos:pos + n].reshape(kh, kw, kn, cn)
            out[k0:k0 + kn, c0:c0 + cn] = block.transpose(2, 3, 0, 1)
            pos += n
    return out


def run_conv(r: RegisterFile, mem: Memory):
    """A direct convolution: CDMA reads (and converts, and pads), CMAC multiplies, CACC
    accumulates and truncates; the result goes on to the SDP. Returns (Layer, int32 cube)."""
    if r.get("CDMA", "D_DATAIN_FORMAT", "DATAIN_FORMAT"):
        raise AccelUnsupportedError("image (pixel) input convolution is not modelled")
    if r.get("CDMA", "D_MISC_CFG", "CONV_MODE"):
        raise AccelUnsupportedError("Winograd convolution is not available on nv_small")
    if r.get("CDMA", "D_MISC_CFG", "IN_PRECISION") or r.get("CDMA", "D_MISC_CFG", "PROC_PRECISION"):
        raise AccelUnsupportedError("only int8 convolution is modelled for nv_small")
    if r.get("CDMA", "D_BATCH_NUMBER", "BATCHES"):
        raise AccelUnsupportedError("convolution batches > 1 are not modelled")
    if r.get("CDMA", "D_WEIGHT_FORMAT", "WEIGHT_FORMAT"):
        raise AccelUnsupportedError("compressed weights are not modelled")
    w = r.get("CDMA", "D_DATAIN_SIZE_0", "DATAIN_WIDTH") + 1
    h = r.get("CDMA", "D_DATAIN_SIZE_0", "DATAIN_HEIGHT") + 1
    c = r.get("CDMA", "D_DATAIN_SIZE_1", "DATAIN_CHANNEL") + 1
    base = _addr(r, "CDMA", "D_DAIN_ADDR_LOW_0", "D_DAIN_ADDR_HIGH_0")
    x = read_int8(mem, base, r.get("CDMA", "D_LINE_STRIDE"), r.get("CDMA", "D_SURF_STRIDE"),
                  c, h, w)
    if r.get("CDMA", "D_CVT_CFG", "CVT_EN"):
        x = arith.cdma_cvt(x, arith.signed(r.get("CDMA", "D_CVT_OFFSET"), 16),
                           arith.signed(r.get("CDMA", "D_CVT_SCALE"), 16),
                           r.get("CDMA", "D_CVT_CFG", "CVT_TRUNCATE"))
    pl = r.get("CDMA", "D_ZERO_PADDING", "PAD_LEFT")
    pr = r.get("CDMA", "D_ZERO_PADDING", "PAD_RIGHT")
    pt = r.get("CDMA", "D_ZERO_PADDING", "PAD_TOP")
    pb = r.get("CDMA", "D_ZERO_PADDING", "PAD_BOTTOM")
    pad_value = arith.signed(r.get("CDMA", "D_ZERO_PADDING_VALUE", "PAD_VALUE"), 8)
    sx = r.get("CDMA", "D_CONV_STRIDE", "CONV_X_STRIDE") + 1
    sy = r.get("CDMA", "D_CONV_STRIDE", "CONV_Y_STRIDE") + 1
    kw = r.get("CSC", "D_WEIGHT_SIZE_EXT_0", "WEIGHT_WIDTH_EXT") + 1
    kh = r.get("CSC", "D_WEIGHT_SIZE_EXT_0", "WEIGHT_HEIGHT_EXT") + 1
    dx = r.get("CSC", "D_DILATION_EXT", "X_DILATION_EXT") + 1
    dy = r.get("CSC", "D_DILATION_EXT", "Y_DILATION_EXT") + 1
    k = r.get("CDMA", "D_WEIGHT_SIZE_1", "WEIGHT_KERNEL") + 1
    per_kernel = r.get("CDMA", "D_WEIGHT_SIZE_0", "BYTE_PER_KERNEL") + 1
    if per_kernel != c * kh * kw:
        raise AccelInvalidError(f"CDMA BYTE_PER_KERNEL {per_kernel} is not C*R*S = {c}*{kh}*{kw}")
    wt = read_weights(mem, _addr(r, "CDMA", "D_WEIGHT_ADDR_LOW", "D_WEIGHT_ADDR_HIGH"),
                      k, c, kh, kw)
    ow = r.get("CACC", "D_DATAOUT_SIZE_0", "DATAOUT_WIDTH") + 1
    oh = r.get("CACC", "D_DATAOUT_SIZE_0", "DATAOUT_HEIGHT") + 1
    padded = np.full((c, h + pt + pb + dy * kh, w + pl + pr + dx * kw), pad_value, np.int64)
    padded[:, pt:pt + h, pl:pl + w] = x
    acc = np.zeros((k, oh * ow), np.float64)
    wt_f = wt.astype(np.float64)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dy, j * dx
            patch = padded[:, y0:y0 + sy * (oh - 1) + 1:sy, x0:x0 + sx * (ow - 1) + 1:sx]
            acc += wt_f[:, :, i, j] @ patch.reshape(c, -1).astype(np.float64)
    # every partial sum is an integer below 2^53: the float accumulation is exact
    acc_i = np.rint(acc).astype(np.int64).reshape(k, oh, ow)
    out = arith.cacc_truncate(acc_i, r.get("CACC", "D_CLIP_CFG", "CLIP_TRUNCATE"))
    layer = Layer("conv", (c, h, w), (k, oh, ow),
                  {"kernel": (kh, kw), "stride": (sy, sx), "dilation": (dy, dx),
                   "padding": (pt, pb, pl, pr)})
    return layer, out


# ---------------------------------------------------------------- PDP

def run_pdp(r: RegisterFile, mem: Memory, data: Optional[np.ndarray] = None):
    """Pooling (max, min, average) from memory or on the fly from the SDP."""
    if r.get("PDP", "D_DATA_FORMAT", "INPUT_DATA") != 0:
        raise AccelUnsupportedError("only int8 pooling is modelled for nv_small")
    w = r.get("PDP", "D_DATA_CUBE_IN_WIDTH") + 1
    h = r.get("PDP", "D_DATA_CUBE_IN_HEIGHT") + 1
    c = whole_atoms(r.get("PDP", "D_DATA_CUBE_IN_CHANNEL") + 1)
    ow = r.get("PDP", "D_DATA_CUBE_OUT_WIDTH") + 1
    oh = r.get("PDP", "D_DATA_CUBE_OUT_HEIGHT") + 1
    off_flying = r.get("PDP", "D_OPERATION_MODE_CFG", "FLYING_MODE")
    if data is None:
        if not off_flying:
            raise AccelInvalidError("the PDP is set on the fly (from the SDP) but no SDP ran")
        # PDP_RDMA fetches the input: its source registers are the ones that count
        base = _addr(r, "PDP_RDMA", "D_SRC_BASE_ADDR_LOW", "D_SRC_BASE_ADDR_HIGH")
        data = read_int8(mem, base, r.get("PDP_RDMA", "D_SRC_LINE_STRIDE"),
                         r.get("PDP_RDMA", "D_SRC_SURFACE_STRIDE"), c, h, w)
    data = data[:c, :h, :w]
    method = r.get("PDP", "D_OPERATION_MODE_CFG", "POOLING_METHOD")
    kw = r.get("PDP", "D_POOLING_KERNEL_CFG", "KERNEL_WIDTH") + 1
    kh = r.get("PDP", "D_POOLING_KERNEL_CFG", "KERNEL_HEIGHT") + 1
    sx = r.get("PDP", "D_POOLING_KERNEL_CFG", "KERNEL_STRIDE_WIDTH") + 1
    sy = r.get("PDP", "D_POOLING_KERNEL_CFG", "KERNEL_STRIDE_HEIGHT") + 1
    pl = r.get("PDP", "D_POOLING_PADDING_CFG", "PAD_LEFT")
    pt = r.get("PDP", "D_POOLING_PADDING_CFG", "PAD_TOP")
    pr = r.get("PDP", "D_POOLING_PADDING_CFG", "PAD_RIGHT")
    pb = r.get("PDP", "D_POOLING_PADDING_CFG", "PAD_BOTTOM")
    pad = arith.signed(r.get("PDP", "D_POOLING_PADDING_VALUE_1_CFG"), 8)
    out = np.zeros((c, oh, ow), np.int64)
    for oy in range(oh):
        y0 = oy * sy - pt
        ys = slice(max(y0, 0), min(y0 + kh, h))
        for ox in range(ow):
            x0 = ox * sx - pl
            xs = slice(max(x0, 0), min(x0 + kw, w))
            win = data[:, ys, xs].reshape(c, -1)
            if method == 1:
                out[:, oy, ox] = win.max(axis=1)
            elif method == 2:
                out[:, oy, ox] = win.min(axis=1)
            else:
                npad = kw * kh - win.shape[1]
                total = win.sum(axis=1) + pad * npad
                t = arith.div_round(total, r.get("PDP", "D_RECIP_KERNEL_WIDTH"))
                out[:, oy, ox] = arith.div_round(t, r.get("PDP", "D_RECIP_KERNEL_HEIGHT"))
    write_int8(mem, _addr(r, "PDP", "D_DST_BASE_ADDR_LOW", "D_DST_BASE_ADDR_HIGH"),
               r.get("PDP", "D_DST_LINE_STRIDE"), r.get("PDP", "D_DST_SURFACE_STRIDE"), out)
    layer = Layer("pdp", (c, h, w), (c, oh, ow),
                  {"kernel": (kh, kw), "stride": (sy, sx), "method": method,
                   "padding": (pt, pb, pl, pr),
                   "on_the_fly": not off_flying,
                   "splits": r.get("PDP", "D_OPERATION_MODE_CFG", "SPLIT_NUM") + 1})
    return layer, out
