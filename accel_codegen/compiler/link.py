"""How generated code is compiled and linked against the simulator library."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import List, Optional, Sequence

from .. import _accel_ffi
from ..errors import AccelLibraryError

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


def c_compiler() -> Optional[str]:
    """The C compiler for generated code: $CC, else gcc or cc on the PATH (None: none
    found, TVM's default is used). $CC names one executable (TVM runs it without a shell):
    one that is not on the PATH is an AccelLibraryError saying so."""
    cc = os.environ.get("CC")
    if not cc:
        return shutil.which("gcc") or shutil.which("cc")
    if shutil.which(cc) is None:
        raise AccelLibraryError(f"$CC ('{cc}') is not an executable C compiler: set it to "
                                f"one program (no options), or unset it to use gcc")
    return cc


def create_shared(output: str, objects: Sequence[str] | str, options=None, cc=None, **kwargs):
    """TVM's ``tvm.support.cc.create_shared`` (the ``fcompile`` of ``export_library``), with
    the C compiler where every file is C source or an object, as the generated code's are.
    TVM's default, g++ (or $CXX), compiles the C as C++: about three times the time for the
    same library (the same exported symbols, which are ``extern "C"`` either way, and the
    same bits: tests/compiler/test_build_time.py), the most of a small model's build."""
    from tvm.support import cc as tvm_cc

    files = [objects] if isinstance(objects, str) else list(objects)
    if cc is None and files and all(str(f).endswith((".c", ".o")) for f in files):
        cc = c_compiler()
    return tvm_cc.create_shared(output, objects, options, cc=cc, **kwargs)


def _target_triple() -> str:
    """The C compiler's target triple (``-dumpmachine``), as TVM's own ``create_shared``
    reports it: with it, ``export_library`` packs the constants into an object through LLVM;
    without it, into a C array (devc.c) that the C compiler takes minutes and gigabytes to
    compile for a model of 60 M weights."""
    from tvm.support import cc as tvm_cc

    return tvm_cc.get_target_by_dump_machine(c_compiler() or tvm_cc.get_cc())()


create_shared.output_format = "so"
create_shared.get_target_triple = _target_triple
