"""The imports' blob written into the library once (compiler/packed_imports.py): the linker
sees a zero-filled array, the linked file is rewritten with the blob's bytes where the array
lies, and the library loads in a fresh process and runs as TVM's own packing's does. A layout
the rewrite does not take falls back to TVM's packing."""
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler import link, packed_imports
from accel_codegen.compiler.elf import ElfFile
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.library import check_library


@pytest.fixture(scope="module")
def built():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 128)).eval()
    x = torch.randn(1, 3, 8, 8)
    mod, params = from_pytorch(model, (x,))
    return ac.build(mod, params), x, model(x).detach().numpy()


def _blob_place(path):
    """(address of the blob symbol, its size, the loads (vaddr, memsz, offset, filesz, flags))."""
    with open(path, "rb") as f:
        elf = ElfFile(f, path.stat().st_size, str(path))
        elf.header()
        elf.sections()
        elf.segments()
        image = path.read_bytes()
    sections = [list(packed_imports._SECTION.unpack_from(image, elf.shoff + i * 64))
                for i in range(len(elf.section_list))]
    size = None
    for s in sections:
        if s[1] == 11:  # .dynsym
            strings = sections[s[6]]
            names = image[strings[4]:strings[4] + strings[5]]
            for k in range(s[5] // 24):
                name, _, _, _, value, symbol_size = struct.unpack_from("<IBBHQQ", image,
                                                                       s[4] + k * 24)
                if names[name:names.find(b"\0", name)] == packed_imports.blob_symbol().encode():
                    address, size = value, symbol_size
    assert size is not None
    return address, size, [(*load, flags) for load, flags in zip(elf.loads, elf.load_flags)]


def test_the_blob_is_in_the_file_where_its_symbol_lies_and_the_library_runs(built, tmp_path,
                                                                             monkeypatch):
    exe, x, expected = built
    objects = []
    real = link.create_shared

    def spy(output, files, *args, **kwargs):
        objects.extend((str(f), __import__("os").path.getsize(f)) for f in files)
        return real(output, files, *args, **kwargs)

    monkeypatch.setattr(packed_imports, "create_shared", spy)
    path = ac.export_library(exe, tmp_path / "m.so")
    blob = np.from_dlpack(__import__("tvm").runtime._ffi_api.ModulePackImportsToTensor(exe.mod))
    address, size, loads = _blob_place(path)
    assert size == blob.size > 500_000  # the weights (1024 x 128) are in it
    # the linker saw the array, not the blob: every file it linked is smaller than the blob
    assert objects and max(n for _, n in objects) < size // 4, objects
    # the blob's bytes lie in the file part of the last loadable segment, at its address
    vaddr, memsz, offset, filesz, _ = loads[-1]
    assert filesz == memsz and vaddr <= address and address + size <= vaddr + filesz
    data = path.read_bytes()
    start = offset + address - vaddr
    assert data[start:start + size] == blob.tobytes()
    check_library(path)  # the ELF checks and the SHA-256 the export appended
    # a fresh process with nothing but tvm (TVM's loader finds the blob by its symbol)
    script = textwrap.dedent(f"""
        import sys, numpy as np, tvm
        from tvm import relax
        vm = relax.VirtualMachine(tvm.runtime.load_module({str(path)!r}), tvm.cpu())
        y = vm["main"](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r})))
        assert "accel_codegen" not in sys.modules
        np.save({str(tmp_path / 'y.npy')!r}, y.numpy())
        """)
    np.save(tmp_path / "x.npy", x.numpy())
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)


def test_a_layout_the_rewrite_does_not_take_falls_back_to_tvms_packing(built, tmp_path,
                                                                       monkeypatch):
    exe, x, expected = built

    def refuse(*args):
        raise packed_imports.BlobLayoutError("a layout of another linker")

    monkeypatch.setattr(packed_imports, "_plan", refuse)
    path = ac.export_library(exe, tmp_path / "m.so")
    address, size, loads = _blob_place(path)
    # TVM's packing: the blob is a read-only constant, in a segment that is not writable
    (flags,) = [f for v, m, _, fs, f in loads if v <= address < v + fs]
    assert size > 500_000 and not flags & 2
    check_library(path)
    y = ac.virtual_machine(path)["main"](x.numpy())
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_the_layout_checks_refuse_what_they_cannot_rewrite(built, tmp_path):
    exe, _, _ = built
    path = ac.export_library(exe, tmp_path / "m.so")
    linked = path.read_bytes()
    _, size, _ = _blob_place(path)
    with pytest.raises(packed_imports.BlobLayoutError, match="64-bit little-endian ELF"):
        packed_imports._plan(b"MZ" + linked[2:], size, "m.so")
    with pytest.raises(packed_imports.BlobLayoutError, match="bytes, the blob"):
        packed_imports._plan(linked, size + 1, "m.so")
    # the rewritten file: the blob is in the file part now, no zero-filled tail to fill
    with pytest.raises(packed_imports.BlobLayoutError, match="zero-filled tail"):
        packed_imports._plan(linked, size, "m.so")
    renamed = linked.replace(packed_imports.blob_symbol().encode(),
                             b"__tvm_ffi__library_bim")
    with pytest.raises(packed_imports.BlobLayoutError, match="not a dynamic symbol"):
        packed_imports._plan(renamed, size, "m.so")
