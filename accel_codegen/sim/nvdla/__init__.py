"""NVDLA's register programming as an input of the simulator: play NVDLA's own trace tests
(``.cfg`` register writes + ``.dat`` memory images) with NVDLA's nv_small register map and int8
arithmetic, and compute the same CRC-32 as NVDLA's testbench. No TVM.

>>> from accel_codegen.sim.nvdla import nvdla_trace
>>> nvdla_trace("path/to/test.cfg")   # {"crc": ["0x44d46c92"], "cycles": ...}
"""
from .runner import TraceRun, main, nvdla_trace, play

__all__ = ["TraceRun", "main", "nvdla_trace", "play"]
