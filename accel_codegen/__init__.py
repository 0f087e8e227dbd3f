"""accel-codegen: a BYOC external code generator for Apache TVM targeting a simulated
NVDLA-like accelerator, and the simulator itself.

The simulator (``Device``, ``AccelConfig``, the engine ops) imports without TVM. The compiler
entry points (``partition_for_accel``, ``build``, ...) import TVM on first use: ``import tvm``
takes seconds.
"""
import importlib

from .config import AccelConfig
from .errors import (AccelBufferError, AccelError, AccelInvalidError, AccelMemoryError,
                     AccelNotFoundError, AccelShapeError, AccelUnsupportedError)
from .ops import Conv, Pool, Sdp
from .profiling import Profile, profile
from .sim import Device, OpStats, RunStats, estimate_chain

__version__ = "0.1.0"

# Public name -> the module that defines it, imported on first access (these import tvm).
_LAZY = {
    "partition_for_accel": "partition", "partition_report": "partition",
    "PartitionReport": "partition", "generated_sources": "partition",
    "build": "toolchain", "export_library": "toolchain", "virtual_machine": "toolchain",
    "build_host": "toolchain", "link_options": "toolchain",
    "frontend": None, "models": None,
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'accel_codegen' has no attribute {name!r}")
    module = importlib.import_module(f".{_LAZY[name] or name}", __name__)
    return module if _LAZY[name] is None else getattr(module, name)


__all__ = [
    "AccelConfig", "AccelError", "AccelInvalidError", "AccelShapeError",
    "AccelUnsupportedError", "AccelBufferError", "AccelMemoryError", "AccelNotFoundError",
    "Conv", "Sdp", "Pool", "Device", "OpStats", "RunStats", "estimate_chain",
    "Profile", "profile", *_LAZY,
]
