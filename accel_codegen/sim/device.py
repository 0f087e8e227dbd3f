"""The simulator from Python: devices, runs, cost estimates and the process-wide profile.

>>> dev = Device("nv_full")
>>> y, stats = dev.run([Conv(w, padding=1), Sdp(scale=s, shift=b, act="relu")], x)
>>> stats.cycles, stats.bytes_read

A run's precision follows its input (``precision=None``): ``np.int8`` codes run int8,
``np.float16`` halves fp16, anything else fp32; every op must declare the same precision and the
output has the input's dtype. Estimates take their first op's precision.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .._accel_ffi import ffi, lib
from ..errors import AccelBufferError, AccelError, AccelInvalidError, check
from .config import AccelConfig, precision_code, precision_name
from .ops import (OP_CLASSES, SHAPE_ONLY, AccelDtypeError, Bdma, Op, as_operand, dtype_for,
                  has_data, integer, sram_bits)
from .layout import c16_shape, nchw_shape
from .vocabulary import ENGINES, LAYOUTS, MODES, PRECISIONS


@dataclasses.dataclass(frozen=True)
class OpStats:
    """What one engine op cost (see accel_op_stats in accel.h)."""

    engine: str
    op: str
    precision: str
    macs: int
    mac_cycles: int
    compute_cycles: int
    input_bytes: int
    weight_bytes: int
    operand_bytes: int
    reread_bytes: int
    bytes_read: int
    bytes_written: int
    memory_cycles: int
    cycles: int
    cbuf_read_bytes: int
    cbuf_write_bytes: int
    mac_energy_pj: float
    cbuf_energy_pj: float
    dram_energy_pj: float
    engine_energy_pj: float
    energy_pj: float
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    sram_read_bytes: int = 0
    sram_write_bytes: int = 0
    sram_cycles: int = 0
    data_banks: int = 0
    weight_banks: int = 0

    @classmethod
    def from_c(cls, c_stats) -> "OpStats":
        values = {f.name: getattr(c_stats, f.name) for f in dataclasses.fields(cls)}
        values["engine"] = ENGINES.name_of(c_stats.engine)
        values["op"] = ffi.string(c_stats.op).decode(errors="replace")
        values["precision"] = precision_name(c_stats.precision)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class RunStats:
    """What one run (a chain of ops) cost; ``ops`` holds the per-op records."""

    label: str
    mode: str
    macs: int
    mac_cycles: int
    bytes_read: int
    bytes_written: int
    cycles: int
    utilization: float
    mac_energy_pj: float
    cbuf_energy_pj: float
    dram_energy_pj: float
    engine_energy_pj: float
    energy_pj: float
    ops: Tuple[OpStats, ...]
    memory_cycles: int = 0   # DRAM cycles of the run
    sram_cycles: int = 0     # secondary-memory cycles of the run
    dram_bytes: int = 0      # DRAM bytes read + written (burst-rounded)
    sram_bytes: int = 0      # SRAM bytes read + written

    @classmethod
    def from_c(cls, c_run, op_records: Sequence[OpStats]) -> "RunStats":
        return cls(
            label=ffi.string(c_run.label).decode(errors="replace"),
            mode=MODES.name_of(c_run.mode),
            macs=c_run.macs, mac_cycles=c_run.mac_cycles, bytes_read=c_run.bytes_read,
            bytes_written=c_run.bytes_written, cycles=c_run.cycles,
            utilization=c_run.utilization, mac_energy_pj=c_run.mac_energy_pj,
            cbuf_energy_pj=c_run.cbuf_energy_pj, dram_energy_pj=c_run.dram_energy_pj,
            engine_energy_pj=c_run.engine_energy_pj, energy_pj=c_run.energy_pj,
            ops=tuple(op_records), memory_cycles=c_run.memory_cycles,
            sram_cycles=c_run.sram_cycles, dram_bytes=c_run.dram_bytes,
            sram_bytes=c_run.sram_bytes)


def _tensor_struct(shape: Tuple[int, ...], precision: str, data=ffi.NULL):
    """An accel_tensor for an NCHW (or 2-D [N, C]) shape."""
    if not isinstance(shape, (tuple, list)) or len(shape) not in (2, 4):
        raise AccelInvalidError(f"tensors are NCHW or [N, C]: got shape {shape!r}")
    if len(shape) == 2:
        shape = (shape[0], shape[1], 1, 1)
    tensor = ffi.new("accel_tensor*")
    for field, size in zip("nchw", shape):
        setattr(tensor, field, integer(size, f"tensor dimension {field}", 1))
    tensor.precision = precision_code(precision)
    tensor.data = data
    return tensor


def _c_label(label: Optional[str]) -> bytes:
    """A label that fits the C record, cut on a character boundary."""
    encoded = (label or "").encode()[:lib.ACCEL_LABEL_LEN - 1]
    return encoded.decode(errors="ignore").encode()


class _Chain:
    """A chain lowered to C structs, its shapes inferred and its operands checked by size."""

    def __init__(self, config_c, ops: Sequence[Op], in_shape: Tuple[int, ...], precision: str,
                 mode: str, layout: str = "nchw", out_layout: Optional[str] = None):
        ops = op_list(ops)
        self.ops = ops
        self.mode = MODES.code(mode)
        self.c_ops = ffi.new("accel_op[]", len(ops))
        for i, op in enumerate(ops):
            try:
                op.lower(self.c_ops[i])
                self.c_ops[i].sram = sram_bits(getattr(op, "sram", ()), "sram")
            except AccelError as error:  # say which op of the chain
                raise type(error)(f"op {i} ({op.engine}): {error}") from None
        self.input = _tensor_struct(in_shape, precision)
        self.input.layout = LAYOUTS.code(layout)
        shapes = ffi.new("accel_tensor[]", len(ops))
        check(lib.accel_chain_shapes(config_c, self.c_ops, len(ops), self.input, self.mode,
                                     shapes))
        self.shapes = [(s.n, s.c, s.h, s.w) for s in shapes]
        seen = (self.input.n, self.input.c, self.input.h, self.input.w)
        for op, out_shape in zip(ops, self.shapes):
            op.check_sizes(seen, out_layout or layout)  # operands: the output's layout
            seen = out_shape


class _Unkeyed(Exception):
    """A chain with a large array operand (or a value of unknown kind): no :func:`chain_key`."""


_SCALARS = frozenset((type(None), bool, int, float, str))


def _value_key(value):
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is tuple or kind is list:
        return tuple(v if type(v) in _SCALARS else _value_key(v) for v in value)
    if value is SHAPE_ONLY:  # present, no data
        return "SHAPE_ONLY"
    if kind is np.ndarray and value.nbytes <= _KEYED_BYTES:  # by its content
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (kind, tuple(v if type(v) in _SCALARS else _value_key(v)
                            for v in vars(value).values()))
    raise _Unkeyed(kind.__name__)


#: The largest array operand a chain key holds (an attention pass's per-token scales, a
#: depthwise layer's weights); a chain with a larger one has no key.
_KEYED_BYTES = 1 << 16


def chain_key(ops: Sequence[Op], in_shape: Tuple[int, ...], precision: Optional[str],
              mode: str) -> Optional[tuple]:
    """What a chain's cost estimate depends on besides the configuration (its ops' every
    field, small arrays by their content, the input shape, precision and mode), hashable;
    None for a chain with a larger array operand. A partition checks every run of every
    layer (:func:`estimate_chain`), and a window attention's or a concat's runs repeat."""
    try:
        return (_value_key(list(ops)), tuple(int(d) for d in in_shape), precision, mode)
    except (_Unkeyed, TypeError, ValueError):
        return None


def op_list(ops: Sequence[Op]) -> List[Op]:
    """The ops of a chain as a list, each a Conv, Sdp, Pool, Lrn, Bdma or Rubik, 1 to
    ACCEL_MAX_CHAIN_OPS (a Bdma or a Rubik runs alone: the C library refuses it in a longer
    chain)."""
    if isinstance(ops, OP_CLASSES) or not isinstance(ops, (list, tuple)):
        raise AccelInvalidError(f"ops must be a list of Conv, Sdp, Pool and Lrn, or one Bdma or "
                                f"Rubik, got {ops!r}")
    for i, op in enumerate(ops):
        if not isinstance(op, OP_CLASSES):
            raise AccelInvalidError(f"op {i} = {op!r} is not a Conv, Sdp, Pool, Lrn, Bdma or "
                                    "Rubik")
        PRECISIONS.code(op.precision, f"op {i} ({op.engine}): precision")
    if not 1 <= len(ops) <= lib.ACCEL_MAX_CHAIN_OPS:
        raise AccelInvalidError(f"a chain has 1 to {lib.ACCEL_MAX_CHAIN_OPS} ops, got {len(ops)}")
    return list(ops)


#: The precision an input array's dtype implies (any other dtype runs fp32).
_DTYPE_PRECISIONS = {np.dtype(np.int8): "int8", np.dtype(np.int16): "int16",
                     np.dtype(np.float16): "fp16"}


def output_precision(ops: Sequence[Op], precision: str) -> str:
    """The precision a chain on ``precision`` input writes: the input's, or the other one of a
    converting SDP (``Sdp.convert``)."""
    ops = op_list(ops)
    return ops[0].output_precision if len(ops) == 1 and getattr(ops[0], "convert", False) \
        else precision


def chain_precision(ops: Sequence[Op], precision: Optional[str] = None) -> str:
    """The precision of a chain without data: the one given, else its first op's."""
    if precision is not None:
        return precision
    return op_list(ops)[0].precision


