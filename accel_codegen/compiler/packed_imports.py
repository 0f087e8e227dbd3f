"""The imports' blob of a library (TVM's serialised modules: the VM's bytecode and constants,
the generated C), written into the file once.

TVM's ``export_library`` packs the blob into an object file through LLVM and hands it to the
linker, which copies it into the library: several times the blob in fresh memory (LLVM's
copies of the constant, the object file, the linker's output), most of the export's time for
a large model (ViT-B/16's 355 MB: docs/transformer_ops.md, "Build time: the blob written
once, in pieces"). Here the linker sees only a
zero-filled array of the blob's size (``.bss``, which takes no room in the file), and the
linked library is then rewritten once, with the blob's bytes where that array lies: its
segment reads them from the file instead of zero-filling them, and the tables that followed
the segment in the file move past it. The dynamic loader maps the same memory either way and
TVM finds the blob by the same symbol.

The rewrite takes the layout every ELF linker gives a 64-bit little-endian shared library:
the array in the zero-filled tail of the last loadable segment, nothing loaded after it in the
file. Any other layout (another linker's, another object format) is refused with
:class:`BlobLayoutError`, and the caller exports with TVM's own packing instead.
"""
from __future__ import annotations

import hashlib
import io
import os
import struct
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import AccelLibraryError
from .elf import _PT_LOAD, _SHF_ALLOC, _SHF_TLS, _SHT_DYNSYM, _SHT_NOBITS, ElfFile
from .link import create_shared, link_options


def blob_symbol() -> str:
    """The symbol TVM's loader finds the blob by (``__tvm_ffi__library_bin`` in TVM 0.27)."""
    import tvm

    return str(tvm.get_global_func("runtime.ModuleImportsBlobName")())


_SHT_PROGBITS = 1
_SECTION = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info,
#                                          addralign, entsize
_SEGMENT = struct.Struct("<IIQQQQQQ")   # type, flags, offset, vaddr, paddr, filesz, memsz, align
_SYMBOL = struct.Struct("<IBBHQQ")      # name, info, other, shndx, value, size
#: The file is written in pieces of this size: Linux 6 gives a write of 2 MB or more huge
#: page-cache folios, which cost many times what small ones do where huge pages are dear (a
#: VM: docs/transformer_ops.md, "Build time: the blob written once, in pieces").
_WRITE_PIECE = 1 << 20


class BlobLayoutError(Exception):
    """The linked library is not laid out as the rewrite expects (internal: the export falls
    back to TVM's own packing)."""


