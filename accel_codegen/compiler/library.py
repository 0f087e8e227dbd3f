"""Library files: written (the destination checked first, compiler failures shortened), then
checked before any is loaded, so that a damaged or foreign file raises AccelLibraryError
naming it instead of crashing the process inside the dynamic loader: the file type, the ELF
header, program and section tables, segments, the dynamic table and relocations against the
file, and the SHA-256 that export_library appends."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import tvm
import tvm_ffi

from ..errors import AccelLibraryError
from ..sim.config import AccelConfig
from ..sim.cost_report import LayerSources
from .codegen.emit import INFO_SECTION
from .elf import ElfFile, check_dynamic


def check_writable(path: Path) -> None:
    """Refuse, before any compiling, a destination that cannot be written: a directory, a
    path whose directory is missing, or a directory this process cannot create files in."""
    what = f"cannot write library '{path}'"
    if path.is_dir():
        raise AccelLibraryError(f"{what}: it is a directory")
    if path.exists() and not path.is_file():
        raise AccelLibraryError(f"{what}: it exists and is not a regular file")
    directory = path.parent
    if not directory.exists():
        raise AccelLibraryError(f"{what}: directory '{directory}' does not exist")
    if not directory.is_dir():
        raise AccelLibraryError(f"{what}: '{directory}' is not a directory")
    try:  # the one reliable test (root passes os.access; /proc refuses anyway)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".accel-write-test-"):
            pass
    except OSError as error:
        raise AccelLibraryError(f"{what}: directory '{directory}' is not writable "
                                f"({error.strerror or error})") from None


def compiler_message(error: BaseException, max_lines: int = 8) -> str:
    """The compiler's own diagnostics from TVM's compile error, without the command line."""
    text = str(error)
    body = text.split("Command line:", 1)[0]
    body = body.split("Compilation error:", 1)[-1]
    lines = [line.rstrip() for line in body.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    chosen = (errors or lines)[:max_lines]
    more = len(errors or lines) - len(chosen)
    message = " | ".join(chosen) if chosen else type(error).__name__
    return message + (f" (and {more} more lines)" if more > 0 else "")


# --- library files -----------------------------------------------------------------------------

#: export_library appends this marker and the SHA-256 of everything before it to the library
#: (the dynamic loader ignores bytes past the ELF's tables): any later change is detected.
CHECKSUM_MARKER = b"\x00accel-sha256\x00\x01\x00"  # 16 bytes
_TRAILER = len(CHECKSUM_MARKER) + 32


def append_checksum(path: Path, digest: Optional[bytes] = None) -> None:
    """Append the marker and the SHA-256 of the file (``digest``: already computed while the
    file was written; None: read the file for it)."""
    with open(path, "r+b") as f:
        if digest is None:
            sha256 = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                sha256.update(block)
            digest = sha256.digest()
        f.seek(0, os.SEEK_END)
        f.write(CHECKSUM_MARKER + digest)


def check_library(path: str | os.PathLike) -> Path:
    """Check that a file is a shared library this process can load, before the dynamic loader
    sees it: a truncated or damaged file would crash the process inside ``dlopen`` (SIGBUS,
    SIGSEGV) instead of raising.

    Checked: the path is an existing regular file; the ELF header (magic, class, byte order and
    machine of this process, a shared object); the program and section header tables, every
    segment and every section lie inside the file; each section lies where the segments map
    it; the dynamic table lies in a loaded segment, agrees with its section and every address
    it gives lies in the loaded memory. A library written by :func:`export_library` also
    carries the SHA-256 of its content, checked in full: any changed byte is refused.

    Returns
    -------
    pathlib.Path
        The path checked.

    Raises
    ------
    AccelLibraryError
        Naming the file and what is wrong with it.
    """
    path = Path(path)
    name = f"library '{path}'"
    try:
        info = path.stat()
    except FileNotFoundError:
        where = "" if path.is_absolute() else f" (looked for '{Path.cwd() / path}')"
        raise AccelLibraryError(f"{name} does not exist{where}") from None
    except OSError as error:
        raise AccelLibraryError(f"{name} cannot be read: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise AccelLibraryError(f"{name} is a directory, not a library file")
    if not stat.S_ISREG(info.st_mode):
        raise AccelLibraryError(f"{name} is not a regular file")
    try:
        with open(path, "rb") as f:
            elf = ElfFile(f, info.st_size, name)
            elf.header()
            elf.sections()
            elf.segments()
            check_dynamic(elf)
            _check_checksum(elf)
    except OSError as error:
        raise AccelLibraryError(f"{name} cannot be read: {error.strerror or error}") from None
    return path


def _check_checksum(elf: ElfFile) -> None:
    """The SHA-256 export_library appended, when there is one."""
    if elf.size < _TRAILER:
        return
    trailer = elf.read(elf.size - _TRAILER, _TRAILER, "checksum")
    if trailer[:len(CHECKSUM_MARKER)] != CHECKSUM_MARKER:
        return
    digest = hashlib.sha256()
    elf.f.seek(0)
    remaining = elf.size - _TRAILER
    while remaining > 0:
        block = elf.f.read(min(remaining, 1 << 20))
        if not block:
            elf.fail("the file shrank while it was checked")
        digest.update(block)
        remaining -= len(block)
    if digest.digest() != trailer[len(CHECKSUM_MARKER):]:
        elf.fail("its content does not match the SHA-256 export_library recorded (the "
                 "file changed after it was written)")


@dataclasses.dataclass
class LibraryInfo:
    """What a library written by ``export_library`` remembers of its build: the configuration
    its code was generated for, the precision, and each layer's names (the generated
    functions' records in the ELF section ``.accel_info``: ``compiler/codegen/emit.py``).

    ``names``: layer key (``f0.3``) -> the layer's name in the source model (PyTorch module
    path, ONNX node name), for the layers that have one; ``ops``: layer key -> the Relax
    operators the layer computes; ``precisions``: layer key -> its precision."""

    config: AccelConfig
    precision: str
    fuse: bool
    symbols: List[str]
    names: Dict[str, str]
    ops: Dict[str, List[str]]
    precisions: Dict[str, str]

    @property
    def sources(self) -> LayerSources:
        """The layers' operators and names as the reports take them (``prof.table(sources=
        info.sources)``, ``prof.csv(path, sources=info.sources)``)."""
        return LayerSources(self.ops, names=self.names)


def library_info(path: str | os.PathLike) -> Optional[LibraryInfo]:
    """The record of its build that a library carries (:class:`LibraryInfo`), read from the
    file without loading it (checked first: :func:`check_library`); None for a library of no
    generated function (nothing offloaded) or one written before libraries carried it.

    Raises
    ------
    AccelLibraryError
        The file is damaged, or its record is unreadable or contradicts itself (functions of
        different configurations).
    """
    path = check_library(path)
    name = f"library '{path}'"
    with open(path, "rb") as f:
        elf = ElfFile(f, path.stat().st_size, name)
        elf.header()
        elf.sections()
        index = elf.section_names.get(INFO_SECTION)
        if index is None:
            return None
        _, _, _, offset, size, _ = elf.section_list[index]
        data = elf.read(offset, size, f"{INFO_SECTION} section")
    try:
        records = [json.loads(part) for part in data.split(b"\0") if part.strip()]
        configs = {json.dumps(r["config"], sort_keys=True) for r in records}
        if len(configs) > 1:
            raise ValueError("its functions were generated for different configurations")
        precisions = {r["precision"] for r in records}
        layers = {key: layer for r in sorted(records, key=lambda r: r["function"])
                  for key, layer in r["layers"].items()}
        info = LibraryInfo(
            config=AccelConfig.from_dict(records[0]["config"]) if records else None,
            precision=precisions.pop() if len(precisions) == 1 else "mixed",
            fuse=all(r["fuse"] for r in records),
            symbols=[r["symbol"] for r in sorted(records, key=lambda r: r["function"])],
            names={key: layer["source"] for key, layer in layers.items() if layer["source"]},
            ops={key: list(layer["ops"]) for key, layer in layers.items()},
            precisions={key: layer["precision"] for key, layer in layers.items()})
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise AccelLibraryError(f"{name} has an unreadable record of its build "
                                f"({INFO_SECTION}): {error}") from None
    return info if records else None


def load_library(path: str | os.PathLike) -> "tvm.runtime.Module":
    """An exported library as a module, checked first (:func:`check_library`); any failure to
    load is an :class:`AccelLibraryError` naming the file.

    Unlike ``tvm.runtime.load_module``, which adds every module it loads to a process-wide list
    (tvm-ffi's ``keep_module_alive``), the module lives as long as references to it do: when
    the last goes, the library is unloaded and its generated functions release their constants,
    packed weights and scratch (``accel_glue_release``). Otherwise each model built in a
    session would stay in memory to its end (ResNet-50 int8: about 80 MB a build)."""
    path = check_library(path)
    # dlopen reads a name without a slash ("r18.so"; pathlib drops "./" too) as a library to
    # find on the loader's search path, not in the working directory: always hand it an
    # absolute path, the file just checked.
    absolute = os.path.abspath(path)
    try:
        return tvm_ffi.load_module(absolute, keep_module_alive=False)
    except Exception as error:  # dlopen's message (a missing dependency), TVM's own checks
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        raise AccelLibraryError(f"cannot load library '{path}': "
                                f"{lines[0] if lines else type(error).__name__}") from None


# --- the virtual machine -----------------------------------------------------------------------

# TVM's argument checks in a VM function's prologue name the parameter and its annotation:
# "ErrorContext(fn=main, loc=param[0], param=x, annotation=R.Tensor((1, 3), dtype="float32"))
#  match_cast error,  shape[2] mismatch to specified constant."
