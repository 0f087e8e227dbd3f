"""Recording the runs of every ``accel_run`` in the process (``accel_set_recorder`` in accel.h):
each run's ops as the op classes of :mod:`.ops` (their operands copied out of the caller's
memory), its input and its output. What a compiled model's generated C asks of the simulator
becomes data, which ``tools/nvdla_export.py`` writes out as NVDLA register traces.

Only INT8 CONV, SDP and PDP ops are read back field by field (the precision the export
needs); any other op is kept as an :class:`OtherOp` naming its engine and precision.
"""
from __future__ import annotations

import dataclasses
from typing import ContextManager, List, Optional

import numpy as np

from .._accel_ffi import ffi, lib
from .hooks import CallbackHook
from .ops import Conv, Pool, Sdp
from .vocabulary import (ACTIVATIONS, CONV_MODES, ELEMENTWISE, ENGINES, PIXEL_FORMATS, POOLS,
                         PRECISIONS)


@dataclasses.dataclass
class OtherOp:
    """An op the recorder does not read back: its engine and precision only."""
    engine: str
    precision: str


@dataclasses.dataclass
class RecordedRun:
    """One accel_run: its label, ops, mode and the input and output it ran on (NCHW arrays;
    None for a channel-blocked (C16) tensor, which only FP32 runs have)."""
    label: str
    ops: list
    mode: str
    input: Optional[np.ndarray]
    output: Optional[np.ndarray]


_HOOK = CallbackHook(lambda on: lib.accel_set_recorder(
    lib.accel_python_recorder if on else ffi.NULL, ffi.NULL))


def _array(pointer, dtype, count: int, shape=None) -> Optional[np.ndarray]:
    if pointer == ffi.NULL:
        return None
    data = np.frombuffer(ffi.buffer(ffi.cast("char*", pointer), count * np.dtype(dtype).itemsize),
                         dtype).copy()
    return data if shape is None else data.reshape(shape)


def _tensor(t) -> Optional[np.ndarray]:
    if t.layout != lib.ACCEL_LAYOUT_NCHW:
        return None
    shape = (int(t.n), int(t.c), int(t.h), int(t.w))
    dtype = {lib.ACCEL_INT8: np.int8, lib.ACCEL_FP16: np.uint16}.get(int(t.precision), np.float32)
    return _array(t.data, dtype, int(np.prod(shape)), shape)


