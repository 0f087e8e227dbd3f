"""How generated code is compiled and linked against the simulator library."""
from __future__ import annotations

from pathlib import Path
from typing import List

from .. import _accel_ffi

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
