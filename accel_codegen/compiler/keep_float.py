"""Layers kept out of int8 by name: an int8 build whose chosen layers run in fp16.

A user who finds (with ``accel-codegen debug``) the layers that break an int8 model's accuracy
names them as the source model does (``layer1.0.conv1``, a module ``layer4`` for every layer
under it, an ONNX node name: :mod:`.source_names`), or by their keys (``f0.3``); those layers
run in fp16 and the rest in int8, which is the mixed int8/fp16 build with that assignment
(docs/mixed-precision.md), so the configuration must have both precisions.
"""
from __future__ import annotations

import fnmatch
from typing import Dict, Iterable, List

import tvm

from ..errors import AccelInvalidError
from ..sim.labels import run_key
from .source_names import compress, layer_op_names
from .walk import external_calls


def layer_source_names(matched: tvm.IRModule) -> Dict[str, List[str]]:
    """Layer key (``f0.3``) -> the source-model names of its operators, in order, of a
    pattern-matched module (empty lists for a module without source names)."""
    result: Dict[str, List[str]] = {}
    for function, (_, external) in enumerate(external_calls(matched)):
        for index, names in enumerate(layer_op_names(external)):
            result[run_key(function, index)] = [n for n in names if n]
    return result


def _matches(pattern: str, name: str) -> bool:
    """``name`` is ``pattern``, lies under it (a module path or an ONNX node path), or matches
    it as a shell-style wildcard."""
    return name == pattern or name.startswith(pattern + ".") or \
        name.startswith(pattern.rstrip("/") + "/") or \
        (any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(name, pattern))


def keep_float_precisions(matched: tvm.IRModule, names: Iterable[str]) -> Dict[str, str]:
    """The mixed build's assignment that keeps the layers ``names`` designates in fp16 and
    runs every other in int8: layer key -> "fp16" or "int8". A name designates a layer when
    it is its key, its source name as the reports show it (``features.{0,1,2}``), or the name
    of one of its operators or a module above one (:func:`_matches`).

    Raises
    ------
    AccelInvalidError
        If ``names`` is a bare string or empty, or a name designates no layer (the message
        lists some of the layers' names).
    """
    if isinstance(names, str):
        raise AccelInvalidError(f"keep_float must be a list of layer names, got the string "
                                f"{names!r} (write [{names!r}])")
    names = list(names)
    if not names:
        raise AccelInvalidError("keep_float is empty: give the names of the layers to keep "
                                "in fp16")
    sources = layer_source_names(matched)
    chosen = {key: "int8" for key in sources}
    for pattern in names:
        if not isinstance(pattern, str) or not pattern:
            raise AccelInvalidError(f"keep_float: {pattern!r} is not a layer name")
        hits = [key for key, ops in sources.items()
                if pattern in (key, compress(ops)) or any(_matches(pattern, op) for op in ops)]
        if not hits:
            known = sorted({op for ops in sources.values() for op in ops})
            listed = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
            raise AccelInvalidError(
                f"keep_float: {pattern!r} names no accelerator layer of the model (its layers' "
                f"source names: {listed or 'none: the module carries no source names'}; or "
                f"their keys, f0.0 to {list(sources)[-1] if sources else 'f0.0'})")
        for key in hits:
            chosen[key] = "fp16"
    return chosen
