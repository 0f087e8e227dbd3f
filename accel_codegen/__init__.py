"""accel-codegen: a BYOC external code generator for Apache TVM targeting a simulated
NVDLA-like accelerator, and the simulator itself.

The simulator (``Device``, ``AccelConfig``, the engine ops) imports without TVM. The compiler
entry points (``partition_for_accel``, ``build``, ...) import TVM on first use: ``import tvm``
takes seconds.
"""
import importlib

try:
    from . import _accel_ffi  # noqa: F401  (the compiled bindings)
except ImportError as error:  # pragma: no cover - a set-up mistake, not a runtime state
    raise ImportError(
        f"accel_codegen's compiled extension is missing from {__path__[0]}: install the "
        "package (pip install .) and import it from there; from the repository root run "
        "`pytest`, not `python -m pytest`, which puts the source tree first") from error
if _accel_ffi.lib.accel_abi_version() != _accel_ffi.lib.ACCEL_ABI_VERSION:  # pragma: no cover
    raise ImportError(  # the bindings and libaccel come from different builds
        f"accel_codegen's libaccel has ABI version {_accel_ffi.lib.accel_abi_version()}, its "
        f"bindings were built against version {_accel_ffi.lib.ACCEL_ABI_VERSION}: install the "
        "package again (pip install .)")

from . import _moved
from .errors import (AccelBufferError, AccelDtypeError, AccelError, AccelInvalidError,
                     AccelLibraryError, AccelMemoryError, AccelNotFoundError, AccelShapeError,
                     AccelUnsupportedError)
from .sim import (AccelConfig, Bdma, Conv, Device, Lrn, OpStats, Pool, Rubik, RunStats, Sdp,
                  estimate_chain)
from .sim.profiling import Profile, profile

_moved.install()  # old import paths (accel_codegen.ops, .config, ...) of moved modules

__version__ = "0.1.0"

# Public name -> the module that defines it, imported on first access (these import tvm);
# a module's own name maps to the module itself.
_LAZY = {
    "partition_for_accel": "flows.pipeline", "partition_report": "flows.pipeline",
    "PartitionReport": "compiler.partition", "generated_sources": "compiler.partition",
    "program_of": "compiler.partition",
    "calibration_of": "compiler.partition", "mixed_precision_of": "flows.pipeline",
    "build": "flows.pipeline", "export_library": "compiler.toolchain",
    "build_host": "compiler.toolchain", "link_options": "compiler.toolchain",
    "virtual_machine": "compiler.vm", "AccelVirtualMachine": "compiler.vm",
    "library_info": "compiler.library", "LibraryInfo": "compiler.library",
    "estimate": "tools.estimation", "EstimateReport": "tools.estimation",
    "accuracy_report": "flows.accuracy", "AccuracyReport": "flows.accuracy",
    "Calibration": "quantization",
    "frontend": "compiler.frontend", "models": "tools.models",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'accel_codegen' has no attribute {name!r}")
    module = importlib.import_module(f".{_LAZY[name]}", __name__)
    return module if _LAZY[name].rpartition(".")[2] == name else getattr(module, name)


__all__ = [
    "AccelConfig", "AccelError", "AccelInvalidError", "AccelShapeError", "AccelDtypeError",
    "AccelUnsupportedError", "AccelBufferError", "AccelMemoryError", "AccelNotFoundError",
    "AccelLibraryError",
    "Conv", "Sdp", "Pool", "Lrn", "Bdma", "Rubik", "Device", "OpStats", "RunStats", "estimate_chain",
    "Profile", "profile", *_LAZY,
]