def input_precision(x, precision: Optional[str] = None) -> str:
    """The precision of a run on ``x``: the one given, else the one x's dtype implies."""
    if precision is not None:
        return precision
    return _DTYPE_PRECISIONS.get(getattr(x, "dtype", None), "fp32")


def _stats(c_run, c_ops, count: int) -> RunStats:
    return RunStats.from_c(c_run, [OpStats.from_c(c_ops[i]) for i in range(count)])


class Device:
    """A simulated accelerator: a configuration plus the scratch memory its kernels reuse.

    Parameters
    ----------
    config : AccelConfig or str
        The hardware configuration, or a preset name.
    num_threads : int, optional
        Threads the kernels use (default: ACCEL_NUM_THREADS, else every online CPU).
    """

    def __init__(self, config: AccelConfig | str = "nv_full", num_threads: Optional[int] = None):
        self.config = AccelConfig.resolve(config)
        self._config_c = self.config.to_c()
        handle = ffi.new("accel_device**")
        check(lib.accel_device_create(self._config_c, handle))
        self._handle = ffi.gc(handle[0], lib.accel_device_destroy)
        if num_threads is not None:
            self.num_threads = num_threads

    @property
    def num_threads(self) -> int:
        return lib.accel_device_threads(self._handle)

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        check(lib.accel_device_set_threads(self._handle, integer(value, "num_threads")))

    def output_shape(self, ops: Sequence[Op], in_shape: Tuple[int, ...],
                     precision: Optional[str] = None,
                     mode: str = "fused") -> Tuple[int, int, int, int]:
        """The NCHW shape a chain produces from an input shape (validates the chain)."""
        return _Chain(self._config_c, ops, tuple(in_shape), chain_precision(ops, precision),
                      mode).shapes[-1]

    def run(self, ops: Sequence[Op], x: np.ndarray, *, mode: str = "fused",
            out: Optional[np.ndarray] = None, label: Optional[str] = None,
            precision: Optional[str] = None,
            layout: str = "nchw",
            out_layout: Optional[str] = None) -> Tuple[np.ndarray, RunStats]:
        """Execute a chain of engine ops on ``x`` (NCHW or [N, C], or C16).

        Parameters
        ----------
        ops : sequence of Conv, Sdp, Pool, Lrn, or one Bdma or Rubik
            The chain. "fused" mode takes at most one of each of the first three, in that
            order, or one Lrn alone; a Bdma or a Rubik runs alone, in either mode.
        x : numpy.ndarray
            The input; used in place when it is C-contiguous with the precision's dtype
            (float32, np.int8 codes, np.float16; see ops.as_typed for the conversions).
        mode : {"fused", "independent"}
        out : numpy.ndarray, optional
            Where to write the result (C-contiguous, right dtype and size). A Bdma run writes
            only its destination channels and leaves the others as they are: several runs into
            one ``out`` make a concat or a channel shuffle. Without ``out``, a Bdma run's other
            channels are zeros.
        label : str, optional
            The run's name in the profile.
        precision : {"fp32", "int8", "fp16"}, optional
            The input's and every op's precision; default: x's (np.int8: int8, np.float16:
            fp16, else fp32).
        layout : {"nchw", "c16"}
            The layout of ``x``, of the output and of the SDP ops' element-wise operands. "c16"
            (fp32 only): channel-blocked arrays of shape ``(n, c // 16, h, w, 16)``
            (:mod:`accel_codegen.sim.layout`), NVDLA's feature format; 1x1 and depthwise 3x3
            convolutions run on it directly, every other chain between conversions, with the
            same values and cost either way.
        out_layout : {"nchw", "c16"}, optional
            The layout of the output and of the element-wise operands when it differs from
            ``x``'s (default: ``layout``): an NCHW image into a C16 output is what the image
            layer's convolution runs natively (csrc/stem_c16.c).

        Returns
        -------
        (numpy.ndarray, RunStats)
            The output (NCHW, or [N, K] for a 2-D input whose chain keeps h = w = 1; C16 with
            ``layout="c16"``) and its cost.
        """
        ops = op_list(ops)
        given = precision
        precision = input_precision(x, precision)
        if given is None:  # an input of the wrong dtype: say which dtype the ops need
            for i, op in enumerate(ops):
                wanted = getattr(op, "precision", precision)
                if wanted != precision:
                    raise AccelDtypeError(
                        f"op {i} ({op.engine}): precision {wanted} differs from the input's "
                        f"{precision} (a {np.asarray(x).dtype} array runs {precision}; "
                        f"{wanted} data is {np.dtype(dtype_for(wanted)).name})")
        x = as_operand(x, precision, "input")
        out_layout = out_layout or layout
        blocked = LAYOUTS.code(out_layout) == lib.ACCEL_LAYOUT_C16
        in_blocked = LAYOUTS.code(layout) == lib.ACCEL_LAYOUT_C16
        in_shape = nchw_shape(x.shape) if in_blocked else x.shape
        for i, op in enumerate(ops):
            if not has_data(op):
                raise AccelInvalidError(f"op {i} ({op.engine}) has shape-only operands: it can "
                                        "be estimated, not run")
        chain = _Chain(self._config_c, ops, in_shape, precision, mode, layout, out_layout)
        writes = output_precision(ops, precision)
        out_dtype = np.dtype(dtype_for(writes))
        out_shape = c16_shape(chain.shapes[-1]) if blocked else chain.shapes[-1]
        if x.ndim == 2 and out_shape[2:] == (1, 1):
            out_shape = out_shape[:2]
        if out is None:
            copy = isinstance(ops[0], Bdma)  # the channels it does not write must be defined
            out = (np.zeros if copy else np.empty)(out_shape, dtype=out_dtype)
        elif not isinstance(out, np.ndarray) or out.dtype != out_dtype:
            raise AccelDtypeError(
                f"out must be a {out_dtype} array for a {precision} chain, got "
                f"{getattr(out, 'dtype', type(out).__name__)}")
        elif (not out.flags.c_contiguous or not out.flags.writeable
              or out.size != int(np.prod(out_shape))):
            raise AccelInvalidError(
                f"out must be a writeable C-contiguous {x.dtype} array of {out_shape}, got "
                f"{out.dtype} {out.shape}")
        elif not out.flags.aligned:
            raise AccelBufferError(
                f"out at address {out.ctypes.data:#x} is not aligned to its {out_dtype.itemsize}-"
                "byte elements: the engines write it in place, so it cannot be a copy")
        chain.input.data = ffi.cast("void*", x.ctypes.data)
        output = _tensor_struct(chain.shapes[-1], writes, ffi.cast("void*", out.ctypes.data))
        output.layout = LAYOUTS.code(out_layout)
        c_run = ffi.new("accel_run_stats*")
        c_ops = ffi.new("accel_op_stats[]", len(chain.ops))
        check(lib.accel_run(self._handle, chain.c_ops, len(chain.ops), chain.input, output,
                            chain.mode, _c_label(label),
                            c_run, c_ops))
        return out, _stats(c_run, c_ops, len(chain.ops))


