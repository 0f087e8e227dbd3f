"""A built model's memory goes with its last reference: the generated library is unloaded and
its functions release their constants, packed weights and scratch (accel_glue_release), for
a VM of an executable (JIT-linked) and of an exported library alike. Without it a session that
builds many models (the mixed-precision search, sweeps, notebooks) keeps every one to its
end: ResNet-50 held about 80 MB per int8 build."""
import ctypes
import gc
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen import frontend
from conftest import random_inputs, run_main

IN_SHAPE = (1, 64, 8, 8)
BUILDS = 8


class Wide(torch.nn.Module):
    """Three 3x3 convs of 256 channels: 1.33 M weights (5.3 MB in fp32), each layer's weights
    packed for the kernel in fp16 and int8."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.Sequential(
            torch.nn.Conv2d(64, 256, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(256, 256, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(256, 256, 3, padding=1))

    def forward(self, x):
        return self.convs(x)


WEIGHT_BYTES = 4 * (64 * 256 * 9 + 2 * 256 * 256 * 9)


@pytest.fixture(scope="module")
def wide():
    torch.manual_seed(0)
    inputs = random_inputs(IN_SHAPE, 1, 0)
    mod, params = frontend.from_pytorch(Wide().eval(), (torch.from_numpy(inputs[0]),))
    return mod, params, inputs


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _heap_bytes() -> int:
    """Bytes malloc holds allocated (glibc's mallinfo2: in use in the main arena, plus every
    mmapped block): what leaks show in even when freed memory they reuse keeps RSS flat."""
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def _mapped(fragment: str) -> set:
    """Files mapped into this process whose path contains ``fragment``."""
    with open("/proc/self/maps") as maps:
        return {line.split(None, 5)[5].strip() for line in maps
                if len(line.split(None, 5)) == 6 and fragment in line}


def _new_libraries(before: set) -> set:
    return _mapped("accel-jit-") - before


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_dropped_builds_release_their_memory(wide, precision):
    """Build, run and drop the model BUILDS times: each build's library is unmapped once its
    VM and executable are dropped; from the second build on, resident memory grows by less
    than two models' fp32 weights and malloc'd memory by less than half of one. Measured
    when the library was unloaded but its functions kept their state: malloc'd +2.6 MB per
    int8 build (RSS flat: freed memory reused), RSS +7.6 MB per fp16 build (weights widened
    to fp32 when packed); kept loaded, also the library itself per build."""
    mod, params, inputs = wide
    calibration = inputs if precision == "int8" else None
    part = ac.partition_for_accel(mod, params, precision=precision, calibration=calibration)
    reference = None
    before = _mapped("accel-jit-")
    rss, heap = [], []
    for _ in range(BUILDS):
        vm = ac.virtual_machine(ac.build(part))
        output = run_main(vm, inputs[0])
        if reference is None:
            reference = output
        np.testing.assert_array_equal(output, reference)  # each build computes the same
        assert len(_new_libraries(before)) == 1, "the build's library is loaded"
        del vm
        gc.collect()
        assert not _new_libraries(before), "the library is unloaded with its last reference"
        rss.append(_rss_bytes())
        heap.append(_heap_bytes())
    rss_growth, heap_growth = rss[-1] - rss[1], heap[-1] - heap[1]
    figures = (f"over {BUILDS - 2} dropped {precision} builds (the model's fp32 weights are "
               f"{WEIGHT_BYTES / 2**20:.1f} MB): RSS {[round(r / 2**20, 1) for r in rss]} MB, "
               f"malloc'd {[round(h / 2**20, 1) for h in heap]} MB")
    assert rss_growth < 2 * WEIGHT_BYTES, f"resident memory grew {rss_growth} bytes {figures}"
    assert heap_growth < WEIGHT_BYTES // 2, f"malloc'd memory grew {heap_growth} bytes {figures}"


def test_dropped_exported_library_is_unloaded(wide, tmp_path):
    """An exported library loaded by path is unloaded when its VM is dropped (tvm's
    load_module would keep it to the end of the process), and loads and runs again after."""
    mod, params, inputs = wide
    path = ac.export_library(ac.build(mod, params, precision="fp16"), tmp_path / "wide.so")
    name = str(Path(path).resolve())
    outputs = []
    for _ in range(3):
        vm = ac.virtual_machine(path)
        outputs.append(run_main(vm, inputs[0]))
        assert name in _mapped(name)
        del vm
        gc.collect()
        assert not _mapped(name), "the exported library is unloaded with its last reference"
    np.testing.assert_array_equal(outputs[0], outputs[2])


def test_executable_keeps_one_library_for_all_its_vms(wide):
    """A second VM of the same executable (and exe.jit()) reuses its library, and the
    library lives while any VM or the executable does."""
    mod, params, inputs = wide
    before = _mapped("accel-jit-")
    exe = ac.build(mod, params)
    first, second = ac.virtual_machine(exe), ac.virtual_machine(exe)
    assert first.library.same_as(second.library) and exe.jit().same_as(first.library)
    assert len(_new_libraries(before)) == 1
    output = run_main(first, inputs[0])
    del first, exe
    gc.collect()
    assert len(_new_libraries(before)) == 1, "the second VM still holds the library"
    np.testing.assert_array_equal(run_main(second, inputs[0]), output)
    assert isinstance(second.library, tvm.runtime.Module)
    del second
    gc.collect()
    assert not _new_libraries(before)
