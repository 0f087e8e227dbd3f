"""The names of accelerator runs: the simulator's profile and observer key every run by its
label; generated code labels its runs this way, and the calibration statistics, the estimate
and the accuracy report read them back::

    f<function>.<layer>[a|b|c<i>|p<i>] <primitive>[ (branch)]

``f2.5`` is the sixth layer of the third external function; a layer with a residual branch (a
conv + batch norm feeding its element-wise op) makes two runs, the branch ``f2.5a`` first, then
``f2.5b``; a concat or channel shuffle makes one BDMA run per copy, ``f2.5c0``, ``f2.5c1``, ...
A transposed convolution or nearest upsampling writes its output's phases (its conv ``f2.5``,
or its copies ``f2.5c0``, ...), then its RUBIK contract ``f2.5r`` rearranges them. An int8
concat along a later axis (a detection head's [N, C, L] along L) copies each input's codes
(``f2.5c0``, ...), then one SDP pass ``f2.5q`` rescales them to the concat's scale.
A layer norm makes one run per engine pass (its dense layer's CONV first, if it has one),
``f2.5p0``, ``f2.5p1``, ..., each labelled ``<primitive>:<pass>`` (``accel.layer_norm:
layer_norm.center``; a halving tree's passes end in their level, ``layer_norm.var.add2``,
other repeated passes in their number, ``softmax.newton.step1``: each label names one pass). In mixed int8/fp16 code, ``f2.5x convert`` converts layer 5's output to the other precision
for the layers that read it in that one.
The part before the space is the run's *key*; its ``f<function>.<layer>`` the layer's.
"""
import re
from typing import Tuple

#: The key part of a layer's RUBIK contract run (after its conv or copies).
CONTRACT_PART = "r"
#: The key part of the SDP pass that rescales an int8 concat along a later axis (after its
#: copies): each position to the concat's scale.
RESCALE_PART = "q"
#: The key part and primitive of the run that converts a layer's output (mixed precision).
CONVERT_PART = "x"
CONVERT_PRIMITIVE = "convert"


def run_key(function: int, layer: int, part: str = "") -> str:
    """The key of a run: ``f<function>.<layer>`` plus "a" (a branch), "b" (after one),
    "c<i>" (copy i of several), "r" (a RUBIK contract) or "q" (an int8 concat's rescale)."""
    return f"f{function}.{layer}{part}"


def copy_part(index: int) -> str:
    """The key part of copy ``index`` of a layer that makes one BDMA run per copy."""
    return f"c{index}"


def pass_part(index: int) -> str:
    """The key part of run ``index`` of a layer decomposed into engine passes (a layer norm)."""
    return f"p{index}"


#: What separates a pass run's primitive from its role (``accel.layer_norm:layer_norm.center``):
#: a layer's primitive is a dotted name and never holds it.
PASS_SEPARATOR = ":"


def pass_primitive(primitive: str, role: str) -> str:
    """The primitive a pass run is labelled with: the layer's and the pass's role."""
    return f"{primitive}{PASS_SEPARATOR}{role}"


def split_pass_primitive(primitive: str) -> Tuple[str, str]:
    """The layer's primitive and the pass's role of a run's primitive (:func:`pass_primitive`
    undone): ``"accel.layer_norm:layer_norm.center"`` -> ``("accel.layer_norm",
    "layer_norm.center")``; a run that is not a pass: ``(primitive, "")``."""
    layer, _, role = primitive.partition(PASS_SEPARATOR)
    return layer, role


def is_pass_label(label: str) -> bool:
    """Whether a run's label (or primitive) is an engine pass's (:func:`pass_primitive`)."""
    return PASS_SEPARATOR in label


#: A repeated pass's number at the end of its role (a halving tree's level ``add2``, a Newton
#: step's ``step1``): after a name, so a role's own digits elsewhere stay.
_PASS_NUMBER = re.compile(r"(?<=[A-Za-z_])\d+$")


def pass_kind(role: str) -> str:
    """A pass's role without its number, the kind its repeats share:
    ``"layer_norm.var.add2"`` -> ``"layer_norm.var.add"``, ``"softmax.newton.step1"`` ->
    ``"softmax.newton.step"``; a role without one is itself."""
    return _PASS_NUMBER.sub("", role)


def run_label(key: str, primitive: str, branch: bool = False) -> str:
    """The label a run carries: its key and primitive (and "(branch)" for a branch)."""
    return f"{key} {primitive}{' (branch)' if branch else ''}"


def label_key(label: str) -> str:
    """``"f0.3a accel.conv2d_bn (branch)"`` -> ``"f0.3a"``."""
    return label.split(" ", 1)[0]


def layer_key(key_or_label: str) -> str:
    """The key of the layer a run belongs to: ``"f0.3a"`` (or its label) -> ``"f0.3"``."""
    return re.match(r"f\d+\.\d+", key_or_label).group(0)