def estimate_chain(config: AccelConfig | str, ops: Sequence[Op], in_shape: Tuple[int, ...], *,
                   mode: str = "fused", precision: Optional[str] = None) -> RunStats:
    """The cost of a chain on a configuration without executing it (no data needed; operands
    may be SHAPE_ONLY). ``precision`` defaults to the first op's."""
    precision = chain_precision(ops, precision)
    config = AccelConfig.resolve(config)
    key = chain_key(ops, in_shape, precision, mode)
    if key is not None:
        known = _ESTIMATES.get((config, key))
        if known is not None:
            return known
    stats = _estimate_chain(config, ops, in_shape, mode, precision)
    if key is not None:
        if len(_ESTIMATES) >= _ESTIMATES_KEPT:
            _ESTIMATES.pop(next(iter(_ESTIMATES)))
        _ESTIMATES[(config, key)] = stats
    return stats


#: estimate_chain's results by (configuration, chain_key), the oldest dropped past the limit:
#: a partition checks every run of every layer, and a window attention's runs repeat.
_ESTIMATES: dict = {}
_ESTIMATES_KEPT = 8192


def _estimate_chain(config: AccelConfig, ops, in_shape, mode: str, precision: str) -> RunStats:
    config_c = config.to_c()
    chain = _Chain(config_c, ops, tuple(in_shape), precision, mode)
    output = _tensor_struct(chain.shapes[-1], output_precision(ops, precision))
    c_run = ffi.new("accel_run_stats*")
    c_ops = ffi.new("accel_op_stats[]", len(chain.ops))
    check(lib.accel_estimate(config_c, chain.c_ops, len(chain.ops), chain.input, output,
                             chain.mode, c_run, c_ops))
    return _stats(c_run, c_ops, len(chain.ops))


