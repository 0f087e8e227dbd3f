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

from ..errors import AccelInvalidError, AccelLibraryError
from .frontend import bind_params
from .library import append_checksum, check_writable, compiler_message
from .link import create_shared, link_options

# Loading and running a library live in .library and .vm; their names stay importable here.
from .library import CHECKSUM_MARKER, check_library, load_library  # noqa: E402,F401,I001
from .vm import AccelVirtualMachine, virtual_machine  # noqa: E402,F401,I001


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
        exe.export_library(str(path), fcompile=create_shared,
                           options=link_options())
    except Exception as error:  # TVM's RuntimeError with the whole compiler command line
        raise AccelLibraryError(f"cannot build library '{path}': "
                                f"{compiler_message(error)}") from None
    try:
        append_checksum(path)
    except OSError as error:
        raise AccelLibraryError(f"cannot write library '{path}': "
                                f"{error.strerror or error}") from None
    return path


def build_host(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None,
               target="llvm") -> "tvm.runtime.Executable":
    """TVM's own CPU build of the same module (the baseline): batch norm in inference form,
    decomposed by TVM."""
    mod = bind_params(mod, params) if params else mod
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return tvm.compile(mod, target=target)
