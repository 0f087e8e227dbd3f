"""Export: a built module to a shared library a fresh process loads with nothing but ``tvm``,
and TVM's own host build (the baseline). ``build`` (partition, then compile to a VM executable
whose external functions call the simulator library) is a flow:
:mod:`accel_codegen.flows.pipeline`. Loading and checking library files is :mod:`.library`; the
thread-safe VM is :mod:`.vm`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import tvm
from tvm import relax

from ..errors import AccelInvalidError, AccelLibraryError, register_with_tvm_ffi
from .frontend import bind_params
from .library import append_checksum, check_writable, compiler_message
from .link import create_shared, link_options
from .packed_imports import write_library

# Loading and running a library live in .library and .vm; their names stay importable here.
from .library import CHECKSUM_MARKER, check_library, load_library  # noqa: E402,F401,I001
from .vm import AccelVirtualMachine, virtual_machine  # noqa: E402,F401,I001
from .vm import jit_with_simulator  # noqa: E402,I001


def export_library(exe: "tvm.runtime.Executable", path: str | os.PathLike) -> Path:
    """Write a shared library that ``tvm.runtime.load_module(path)`` loads in a fresh process.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    AccelInvalidError
        ``path`` does not end in ``.so``, or ``exe`` is not an executable.
    AccelLibraryError
        The destination is a directory, its directory is missing or not writable, or the C
        compiler failed (the message keeps the compiler's error lines).
    """
    path = Path(path)
    if path.suffix != ".so":
        raise AccelInvalidError(f"export path {str(path)!r} must end in .so")
    if not hasattr(exe, "export_library"):
        raise AccelInvalidError(f"export_library takes the executable build() returns, got "
                                f"{type(exe).__name__}")
    check_writable(path)
    try:
        digest = write_library(exe.mod, path)
    except AccelLibraryError:
        raise
    except Exception as error:  # TVM's RuntimeError with the whole compiler command line
        raise AccelLibraryError(f"cannot build library '{path}': "
                                f"{compiler_message(error)}") from None
    try:
        append_checksum(path, digest)
    except OSError as error:
        raise AccelLibraryError(f"cannot write library '{path}': "
                                f"{error.strerror or error}") from None
    return path


class AccelExecutable(tvm.runtime.Executable):
    """What ``build`` returns: TVM's executable, whose own ``jit`` and ``export_library`` link
    the simulator library in, so that it runs as any ``tvm.compile`` result does
    (``relax.VirtualMachine(exe, tvm.cpu())``, ``exe.export_library("m.so")``). TVM's defaults
    would compile the generated C without the library's headers and fail in the C compiler.
    A caller's own ``fcompile`` (or other export options) is TVM's path, left as it is."""

    def jit(self, *, fcompile=None, addons=None, force_recompile=False, **kwargs):
        if fcompile is not None or addons or kwargs:
            return super().jit(fcompile=fcompile, addons=addons,
                               force_recompile=force_recompile, **kwargs)
        if force_recompile:
            self._jitted_mod = None
        register_with_tvm_ffi()  # errors raised by the generated code arrive typed
        return jit_with_simulator(self)

    def export_library(self, file_name, *, fcompile=None, addons=None, workspace_dir=None,
                       **kwargs):
        if fcompile is None and not addons and workspace_dir is None and not kwargs \
                and str(file_name).endswith(".so"):
            return export_library(self, file_name)  # checked on load, errors typed
        if fcompile is None:
            fcompile = create_shared
            kwargs["options"] = link_options() + list(kwargs.get("options") or [])
        return super().export_library(file_name, fcompile=fcompile, addons=addons,
                                      workspace_dir=workspace_dir, **kwargs)


def build_host(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None,
               target="llvm") -> "tvm.runtime.Executable":
    """TVM's own CPU build of the same module (the baseline): batch norm in inference form,
    decomposed by TVM."""
    mod = bind_params(mod, params) if params else mod
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return tvm.compile(mod, target=target)
