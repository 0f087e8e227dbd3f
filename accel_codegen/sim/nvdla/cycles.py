"""The cycle estimate of a trace's layers from the project's cost model (csrc/cost_model.c,
through :func:`accel_codegen.sim.device.estimate_chain`), under NVDLA's RTL testbench memory.

The testbench's memory is not a DRAM: a fixed read latency, one beat per cycle, a read
request accepted every few cycles (the TESTBENCH_* constants below, their one definition).
:func:`testbench_config` is nv_small with that memory in place of its DRAM (bursts of one beat,
no turnaround). The cost model's RTL-calibrated fields (pipeline cycles, weight-load cycles)
are nv_small's own; docs/nvdla_rtl.md has the error table against the RTL's cycles.

The CDP layer's estimate here (its int8 descriptor carries tables the cost does not need) is the
cost model's own rule for a streaming engine written out: the CDP's pipeline cycles, then the
long pole of the read latency plus one element per cycle (nv_small's CDP throughput, whole
atoms) and the transfers (the input read once at the read rate, the output written once).
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import List, Sequence

from ..config import AccelConfig
from ..device import estimate_chain
from ..ops import Conv, Pool, Sdp, SHAPE_ONLY
from .layers import ATOM_C, Layer, whole_atoms

TESTBENCH_LATENCY = 32      # cycles from a read request to its data
TESTBENCH_BEAT_BYTES = 8    # one 8-byte beat per cycle
TESTBENCH_REQUEST_CYCLES = 2  # a read request accepted every other cycle


@lru_cache(maxsize=None)
def testbench_config() -> AccelConfig:
    """nv_small with the RTL testbench's memory in place of its DRAM."""
    base = AccelConfig.preset("nv_small")
    return dataclasses.replace(
        base, name="nv_small_testbench",
        dram_bytes_per_s=TESTBENCH_BEAT_BYTES * base.clock_hz,
        dram_latency_cycles=TESTBENCH_LATENCY, dram_burst_bytes=TESTBENCH_BEAT_BYTES,
        dram_turnaround_cycles=0.0, dram_read_request_cycles=TESTBENCH_REQUEST_CYCLES)


def _sdp_op(layer: Layer) -> Sdp:
    """The SDP as the simulator's descriptor: per-channel operands where the trace's BS or BN
    reads them from memory; none where its operands are registers or it is bypassed (NVDLA
    then reads its data alone)."""
    if not layer.params.get("operands", True):
        return Sdp(precision="int8")
    return Sdp(precision="int8", bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY)


def _pool_op(layer: Layer) -> Pool:
    p = layer.params
    kind = {0: "avg", 1: "max", 2: "max"}[p["method"]]   # min costs what max costs
    pt, pb, pl, pr = p["padding"]
    # NVDLA's PDP divides by the whole window (its padded positions add PAD_VALUE)
    return Pool(kind=kind, kernel=p["kernel"], stride=p["stride"], padding=(pt, pl, pb, pr),
                count_include_pad=True, precision="int8")


def _chains(layers: Sequence[Layer]):
    """Group a trace's layers into the chains the simulator runs (conv -> SDP -> PDP fused)."""
    chains: List[List[Layer]] = []
    for layer in layers:
        joins = chains and (
            (layer.kind == "sdp" and chains[-1][-1].kind == "conv")
            or (layer.kind == "pdp" and layer.params.get("on_the_fly")
                and chains[-1][-1].kind == "sdp"))
        if joins:
            chains[-1].append(layer)
        else:
            chains.append([layer])
    return chains


def _cdp_cycles(layer: Layer, config: AccelConfig) -> int:
    """cost_model.c's rule for an engine that reads and writes memory, for the CDP: its
    pipeline cycles, then the long pole of the read latency plus its elements (whole atoms) at
    its throughput, and the transfers (reads no faster than the read requests go)."""
    c, h, w = layer.in_shape
    elements = whole_atoms(c) * h * w
    beats = config.dram_bytes_per_s / config.clock_hz
    reads = beats if config.dram_read_request_cycles <= 0 else min(
        beats, config.dram_burst_bytes / config.dram_read_request_cycles)
    transfer = max(elements / reads, 2 * elements / beats)
    compute = -(-elements // config.cdp_throughput)
    return int(config.cdp_pipeline_cycles + max(config.dram_latency_cycles + compute,
                                                config.dram_latency_cycles + math.ceil(transfer)))


def pdp_split_cycles(layer: Layer, config: AccelConfig) -> int:
    """What NVDLA's PDP spends on split mode (a width its line buffer cannot hold pooled in
    SPLIT_NUM + 1 vertical strips; the simulator's descriptor has no split): every strip after
    the first reads, for each line of each 8-channel surface, its partial width plus the
    ``kernel_w - stride_w`` columns it shares with the strip before (NV_NVDLA_PDP_RDMA_ig's
    request size; fewer when the stride exceeds the kernel), and the core pools them
    (NV_NVDLA_PDP_CORE_cal1d's pooling_pwidth), at the PDP's elements per cycle. The reads of
    the strips pipeline like those of the surfaces (no restart per strip), and each strip's
    line ends add no flush bubble the whole cube's do not (cal1d sets them only at the last
    strip, where its first output is a whole kernel). From the registers; the RTL's cycles on
    both split traces exactly: pdp_5x7x8_4x1_split (one more strip, one surface, 2 columns x 7
    lines: 112 cycles) and pdp_16x6x16_4x2_split (two more, two surfaces, 2 x 6: 384)."""
    splits = int(layer.params.get("splits", 1))
    if layer.kind != "pdp" or splits <= 1:
        return 0
    c, h, _ = layer.in_shape
    overlap = layer.params["kernel"][1] - layer.params["stride"][1]
    elements = (splits - 1) * (whole_atoms(c) // ATOM_C) * overlap * h * ATOM_C
    return math.ceil(elements / config.pdp_throughput)   # negative: the columns skipped


def simulator_chains(layers: Sequence[Layer]):
    """The trace's layers as the simulator's descriptors: a list of ``(ops, in_shape)``, one
    per chain (``Conv`` + ``Sdp`` fused, ``Sdp``, ``Pool``, int8; operands shape-only), or
    ``(None, layer)`` for a CDP layer, costed by the rule above."""
    out = []
    for chain in _chains(layers):
        first = chain[0]
        if first.kind == "cdp":
            out.append((None, first))
            continue
        ops = []
        for layer in chain:
            if layer.kind == "conv":
                c = layer.in_shape[0]
                k = layer.out_shape[0]
                pt, pb, pl, pr = layer.params["padding"]
                ops.append(Conv(weights=None, weight_shape=(k, c) + tuple(layer.params["kernel"]),
                                stride=layer.params["stride"], padding=(pt, pl, pb, pr),
                                dilation=layer.params["dilation"], precision="int8"))
            elif layer.kind == "sdp":
                ops.append(_sdp_op(layer))
            elif layer.kind == "pdp":
                ops.append(_pool_op(layer))
        out.append((ops, (1,) + tuple(first.in_shape)))
    return out


def estimate_cycles(layers: Sequence[Layer], config: AccelConfig = None) -> int:
    """Estimated cycles of a trace's layers, first OP_ENABLE to the last write."""
    config = config or testbench_config()
    total = 0
    for ops, shape in simulator_chains(layers):
        if ops is None:
            total += _cdp_cycles(shape, config)
        else:
            total += estimate_chain(config, ops, shape, precision="int8").cycles
    return int(total + sum(pdp_split_cycles(layer, config) for layer in layers))
