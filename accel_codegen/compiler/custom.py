"""Custom primitives: keep a user's custom PyTorch module as one op through import, and offload
it when the accelerator has a primitive for it.

A module whose ``forward`` calls a torch custom op (``torch.library.custom_op``) stays one node
in ``torch.export``. Registering a primitive for that op gives the importer a converter (the
op becomes ONE ``call_tir`` of a TE host implementation, so it still runs on TVM's host path
when it is not offloaded) and gives the partitioner a pattern and the engine stages that run
it::

    register_primitive(
        "scale_shift_relu", torch_op="scale_shift_relu.default",
        host_compute=lambda x, s, b: topi.nn.relu(x * topi.reshape(s, (1, -1, 1, 1)) + ...),
        stages=lambda x, s, b: {"sdp": SdpSpec(scale=s, bias=b, act="relu")})
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

from tvm import relax

from ..errors import AccelInvalidError
from .layer import ConvSpec, PoolSpec, SdpSpec  # noqa: F401  (the stage vocabulary)

PRIMFUNC_PREFIX = "accel_custom_"


@dataclasses.dataclass(frozen=True)
class Primitive:
    """A registered custom primitive.

    Attributes
    ----------
    name : str
        The primitive's name: its composite is ``accel.custom.<name>``.
    torch_op : str
        The converter key of the torch custom op (``"<op>.default"`` for ``ns::op``).
    host_compute : callable
        ``(*te_tensors) -> te.Tensor``: the op in TE, the host implementation.
    stages : callable
        ``(*relax_args) -> dict``: the engine stages that compute it, as keyword parts of a
        layer: ``conv`` (ConvSpec), ``sdp`` (SdpSpec), ``pool`` (PoolSpec), and optionally
        ``data`` (the feature input; the first argument by default).
    """

    name: str
    torch_op: str
    host_compute: Callable
    stages: Callable

    @property
    def primfunc(self) -> str:
        return PRIMFUNC_PREFIX + self.name


_REGISTRY: Dict[str, Primitive] = {}


def register_primitive(name: str, *, torch_op: str, host_compute: Callable,
                       stages: Callable) -> Primitive:
    """Register (or replace) a custom primitive; see :class:`Primitive`."""
    if not name.isidentifier():
        raise AccelInvalidError(f"primitive name {name!r} must be an identifier")
    primitive = Primitive(name, torch_op, host_compute, stages)
    _REGISTRY[name] = primitive
    return primitive


def unregister_primitive(name: str) -> None:
    _REGISTRY.pop(name, None)


def registered() -> Dict[str, Primitive]:
    return dict(_REGISTRY)


def find(primfunc_name: str) -> Optional[Primitive]:
    """The primitive a call_tir callee belongs to (emit_te may add a numeric suffix)."""
    for primitive in _REGISTRY.values():
        if primfunc_name == primitive.primfunc or (
                primfunc_name.startswith(primitive.primfunc) and
                primfunc_name[len(primitive.primfunc):].isdigit()):
            return primitive
    return None


def convert_map() -> Dict[str, Callable]:
    """Converters for ``from_exported_program``: each registered op becomes one call_tir."""
    def converter(primitive: Primitive):
        def convert(node, importer) -> relax.Expr:
            args = importer.retrieve_args(node)
            return importer.block_builder.emit_te(primitive.host_compute, *args,
                                                  primfunc_name_hint=primitive.primfunc)
        return convert

    return {p.torch_op: converter(p) for p in _REGISTRY.values()}