def _conv(d, channels: int) -> Conv:
    groups = int(d.groups)
    shape = (int(d.out_c), channels // groups, int(d.kernel_h), int(d.kernel_w))
    return Conv(weights=_array(d.weights, np.int8, int(np.prod(shape)), shape),
                stride=(int(d.stride_h), int(d.stride_w)),
                padding=(int(d.pad_top), int(d.pad_left), int(d.pad_bottom), int(d.pad_right)),
                dilation=(int(d.dilation_h), int(d.dilation_w)), groups=groups,
                precision="int8", in_zero=int(d.in_zero),
                pixel_format=PIXEL_FORMATS.name_of(int(d.pixel_format)),
                multi_batch=bool(d.multi_batch), mode=CONV_MODES.name_of(int(d.mode)),
                weight_format="sparse" if d.weight_format else "dense")


def _sdp(d, shape) -> Sdp:
    c = shape[1]
    act = ACTIVATIONS.name_of(int(d.act))
    ew_op = ELEMENTWISE.name_of(int(d.ew_op))
    sdp = Sdp(precision="int8", act=act, ew_op=ew_op,
              bias=_array(d.bias, np.int32, c), mul=_array(d.mul, np.int16, c),
              rshift=_array(d.rshift, np.uint8, c), in_zero=int(d.in_zero),
              ew_zero=int(d.ew_zero), ew_mul=int(d.ew_mul), ew_shift=int(d.ew_shift),
              prelu_mul=_array(d.prelu_mul, np.int16, c), prelu_shift=int(d.prelu_shift),
              out_mul=int(d.out_mul), out_shift=int(d.out_shift), out_zero=int(d.out_zero),
              convert=bool(d.convert))
    if ew_op is not None and d.ew_per_channel:  # one value per image and channel
        sdp.operand = _array(d.ew_operand, np.int8, shape[0] * c, (shape[0], c))
        sdp.ew_per_channel = True
    elif ew_op is not None:
        sdp.operand = _array(d.ew_operand, np.int8, int(np.prod(shape)), shape)
    if act == "clip":
        sdp.clip_lo, sdp.clip_hi = int(d.clip_lo), int(d.clip_hi)
    if d.lut != ffi.NULL:
        sdp.lut = "int8 table"  # recorded as present; the export refuses LUTs (nv_small has none)
    return sdp


def _pool(d) -> Pool:
    return Pool(kind=POOLS.name_of(int(d.pool)), kernel=(int(d.kernel_h), int(d.kernel_w)),
                stride=(int(d.stride_h), int(d.stride_w)),
                padding=(int(d.pad_top), int(d.pad_left), int(d.pad_bottom), int(d.pad_right)),
                count_include_pad=bool(d.count_include_pad), precision="int8", zero=int(d.zero))


def _read_ops(ops, num_ops: int, input_shape) -> list:
    out = []
    shape = list(input_shape)
    for i in range(num_ops):
        op = ops[i]
        engine = ENGINES.name_of(int(op.engine))
        desc = {"CONV": op.conv, "SDP": op.sdp, "PDP": op.pdp}.get(engine)
        precision = PRECISIONS.name_of(int(desc.precision)) if desc is not None else None
        if desc is None or precision != "int8":
            if engine in ("CDP",):
                precision = PRECISIONS.name_of(int(op.cdp.precision))
            out.append(OtherOp(engine, precision or "?"))
            continue
        if engine == "CONV":
            d = op.conv
            out.append(_conv(d, shape[1]))
            # the shape an SDP after it sees (its element-wise operand's)
            shape = [shape[0], int(d.out_c),
                     _out(shape[2], d.kernel_h, d.stride_h, d.pad_top + d.pad_bottom,
                          d.dilation_h),
                     _out(shape[3], d.kernel_w, d.stride_w, d.pad_left + d.pad_right,
                          d.dilation_w)]
        elif engine == "SDP":
            out.append(_sdp(op.sdp, tuple(shape)))
        else:
            d = op.pdp
            out.append(_pool(d))
            shape = [shape[0], shape[1],
                     _out(shape[2], d.kernel_h, d.stride_h, d.pad_top + d.pad_bottom),
                     _out(shape[3], d.kernel_w, d.stride_w, d.pad_left + d.pad_right)]
    return out


def _out(size: int, kernel: int, stride: int, pads: int, dilation: int = 1) -> int:
    """An output side of a direct convolution or a pool (accel.h's formulas)."""
    return (int(size) + int(pads) - int(dilation) * (int(kernel) - 1) - 1) // int(stride) + 1


@ffi.def_extern()
def accel_python_recorder(user, label, ops, num_ops, input, output, mode):  # pragma: no cover
    del user
    _HOOK.call(_record, label, ops, num_ops, input, output, mode)


def _record(runs: List[RecordedRun], label, ops, num_ops, input, output, mode) -> None:
    shape = (int(input.n), int(input.c), int(input.h), int(input.w))
    runs.append(RecordedRun(label=ffi.string(label).decode("utf-8", "replace"),
                            ops=_read_ops(ops, int(num_ops), shape),
                            mode="fused" if mode == lib.ACCEL_MODE_FUSED else "independent",
                            input=_tensor(input), output=_tensor(output)))


def recording() -> ContextManager[List[RecordedRun]]:
    """Record every accel_run in the process while the block runs, in order, into the list
    it yields (one recorder at a time). An exception raised while reading a run back is raised
    when the block ends (cffi cannot unwind the simulator's C frames)."""
    return _HOOK.active([])
