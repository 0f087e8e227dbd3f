"""``relax.ext.accel``: the external code generator. Each offloaded Relax function becomes C
source that fills engine descriptors (``accel/accel.h``) and calls the simulator's runtime.

Precisions: fp32 as the model is. fp16 and int8 store every tensor of the function in that
precision: inputs are converted where they enter (``accel_convert``), outputs where they leave,
so TVM's graph around the call stays fp32. int8 quantises weights per output channel with batch
norm (and any per-channel scale) folded in first, and encodes every layer's requantisation as
the SDP's integer converters, from the activation scales of a :class:`Calibration`.

RunCodegen calls :func:`generate` with the partitioned functions. Per function it emits one C
source module exporting ``__tvm_ffi_<symbol>`` (the tvm-ffi C ABI, destination-passing style:
inputs in parameter order, then outputs) and ``__tvm_ffi___init_<symbol>``, which the constant
loader calls once with the function's constants. Constants are the codegen's own: conv weights
as they are, and batch norm with any conv bias folded into one per-channel scale and one shift
at compile time (the two adds become one). Where those parameters are runtime inputs, the
generated code folds them on every call with the same library routine.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tvm
from tvm import relax

from ._accel_ffi import ffi, lib
from .config import AccelConfig
from . import errors
from .errors import AccelError, AccelInvalidError, AccelUnsupportedError, check
from .compiler.layer import (BatchNormSpec, Layer, SdpSpec, bound_values, chain_root,
                             constant_value, is_constant, static_shape)
from .compiler.lowering import lower_chain
from .quantization import (Calibration, TensorQuant, encode_multiplier, encode_multipliers,
                           quantize_weights, round_half_away)

_ACT = {None: "ACCEL_ACT_NONE", "relu": "ACCEL_ACT_RELU", "clip": "ACCEL_ACT_CLIP",
        "prelu": "ACCEL_ACT_PRELU", "sigmoid": "ACCEL_ACT_SIGMOID", "tanh": "ACCEL_ACT_TANH"}
_EW = {None: "ACCEL_EW_NONE", "add": "ACCEL_EW_ADD", "mul": "ACCEL_EW_MUL",
       "max": "ACCEL_EW_MAX", "min": "ACCEL_EW_MIN"}
_POOL = {"max": "ACCEL_POOL_MAX", "avg": "ACCEL_POOL_AVG"}
#: Storage dtype of each precision the code generator emits.
STORAGE = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}
#: DLPack (type code, bits) of every constant dtype the loader accepts.
_DL_TYPES = {np.dtype(np.float32): ("kDLFloat", 32), np.dtype(np.float16): ("kDLFloat", 16),
             np.dtype(np.int8): ("kDLInt", 8), np.dtype(np.int16): ("kDLInt", 16),
             np.dtype(np.int32): ("kDLInt", 32), np.dtype(np.uint8): ("kDLUInt", 8)}
#: How far below the output's step an int8 SDP sums an element-wise operand (NVDLA aligns
#: the two streams before the adder): 8 extra bits, one rounding at the output.
_EW_EXTRA_BITS = 8


@dataclasses.dataclass
class Generated:
    """What the last code generation produced, for the build step and for inspection."""

    sources: Dict[str, str] = dataclasses.field(default_factory=dict)  # symbol -> C source
    constants: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # name -> array
    # int8: (run key, op index) -> the quantisation of every tensor the runs read or write,
    # keyed as the observer reports them
    quantization: Dict[Tuple[str, int], TensorQuant] = dataclasses.field(default_factory=dict)
    # an AccelError the generator raised: TVM hands the caller a RuntimeError with its text,
    # the partitioner raises this one instead, typed
    error: Optional[Exception] = None


LAST = Generated()


def fold_batch_norm(bn: BatchNormSpec, bias: Optional[np.ndarray], channels: int
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """Constant batch norm (and bias) -> (scale, shift), by the C library's own routine."""
    def arg(expr):
        return None if expr is None else np.ascontiguousarray(
            constant_value(expr), dtype=np.float32).reshape(-1)

    inputs = [arg(bn.gamma), arg(bn.beta), arg(bn.mean), arg(bn.var), bias]
    scale = np.empty(channels, np.float32)
    shift = np.empty(channels, np.float32)
    pointers = [ffi.NULL if a is None else ffi.cast("float*", a.ctypes.data) for a in inputs]
    check(lib.accel_fold_batch_norm(channels, *pointers, bn.epsilon,
                                    ffi.cast("float*", scale.ctypes.data),
                                    ffi.cast("float*", shift.ctypes.data)))
    return scale, shift


def _affine(s: SdpSpec, channels: int, scope) -> Tuple[np.ndarray, np.ndarray]:
    """The per-channel (g, h) of an SDP's scale/shift stages: y = g * x + h (float64)."""
    def value(expr):
        return np.broadcast_to(np.asarray(constant_value(scope.get(expr, expr)), np.float64
                                          ).reshape(-1), (channels,)).copy()

    bias = value(s.bias) if s.bias is not None else None
    if s.batch_norm is not None:
        bn = s.batch_norm
        parts = [None if p is None else scope.get(p, p) for p in (bn.gamma, bn.beta, bn.mean,
                                                                  bn.var)]
        scale, shift = fold_batch_norm(BatchNormSpec(*parts, bn.epsilon),
                                       None if bias is None else bias.astype(np.float32),
                                       channels)
        return scale.astype(np.float64), shift.astype(np.float64)
    g = value(s.scale) if s.scale is not None else np.ones(channels)
    return g, bias if bias is not None else np.zeros(channels)


def _range_quant(value: np.ndarray) -> TensorQuant:
    """The quantisation of a constant tensor from its own range."""
    unsigned = value.min() >= 0 if value.size else True
    amax = float(np.abs(value).max()) if value.size else 0.0
    amax = amax if amax > 0 else 1.0
    return TensorQuant(float(np.float32(amax / (255 if unsigned else 127))),
                       -128 if unsigned else 0)


