"""Walking a partitioned module: main -> external functions -> composites -> layers -> runs.

The walk is :mod:`.program`'s (the Program built once after matching); these names stay for
the callers that want the runs alone.
"""
from __future__ import annotations

from typing import Iterator, Mapping, Optional

import tvm

from .program import (Run, composite_calls, converted_outputs, external_calls,  # noqa: F401
                      layer_of, layer_runs, layer_sources, lower_module)


def runs(mod: tvm.IRModule, precisions: Optional[Mapping[str, str]] = None,
         precision: str = "fp32") -> Iterator[Run]:
    """Every accelerator run of a partitioned (or pattern-matched) module, in execution order,
    named as the generated code names it. ``precisions``: mixed int8/fp16 code, each layer's
    precision by its key (``f0.3``); the runs then carry their precision, and a converting
    run follows each layer whose output a layer of the other precision reads. ``precision``:
    the build's otherwise (a layer norm's passes depend on it)."""
    program = lower_module(mod, "mixed" if precisions is not None else precision, precisions)
    return iter(program.runs)
