"""Library files: written (the destination checked first, compiler failures shortened), then
checked before any is loaded, so that a damaged or foreign file raises AccelLibraryError
naming it instead of crashing the process inside the dynamic loader: the file type, the ELF
header, program and section tables, segments, the dynamic table and relocations against the
file, and the SHA-256 that export_library appends."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import stat
import struct
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import tvm
import tvm_ffi

from ..errors import AccelLibraryError


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
_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "i386": 3,
                 "i686": 3, "armv7l": 40, "ppc64le": 21, "ppc64": 21, "s390x": 22,
                 "riscv64": 243, "loongarch64": 258}
_ET_DYN, _PT_LOAD, _PT_DYNAMIC, _PT_TLS = 3, 1, 2, 7
_PT_GNU_STACK, _PT_GNU_RELRO = 0x6474E551, 0x6474E552
_SHT_DYNAMIC, _SHT_NOBITS, _SHT_DYNSYM = 6, 8, 11
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR, _SHF_TLS = 0x1, 0x2, 0x4, 0x400
_PN_XNUM, _SHN_XINDEX = 0xFFFF, 0xFFFF
# Dynamic table tags (elf.h names).
_DT_PLTRELSZ, _DT_STRTAB, _DT_SYMTAB, _DT_RELA, _DT_RELASZ, _DT_RELAENT = 2, 5, 6, 7, 8, 9
_DT_STRSZ, _DT_SYMENT, _DT_REL, _DT_RELSZ, _DT_RELENT, _DT_PLTREL = 10, 11, 17, 18, 19, 20
_DT_JMPREL, _DT_LAST = 23, 37
_DT_STRINGS = (1, 14, 15, 29)  # DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH: strtab offsets
# The tables the loader follows: address tag -> (its size tag, the section type holding it).
_DT_TABLES = {3: (None, None), 4: (None, 5), _DT_STRTAB: (_DT_STRSZ, None),
              _DT_SYMTAB: (None, 11), _DT_RELA: (_DT_RELASZ, 4), 12: (None, None),
              13: (None, None), _DT_REL: (_DT_RELSZ, 9), _DT_JMPREL: (_DT_PLTRELSZ, None),
              25: (27, 14), 26: (28, 15), 32: (33, 16), 36: (35, 19),
              0x6FFFFEF5: (None, 0x6FFFFFF6), 0x6FFFFFF0: (None, 0x6FFFFFFF),
              0x6FFFFFFC: (0x6FFFFFFD, 0x6FFFFFFD), 0x6FFFFFFE: (0x6FFFFFFF, 0x6FFFFFFE)}
# Section types a library has at most one of, each with its dynamic entry.
_UNIQUE_SECTIONS = {5, 11, 14, 15, 0x6FFFFFF6, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF}
_DT_BYTE_SIZES = {_DT_STRSZ, _DT_RELASZ, _DT_RELSZ, _DT_PLTRELSZ, 27, 28, 33, 35}
_DT_FOLLOWED = set(_DT_TABLES) | {size for size, _ in _DT_TABLES.values() if size} | {
    _DT_SYMENT, _DT_RELAENT, _DT_RELENT, _DT_PLTREL}


@functools.lru_cache(maxsize=None)
def _own_elf() -> Tuple[int, int, Optional[int]]:
    """(ELF class, data encoding, machine) of this process: a library must match all three."""
    for image in ("/proc/self/exe", sys.executable):
        try:
            with open(image, "rb") as f:
                head = f.read(20)
        except OSError:
            continue
        if len(head) == 20 and head[:4] == b"\x7fELF" and head[5] in (1, 2):
            return head[4], head[5], struct.unpack("<H" if head[5] == 1 else ">H",
                                                   head[18:20])[0]
    return (2 if sys.maxsize > 2 ** 32 else 1, 1 if sys.byteorder == "little" else 2,
            _ELF_MACHINES.get(platform.machine().lower()))


def append_checksum(path: Path) -> None:
    digest = hashlib.sha256()
    with open(path, "r+b") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        f.write(CHECKSUM_MARKER + digest.digest())


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
            _ElfCheck(f, info.st_size, name).run()
    except OSError as error:
        raise AccelLibraryError(f"{name} cannot be read: {error.strerror or error}") from None
    return path


class _ElfCheck:
    """The checks of :func:`check_library` on an open file of ``size`` bytes."""

    def __init__(self, f, size: int, name: str):
        self.f, self.size, self.name = f, size, name

    def fail(self, problem: str):
        raise AccelLibraryError(f"{self.name} is damaged or not a shared library: {problem}")

    def beyond(self, what: str, offset: int, count: int):
        """Fail: ``what`` (bytes offset..offset + count) does not fit in the file."""
        self.fail(f"{what} (bytes {offset}..{offset + count}) is not inside the file "
                  f"({self.size} bytes): the file is truncated or damaged")

    def read(self, offset: int, count: int, what: str) -> bytes:
        if offset < 0 or count < 0 or offset + count > self.size:
            self.beyond(f"its {what}", offset, count)
        self.f.seek(offset)
        data = self.f.read(count)
        if len(data) != count:
            self.fail(f"its {what} could not be read in full (the file shrank?)")
        return data

    def run(self) -> None:
        self.header()
        self.sections()
        self.segments()
        self.dynamic()
        self.checksum()

    def header(self) -> None:
        if self.size == 0:
            self.fail("the file is empty (0 bytes)")
        ident = self.f.read(16)
        if ident[:4] != b"\x7fELF":
            self.fail(f"no ELF header (the file starts with {ident[:8]!r})")
        if len(ident) < 16:
            self.fail(f"the file is {self.size} bytes, too short for an ELF header")
        own_class, own_data, own_machine = _own_elf()
        elf_class, data, version = ident[4], ident[5], ident[6]
        if elf_class not in (1, 2) or data not in (1, 2) or version != 1:
            self.fail(f"invalid ELF identification (class {elf_class}, data {data}, "
                      f"version {version})")
        bits, endian = {1: 32, 2: 64}, {1: "little-endian", 2: "big-endian"}
        if elf_class != own_class:
            self.fail(f"a {bits[elf_class]}-bit ELF file; this process is {bits[own_class]}-bit")
        if data != own_data:
            self.fail(f"a {endian[data]} ELF file; this process is {endian[own_data]}")
        self.wide = elf_class == 2
        self.order = "<" if data == 1 else ">"
        word = "Q" if self.wide else "I"
        header_size = 64 if self.wide else 52
        (e_type, machine, e_version, _entry, self.phoff, self.shoff, _flags, ehsize,
         self.phentsize, self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack(
            f"{self.order}HHI{word}{word}{word}IHHHHHH",
            self.read(16, header_size - 16, "ELF header"))
        if e_type != _ET_DYN:
            kinds = {0: "no file type", 1: "a relocatable object", 2: "an executable",
                     4: "a core dump"}
            self.fail(f"ELF type {e_type} ({kinds.get(e_type, 'unknown')}), not a shared "
                      "object")
        if own_machine is not None and machine != own_machine:
            self.fail(f"built for ELF machine {machine}; this process runs machine "
                      f"{own_machine}")
        if e_version != 1 or ehsize != header_size:
            self.fail(f"invalid ELF header (version {e_version}, header size {ehsize})")

    def sections(self) -> None:
        """The section table (the loader does not read it, but it records the layout the
        linker wrote: the segments are checked against it)."""
        self.section_list = []  # (type, flags, addr, offset, size, link)
        self.section_names: Dict[str, int] = {}  # name -> index, when the names are readable
        if self.shoff == 0 and self.shnum == 0:
            return
        entry = 64 if self.wide else 40
        if self.shentsize != entry:
            self.fail(f"section header entry size {self.shentsize}, expected {entry}")
        if self.shoff == 0:
            self.fail(f"{self.shnum} section headers at file offset 0")
        form = f"{self.order}IIQQQQIIQQ" if self.wide else f"{self.order}IIIIIIIIII"
        first = struct.unpack(form, self.read(self.shoff, entry, "section header table"))
        count = self.shnum or first[5]  # more than 0xff00 sections: SHN_UNDEF's sh_size
        if count > self.size // entry:
            self.fail(f"{count} section headers cannot fit in {self.size} bytes")
        table = self.read(self.shoff, count * entry, "section header table")
        for i in range(count):
            _, sh_type, flags, addr, offset, size, link, _, _, _ = struct.unpack_from(
                form, table, i * entry)
            if sh_type not in (0, _SHT_NOBITS) and offset + size > self.size:
                self.beyond(f"section {i}", offset, size)
            self.section_list.append((sh_type, flags, addr, offset, size, link))
        strings = self.shstrndx if self.shstrndx != _SHN_XINDEX else first[6]
        if count and strings >= count:
            self.fail(f"section name table index {strings} is outside the {count} sections")
        if count and self.section_list[strings][0] == 3:  # SHT_STRTAB: read the names
            _, _, _, offset, size, _ = self.section_list[strings]
            names = self.read(offset, size, "section name table")
            for i in range(count):
                start = struct.unpack_from(form, table, i * entry)[0]
                end = names.find(b"\0", start)
                if start < size and end >= 0:
                    self.section_names.setdefault(names[start:end].decode("latin-1"), i)
        if self.phnum == _PN_XNUM:
            self.phnum = first[7]  # the count is SHN_UNDEF's sh_info

    def segments(self) -> None:
        """The program headers: what the loader maps, from where."""
        entry = 56 if self.wide else 32
        if self.phentsize != entry:
            self.fail(f"program header entry size {self.phentsize}, expected {entry}")
        if self.phnum == 0 or self.phoff == 0:
            self.fail("no program headers")
        table = self.read(self.phoff, self.phnum * entry, "program header table")
        form = f"{self.order}IIQQQQQQ" if self.wide else f"{self.order}IIIIIIII"
        self.loads: List[Tuple[int, int, int, int]] = []  # (vaddr, memsz, offset, filesz)
        flags: List[int] = []  # of each load: PF_X 1, PF_W 2, PF_R 4
        self.dynamic_segment = None
        others = []  # (index, type, offset, vaddr, extent) of the segments inside the loads
        for i in range(self.phnum):
            fields = struct.unpack_from(form, table, i * entry)
            if self.wide:
                p_type, p_flags, offset, vaddr, _, filesz, memsz, align = fields
            else:
                p_type, offset, vaddr, _, filesz, memsz, p_flags, align = fields
            if p_type != 0 and offset + filesz > self.size:
                self.beyond(f"segment {i} (type {p_type:#x})", offset, filesz)
            if p_type == _PT_LOAD:
                if filesz > memsz:
                    self.fail(f"loadable segment {i} has {filesz} bytes in the file but "
                              f"{memsz} in memory")
                if align > 1 and (align & (align - 1) or offset % align != vaddr % align):
                    self.fail(f"loadable segment {i} is misaligned (offset {offset:#x}, "
                              f"address {vaddr:#x}, alignment {align:#x})")
                if not p_flags & 4:
                    self.fail(f"loadable segment {i} is not readable (flags {p_flags:#x})")
                if self.loads and vaddr < self.loads[-1][0] + self.loads[-1][1]:
                    self.fail(f"loadable segment {i} (address {vaddr:#x}) overlaps or precedes "
                              "the one before it")
                self.loads.append((vaddr, memsz, offset, filesz))
                flags.append(p_flags)
            elif p_type == _PT_DYNAMIC:
                if self.dynamic_segment is not None:
                    self.fail("two dynamic segments")
                self.dynamic_segment = (offset, vaddr, filesz)
            if p_type not in (0, _PT_LOAD, _PT_GNU_STACK) and memsz > 0:
                others.append((i, p_type, offset, vaddr, filesz if p_type == _PT_TLS else memsz))
        self.load_flags = flags
        if not self.loads:
            self.fail("no loadable segment")
        if self.dynamic_segment is None:
            self.fail("no dynamic segment")
        for i, p_type, offset, vaddr, extent in others:  # RELRO, notes, EH frame, TLS, ...
            # RELRO may run to the end of the last page (the loader protects whole pages)
            slack = (lambda end: -end % 4096) if p_type == _PT_GNU_RELRO else (lambda end: 0)
            if not any(v <= vaddr and vaddr + extent <= v + m + slack(v + m) and
                       offset - o == vaddr - v for v, m, o, _ in self.loads):
                self.fail(f"segment {i} (type {p_type:#x}, address {vaddr:#x}, {extent} "
                          "bytes) is not inside a loadable segment")
        for i, (sh_type, sh_flags, addr, offset, size, _) in enumerate(self.section_list):
            if not sh_flags & _SHF_ALLOC or sh_flags & _SHF_TLS or size == 0:
                continue
            nobits = sh_type == _SHT_NOBITS
            holder = next((k for k, (v, m, o, fs) in enumerate(self.loads)
                           if v <= addr and addr + size <= v + (m if nobits else fs) and
                           (nobits or offset - o == addr - v)), None)
            if holder is None:
                self.fail(f"section {i} (address {addr:#x}, file offset {offset:#x}) is not "
                          "where the loadable segments map it")
            v, _, _, fs = self.loads[holder]
            if nobits and addr < v + fs:  # zero-filled memory that the file would fill
                self.fail(f"section {i} (zero-filled, address {addr:#x}) lies in the part of "
                          f"its segment read from the file (up to {v + fs:#x})")
            # writable data in a writable segment, code in an executable one
            for section_flag, segment_flag, what in ((_SHF_WRITE, 2, "writable"),
                                                     (_SHF_EXECINSTR, 1, "executable")):
                if sh_flags & section_flag and not flags[holder] & segment_flag:
                    self.fail(f"section {i} is {what} but its segment is not (flags "
                              f"{flags[holder]:#x})")
        self.relro = None
        for i, p_type, offset, vaddr, extent in others:
            if p_type != _PT_GNU_RELRO:
                continue
            # the pages made read-only after relocation: no .data or .bss among them
            protected = (vaddr - vaddr % 4096, (vaddr + extent) - (vaddr + extent) % 4096)
            self.relro = protected
            for name in (".data", ".bss"):
                if name in self.section_names:
                    addr, size = (self.section_list[self.section_names[name]][k] for k in (2, 4))
                    if size and addr < protected[1] and addr + size > protected[0]:
                        self.fail(f"the read-only-after-relocation segment {i} covers {name}")

    def mapped(self, address: int, count: int) -> bool:
        return any(v <= address and address + count <= v + m for v, m, _, _ in self.loads)

    def dynamic(self) -> None:
        """The dynamic table: well formed, in agreement with the sections, and every address
        the loader follows (tables, relocation targets) in loaded memory."""
        offset, vaddr, filesz = self.dynamic_segment
        if not self.mapped(vaddr, filesz):
            self.fail(f"the dynamic table (address {vaddr:#x}, {filesz} bytes) is outside the "
                      "loaded segments")
        by_type: Dict[int, List[Tuple[int, int, int, int]]] = {}
        for sh_type, _, addr, sh_offset, size, link in self.section_list:
            by_type.setdefault(sh_type, []).append((addr, sh_offset, size, link))
        if _SHT_DYNAMIC in by_type and \
                by_type[_SHT_DYNAMIC][0][:3] != (vaddr, offset, filesz):
            self.fail("the dynamic segment and the dynamic section disagree")
        entry = 16 if self.wide else 8
        table = self.read(offset, filesz - filesz % entry, "dynamic table")
        tags: Dict[int, int] = {}
        strings: List[int] = []
        form = f"{self.order}{'qQ' if self.wide else 'iI'}"
        entries = [struct.unpack_from(form, table, i * entry) for i in range(len(table) // entry)]
        end = next((i for i, (tag, _) in enumerate(entries) if tag == 0), None)
        if end is None:
            self.fail("the dynamic table has no end marker")
        if any(tag != 0 for tag, _ in entries[end:]):
            self.fail(f"the dynamic table ends at entry {end}, before some of its entries")
        for i, (tag, value) in enumerate(entries[:end]):
            if not (0 < tag <= _DT_LAST or 0x6000000D <= tag <= 0x7FFFFFFF):
                self.fail(f"dynamic entry {i} has an unknown tag {tag:#x}")
            if tag in _DT_STRINGS:
                strings.append(value)
            elif tag in tags and tag in _DT_FOLLOWED:
                self.fail(f"dynamic entry {i}: tag {tag:#x} given twice")
            else:
                tags.setdefault(tag, value)
        word = 8 if self.wide else 4
        for address, (size_tag, section_type) in _DT_TABLES.items():
            if size_tag is not None and (address in tags) != (size_tag in tags):
                self.fail(f"the dynamic table has tag {address:#x} or {size_tag:#x} without "
                          "the other")
            if address not in tags:
                continue
            count = tags[size_tag] if size_tag in _DT_BYTE_SIZES else 1
            if not self.mapped(tags[address], count):
                self.fail(f"dynamic entry {address:#x} points to {tags[address]:#x} (+{count} "
                          "bytes), outside the loaded segments")
            if section_type in by_type and tags[address] not in \
                    [addr for addr, _, _, _ in by_type[section_type]]:
                self.fail(f"dynamic entry {address:#x} ({tags[address]:#x}) is not where the "
                          "sections put its table")
            if size_tag in _DT_BYTE_SIZES:  # a table the loader reads whole: not cut short
                for sh_type, sh_flags, addr, _, size, _ in self.section_list:
                    if addr == tags[address] and sh_flags & _SHF_ALLOC and \
                            sh_type in (3, 4, 9, 14, 15, 16) and tags[size_tag] < size:
                        self.fail(f"dynamic entry {size_tag:#x} gives {tags[size_tag]} bytes, "
                                  f"less than the {size} of its table at {addr:#x}")
        symbol_entry = 24 if self.wide else 16
        for tag in (12, 13):  # DT_INIT, DT_FINI: code the loader runs
            if tag in tags and not any(v <= tags[tag] < v + fs and flags & 1 for (v, _, _, fs),
                                       flags in zip(self.loads, self.load_flags)):
                self.fail(f"dynamic entry {tag:#x} ({tags[tag]:#x}) is not in executable code")
        for address, (_, section_type) in _DT_TABLES.items():  # a table without its entry
            present = [s for s in self.section_list
                       if s[0] == section_type and s[1] & _SHF_ALLOC and s[4] > 0]
            if section_type in _UNIQUE_SECTIONS and present and address not in tags:
                self.fail(f"the dynamic table has no entry {address:#x} for its "
                          f"section of type {section_type:#x}")
        for tag, expected in ((_DT_SYMENT, symbol_entry), (_DT_RELAENT, 3 * word),
                              (_DT_RELENT, 2 * word)):
            if tag in tags and tags[tag] != expected:
                self.fail(f"dynamic entry {tag:#x} is {tags[tag]}, expected {expected}")
        if _DT_JMPREL in tags and tags.get(_DT_PLTREL) not in (_DT_RELA, _DT_REL):
            self.fail(f"the PLT relocation type {tags.get(_DT_PLTREL)} is neither RELA nor REL")
        if any(s >= tags.get(_DT_STRSZ, 0) for s in strings):
            self.fail("a library name in the dynamic table lies outside its string table")
        symbols = None
        if _SHT_DYNSYM in by_type:
            symtab, _, size, link = by_type[_SHT_DYNSYM][0]
            strtab = self.section_list[link] if link < len(self.section_list) else None
            if tags.get(_DT_SYMTAB) != symtab or strtab is None or \
                    (tags.get(_DT_STRTAB), tags.get(_DT_STRSZ)) != (strtab[2], strtab[4]):
                self.fail("the dynamic table's symbol or string table disagrees with the "
                          "sections")
            symbols = size // symbol_entry
        bind_now = 24 in tags or tags.get(30, 0) & 0x8 or tags.get(0x6FFFFFFB, 0) & 0x1
        self.relocations(tags, symbols, bool(bind_now))

    def relocations(self, tags: Dict[int, int], symbols: Optional[int],
                    bind_now: bool) -> None:
        """Every relocation writes inside loaded memory and names a symbol that exists."""
        word = 8 if self.wide else 4
        tables = []
        if _DT_RELA in tags:
            tables.append((tags[_DT_RELA], tags[_DT_RELASZ], True))
        if _DT_REL in tags:
            tables.append((tags[_DT_REL], tags[_DT_RELSZ], False))
        if _DT_JMPREL in tags:
            tables.append((tags[_DT_JMPREL], tags[_DT_PLTRELSZ], tags[_DT_PLTREL] == _DT_RELA))
        for address, size, addend in tables:
            lazy = address == tags.get(_DT_JMPREL) and not bind_now
            entry = (3 if addend else 2) * word
            if size % entry:
                self.fail(f"relocation table at {address:#x}: {size} bytes is not a whole "
                          f"number of {entry}-byte entries")
            offset = self.file_offset(address, size)
            data = self.read(offset, size, "relocation table")
            form = f"{self.order}{'QQ' if self.wide else 'II'}"
            shift = 32 if self.wide else 8
            for i in range(size // entry):
                target, info = struct.unpack_from(form, data, i * entry)
                if not self.mapped(target, word):
                    self.fail(f"relocation {i} of the table at {address:#x} writes to "
                              f"{target:#x}, outside the loaded segments")
                if lazy and self.relro and self.relro[0] <= target < self.relro[1]:
                    self.fail(f"relocation {i} is bound lazily but writes to {target:#x}, "
                              "which is read-only after relocation")
                if symbols is not None and info >> shift >= symbols:
                    self.fail(f"relocation {i} of the table at {address:#x} names symbol "
                              f"{info >> shift} of {symbols}")

    def file_offset(self, address: int, count: int) -> int:
        """The file offset the loader reads ``count`` bytes at ``address`` from."""
        for v, _, o, fs in self.loads:
            if v <= address and address + count <= v + fs:
                return o + address - v
        self.fail(f"the table at {address:#x} (+{count} bytes) is not in the file's loaded "
                  "part")

    def checksum(self) -> None:
        """The SHA-256 export_library appended, when there is one."""
        if self.size < _TRAILER:
            return
        trailer = self.read(self.size - _TRAILER, _TRAILER, "checksum")
        if trailer[:len(CHECKSUM_MARKER)] != CHECKSUM_MARKER:
            return
        digest = hashlib.sha256()
        self.f.seek(0)
        remaining = self.size - _TRAILER
        while remaining > 0:
            block = self.f.read(min(remaining, 1 << 20))
            if not block:
                self.fail("the file shrank while it was checked")
            digest.update(block)
            remaining -= len(block)
        if digest.digest() != trailer[len(CHECKSUM_MARKER):]:
            self.fail("its content does not match the SHA-256 export_library recorded (the "
                      "file changed after it was written)")


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