def _c_float(value: float) -> str:
    if np.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return f"{float(np.float32(value))!r}f"


class FunctionCodegen:
    """C source for one offloaded function."""

    def __init__(self, function: relax.Function, config: AccelConfig, fuse: bool, index: int,
                 precision: str = "fp32", calibration: Optional[Calibration] = None):
        self.function = function
        self.config = config
        self.fuse = fuse
        self.index = index
        self.precision = precision
        self.storage = np.dtype(STORAGE[precision])
        self.calibration = calibration
        self.symbol = str(function.attrs["global_symbol"])
        # Fused ops name the symbol: long enough to crowd the reason out of an error message.
        self.short = self.symbol if len(self.symbol) <= 64 else \
            f"{self.symbol[:40]}...{self.symbol[-20:]}"
        self.constants: Dict[str, np.ndarray] = {}
        self.temps: List[int] = []  # byte sizes of the scratch buffers
        self.temp_free_after: List[int] = []  # the layer after which each buffer is free
        self.packed = 0  # int8/fp16 convs whose weights are packed once, at the first call
        self.quantization: Dict[Tuple[str, int], TensorQuant] = {}
        self.layer_index = 0
        self.last_use: Dict[relax.Var, int] = {}
        self.layer_comments: List[str] = []
        self.body: List[str] = []
        params = list(function.params)
        self.inputs = params
        self.outputs = self._outputs()
        # Where each tensor lives, in the function's precision, and its int8 quantisation.
        self.operands: Dict[relax.Var, str] = {}
        self.quant: Dict[relax.Var, TensorQuant] = {}
        self.args: Dict[relax.Var, str] = {p: f"a[{i}]" for i, p in enumerate(params)}
        for r, var in enumerate(self.outputs):
            self.args.setdefault(var, f"a[{len(params) + r}]")
        if precision == "fp32":
            self.operands.update(self.args)
        self.inner: Dict[relax.Var, str] = {}  # composite-internal results held in scratch

    # --- operands ---------------------------------------------------------------------------
    def _outputs(self) -> List[relax.Var]:
        result = self.function.body.body
        fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
        for i, var in enumerate(fields):
            if not isinstance(var, relax.Var):
                raise AccelUnsupportedError(f"{self.short}: output {i} is not a variable")
        return fields

    def _constant(self, array: np.ndarray) -> str:
        """A constant for the loader; floats take the function's precision unless given as
        integers (int8 codes and converters keep their types)."""
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float16 if self.precision == "fp16" else np.float32)
        name = f"{self.symbol}_c{len(self.constants)}"
        self.constants[name] = np.ascontiguousarray(array)
        return f"k_const[{len(self.constants) - 1}]"

    def _temp(self, count: int, free_after: Optional[int] = None, itemsize: int = 0) -> str:
        """A scratch buffer of ``count`` elements (of the function's precision unless
        ``itemsize`` says otherwise), live from this layer to ``free_after`` (this layer by
        default): buffers whose values are dead are reused, so a deep network needs a few
        activations' worth of scratch, not all of them."""
        size = int(count) * (itemsize or self.storage.itemsize)
        free_after = self.layer_index if free_after is None else free_after
        free = [i for i, end in enumerate(self.temp_free_after) if end < self.layer_index]
        if free:
            index = max(free, key=lambda i: (self.temps[i] >= size, -self.temps[i]))
            self.temps[index] = max(self.temps[index], size)
            self.temp_free_after[index] = free_after
        else:
            self.temps.append(size)
            self.temp_free_after.append(free_after)
            index = len(self.temps) - 1
        return f"k_temp[{index}]"

    def _pointer(self, expr: Optional[relax.Expr], scope: Dict[relax.Var, relax.Expr],
                 reshape=None) -> str:
        """A C pointer expression for an operand of a composite (its params map to the call's
        arguments in this function)."""
        if expr is None:
            return "NULL"
        if expr in self.inner:
            return self.inner[expr]
        expr = scope.get(expr, expr)
        if is_constant(expr):
            value = constant_value(expr)
            return self._constant(reshape(value) if reshape else value)
        if expr in self.operands:
            return self.operands[expr]
        if expr in self.args:  # a function input, converted where it enters
            return self._enter(expr, None)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _data(self, expr: relax.Expr, scope, key: Tuple[str, int]) -> Tuple[str, TensorQuant]:
        """Pointer and quantisation of a data tensor in the function's precision; ``key``
        names the calibration statistics of this use, for tensors quantised here."""
        if expr in self.inner:
            return self.inner[expr], self.quant.get(expr)
        resolved = scope.get(expr, expr)
        if is_constant(resolved):  # a constant element-wise operand: its own scale
            value = np.asarray(constant_value(resolved), np.float64)
            quant = None
            if self.precision == "int8":
                quant = _range_quant(value)
                value = quant.quantize(value)
            return self._constant(value), quant
        if resolved in self.operands:
            return self.operands[resolved], self.quant.get(resolved)
        if resolved in self.args:
            return self._enter(resolved, key), self.quant.get(resolved)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _calibrated(self, key: Tuple[str, int]) -> Optional[TensorQuant]:
        if self.precision != "int8":
            return None
        if self.calibration is None:
            raise AccelInvalidError("int8 code needs a calibration")
        return self.calibration.get(*key)

    def _enter(self, var: relax.Var, key: Optional[Tuple[str, int]]) -> str:
        """A function input converted to the function's precision, once, where it is first
        read; it stays until its last reader."""
        count = int(np.prod(static_shape(var)))
        quant = self._calibrated(key) if key is not None else None
        if self.precision == "int8" and quant is None:
            raise AccelInvalidError(f"{self.short}: input {var.name} has no calibration")
        temp = self._temp(count, self.last_use.get(var, self.layer_index))
        self.operands[var], self.quant[var] = temp, quant
        self.body.append(f"/* input {var.name} enters as {self.precision} */")
        self.body.append(self._convert(self.args[var], "ACCEL_FP32", temp,
                                       f"ACCEL_{self.precision.upper()}", count, quant))
        return temp

    @staticmethod
    def _convert(src: str, src_type: str, dst: str, dst_type: str, count: int,
                 quant: Optional[TensorQuant]) -> str:
        scale, zero = (quant.scale, quant.zero) if quant is not None else (1.0, 0)
        return (f"if (convert({src}, {src_type}, {dst}, {dst_type}, {count}, "
                f"{_c_float(scale)}, {zero}) != 0) return -1;")

    # --- layers -----------------------------------------------------------------------------
    def run(self) -> str:
        lookup = bound_values(self.function)
        calls = [b for block in self.function.body.blocks for b in block.bindings
                 if not isinstance(b.value, relax.Function)]
        for index, binding in enumerate(calls):
            if not (isinstance(binding.value, relax.Call) and
                    isinstance(binding.value.op, relax.Var)):
                raise AccelUnsupportedError(f"{self.short}: unexpected binding {binding.value}")
            for arg in binding.value.args:
                self.last_use[arg] = index
        for index, binding in enumerate(calls):
            self.layer_index = index
            self._layer(index, binding.var, lookup(binding.value.op), binding.value.args)
        return self._source()

    def _layer(self, index: int, var: relax.Var, composite: relax.Function,
               args: Sequence[relax.Expr]) -> None:
        name = str(composite.attrs["Composite"])
        scope = dict(zip(composite.params, args))
        layer = lower_chain(chain_root(composite), bound_values(composite))
        if var not in self.operands:
            # Live until its last reader; never the same buffer as this layer's inputs, which
            # are still live while it is allocated.
            self.operands[var] = self._temp(int(np.prod(static_shape(var))),
                                            self.last_use.get(var, index))
        sources = layer.source_ops if layer.branch is None else \
            layer.branch.source_ops + layer.source_ops
        self.layer_comments.append(f"{index}: {name} ({', '.join(sources)})")
        if layer.branch is not None:
            branch_out = self._temp(int(np.prod(layer.branch.out_shape)))
            self.inner[layer.sdp.operand] = branch_out
            self.quant[layer.sdp.operand] = self._emit(layer.branch, scope, f"{index}a",
                                                       f"{name} (branch)", branch_out)
            index = f"{index}b"
        self.quant[var] = self._emit(layer, scope, index, name, self.operands[var])
        if self.precision != "fp32" and var in self.args:  # an output leaves as fp32
            self.body.append(self._convert(
                self.operands[var], f"ACCEL_{self.precision.upper()}", self.args[var],
                "ACCEL_FP32", int(np.prod(static_shape(var))), self.quant[var]))

    def _emit(self, layer: Layer, scope, index, name: str, output: str
              ) -> Optional[TensorQuant]:
        """One accelerator run; returns the int8 quantisation of its output."""
        label = f"f{self.index}.{index} {name}"
        key = f"f{self.index}.{index}"
        lines = [f"/* layer {index}: {name}: {' -> '.join(layer.source_ops)} */", "{"]
        data, in_quant = self._data(layer.data, scope, (key, -1))
        ops: List[str] = []
        out_quant = in_quant
        if self.precision == "int8":
            ops, out_quant = self._int8_ops(layer, scope, key, in_quant)
            self.quantization[(key, -1)] = in_quant
            for i in range(1 if layer.conv is not None else 0, len(ops)):
                self.quantization[(key, i)] = out_quant
        elif self.precision == "fp16" and self.fuse and layer.conv is not None:
            # Batch norm's (or a scale's) factor goes into the weights before they are
            # rounded to half: one rounding fewer per layer; the SDP adds the shift.
            g, h = _affine(layer.sdp, self._channels(layer), scope)
            weights = np.asarray(constant_value(scope.get(layer.conv.weight, layer.conv.weight)),
                                 np.float64)
            weights = (weights.T if layer.conv.transpose_weight else weights).reshape(
                layer.conv.weight_shape) * g.reshape(-1, 1, 1, 1)
            ops.append(self._conv(layer, scope, self._constant(weights)))  # one rounding
            shift = "NULL" if layer.sdp.bias is None and layer.sdp.batch_norm is None else \
                self._constant(h)
            ops.extend(self._sdp(layer, scope, lines, ("NULL", shift)))
        else:
            if layer.conv is not None:
                ops.append(self._conv(layer, scope))
            ops.extend(self._sdp(layer, scope, lines))
        if self.precision == "fp16" and layer.conv is not None and len(ops) == 1:
            ops.append(f"OP.engine = ACCEL_ENGINE_SDP;  /* the accumulators' converter */\n"
                       f"OP.sdp.precision = {self._c_precision};")
        if self.precision != "int8" and layer.pool is not None:
            ops.append(self._pool(layer))
        lines.append(f"  accel_op ops[{len(ops)}];")
        lines.append("  memset(ops, 0, sizeof ops);")
        for i, op in enumerate(ops):
            lines.extend("  " + line.replace("OP", f"ops[{i}]") for line in op.splitlines())
        mode = "ACCEL_MODE_FUSED" if self.fuse else "ACCEL_MODE_INDEPENDENT"
        in_shape = ", ".join(map(str, layer.in_shape))
        out_shape = ", ".join(map(str, _feature(layer.out_shape)))
        lines.append(f"  static const int32_t in_shape[4] = {{{in_shape}}}, "
                     f"out_shape[4] = {{{out_shape}}};")
        lines.append(f"  if (run_layer(ops, {len(ops)}, {data}, in_shape, {output}, out_shape, "
                     f"{mode}, \"{label}\") != 0) return -1;")
        lines.append("}")
        self.body.extend(lines)
        return out_quant

    @property
    def _c_precision(self) -> str:
        return f"ACCEL_{self.precision.upper()}"

    def _conv(self, layer: Layer, scope, weights: Optional[str] = None, in_zero: int = 0) -> str:
        c = layer.conv
        if weights is None:
            weights = self._pointer(c.weight, scope,
                                    reshape=(lambda v: v.T) if c.transpose_weight else None)
        k, _, kh, kw = c.weight_shape
        t, l, b, r = c.padding
        pack = f"\nOP.conv.in_zero = {in_zero};" if in_zero else ""
        if self.precision != "fp32":  # packed (int8) or widened (fp16) once, not every call
            pack += (f"\nif (pack_weights(&OP, {layer.in_shape[1]}, &k_packed[{self.packed}], "
                     f"&k_packed_bytes[{self.packed}]) != 0) return -1;")
            self.packed += 1
        return textwrap.dedent(f"""\
            OP.engine = ACCEL_ENGINE_CONV;  /* {c.source} */
            OP.conv.out_c = {k};
            OP.conv.kernel_h = {kh}; OP.conv.kernel_w = {kw};
            OP.conv.stride_h = {c.stride[0]}; OP.conv.stride_w = {c.stride[1]};
            OP.conv.pad_top = {t}; OP.conv.pad_left = {l}; OP.conv.pad_bottom = {b}; OP.conv.pad_right = {r};
            OP.conv.dilation_h = {c.dilation[0]}; OP.conv.dilation_w = {c.dilation[1]};
            OP.conv.groups = {c.groups};
            OP.conv.precision = {self._c_precision};
            OP.conv.weights = {weights};""") + pack

    def _sdp(self, layer: Layer, scope, lines: List[str],
             folded: Optional[Tuple[str, str]] = None) -> List[str]:
        """The SDP op(s) of a layer; ``folded``: the fused scale and shift, made by the caller."""
        s = layer.sdp
        if s.empty():
            return []
        channels = self._channels(layer)

        def sdp(scale="NULL", shift="NULL", ew=None, operand="NULL", act=None, what=""):
            text = [f"OP.engine = ACCEL_ENGINE_SDP;  /* {what} */",
                    f"OP.sdp.scale = {scale}; OP.sdp.shift = {shift};"]
            if ew:
                text.append(f"OP.sdp.ew_op = {_EW[ew]}; OP.sdp.ew_operand = {operand};")
            if act:
                text.append(f"OP.sdp.act = {_ACT[act]};")
                if act == "clip":
                    text.append(f"OP.sdp.clip_min = {_c_float(s.clip[0])}; "
                                f"OP.sdp.clip_max = {_c_float(s.clip[1])};")
                if act == "prelu":
                    text.append(f"OP.sdp.prelu_slope = {self._pointer(s.prelu_slope, scope)};")
            text.append(f"OP.sdp.precision = {self._c_precision};")
            return "\n".join(text)

        operand = self._data(s.operand, scope, ("", 0))[0] if s.ew_op else "NULL"
        if self.fuse:
            scale, shift = folded or self._scale_shift(s, s.bias, channels, scope, lines)
            stages = [name for name, present in (
                ("bias", s.bias is not None), ("batch_norm", s.batch_norm is not None),
                ("scale", s.scale is not None), (f"{s.ew_op} operand", s.ew_op is not None),
                (s.act, s.act is not None)) if present]
            folded = " (folded into one scale/shift)" if s.batch_norm is not None else ""
            return [sdp(scale, shift, s.ew_op, operand, s.act, " + ".join(stages) + folded)]
        ops = []
        for stage in s.decomposed_order():
            if stage == "bias":
                ops.append(sdp(shift=self._pointer(s.bias, scope), what="bias"))
            else:
                scale, shift = self._scale_shift(s, None, channels, scope, lines)
                ops.append(sdp(scale, shift, what=stage))
        if s.ew_op:
            ops.append(sdp(ew=s.ew_op, operand=operand, what=s.ew_op))
        if s.act:
            ops.append(sdp(act=s.act, what=s.act))
        return ops

    @staticmethod
    def _channels(layer: Layer) -> int:
        if layer.conv is not None:
            return layer.conv.weight_shape[0]
        return layer.in_shape[1]

    def _scale_shift(self, s, bias, channels: int, scope, lines: List[str]) -> Tuple[str, str]:
        """Pointers to the SDP's scale and shift: batch norm (with the bias, when given) folded
        into one scale and one shift, at compile time when every parameter is constant."""
        bn = s.batch_norm
        if bn is None:
            return self._pointer(s.scale, scope), self._pointer(bias, scope)
        parts = [bn.gamma, bn.beta, bn.mean, bn.var, bias]
        resolved = [None if p is None else scope.get(p, p) for p in parts]
        if all(p is None or is_constant(p) for p in resolved):
            bias_value = None if bias is None else np.ascontiguousarray(
                constant_value(resolved[4]), np.float32).reshape(-1)
            folded = BatchNormSpec(*resolved[:4], bn.epsilon)
            scale, shift = fold_batch_norm(folded, bias_value, channels)
            return self._constant(scale), self._constant(shift)
        scale = self._temp(channels, itemsize=4)
        shift = self._temp(channels, itemsize=4)
        pointers = ", ".join(f"(const float*){self._pointer(p, scope)}" for p in parts)
        lines.append(f"  /* batch norm{' and bias' if bias is not None else ''} are runtime "
                     "inputs: fold them now */")
        lines.append(f"  if (fold_batch_norm({channels}, {pointers}, {_c_float(bn.epsilon)}, "
                     f"(float*){scale}, (float*){shift}) != 0) return -1;")
        return scale, shift

    def _pool(self, layer: Layer, zero: int = 0) -> str:
        p = layer.pool
        t, l, b, r = p.padding
        return textwrap.dedent(f"""\
            OP.engine = ACCEL_ENGINE_PDP;  /* {p.source} */
            OP.pdp.pool = {_POOL[p.kind]};
            OP.pdp.kernel_h = {p.kernel[0]}; OP.pdp.kernel_w = {p.kernel[1]};
            OP.pdp.stride_h = {p.stride[0]}; OP.pdp.stride_w = {p.stride[1]};
            OP.pdp.pad_top = {t}; OP.pdp.pad_left = {l}; OP.pdp.pad_bottom = {b}; OP.pdp.pad_right = {r};
            OP.pdp.count_include_pad = {int(p.count_include_pad)};
            OP.pdp.precision = {self._c_precision};
            OP.pdp.zero = {zero};""")

    # --- int8 -------------------------------------------------------------------------------
    def _int8_ops(self, layer: Layer, scope, key: str, in_quant: TensorQuant
                  ) -> Tuple[List[str], TensorQuant]:
        """The engine ops of an int8 layer and the quantisation of its output. Real values:
        SDP result = g[c] * (accumulator in units a[c]) + h[c], with batch norm, bias and a
        per-channel scale as (g, h); a conv takes g into its weights before quantising them."""
        s = layer.sdp
        channels = self._channels(layer)
        g, h = _affine(s, channels, scope)
        ops: List[str] = []
        if layer.conv is not None:
            weights = np.asarray(constant_value(scope.get(layer.conv.weight, layer.conv.weight)),
                                 np.float64)
            if layer.conv.transpose_weight:
                weights = weights.T
            weights = weights.reshape(layer.conv.weight_shape) * g.reshape(-1, 1, 1, 1)
            codes, weight_scales = quantize_weights(weights)
            h = h - self._weight_error_mean(layer, key, codes, weight_scales, weights)
            unit = in_quant.scale * weight_scales
            g = np.ones(channels)
            ops.append(self._conv(layer, scope, self._constant(codes), in_quant.zero))
        else:
            unit = np.full(channels, in_quant.scale)
        has_sdp = layer.conv is not None or not s.empty()
        out_quant = in_quant
        if has_sdp:
            pre_pool = (1 if layer.conv is not None else 0) + (0 if s.empty() else 1) - 1
            out_quant = self._calibrated((key, pre_pool))
            ops.append(self._int8_sdp(layer, scope, key, g, h, unit, in_quant, out_quant))
        if layer.pool is not None:
            ops.append(self._pool(layer, out_quant.zero))
        return ops, out_quant

    def _weight_error_mean(self, layer: Layer, key: str, codes, weight_scales, weights
                           ) -> np.ndarray:
        """Bias correction (Nagel et al., "Data-free quantization", 2019): the rounding error
        of the weights shifts each output channel's mean by sum(error * E[input]); the
        calibration's per-channel input means give it, and the bias takes it back. (Border
        positions, where padding reads zero, are treated like the interior.)"""
        means = self.calibration.means.get(key) if self.calibration else None
        conv = layer.conv
        if means is None or len(means) != layer.in_shape[1]:
            return np.zeros(conv.weight_shape[0])
        error = codes.astype(np.float64) * weight_scales.reshape(-1, 1, 1, 1) - weights
        k, c_group = conv.weight_shape[:2]
        group_means = means.reshape(conv.groups, 1, c_group)  # [groups, 1, C/groups]
        per_k = error.sum(axis=(2, 3)).reshape(conv.groups, k // conv.groups, c_group)
        return (per_k * group_means).sum(axis=2).reshape(-1)

    def _int8_sdp(self, layer: Layer, scope, key: str, g, h, unit, in_quant: TensorQuant,
                  out_quant: TensorQuant) -> str:
        s = layer.sdp
        what = f"layer {key}"
        fields = {"precision": "ACCEL_INT8", "out_zero": out_quant.zero}
        if layer.conv is None:
            fields["in_zero"] = in_quant.zero
        if np.any(g == 0):
            raise AccelInvalidError(f"{what}: a per-channel scale of 0 (channel "
                                    f"{int(np.argmax(g == 0))}) has no int8 converter")
        # The domain the SDP sums in: the output's step, or 2^-8 of it when an element-wise
        # operand is added (both streams aligned below the output LSB, one rounding at the end).
        target = out_quant.scale
        comment = "x: scale/shift to the output step"
        if s.ew_op is not None:
            ew_key = (key, -2 - (layer.conv is not None))
            operand, ew_quant = self._data(s.operand, scope, ew_key)
            self.quantization[ew_key] = ew_quant
            extra = _EW_EXTRA_BITS
            if s.ew_op != "mul":
                fits = int(np.floor(np.log2(32767.0 * out_quant.scale / ew_quant.scale)))
                extra = min(extra, fits)
                if extra < 0:
                    raise AccelInvalidError(f"{what}: the element-wise operand's scale "
                                            f"{ew_quant.scale:g} is too large for the output's "
                                            f"{out_quant.scale:g}")
            target = out_quant.scale / 2 ** extra
            fields.update(ew_op=_EW[s.ew_op], ew_operand=operand, ew_zero=ew_quant.zero)
            if s.ew_op == "mul":  # e stays in its own codes; the output converter scales
                fields.update(ew_mul=1, ew_shift=0)
                out_mul, out_shift = encode_multiplier(target * ew_quant.scale / out_quant.scale,
                                                       f"{what} output converter")
            else:
                fields["ew_mul"], fields["ew_shift"] = encode_multiplier(
                    ew_quant.scale / target, f"{what} element-wise converter")
                out_mul, out_shift = 1, extra
            fields.update(out_mul=out_mul, out_shift=out_shift)
            comment = f"x and the {s.ew_op} operand to 2^-{extra} of the output step"
        bias = round_half_away(h / (g * unit))
        if np.any(np.abs(bias) > 2 ** 31 - 1):
            bad = int(np.argmax(np.abs(bias)))
            raise AccelInvalidError(f"{what}: shift {h[bad]:g} of channel {bad} is "
                                    f"{bias[bad]:g} accumulator steps, beyond the int32 bias")
        mul, rshift = encode_multipliers(g * unit / target, f"{what} multiplier")
        fields.update(bias=f"(const int32_t*){self._constant(bias.astype(np.int32))}",
                      mul=f"(const int16_t*){self._constant(mul)}",
                      rshift=f"(const uint8_t*){self._constant(rshift)}")
        if s.act is not None:
            fields["act"] = _ACT[s.act]
        if s.act == "clip":
            lo, hi = (int(np.clip(round_half_away(v / out_quant.scale) + out_quant.zero, -128, 127))
                      for v in s.clip)
            fields.update(clip_lo=lo, clip_hi=hi)
        elif s.act == "prelu":
            slope = np.asarray(constant_value(scope.get(s.prelu_slope, s.prelu_slope)),
                               np.float64).reshape(-1)
            slope = np.broadcast_to(slope, (len(g),)) if slope.size == 1 else slope
            # one shift for every channel: the one the largest slope allows
            _, shift = encode_multiplier(float(np.max(np.abs(slope))), f"{what} PReLU slope")
            codes = round_half_away(slope * 2.0 ** shift).astype(np.int16)
            fields.update(prelu_mul=f"(const int16_t*){self._constant(codes)}",
                          prelu_shift=shift)
        text = [f"OP.engine = ACCEL_ENGINE_SDP;  /* {comment} */"]
        text += [f"OP.sdp.{field} = {value};" for field, value in fields.items()]
        return "\n".join(text)

    # --- the translation unit ---------------------------------------------------------------
    def _source(self) -> str:
        cfg = self.config
        arg_checks = []
        for i, var in enumerate(self.inputs + self.outputs):
            role = f"input {i}" if i < len(self.inputs) else f"output {i - len(self.inputs)}"
            shape = static_shape(var)
            arg_checks.append(
                f"  static const int64_t shape_{i}[{max(len(shape), 1)}] = "
                f"{{{', '.join(map(str, shape)) or '0'}}};\n"
                f"  a[{i}] = tensor_data(&args[{i}], \"{role} ({var.name})\", {len(shape)}, "
                f"shape_{i});\n"
                f"  if (a[{i}] == NULL) return -1;")
        passthrough = []
        for r, var in enumerate(self.outputs):
            source = self.args[var]  # an fp32 input, or the output's first position
            target = f"a[{len(self.inputs) + r}]"
            if source != target:  # an output that is an input or another output
                count = int(np.prod(static_shape(var)))
                passthrough.append(f"  memcpy({target}, {source}, {count} * sizeof(float));")
        num_args = len(self.inputs) + len(self.outputs)
        features = " | ".join(f"ACCEL_FEATURE_{f.upper()}" for f in cfg.features) or "0"
        precisions = " | ".join(f"(1u << ACCEL_{p.upper()})" for p in cfg.precisions)
        temps = ", ".join(map(str, self.temps)) or "0"
        const_counts = ", ".join(str(a.size) for a in self.constants.values()) or "0"
        const_types = ", ".join("{%s, %d}" % _DL_TYPES[a.dtype]
                                for a in self.constants.values()) or "{0, 0}"
        layers = "\n".join(f" *   {c}" for c in self.layer_comments)
        return f"""\
/*
 * Generated by accel-codegen: external function {self.symbol}
 * Configuration {cfg.name}, {"fused" if self.fuse else "decomposed (independent)"} mode, {self.precision}.
 * Layers:
{layers}
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tvm/ffi/c_api.h>

#include "accel/accel.h"

#define NUM_CONSTANTS {len(self.constants)}
#define NUM_TEMPS {len(self.temps)}
#define NUM_PACKED {self.packed}
#define NUM_ARGS {num_args}

static const void* k_const[NUM_CONSTANTS + 1];    /* set by the constant loader */
static void* k_const_object[NUM_CONSTANTS + 1];   /* the tensors it holds a reference to */
static const int64_t k_const_count[NUM_CONSTANTS + 1] = {{{const_counts}}};
static const struct {{ int code, bits; }} k_const_type[NUM_CONSTANTS + 1] = {{{const_types}}};
static void* k_temp[NUM_TEMPS + 1];               /* intermediates, allocated once */
static const int64_t k_temp_bytes[NUM_TEMPS + 1] = {{{temps}}};
static void* k_packed[NUM_PACKED + 1];            /* weights packed at the first call */
static size_t k_packed_bytes[NUM_PACKED + 1];     /* and their sizes */
static accel_config k_config;
static accel_device* k_device;
static pthread_mutex_t k_lock = PTHREAD_MUTEX_INITIALIZER; /* one accelerator: calls queue */

static int raise_error(const char* kind, const char* format, ...) {{
  char message[768];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  TVMFFIErrorSetRaisedFromCStr(kind, message);
  return -1;
}}

/* A runtime status as the accel_codegen exception of the same name (accel_codegen registers
 * these kinds with tvm-ffi; a process without it sees a RuntimeError with the same text). */
static int raise_status(accel_status status, const char* where) {{
  const char* kind = "AccelError";
  switch ((int)status) {{
    case ACCEL_ERR_INVALID: kind = "AccelInvalidError"; break;
    case ACCEL_ERR_SHAPE: kind = "AccelShapeError"; break;
    case ACCEL_ERR_UNSUPPORTED: kind = "AccelUnsupportedError"; break;
    case ACCEL_ERR_NULL: case ACCEL_ERR_ALIGNMENT: kind = "AccelBufferError"; break;
    case ACCEL_ERR_NO_MEMORY: kind = "AccelMemoryError"; break;
    case ACCEL_ERR_NOT_FOUND: kind = "AccelNotFoundError"; break;
    default: break;
  }}
  return raise_error(kind, "{self.short}: %s%s [%s]", where, accel_last_error(),
                     accel_status_name(status));
}}

static const DLTensor* as_dltensor(const TVMFFIAny* value) {{
  if (value->type_index == kTVMFFITensor) {{
    return (const DLTensor*)((const char*)value->v_obj + sizeof(TVMFFIObject));
  }}
  if (value->type_index == kTVMFFIDLTensorPtr) return (const DLTensor*)value->v_ptr;
  return NULL;
}}

/* The data of a compact float32 CPU tensor of the expected shape, or NULL with an error. */
static float* tensor_data(const TVMFFIAny* value, const char* what, int ndim,
                          const int64_t* shape) {{
  const DLTensor* t = as_dltensor(value);
  if (t == NULL) {{
    raise_error("AccelInvalidError", "{self.short}: %s is not a tensor (type index %d)", what,
                (int)value->type_index);
    return NULL;
  }}
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1) {{
    raise_error("AccelInvalidError", "{self.short}: %s has dtype code %d bits %d, expected float32",
                what, (int)t->dtype.code, (int)t->dtype.bits);
    return NULL;
  }}
  if (t->device.device_type != kDLCPU) {{
    raise_error("AccelInvalidError", "{self.short}: %s is on device type %d, expected the CPU", what,
                (int)t->device.device_type);
    return NULL;
  }}
  if (t->ndim != ndim) {{
    raise_error("AccelShapeError", "{self.short}: %s has %d dimensions, expected %d", what,
                (int)t->ndim, ndim);
    return NULL;
  }}
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {{
    if (t->shape[i] != shape[i]) {{
      raise_error("AccelShapeError", "{self.short}: %s has size %lld in dimension %d, expected %lld",
                  what, (long long)t->shape[i], i, (long long)shape[i]);
      return NULL;
    }}
    if (t->strides != NULL && shape[i] != 1 && t->strides[i] != stride) {{
      raise_error("AccelBufferError", "{self.short}: %s is not compact (stride %lld in dimension %d)",
                  what, (long long)t->strides[i], i);
      return NULL;
    }}
    stride *= shape[i];
  }}
  if (t->data == NULL) {{
    raise_error("AccelBufferError", "{self.short}: %s has no data", what);
    return NULL;
  }}
  return (float*)((char*)t->data + t->byte_offset);
}}

static int setup(void) {{
  accel_config config;
  memset(&config, 0, sizeof config);
  strncpy(config.name, "{cfg.name}", sizeof config.name - 1);
  config.atomic_c = {cfg.atomic_c};
  config.atomic_k = {cfg.atomic_k};
  config.cbuf_bytes = {cfg.cbuf_bytes};
  config.memory_atom_bytes = {cfg.memory_atom_bytes};
  config.sdp_throughput = {cfg.sdp_throughput};
  config.sdp_ew_throughput = {cfg.sdp_ew_throughput};
  config.pdp_throughput = {cfg.pdp_throughput};
  config.clock_hz = {cfg.clock_hz!r};
  config.dram_bytes_per_s = {cfg.dram_bytes_per_s!r};
  config.precisions = {precisions};
  config.features = {features};
  accel_device* device = NULL;
  const accel_status status = accel_device_shared(&config, &device);
  if (status != ACCEL_OK) return raise_status(status, "");
  for (int i = 0; i < NUM_TEMPS; ++i) {{
    if (k_temp[i] == NULL) k_temp[i] = malloc((size_t)k_temp_bytes[i]);
    if (k_temp[i] == NULL) return raise_error("AccelMemoryError", "{self.short}: out of memory");
  }}
  k_config = config;
  k_device = device; /* last: a failed set-up is tried again by the next call */
  return 0;
}}

/* Data entering or leaving the accelerator (fp32 <-> the function's precision). */
static int convert(const void* src, accel_precision from, void* dst, accel_precision to,
                   int64_t count, float scale, int32_t zero) {{
  const accel_status status = accel_convert(src, from, dst, to, count, scale, zero);
  return status == ACCEL_OK ? 0 : raise_status(status, "");
}}

/* Weights prepared once for the kernel: int8 in its layout, fp16 widened (NVDLA's compiler
 * pre-formats weights too). */
static int pack_weights(accel_op* op, int32_t in_c, void** packed, size_t* packed_bytes) {{
  if (*packed == NULL) {{
    size_t bytes = 0;
    accel_status status = accel_conv_pack_weights(&k_config, &op->conv, in_c, NULL, &bytes);
    if (status != ACCEL_OK) return raise_status(status, "");
    const size_t align = ACCEL_PACKED_ALIGNMENT;
    void* buffer = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (buffer == NULL) return raise_error("AccelMemoryError", "{self.short}: out of memory");
    status = accel_conv_pack_weights(&k_config, &op->conv, in_c, buffer, &bytes);
    if (status != ACCEL_OK) {{
      free(buffer);
      return raise_status(status, "");
    }}
    *packed = buffer;
    *packed_bytes = bytes;
  }}
  op->conv.weights_packed = *packed;
  op->conv.weights_packed_bytes = *packed_bytes;
  return 0;
}}

static int fold_batch_norm(int32_t channels, const float* gamma, const float* beta,
                           const float* mean, const float* var, const float* bias,
                           float epsilon, float* scale, float* shift) {{
  const accel_status status =
      accel_fold_batch_norm(channels, gamma, beta, mean, var, bias, epsilon, scale, shift);
  return status == ACCEL_OK ? 0 : raise_status(status, "");
}}

static int run_layer(const accel_op* ops, int32_t num_ops, const void* in,
                     const int32_t* in_shape, void* out, const int32_t* out_shape,
                     accel_mode mode, const char* label) {{
  accel_tensor input, output;
  memset(&input, 0, sizeof input);
  memset(&output, 0, sizeof output);
  input.data = (void*)in;
  input.n = in_shape[0]; input.c = in_shape[1]; input.h = in_shape[2]; input.w = in_shape[3];
  input.precision = {self._c_precision};
  output.data = out;
  output.n = out_shape[0]; output.c = out_shape[1]; output.h = out_shape[2]; output.w = out_shape[3];
  output.precision = {self._c_precision};
  const accel_status status =
      accel_run(k_device, ops, num_ops, &input, &output, mode, label, NULL, NULL);
  if (status != ACCEL_OK) {{
    char where[160];
    snprintf(where, sizeof where, "layer %s: ", label);
    return raise_status(status, where);
  }}
  return 0;
}}

static int run_layers(float** a) {{
  if (k_device == NULL && setup() != 0) return -1;
{textwrap.indent(chr(10).join(self.body), "  ")}
{chr(10).join(passthrough)}
  return 0;
}}

#ifdef __cplusplus
extern "C" {{
#endif

TVM_FFI_DLL_EXPORT int __tvm_ffi___init_{self.symbol}(void* self, const TVMFFIAny* args,
                                                 int32_t num_args, TVMFFIAny* result) {{
  (void)self;
  if (num_args != 1 || args[0].type_index != kTVMFFIArray) {{
    return raise_error("AccelInvalidError", "__init_{self.short}: expected one array of constants");
  }}
  const TVMFFISeqCell* cell =
      (const TVMFFISeqCell*)((const char*)args[0].v_obj + sizeof(TVMFFIObject));
  if (cell->size != NUM_CONSTANTS) {{
    return raise_error("AccelInvalidError", "__init_{self.short}: %lld constants, expected %d",
                       (long long)cell->size, NUM_CONSTANTS);
  }}
  const TVMFFIAny* items = (const TVMFFIAny*)cell->data;
  for (int i = 0; i < NUM_CONSTANTS; ++i) {{ /* all checked before any is taken */
    const DLTensor* t = as_dltensor(&items[i]);
    if (t == NULL) {{
      return raise_error("AccelInvalidError", "__init_{self.short}: constant %d is not a tensor", i);
    }}
    if (t->dtype.code != k_const_type[i].code || t->dtype.bits != k_const_type[i].bits ||
        t->dtype.lanes != 1) {{
      return raise_error("AccelInvalidError", "__init_{self.short}: constant %d has type code %d, "
                         "%d bits, expected type code %d, %d bits", i, (int)t->dtype.code,
                         (int)t->dtype.bits, k_const_type[i].code, k_const_type[i].bits);
    }}
    int64_t count = 1;
    for (int d = 0; d < t->ndim; ++d) count *= t->shape[d];
    if (count != k_const_count[i]) {{
      return raise_error("AccelInvalidError", "__init_{self.short}: constant %d has %lld values, "
                         "expected %lld", i, (long long)count, (long long)k_const_count[i]);
    }}
  }}
  pthread_mutex_lock(&k_lock); /* no call runs while the constants change */
  for (int i = 0; i < NUM_CONSTANTS; ++i) {{
    const DLTensor* t = as_dltensor(&items[i]);
    /* Hold the constant for as long as this library is loaded, or until the next load. */
    void* object = items[i].type_index == kTVMFFITensor ? items[i].v_obj : NULL;
    if (object != NULL) TVMFFIObjectIncRef(object);
    if (k_const_object[i] != NULL) TVMFFIObjectDecRef(k_const_object[i]);
    k_const_object[i] = object;
    k_const[i] = (const char*)t->data + t->byte_offset;
  }}
  for (int i = 0; i < NUM_PACKED; ++i) {{ /* new weights: pack again */
    free(k_packed[i]);
    k_packed[i] = NULL;
    k_packed_bytes[i] = 0;
  }}
  pthread_mutex_unlock(&k_lock);
  result->type_index = kTVMFFIInt;
  result->v_int64 = 0;
  return 0;
}}

TVM_FFI_DLL_EXPORT int __tvm_ffi_{self.symbol}(void* self, const TVMFFIAny* args,
                                          int32_t num_args, TVMFFIAny* result) {{
  (void)self;
  float* a[NUM_ARGS];
  if (num_args != NUM_ARGS) {{
    return raise_error("AccelInvalidError", "{self.short}: %d arguments, expected %d", (int)num_args,
                       NUM_ARGS);
  }}
{chr(10).join(arg_checks)}
  pthread_mutex_lock(&k_lock);
  const int status = run_layers(a);
  pthread_mutex_unlock(&k_lock);
  if (status != 0) return -1;
  result->type_index = kTVMFFINone;
  result->v_int64 = 0;
  return 0;
}}

#ifdef __cplusplus
}}
#endif
"""


def _feature(shape: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    return tuple(shape) if len(shape) == 4 else (shape[0], shape[1], 1, 1)


def register_error_kinds() -> None:
    """Let tvm-ffi carry accel_codegen's exceptions by name, both ways: the generated C raises
    them by class name (``TVMFFIErrorSetRaisedFromCStr("AccelShapeError", ...)``) and Python
    receives that class, not a RuntimeError; an :class:`AccelError` raised in Python under a
    TVM call (this code generator) keeps its class too. Run when this module is imported: the
    compiler side (partition, build, virtual_machine) imports it. A process that loads a
    library without accel_codegen sees a RuntimeError with the same message."""
    import tvm_ffi

    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, AccelError):
            tvm_ffi.register_error(value.__name__, value)


register_error_kinds()


@tvm.register_global_func("relax.ext.accel", override=True)
def generate(functions, options, constant_names):
    """The codegen entry point RunCodegen calls: one C source module per function."""
    del constant_names  # the codegen names its own (folded) constants
    options = dict(options) if options is not None else {}
    config = AccelConfig.from_json(str(options["config"]))
    fuse = bool(options.get("fuse", True))
    precision = str(options.get("precision", "fp32"))
    calibration = Calibration.from_json(str(options["calibration"])) \
        if "calibration" in options else None
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    modules = []
    for function in functions:
        gen = FunctionCodegen(function, config, fuse, len(LAST.sources), precision, calibration)
        try:
            source = gen.run()
        except AccelError as error:
            LAST.error = error
            raise
        LAST.sources[gen.symbol] = source
        LAST.constants.update(gen.constants)
        LAST.quantization.update(gen.quantization)
        modules.append(create(source, "c", [gen.symbol], list(gen.constants)))
    return modules
