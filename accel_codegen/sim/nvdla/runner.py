"""Play an NVDLA trace test (``.cfg`` + ``.dat``) on the simulator's NVDLA front end.

The register writes are collected per unit; a layer runs when its units have been enabled
(``D_OP_ENABLE``) and the trace waits for it (``intr_notify``, or a ``check_crc`` that follows);
``check_crc`` takes zlib's CRC-32 of the region, as NVDLA's testbench does.

>>> result = nvdla_trace("tests/nv_small/sdp_3x3x33_bs_bn_int8_0/sdp_3x3x33_bs_bn_int8_0.cfg")
>>> result["crc"], result["cycles"]
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ...errors import AccelInvalidError, AccelUnsupportedError
from . import layers as L
from .cdp import LutMemory, run_cdp
from . import regs
from .trace import Memory, RegisterFile, dat_path, load_dat, number, parse_cfg

#: The status registers a trace may poll and the value each always has in the simulator, where
#: a layer runs to completion when the trace waits for it: the CBUF flush is done at once.
READY_STATUS = {("CDMA", "S_CBUF_FLUSH_STATUS"): 1}


@dataclass
class TraceRun:
    """The outcome of one trace: CRCs in check order (computed and expected), the layers run."""
    crcs: List[int] = field(default_factory=list)
    expected: List[int] = field(default_factory=list)
    layers: List[L.Layer] = field(default_factory=list)
    memory: Optional[Memory] = None

    @property
    def matches(self) -> bool:
        """Every check_crc region gave the trace's golden CRC (vacuously true without one)."""
        return self.crcs == self.expected


class Runner:
    def __init__(self) -> None:
        self.memory = Memory()
        self.regs = RegisterFile()
        self.pending: Dict[str, bool] = {}
        self.layers: List[L.Layer] = []
        self.cdp_lut = LutMemory()

    def _enable(self, unit: str) -> None:
        self.pending[unit] = True

    def _poll(self, name: str, value: int, where: str) -> None:
        """A trace's wait for a status register: only the values the simulator always has
        (READY_STATUS) can be waited for; any other wait would never end (or means a status
        the simulator does not model)."""
        reg = regs.lookup(name)
        if READY_STATUS.get((reg.unit, reg.name)) != value:
            known = ", ".join(f"{u}.{n} = {v:#x}" for (u, n), v in READY_STATUS.items())
            raise AccelUnsupportedError(f"{where}: poll_reg_equal({name}, {value:#x}) waits for "
                                        f"a status the simulator does not have (only {known})")

    def flush(self) -> None:
        """Run the layer(s) whose units are enabled."""
        p = self.pending
        if not p:
            return
        unsupported = [u for u in p if u in ("BDMA", "RBK")]
        if unsupported:
            raise AccelUnsupportedError(f"nv_small has no {unsupported[0]} (the trace enables it)")
        r, mem = self.regs, self.memory
        sdp_out = None
        if p.get("CDMA") or p.get("CACC") or p.get("CSC"):
            layer, acc = L.run_conv(r, mem)
            self.layers.append(layer)
            if not p.get("SDP"):
                raise AccelInvalidError("a convolution ran without its SDP (CACC's output goes "
                                        "to the SDP)")
            layer, sdp_out = L.run_sdp(r, mem, acc)
            self.layers.append(layer)
        elif p.get("SDP"):
            layer, sdp_out = L.run_sdp(r, mem)
            self.layers.append(layer)
        if p.get("PDP"):
            on_fly = not r.get("PDP", "D_OPERATION_MODE_CFG", "FLYING_MODE")
            if on_fly and sdp_out is None:
                raise AccelInvalidError("the PDP takes the SDP's output on the fly but no SDP ran")
            layer, _ = L.run_pdp(r, mem, sdp_out if on_fly else None)
            self.layers.append(layer)
        if p.get("CDP"):
            layer, _ = run_cdp(r, mem, self.cdp_lut)
            self.layers.append(layer)
        self.pending = {}

    def play(self, cfg_path: str) -> TraceRun:
        run = TraceRun(memory=self.memory)
        for cmd in parse_cfg(cfg_path):
            a = cmd.args
            where = f"{cfg_path}:{cmd.line}"
            if cmd.op == "mem_init":
                self.memory.zero(number(a[1], where), number(a[2], where))
            elif cmd.op == "mem_load":
                load_dat(self.memory, number(a[1], where), dat_path(cfg_path, a[2]))
            elif cmd.op == "reg_write":
                value = number(a[1], where)
                reg = self.regs.write(a[0], value)
                if reg.name == "D_OP_ENABLE" and value & 1:
                    self._enable(reg.unit)
                elif reg.unit == "CDP" and reg.name == "S_LUT_ACCESS_CFG":
                    self.cdp_lut.access_cfg(value)
                elif reg.unit == "CDP" and reg.name == "S_LUT_ACCESS_DATA":
                    self.cdp_lut.data(value)
            elif cmd.op == "poll_reg_equal":
                self._poll(a[0], number(a[1], where), where)
            elif cmd.op in ("intr_notify", "check_nothing"):
                self.flush()
            elif cmd.op == "check_crc":
                self.flush()
                base, size = number(a[2], where), number(a[3], where)
                run.crcs.append(self.memory.crc32(base, size))
                run.expected.append(number(a[4], where))
        self.flush()
        run.layers = self.layers
        return run


def play(cfg_path: str) -> TraceRun:
    """Play a trace test and return its :class:`TraceRun`."""
    return Runner().play(cfg_path)


def _summary(run: TraceRun) -> dict:
    from .cycles import estimate_cycles
    return {"crc": [f"{c:#010x}" for c in run.crcs], "cycles": int(estimate_cycles(run.layers))}


def nvdla_trace(cfg_path: str) -> dict:
    """``{"crc": [CRC-32 of each check_crc region, in order, as hex strings],
    "cycles": the cost model's estimate under the testbench's memory}``."""
    return _summary(play(cfg_path))


def main(cfg_path: str) -> int:
    """What ``accel-codegen nvdla-trace CFG`` does: print one JSON line; 0 when every CRC
    matches the trace's golden value, 1 otherwise."""
    run = play(cfg_path)
    print(json.dumps({**_summary(run), "golden": [f"{c:#010x}" for c in run.expected],
                      "match": run.matches}))
    return 0 if run.matches else 1