_ISA_NAMES = (("avx2", "ACCEL_ISA_AVX2"), ("avx512", "ACCEL_ISA_AVX512"),
              ("avx512_vnni", "ACCEL_ISA_AVX512_VNNI"), ("avx512_vbmi", "ACCEL_ISA_AVX512_VBMI"),
              ("amx", "ACCEL_ISA_AMX"))


def host_isa() -> frozenset:
    """The instruction sets the library's host kernels were compiled for
    (``accel_host_isa``), by name: ``"avx2"``, ``"avx512"``, ``"avx512_vnni"``,
    ``"avx512_vbmi"``, ``"amx"``. They decide which kernel implementations a build has
    (docs/kernels.md): the C16 kernels are AVX-512 code, so without ``"avx512"`` every C16 run
    is converted around the NCHW kernels (``c16_native`` is false)."""
    bits = lib.accel_host_isa()
    return frozenset(name for name, c_name in _ISA_NAMES if bits & getattr(lib, c_name))


def c16_native(config: AccelConfig | str, ops: Sequence[Op], in_shape: Tuple[int, ...], *,
               mode: str = "fused", in_layout: str = "c16") -> bool:
    """Whether the chain has a C16 kernel (``accel_c16_native``): with its output
    channel-blocked and its input in ``in_layout`` ("c16", or "nchw": the image layer's
    convolution reads NCHW and writes C16) it runs without conversions (operands may be
    SHAPE_ONLY). ``in_shape`` is the input's NCHW shape either way."""
    ops = op_list(ops)
    c_ops = ffi.new("accel_op[]", len(ops))
    for op, c_op in zip(ops, c_ops):
        op.lower(c_op)
    shape = _tensor_struct(tuple(in_shape), chain_precision(ops, None))
    shape.layout = LAYOUTS.code(in_layout)
    return bool(lib.accel_c16_native(AccelConfig.resolve(config).to_c(), c_ops, len(ops), shape,
                                     MODES.code(mode)))


