"""Where the tensors of one offloaded function live while its C is written: the function's
arguments, the scratch each layer's output takes (live until its last reader), the constant
pool, and in int8 code each tensor's quantisation. A function input enters in the code's
precision where it is first read, an output leaves as fp32; in mixed int8/fp16 code a tensor
may be held in both precisions (the layer's own, and a converting run's copy).

:class:`FunctionTensors` is the base of :class:`~.function.FunctionCodegen`, which prints the
runs; the code of the engine ops reads operands through it (``_pointer``, ``_data``)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
from tvm import relax

from ...errors import AccelInvalidError, AccelUnsupportedError
from ...quantization import Calibration, Key, TensorQuant
from ..layer import constant_value, is_constant, static_shape
from . import emit, int8
from .buffers import ScratchPlanner
from .constants import ConstantPool

#: Storage dtype of each precision the code generator emits.
STORAGE = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}


def scale_zero(quant: Optional[TensorQuant]) -> Tuple[float, int]:
    """A conversion's scale and zero point: int8's, or the identity."""
    return (quant.scale, quant.zero) if quant is not None else (1.0, 0)


def resolve_operand(expr: relax.Expr, scope) -> Tuple[relax.Expr, Optional[np.ndarray]]:
    """What a run's operand names through its call's scope, and its value (float64) where that
    is a constant (an element-wise operand, quantised to its own range in int8 code), else
    None: the function's tensor. The one lookup of the code generator (``Tensors._data``) and
    the int8 pass (``int8_plan``), which then find the tensor where each keeps it."""
    resolved = scope.get(expr, expr)
    if is_constant(resolved):
        return resolved, np.asarray(constant_value(resolved), np.float64)
    return resolved, None


class FunctionTensors:
    """The tensors of ``function`` in code of ``precision`` (a layer's, in mixed code: see
    :meth:`_use_precision`); ``calibration``: int8's activation scales."""

    def __init__(self, function: relax.Function, precision: str,
                 calibration: Optional[Calibration]):
        self.function = function
        self.precision = precision
        self.storage = np.dtype(STORAGE[precision])
        self.calibration = calibration
        self.symbol = str(function.attrs["global_symbol"])
        # Fused ops name the symbol: long enough to crowd the reason out of an error message.
        self.short = self.symbol if len(self.symbol) <= 64 else \
            f"{self.symbol[:40]}...{self.symbol[-20:]}"
        self.pool = ConstantPool(self.symbol, precision)
        self.scratch = ScratchPlanner()
        self.layer_index = 0
        self.last_use: Dict[relax.Var, int] = {}
        self.body: List[str] = []
        self.inputs = list(function.params)
        self.outputs = self._outputs()
        # Where each tensor lives, in the function's precision, and its int8 quantisation.
        self.args: Dict[relax.Var, str] = {p: f"a[{i}]" for i, p in enumerate(self.inputs)}
        for r, var in enumerate(self.outputs):
            self.args.setdefault(var, f"a[{len(self.inputs) + r}]")
        self.operands: Dict[relax.Var, str] = dict(self.args) if precision == "fp32" else {}
        self.held: Dict[relax.Var, str] = {}  # mixed: the precision of each operand
        self.converted: Dict[relax.Var, str] = {}  # mixed: operands in the other precision
        self.quant: Dict[relax.Var, TensorQuant] = {}
        self.inner: Dict[relax.Var, str] = {}  # composite-internal results held in scratch
        # a token layer's output also held on its [B, C, 1, T] surface until its last reader:
        # var -> (pointer, (B, C, T), precision); a token layer reading it takes the surface
        # instead of transposing the tokens again (codegen/passes.py)
        self.token_surfaces: Dict[relax.Var, Tuple[str, Tuple[int, int, int], str]] = {}
        # tensors whose tokens were never written: every reader takes the surface
        self.surface_only: set = set()
        self.readers: Dict[relax.Var, List[int]] = {}  # the layers reading each tensor
        # int8 outputs that leave range by range, each in its own quantisation: (offset,
        # count, quantisation) in elements (an int8 concat of Layer.keeps_input_scales)
        self.regions: Dict[relax.Var, List[Tuple[int, int, TensorQuant]]] = {}

    @property
    def constants(self) -> Dict[str, np.ndarray]:
        return self.pool.arrays

    def _use_precision(self, precision: str) -> None:
        """Mixed code: the precision of the layer written next."""
        self.precision = precision
        self.storage = np.dtype(STORAGE[precision])
        self.pool.float_dtype = np.float16 if precision == "fp16" else np.float32

    def _outputs(self) -> List[relax.Var]:
        result = self.function.body.body
        fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
        for i, var in enumerate(fields):
            if not isinstance(var, relax.Var):
                raise AccelUnsupportedError(f"{self.short}: output {i} is not a variable")
        return fields

    def _constant(self, array: np.ndarray) -> str:
        return f"k_const[{self.pool.add(array)}]"

    def _temp(self, count: int, free_after: Optional[int] = None, itemsize: int = 0) -> str:
        """Scratch for ``count`` elements (of the function's precision unless ``itemsize``
        says otherwise), live from this layer to ``free_after`` (this layer by default)."""
        size = int(count) * (itemsize or self.storage.itemsize)
        free_after = self.layer_index if free_after is None else free_after
        return f"k_temp[{self.scratch.allocate(size, self.layer_index, free_after)}]"

    def _output(self, var: relax.Var) -> str:
        """The buffer of a layer's output: live until its last reader; never the same buffer
        as this layer's inputs, which are still live while it is allocated."""
        if var not in self.operands:
            self.operands[var] = self._temp(int(np.prod(static_shape(var))),
                                            self.last_use.get(var, self.layer_index))
            self.held[var] = self.precision
        return self.operands[var]

    def _pointer(self, expr: Optional[relax.Expr], scope, reshape=None) -> str:
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
        held = self._held(expr)
        if held is not None:
            return held
        if expr in self.args:  # a function input, converted where it enters
            return self._enter(expr, None)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _held(self, var: relax.Expr) -> Optional[str]:
        """Where ``var`` is held in the current layer's precision, if it is."""
        if var in self.operands and self.held.get(var, self.precision) == self.precision:
            return self.operands[var]
        return self.converted.get(var)

    def _data(self, expr: relax.Expr, scope, key: Key) -> Tuple[str, Optional[TensorQuant]]:
        """Pointer and quantisation of a data tensor in the function's precision (int8: the
        quantisation pass's, ``int8_plan``); ``key`` names the calibration statistics of this
        use, for a function input that enters the code here."""
        if expr in self.inner:
            return self.inner[expr], self.quant.get(expr)
        resolved, value = resolve_operand(expr, scope)
        if value is not None:  # a constant element-wise operand: its own scale
            quant = None
            if self.precision == "int8":
                quant = int8.range_quant(value)
                value = quant.quantize(value)
            return self._constant(value), quant
        held = self._held(resolved)
        if held is not None:
            return held, self.quant.get(resolved)
        if resolved in self.args:
            return self._enter(resolved, key), self.quant.get(resolved)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _enter(self, var: relax.Var, key: Optional[Key]) -> str:
        """A function input converted to the function's precision, once, where it is first
        read; it stays until its last reader."""
        count = int(np.prod(static_shape(var)))
        # int8: the quantisation the int8 pass gave it at this use (``key``; None: a read
        # without one, which int8 code cannot convert)
        quant = self.quant.get(var) if self.precision == "int8" and key is not None else None
        if self.precision == "int8" and quant is None:
            raise AccelInvalidError(f"{self.short}: input {var.name} has no calibration")
        temp = self._temp(count, self.last_use.get(var, self.layer_index))
        if var in self.operands:  # mixed: entered in the other precision already
            self.converted[var] = temp
        else:
            self.operands[var], self.held[var] = temp, self.precision
        self.body.append(f"/* input {var.name} enters as {self.precision} */")
        self.body.append(emit.convert(self.args[var], "fp32", temp, self.precision, count,
                                      *scale_zero(quant)))
        return temp

    def _leave(self, var: relax.Var) -> None:
        """A function output written in the code's precision leaves as fp32 (an int8 one
        with ``regions``: each range with its own quantisation)."""
        if self.precision == "int8" and var in self.args and var in self.regions:
            for offset, count, quant in self.regions[var]:
                self.body.append(emit.convert(
                    f"(int8_t*){self.operands[var]} + {offset}", "int8",
                    f"(float*){self.args[var]} + {offset}", "fp32", count, *scale_zero(quant)))
            return
        if self.precision != "fp32" and var in self.args:
            quant = self.quant[var] if self.precision == "int8" else None
            self.body.append(emit.convert(
                self.operands[var], self.precision, self.args[var], "fp32",
                int(np.prod(static_shape(var))), *scale_zero(quant)))
