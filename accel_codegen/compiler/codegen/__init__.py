"""``relax.ext.accel``: the external code generator. Each offloaded Relax function becomes C
source that fills engine descriptors (``accel/accel.h``) and calls the simulator's runtime
through the fixed glue of ``accel/tvm_glue.h``.

Precisions: fp32 as the model is. fp16 and int8 store every tensor of the function in that
precision: inputs are converted where they enter (``accel_convert``), outputs where they leave,
so TVM's graph around the call stays fp32. int8 quantises weights per output channel with batch
norm (and any per-channel scale) folded in first, and encodes every layer's requantisation as
the SDP's integer converters, from the activation scales of a :class:`Calibration`.

RunCodegen calls the registered function with the partitioned functions. Per function it emits
one C source module exporting ``__tvm_ffi_<symbol>`` (the tvm-ffi C ABI, destination-passing
style: inputs in parameter order, then outputs) and ``__tvm_ffi___init_<symbol>``, which the
constant loader calls once with the function's constants. Constants are the codegen's own: conv
weights as they are, and batch norm with any conv bias folded into one per-channel scale and one
shift at compile time (the two adds become one). Where those parameters are runtime inputs, the
generated code folds them on every call with the same library routine.

Registration is explicit: :func:`collecting` registers the generator for one RunCodegen and
hands back what it generated; :func:`register` registers it for a caller that runs RunCodegen
itself.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tvm

from ...errors import AccelMemoryError, register_with_tvm_ffi
from ...quantization import Calibration, TensorQuant
from .folding import fold_batch_norm  # noqa: F401  (part of this package's interface)
from .function import FunctionCodegen
from .int8_plan import quantize_int8
from .planning import plan_program
from ...sim.labels import run_key
from ..engines import fp16_runner
from ..program import lower_functions
from ..target import LayerPlan, Target

#: The global function RunCodegen calls for functions annotated ``Codegen="accel"``.
GLOBAL_NAME = "relax.ext.accel"


@dataclasses.dataclass
class Generated:
    """What one RunCodegen produced, for the build step and for inspection."""

    sources: Dict[str, str] = dataclasses.field(default_factory=dict)  # symbol -> C source
    constants: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # name -> array
    # int8: (run key, op index) -> the quantisation of every tensor the runs read or write,
    # keyed as the observer reports them
    quantization: Dict[Tuple[str, int], TensorQuant] = dataclasses.field(default_factory=dict)
    # run key -> its CONV's mode ("direct", "winograd"), chosen with the memory plan
    conv_modes: Dict[str, str] = dataclasses.field(default_factory=dict)
    # the planned Program the code was printed from, as JSON data (``Program.to_dict``; the
    # functions of every call, in order)
    program: Dict[str, object] = dataclasses.field(default_factory=dict)
    # layer key -> why int8 code runs it in fp16 (``program.Call.fp16_reason``), for the layers
    # of int8 and mixed code that run in fp16 in every assignment
    fp16_reasons: Dict[str, str] = dataclasses.field(default_factory=dict)


def generate(functions, options, into: Generated) -> List:
    """C source modules for ``functions`` (one per function), recording them in ``into``."""
    options = dict(options) if options is not None else {}
    target = Target.from_options(options)  # the build's options, as the partition made them
    calibration = Calibration.from_json(str(options["calibration"])) \
        if "calibration" in options else None
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    modules = []
    functions = list(functions)
    # the functions' runs, lowered once, planned by the passes (int8: quantised from the
    # calibration), then printed as C
    program = quantize_int8(plan_program(lower_functions(
        functions, len(into.sources), target.code, target.layer_precisions,
        fp16_runner(target.config, target.fuse)), target), calibration)
    if program.mixed and not target.mixed:
        # int8 code whose norms, softmaxes and attention cores run in fp16 (program.py): the
        # mixed code of that assignment, one definition of converting runs and borders
        target = target.replace(precision=LayerPlan.of(program.layer_precisions))
    if program.mixed:
        into.fp16_reasons.update({run_key(f.index, i): c.fp16_reason
                                  for f in program.functions for i, c in enumerate(f.calls)
                                  if c.fp16_reason is not None})
    into.conv_modes.update({run.key: run.memory.conv.mode for run in program.runs
                            if run.memory.conv is not None})
    described = program.to_dict()
    into.program.setdefault("precision", described["precision"])
    into.program.setdefault("layer_precisions", described["layer_precisions"])
    into.program.setdefault("functions", []).extend(described["functions"])
    for function, lowered in zip(functions, program.functions):
        gen = FunctionCodegen(function, target, len(into.sources), calibration, lowered)
        source = gen.run()
        into.sources[gen.symbol] = source
        into.constants.update(gen.constants)
        into.quantization.update(gen.quantization)
        modules.append(create(source, "c", [gen.symbol], list(gen.constants)))
    return modules


def register(into: Optional[Generated] = None) -> None:
    """Register the generator as ``relax.ext.accel`` (``into`` collects what it generates;
    default: a fresh record per call, dropped), and accel_codegen's exceptions with tvm-ffi so
    that they reach the caller with their class."""
    register_with_tvm_ffi()

    def entry(functions, options, constant_names):
        del constant_names  # the codegen names its own (folded) constants
        try:
            return generate(functions, options, Generated() if into is None else into)
        except MemoryError as error:  # NumPy's too: a layer whose constants outgrow the host
            raise AccelMemoryError(f"code generation ran out of host memory: {error}") \
                from error

    tvm.register_global_func(GLOBAL_NAME, entry, override=True)


_LOCK = threading.Lock()


@contextlib.contextmanager
def collecting() -> Iterator[Generated]:
    """Register the generator for the block and yield what it generates there (one block at a
    time in the process: the global registry has one ``relax.ext.accel``)."""
    with _LOCK:
        generated = Generated()
        register(generated)
        try:
            yield generated
        finally:
            register()