def c16_saving(kernel: Tuple[int, int], groups: int, group_channels: int, stride: int, *,
               winograd: bool, out_shape: Tuple[int, ...]) -> float:
    """Seconds that a convolution saves on its C16 kernel against its NCHW kernel on this host
    (``accel_host_c16_saving``; negative: it loses, 0: a kernel the runtime's table does not
    list). The figures are the runtime's, overridden by ``ACCEL_HOST_C16``
    (docs/kernels.md)."""
    seconds = ffi.new("double*")
    check(lib.accel_host_c16_saving(int(kernel[0]), int(kernel[1]), int(groups),
                                    int(group_channels), int(stride), int(bool(winograd)),
                                    int(np.prod(out_shape)), int(np.prod(out_shape[2:])),
                                    seconds))
    return seconds[0]


def conversion_seconds_per_byte() -> float:
    """Seconds per byte of a tensor that converting it between NCHW and C16 takes on this host
    (``accel_host_conversion_seconds``: the runtime's figure, ``ACCEL_HOST_C16``'s convert
    row)."""
    per_byte = ffi.new("double*")
    check(lib.accel_host_conversion_seconds(per_byte))
    return per_byte[0]


class ChainBatch:
    """Chains lowered to C once, then costed on any configuration by one library call
    (``accel_estimate_chains``): what :func:`accel_codegen.estimate` and the sweep use, so a
    configuration costs a whole model without lowering it again. The C library checks every
    chain against each configuration it is costed on.

    Parameters
    ----------
    config : AccelConfig or str
        The configuration the chains are lowered and shaped for.
    chains : sequence of (ops, in_shape, mode)
        Each chain's engine ops, input shape and mode ("fused" or "independent").
    precision : str, optional
        The chains' precision; None: each chain's first op's (mixed int8/fp16 code).
    """

    def __init__(self, config: AccelConfig | str,
                 chains: Sequence[Tuple[Sequence[Op], Tuple[int, ...], str]],
                 precision: Optional[str] = None):
        config_c = AccelConfig.resolve(config).to_c()
        self._chains = [_Chain(config_c, ops, tuple(shape), chain_precision(ops, precision),
                               mode) for ops, shape, mode in chains]
        self._c_chains = ffi.new("accel_chain[]", len(self._chains))
        for c_chain, chain in zip(self._c_chains, self._chains):
            c_chain.ops = chain.c_ops
            c_chain.num_ops = len(chain.ops)
            c_chain.input = chain.input[0]
            writes = output_precision(chain.ops, precision_name(chain.input.precision))
            c_chain.output = _tensor_struct(chain.shapes[-1], writes)[0]
            c_chain.mode = chain.mode
        self._num_ops = sum(len(chain.ops) for chain in self._chains)

    def __len__(self) -> int:
        return len(self._chains)

    def run_stats(self, config: AccelConfig | str, op_stats=None):
        """The C ``accel_run_stats[]`` of every chain on ``config`` (fields read as attributes;
        for a caller that wants a few figures of many configurations). ``op_stats``: an
        ``accel_op_stats[]`` of :attr:`num_ops` to fill too."""
        c_runs = ffi.new("accel_run_stats[]", len(self._chains))
        check(lib.accel_estimate_chains(AccelConfig.resolve(config).to_c(), self._c_chains,
                                        len(self._chains), c_runs,
                                        ffi.NULL if op_stats is None else op_stats))
        return c_runs

    @property
    def num_ops(self) -> int:
        """The ops of every chain together."""
        return self._num_ops

    def estimate(self, config: AccelConfig | str) -> List[RunStats]:
        """Every chain's cost on ``config``, with its op records."""
        c_ops = ffi.new("accel_op_stats[]", max(self._num_ops, 1))
        c_runs = self.run_stats(config, c_ops)
        records, first = [], 0
        for i, chain in enumerate(self._chains):
            count = len(chain.ops)
            records.append(RunStats.from_c(c_runs[i], [OpStats.from_c(c_ops[first + j])
                                                       for j in range(count)]))
            first += count
        return records


def int8_amx(on: Optional[bool] = None) -> bool:
    """Whether the simulator's INT8 convolutions run on the host's AMX tiles (accel_int8_amx:
    same codes, faster); ``on`` switches them (process-wide) where the build, CPU and OS have
    them. ACCEL_INT8_AMX=0 in the environment starts the process with them off."""
    return bool(lib.accel_int8_amx(-1 if on is None else int(bool(on))))


def profile_enable(enabled: bool) -> None:
    """Start (clearing earlier records) or stop recording every run in the process."""
    lib.accel_profile_enable(1 if enabled else 0)


def profile_records() -> List[RunStats]:
    """Every run recorded since profiling was enabled, with its op records."""
    records = []
    c_run = ffi.new("accel_run_stats*")
    first = ffi.new("int32_t*")
    c_op = ffi.new("accel_op_stats*")
    for i in range(lib.accel_profile_num_runs()):
        check(lib.accel_profile_run(i, c_run, first))
        op_records = []
        for j in range(first[0], first[0] + c_run.num_ops):
            check(lib.accel_profile_op(j, c_op))
            op_records.append(OpStats.from_c(c_op))
        records.append(RunStats.from_c(c_run, op_records))
    return records
