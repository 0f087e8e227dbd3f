"""Build and export: a partitioned module to a VM executable whose external functions call the
simulator library, and to a shared library a fresh process loads with nothing but ``tvm``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import tvm
from tvm import relax

from . import _accel_ffi
from .config import AccelConfig
from .errors import AccelInvalidError
from .frontend import bind_params
from .partition import is_partitioned, partition_for_accel
from .quantization import DEFAULT_METHOD

#: Where the compiled parts (the bindings, include/ and lib/) were installed: beside the
#: Python files, except in an editable install, where only the bindings' folder has them.
PACKAGE_DIR = Path(_accel_ffi.__file__).resolve().parent


def link_options() -> List[str]:
    """Compiler and linker flags for the generated C: the ISA header, and libaccel linked by
    name with an rpath. --no-as-needed because TVM puts options before the objects (the library
    would be dropped); -z now so that a missing symbol fails at load, not at the first call."""
    lib_dir = PACKAGE_DIR / "lib"
    return [f"-I{PACKAGE_DIR / 'include'}", "-Wl,--no-as-needed", f"-L{lib_dir}", "-laccel",
            f"-Wl,-rpath,{lib_dir}", "-Wl,-z,now"]


def build(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
          config: AccelConfig | str = "nv_full", fuse: bool = True, precision: str = "fp32",
          calibration=None, calibration_method: str = DEFAULT_METHOD,
          target="llvm") -> "tvm.runtime.Executable":
    """Partition (unless partitioned already) and compile a module.

    Parameters
    ----------
    mod, params, config, fuse, precision, calibration, calibration_method
        As for :func:`accel_codegen.partition_for_accel`: int8 needs ``calibration``, an
        iterable of example input tuples (or a Calibration).
    target : str or dict
        The host target for the ops that stay on the host.

    Returns
    -------
    tvm.runtime.Executable
        Run it with :func:`virtual_machine`, or export it with :func:`export_library`.
    """
    if is_partitioned(mod):
        if params:
            raise AccelInvalidError("bind params before partitioning: the module is partitioned")
    else:
        mod = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                  calibration=calibration,
                                  calibration_method=calibration_method)
    return tvm.compile(mod, target=target)


def export_library(exe: "tvm.runtime.Executable", path: str | os.PathLike) -> Path:
    """Write a shared library that ``tvm.runtime.load_module(path)`` loads in a fresh process.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    path = Path(path)
    if path.suffix != ".so":
        raise AccelInvalidError(f"export path {str(path)!r} must end in .so")
    exe.export_library(str(path), options=link_options())
    return path


def virtual_machine(exe_or_path, device=None) -> relax.VirtualMachine:
    """A VM for an executable (JIT-linked against the simulator), an exported library's path,
    or a loaded module."""
    device = device if device is not None else tvm.cpu()
    if isinstance(exe_or_path, (str, os.PathLike)):
        module = tvm.runtime.load_module(str(exe_or_path))
    elif hasattr(exe_or_path, "jit"):
        module = exe_or_path.jit(options=link_options())
    else:  # a loaded runtime module
        module = exe_or_path
    return relax.VirtualMachine(module, device)


def build_host(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None,
               target="llvm") -> "tvm.runtime.Executable":
    """TVM's own CPU build of the same module (the baseline): batch norm in inference form,
    decomposed by TVM."""
    mod = bind_params(mod, params) if params else mod
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return tvm.compile(mod, target=target)
