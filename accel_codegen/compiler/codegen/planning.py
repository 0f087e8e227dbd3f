"""The planning passes over a Program, in the order the code generator runs them: each conv
run's modes (:func:`~.memory.choose_conv_modes`), its emitted weights, folded, halved or
quantised once (:func:`~.weights.quantize`), the memory plan and with it each conv's mode
(:func:`~.memory.plan_memory`), the fp32 layouts (:func:`~.layouts.plan_layouts`). Each sets
fields of the runs (``Run.conv_modes``, ``weights``, ``memory``, ``in_layout``...), which the
code generator reads."""
from __future__ import annotations

from ...sim.config import AccelConfig
from ..program import Program
from . import layouts
from .memory import choose_conv_modes, plan_memory
from .weights import quantize


def plan_program(program: Program, config: AccelConfig, fuse: bool,
                 winograd: bool = True) -> Program:
    """``program`` with every planning pass's choices set on its runs (``winograd``: the
    conv-mode policy: False keeps every convolution direct)."""
    choose_conv_modes(program, config, fuse, winograd)
    quantize(program, fuse)
    plan_memory(program, config, fuse)
    layouts.plan_layouts(program, config, fuse)
    return program