class BlobPacker:
    """``fpack_imports`` for TVM's ``export_library``, then :meth:`place` on the linked file.

    Called by TVM with the module to export, it serialises the imports (``blob``) and returns
    a C file declaring the zero-filled array the blob will fill."""

    def __init__(self):
        self.blob = None  # the serialised imports (a tvm Tensor of bytes), once packed

    def __call__(self, module, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
        from tvm.runtime import _ffi_api

        if is_system_lib or prefix:  # a system library's blob is registered, not looked up
            raise BlobLayoutError("a system library")
        self.blob = _ffi_api.ModulePackImportsToTensor(module)
        path = os.path.join(workspace_dir, "accel_blob.c")
        with open(path, "w") as f:  # no initializer: .bss, no bytes in the object file
            f.write(f"char {blob_symbol()}[{self.blob.shape[0]}] __attribute__((aligned(64)));\n")
        return path

    def place(self, path: Path) -> bytes:
        """Rewrite the linked library at ``path`` with the blob in it; the SHA-256 of the
        written file (computed as it is written, for the checksum). BlobLayoutError: the file
        is as the linker wrote it, the blob not placed."""
        blob = memoryview(np.from_dlpack(self.blob)).cast("B")
        with open(path, "rb") as f:
            image = f.read()
        plan = _plan(image, len(blob), str(path))
        temporary = path.with_name(f".{path.name}.accel-tmp")
        digest = hashlib.sha256()
        try:
            with open(temporary, "wb") as out:
                for part in plan.parts(blob):
                    digest.update(part)
                    for start in range(0, len(part), _WRITE_PIECE):
                        out.write(part[start:start + _WRITE_PIECE])
            os.chmod(temporary, os.stat(path).st_mode & 0o7777)
            os.replace(temporary, path)
        except OSError as error:
            raise AccelLibraryError(f"cannot write library '{path}': "
                                    f"{error.strerror or error}") from None
        finally:
            if temporary.exists():
                temporary.unlink()
        return digest.digest()


class _Plan:
    """Where the blob goes and what moves: the file up to ``end`` (the segment's old file
    part) stays, the segment's memory from there to its end becomes file bytes (zeros, and
    the blob at ``blob_offset``), and the rest of the file follows ``shift`` bytes later."""

    def __init__(self, patched: bytearray, end: int, blob_offset: int, shift: int):
        self.patched, self.end, self.blob_offset, self.shift = patched, end, blob_offset, shift

    def parts(self, blob: memoryview):
        """The new file, part by part."""
        yield bytes(self.patched[:self.end])
        yield bytes(self.blob_offset - self.end)
        yield blob
        yield bytes(self.end + self.shift - self.blob_offset - len(blob))
        yield bytes(self.patched[self.end:])


def _plan(image: bytes, blob_size: int, name: str) -> _Plan:
    """Check the layout (BlobLayoutError if it is not the expected one) and patch the headers
    of a copy of ``image``: the segment's file size, the moved sections' offsets, ``.bss``'s
    type (its bytes are now in the file) and the section table's offset."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise BlobLayoutError("not a 64-bit little-endian ELF file")
    elf = ElfFile(io.BytesIO(image), len(image), name)
    try:
        elf.header()
        elf.sections()
        elf.segments()
    except AccelLibraryError as error:
        raise BlobLayoutError(str(error)) from None
    patched = bytearray(image)
    sections = [list(_SECTION.unpack_from(image, elf.shoff + i * _SECTION.size))
                for i in range(len(elf.section_list))]
    symbol = blob_symbol()
    address = _symbol_address(image, sections, symbol, blob_size)
    segments = [(i, list(_SEGMENT.unpack_from(image, elf.phoff + i * _SEGMENT.size)))
                for i in range(elf.phnum)]
    loads = [(i, s) for i, s in segments if s[0] == _PT_LOAD]
    index, segment = max(loads, key=lambda item: item[1][2])  # the last in the file
    _, _, offset, vaddr, _, filesz, memsz, _ = segment
    if not (vaddr + filesz <= address and address + blob_size <= vaddr + memsz):
        raise BlobLayoutError(f"{symbol} is not in the zero-filled tail of the last "
                              "loadable segment")
    if any(s[3] > vaddr for _, s in loads):
        raise BlobLayoutError("a loadable segment lies above the last one in the file")
    end = offset + filesz
    if any(s[0] != 0 and s[5] and s[2] + s[5] > end for _, s in segments):
        raise BlobLayoutError("a segment's file bytes lie past the last loadable segment")
    past = [(i, s) for i, s in enumerate(sections) if s[1] not in (0, _SHT_NOBITS) and
            s[4] >= end]
    if any(s[2] & _SHF_ALLOC and s[5] for _, s in past) or elf.shoff < end:
        raise BlobLayoutError("loaded sections or the section table lie past the last "
                              "loadable segment")
    moved = {i for i, s in past if not s[2] & _SHF_ALLOC}  # symbols, names, comments
    alignment = max([4096] + [sections[i][8] for i in moved])
    shift = -(-(memsz - filesz) // alignment) * alignment
    segment[5] = memsz
    _SEGMENT.pack_into(patched, elf.phoff + index * _SEGMENT.size, *segment)
    for i, section in enumerate(sections):
        if i in moved:
            section[4] += shift
        elif section[1] == _SHT_NOBITS and section[2] & _SHF_ALLOC and \
                vaddr <= section[3] < vaddr + memsz:
            if section[2] & _SHF_TLS:
                raise BlobLayoutError("thread-local zero-filled data in the segment")
            section[1], section[4] = _SHT_PROGBITS, offset + section[3] - vaddr
        _SECTION.pack_into(patched, elf.shoff + i * _SECTION.size, *section)
    struct.pack_into("<Q", patched, 0x28, elf.shoff + shift)  # e_shoff
    return _Plan(patched, end, offset + address - vaddr, shift)


def _symbol_address(image: bytes, sections: list, symbol: str, size: int) -> int:
    """The address of the blob's array in the dynamic symbol table (what ``dlsym`` reads),
    which must be ``size`` bytes."""
    found: Optional[int] = None
    for section in sections:
        if section[1] != _SHT_DYNSYM:
            continue
        strings = sections[section[6]]
        names = image[strings[4]:strings[4] + strings[5]]
        for k in range(section[5] // _SYMBOL.size):
            name, _, _, _, value, symbol_size = _SYMBOL.unpack_from(
                image, section[4] + k * _SYMBOL.size)
            if names[name:names.find(b"\0", name)] == symbol.encode():
                if symbol_size != size:
                    raise BlobLayoutError(f"{symbol} is {symbol_size} bytes, the blob {size}")
                found = value
    if found is None:
        raise BlobLayoutError(f"{symbol} is not a dynamic symbol")
    return found


def write_library(module, path: Path) -> Optional[bytes]:
    """Compile and link ``module`` (an executable's ``mod``) into the library at ``path``, the
    blob placed by :class:`BlobPacker`, or by TVM's own packing where the linked layout is not
    the one the rewrite takes. The SHA-256 of the file when it was computed while writing
    (None: not computed). The compiler's failures are TVM's exceptions, as they arrive."""
    packer = BlobPacker()
    try:
        module.export_library(str(path), fcompile=create_shared, options=link_options(),
                              fpack_imports=packer)
        return packer.place(path) if packer.blob is not None else None
    except BlobLayoutError:
        module.export_library(str(path), fcompile=create_shared, options=link_options())
        return None
