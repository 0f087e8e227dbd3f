"""Stable codes for the reasons an operator stays on the host, beside their sentences.

The partition report says in a sentence why each host operator stays there; the sentence names
the values (the op, the attribute, the configuration) and its wording may improve. A script
that counts or filters reasons reads the code instead, which does not change: one of
:data:`REASON_CODES`, the first whose pattern the sentence matches (docs/report-schema.md
lists them). A sentence no pattern matches is ``other``: a new kind of reason, for which a
code is added here (tests/compiler/test_reason_codes.py holds the reasons the zoo's models
give on the presets to their codes).
"""
from __future__ import annotations

import re
from typing import Optional, Tuple

#: (code, what it means, the pattern of the reason sentences it stands for), in matching order.
REASON_CODES: Tuple[Tuple[str, str, str], ...] = (
    ("no-primitive", "the accelerator has no primitive for the operator",
     r"^no accelerator primitive for|is not an accelerator op"),
    ("runtime-shape", "a shape known only at run time (a shape check, a symbolic dimension)",
     r"match_cast|symbolic shape|no static tensor shape"),
    ("config-lacks-precision", "the configuration does not have the precision",
     r"precision \S+ is not supported by configuration"),
    ("config-lacks-engine", "the configuration lacks an engine, unit or feature the operator "
     "needs", r"has no \w+ engine|which \S+ lacks|ACCEL_FEATURE|configuration \S+ has no"),
    ("config-limit", "a size beyond one of the configuration's or the ISA's limits",
     r"exceeds|more than|at most|beyond|too large|too many|ACCEL_MAX"),
    ("not-constant", "a weight or parameter computed at run time where the code needs a "
     "constant", r"is not a constant"),
    ("precision", "the operator is not generated in this precision (int8, fp16)",
     r"int8|INT8|fp16|FP16|in this precision"),
    ("layout", "a tensor layout or rank the engines do not read (they take NCHW or [N, C])",
     r"NCHW|\d-D|layout|batched matmul|\[N, C\]|channel shuffle|not a flatten|axis|axes"),
    ("chain-order", "the chain's operators in an order or number the engines' pipeline "
     "cannot run", r"another order|is the last engine|two activations|a second |two bias|"
     r"after pooling|before batch norm|after a bias|after batch norm|after conv2d_transpose|"
     r"computed inside the matched region|nothing for the engines to do"),
    ("left-by-partitioner", "supported alone, but its neighbours kept it out of a region",
     r"left on the host by the partitioner"),
    ("dtype", "a data type the simulator does not run", r"dtype"),
    ("unsupported-attribute", "an attribute value of the operator the engine does not have "
     "(dilation, padding, mode, window, ...)",
     r" with | is \S+; | other than |not one value per channel|windows differ|has no "
     r"factors|no int8 converter|takes|gives"),
)

#: The code of a sentence no pattern matches.
OTHER = "other"

_COMPILED = tuple((code, re.compile(pattern)) for code, _, pattern in REASON_CODES)

#: A reason of int8 calibration's fp32 build: the code is that of the reason after it.
_CALIBRATION_PREFIX = "int8 calibration runs it in fp32: "


def reason_code(reason: Optional[str]) -> Optional[str]:
    """The stable code of a host reason sentence (None for None)."""
    if reason is None:
        return None
    text = reason.removeprefix(_CALIBRATION_PREFIX)
    for code, pattern in _COMPILED:
        if pattern.search(text):
            return code
    return OTHER


def coded_reason(reason: str, code: Optional[str] = None) -> str:
    """A host reason as every report prints it: its stable code in brackets first
    (``reason_code``'s unless ``code`` is given), then the sentence."""
    return f"[{reason_code(reason) if code is None else code}] {reason}"


def codes() -> Tuple[str, ...]:
    """Every code, :data:`OTHER` last."""
    return tuple(code for code, _, _ in REASON_CODES) + (OTHER,)
