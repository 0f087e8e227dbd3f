"""The planning passes over a Program, in the order the code generator runs them: the residual adds of token tensors on their surfaces
(:func:`~.passes.plan_surface_adds`), each conv
run's modes (:func:`~.memory.choose_conv_modes`), its emitted weights, folded, halved or
quantised once (:func:`~.weights.quantize`), the memory plan and with it each conv's mode
(:func:`~.memory.plan_memory`), the fp32 layouts (:func:`~.layouts.plan_layouts`). Each sets
fields of the runs (``Run.conv_modes``, ``weights``, ``memory``, ``in_layout``...), which the
code generator reads."""
from __future__ import annotations

from ..program import Program
from ..target import Target
from . import layouts
from .memory import choose_conv_modes, plan_memory
from .passes import plan_surface_adds
from .weights import quantize


def plan_program(program: Program, target: Target) -> Program:
    """``program`` with every planning pass's choices set on its runs, for ``target``'s
    configuration, fusion and conv-mode policy (``winograd`` False keeps every convolution
    direct)."""
    config, fuse = target.config, target.fuse
    plan_surface_adds(program)
    choose_conv_modes(program, config, fuse, target.winograd)
    quantize(program, fuse)
    plan_memory(program, config, fuse)
    layouts.plan_layouts(program, config, fuse)
    return program
