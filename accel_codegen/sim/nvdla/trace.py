"""NVDLA trace tests: the ``.cfg`` command list, the ``.dat`` memory images, and the sparse
memory the commands act on.

A ``.cfg`` (nvdla/hw ``verif/tests/trace_tests``) is a list of commands, one per line, with
``//`` comments::

    mem_init(pri_mem, BASE, SIZE, ALL_ZERO);
    mem_load(pri_mem, BASE, "file.dat");
    reg_write(NVDLA_<UNIT>.<REGISTER>_0, VALUE);
    poll_reg_equal(NVDLA_<UNIT>.<REGISTER>_0, VALUE);
    intr_notify(<UNIT>_0, SYNC_ID);
    check_crc(SYNC_ID, MEM, BASE, SIZE, CRC);
    check_nothing(SYNC_ID);

A ``.dat`` is text: ``{``, lines ``{offset:0x.., size:N, payload:0x.. 0x.. ...},`` (offsets
relative to the ``mem_load`` base, bytes in address order), ``}``.
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from ...errors import AccelInvalidError, AccelNotFoundError
from . import regs

_PAGE_BITS = 16
_PAGE = 1 << _PAGE_BITS


class Memory:
    """A sparse byte-addressed memory (64 KiB pages, zero until written): the testbench's
    ``pri_mem``, where a layer's 24 MiB of declared space may hold a few KiB of data."""

    def __init__(self) -> None:
        self._pages: Dict[int, np.ndarray] = {}

    def _page(self, index: int) -> np.ndarray:
        page = self._pages.get(index)
        if page is None:
            page = self._pages[index] = np.zeros(_PAGE, np.uint8)
        return page

    def read(self, address: int, size: int) -> np.ndarray:
        """``size`` bytes from ``address`` (a copy)."""
        out = np.zeros(size, np.uint8)
        pos = 0
        while pos < size:
            a = address + pos
            index, offset = a >> _PAGE_BITS, a & (_PAGE - 1)
            n = min(_PAGE - offset, size - pos)
            page = self._pages.get(index)
            if page is not None:
                out[pos:pos + n] = page[offset:offset + n]
            pos += n
        return out

    def write(self, address: int, data) -> None:
        data = np.asarray(data, np.uint8).ravel()
        pos = 0
        while pos < data.size:
            a = address + pos
            index, offset = a >> _PAGE_BITS, a & (_PAGE - 1)
            n = min(_PAGE - offset, data.size - pos)
            self._page(index)[offset:offset + n] = data[pos:pos + n]
            pos += n

    def zero(self, address: int, size: int) -> None:
        """Zero ``size`` bytes, touching only pages that exist (absent pages read as zero)."""
        pos = 0
        while pos < size:
            a = address + pos
            index, offset = a >> _PAGE_BITS, a & (_PAGE - 1)
            n = min(_PAGE - offset, size - pos)
            page = self._pages.get(index)
            if page is not None:
                page[offset:offset + n] = 0
            pos += n

    def gather(self, addresses: np.ndarray) -> np.ndarray:
        """The bytes at an array of addresses (any shape)."""
        addresses = np.asarray(addresses, np.int64)
        if addresses.size == 0:
            return np.zeros(addresses.shape, np.uint8)
        lo, hi = int(addresses.min()), int(addresses.max())
        window = self.read(lo, hi - lo + 1)
        return window[addresses - lo]

    def scatter(self, addresses: np.ndarray, values: np.ndarray) -> None:
        """Write ``values`` (bytes) at ``addresses``, leaving every other byte alone."""
        addresses = np.asarray(addresses, np.int64).ravel()
        values = np.asarray(values).astype(np.uint8).ravel()
        if addresses.size == 0:
            return
        lo, hi = int(addresses.min()), int(addresses.max())
        window = self.read(lo, hi - lo + 1)
        window[addresses - lo] = values
        self.write(lo, window)

    def crc32(self, address: int, size: int) -> int:
        """zlib's CRC-32 over [address, address + size), as NVDLA's check_crc computes it."""
        return zlib.crc32(self.read(address, size).tobytes()) & 0xFFFFFFFF


@dataclass(frozen=True)
class Command:
    op: str            # reg_write, mem_init, mem_load, poll_reg_equal, intr_notify, check_crc, ...
    args: Tuple[str, ...]
    line: int


_CALL = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*;?\s*$")
KNOWN = {"reg_write", "mem_init", "mem_load", "poll_reg_equal", "intr_notify", "check_crc",
         "check_nothing"}


def number(text: str, what: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise AccelInvalidError(f"{what}: {text.strip()!r} is not a number") from None


def parse_cfg(path: str) -> List[Command]:
    """The commands of a ``.cfg`` trace, in order (comments and blank lines dropped)."""
    commands = []
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            text = raw.split("//", 1)[0].strip()
            if not text:
                continue
            m = _CALL.match(text)
            if not m or m.group(1) not in KNOWN:
                raise AccelInvalidError(f"{path}:{lineno}: not an NVDLA trace command: {text!r}")
            args = tuple(a.strip().strip('"') for a in m.group(2).split(","))
            commands.append(Command(m.group(1), args, lineno))
    return commands


_ENTRY = re.compile(r"\{\s*offset\s*:\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*size\s*:\s*(\d+)\s*,"
                    r"\s*payload\s*:([^}]*)\}")


def load_dat(memory: Memory, base: int, path: str) -> int:
    """Load a ``.dat`` image at ``base``; returns the number of bytes written."""
    with open(path) as f:
        text = f.read()
    total = 0
    chunks: List[Tuple[int, bytes]] = []
    for m in _ENTRY.finditer(text):
        offset, size = int(m.group(1), 0), int(m.group(2))
        payload = bytes(int(b, 16) for b in m.group(3).split())
        if len(payload) != size:
            raise AccelInvalidError(f"{path}: entry at offset {m.group(1)} says size {size} "
                                    f"but has {len(payload)} bytes")
        chunks.append((offset, payload))
        total += size
    # coalesce consecutive entries so memory is written in a few large pieces
    chunks.sort()
    run_start, run = None, bytearray()
    for offset, payload in chunks:
        if run_start is not None and offset == run_start + len(run):
            run += payload
            continue
        if run_start is not None:
            memory.write(base + run_start, np.frombuffer(bytes(run), np.uint8))
        run_start, run = offset, bytearray(payload)
    if run_start is not None:
        memory.write(base + run_start, np.frombuffer(bytes(run), np.uint8))
    return total


class RegisterFile:
    """The values written to NVDLA's registers, by address (the last write wins)."""

    def __init__(self) -> None:
        self.values: Dict[int, int] = {}

    def write(self, name: str, value: int) -> regs.Register:
        reg = regs.lookup(name)
        self.values[reg.address] = value & 0xFFFFFFFF
        return reg

    def get(self, unit: str, name: str, field: str = None) -> int:
        reg = regs.REGISTERS.get((unit, name))
        if reg is None:
            raise AccelInvalidError(f"unknown NVDLA register {unit}.{name}")
        value = self.values.get(reg.address, 0)
        return value if field is None else reg.field(value, field)


def dat_path(cfg_path: str, name: str) -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(cfg_path)), name)
    if not os.path.exists(path):
        raise AccelNotFoundError(f"{cfg_path}: mem_load names {name!r}, which is not beside it")
    return path
