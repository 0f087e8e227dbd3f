"""The ELF checks of :func:`accel_codegen.compiler.library.check_library`: a damaged or foreign
file is refused, naming what is wrong, before the dynamic loader maps it (which would crash the
process with SIGBUS or SIGSEGV instead of raising). Checked against the file: the ELF header,
the program and section tables, the segments, the dynamic table and the relocations."""
from __future__ import annotations

import functools
import platform
import struct
import sys
from typing import Dict, List, Optional, Tuple

from ..errors import AccelLibraryError

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


class ElfFile:
    """An open ELF file of ``size`` bytes, read and checked part by part: the header, the
    section and program header tables and the segments; :func:`check_dynamic` then checks the
    dynamic table and the relocations against what this records."""

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

    def file_offset(self, address: int, count: int) -> int:
        """The file offset the loader reads ``count`` bytes at ``address`` from."""
        for v, _, o, fs in self.loads:
            if v <= address and address + count <= v + fs:
                return o + address - v
        self.fail(f"the table at {address:#x} (+{count} bytes) is not in the file's loaded "
                  "part")


def check_dynamic(elf: ElfFile) -> None:
    """The dynamic table: well formed, in agreement with the sections, and every address
    the loader follows (tables, relocation targets) in loaded memory."""
    offset, vaddr, filesz = elf.dynamic_segment
    if not elf.mapped(vaddr, filesz):
        elf.fail(f"the dynamic table (address {vaddr:#x}, {filesz} bytes) is outside the "
                  "loaded segments")
    by_type: Dict[int, List[Tuple[int, int, int, int]]] = {}
    for sh_type, _, addr, sh_offset, size, link in elf.section_list:
        by_type.setdefault(sh_type, []).append((addr, sh_offset, size, link))
    if _SHT_DYNAMIC in by_type and \
            by_type[_SHT_DYNAMIC][0][:3] != (vaddr, offset, filesz):
        elf.fail("the dynamic segment and the dynamic section disagree")
    entry = 16 if elf.wide else 8
    table = elf.read(offset, filesz - filesz % entry, "dynamic table")
    tags: Dict[int, int] = {}
    strings: List[int] = []
    form = f"{elf.order}{'qQ' if elf.wide else 'iI'}"
    entries = [struct.unpack_from(form, table, i * entry) for i in range(len(table) // entry)]
    end = next((i for i, (tag, _) in enumerate(entries) if tag == 0), None)
    if end is None:
        elf.fail("the dynamic table has no end marker")
    if any(tag != 0 for tag, _ in entries[end:]):
        elf.fail(f"the dynamic table ends at entry {end}, before some of its entries")
    for i, (tag, value) in enumerate(entries[:end]):
        if not (0 < tag <= _DT_LAST or 0x6000000D <= tag <= 0x7FFFFFFF):
            elf.fail(f"dynamic entry {i} has an unknown tag {tag:#x}")
        if tag in _DT_STRINGS:
            strings.append(value)
        elif tag in tags and tag in _DT_FOLLOWED:
            elf.fail(f"dynamic entry {i}: tag {tag:#x} given twice")
        else:
            tags.setdefault(tag, value)
    word = 8 if elf.wide else 4
    for address, (size_tag, section_type) in _DT_TABLES.items():
        if size_tag is not None and (address in tags) != (size_tag in tags):
            elf.fail(f"the dynamic table has tag {address:#x} or {size_tag:#x} without "
                      "the other")
        if address not in tags:
            continue
        count = tags[size_tag] if size_tag in _DT_BYTE_SIZES else 1
        if not elf.mapped(tags[address], count):
            elf.fail(f"dynamic entry {address:#x} points to {tags[address]:#x} (+{count} "
                      "bytes), outside the loaded segments")
        if section_type in by_type and tags[address] not in \
                [addr for addr, _, _, _ in by_type[section_type]]:
            elf.fail(f"dynamic entry {address:#x} ({tags[address]:#x}) is not where the "
                      "sections put its table")
        if size_tag in _DT_BYTE_SIZES:  # a table the loader reads whole: not cut short
            for sh_type, sh_flags, addr, _, size, _ in elf.section_list:
                if addr == tags[address] and sh_flags & _SHF_ALLOC and \
                        sh_type in (3, 4, 9, 14, 15, 16) and tags[size_tag] < size:
                    elf.fail(f"dynamic entry {size_tag:#x} gives {tags[size_tag]} bytes, "
                              f"less than the {size} of its table at {addr:#x}")
    symbol_entry = 24 if elf.wide else 16
    for tag in (12, 13):  # DT_INIT, DT_FINI: code the loader runs
        if tag in tags and not any(v <= tags[tag] < v + fs and flags & 1 for (v, _, _, fs),
                                   flags in zip(elf.loads, elf.load_flags)):
            elf.fail(f"dynamic entry {tag:#x} ({tags[tag]:#x}) is not in executable code")
    for address, (_, section_type) in _DT_TABLES.items():  # a table without its entry
        present = [s for s in elf.section_list
                   if s[0] == section_type and s[1] & _SHF_ALLOC and s[4] > 0]
        if section_type in _UNIQUE_SECTIONS and present and address not in tags:
            elf.fail(f"the dynamic table has no entry {address:#x} for its "
                      f"section of type {section_type:#x}")
    for tag, expected in ((_DT_SYMENT, symbol_entry), (_DT_RELAENT, 3 * word),
                          (_DT_RELENT, 2 * word)):
        if tag in tags and tags[tag] != expected:
            elf.fail(f"dynamic entry {tag:#x} is {tags[tag]}, expected {expected}")
    if _DT_JMPREL in tags and tags.get(_DT_PLTREL) not in (_DT_RELA, _DT_REL):
        elf.fail(f"the PLT relocation type {tags.get(_DT_PLTREL)} is neither RELA nor REL")
    if any(s >= tags.get(_DT_STRSZ, 0) for s in strings):
        elf.fail("a library name in the dynamic table lies outside its string table")
    symbols = None
    if _SHT_DYNSYM in by_type:
        symtab, _, size, link = by_type[_SHT_DYNSYM][0]
        strtab = elf.section_list[link] if link < len(elf.section_list) else None
        if tags.get(_DT_SYMTAB) != symtab or strtab is None or \
                (tags.get(_DT_STRTAB), tags.get(_DT_STRSZ)) != (strtab[2], strtab[4]):
            elf.fail("the dynamic table's symbol or string table disagrees with the "
                      "sections")
        symbols = size // symbol_entry
    bind_now = 24 in tags or tags.get(30, 0) & 0x8 or tags.get(0x6FFFFFFB, 0) & 0x1
    check_relocations(elf, tags, symbols, bool(bind_now))


def check_relocations(elf: ElfFile, tags: Dict[int, int], symbols: Optional[int],
                      bind_now: bool) -> None:
    """Every relocation writes inside loaded memory and names a symbol that exists."""
    word = 8 if elf.wide else 4
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
            elf.fail(f"relocation table at {address:#x}: {size} bytes is not a whole "
                      f"number of {entry}-byte entries")
        offset = elf.file_offset(address, size)
        data = elf.read(offset, size, "relocation table")
        form = f"{elf.order}{'QQ' if elf.wide else 'II'}"
        shift = 32 if elf.wide else 8
        for i in range(size // entry):
            target, info = struct.unpack_from(form, data, i * entry)
            if not elf.mapped(target, word):
                elf.fail(f"relocation {i} of the table at {address:#x} writes to "
                          f"{target:#x}, outside the loaded segments")
            if lazy and elf.relro and elf.relro[0] <= target < elf.relro[1]:
                elf.fail(f"relocation {i} is bound lazily but writes to {target:#x}, "
                          "which is read-only after relocation")
            if symbols is not None and info >> shift >= symbols:
                elf.fail(f"relocation {i} of the table at {address:#x} names symbol "
                          f"{info >> shift} of {symbols}")
