"""The benchmark: one model, side by side in one process, in up to four modes.

* **fused** — the accelerator flow (``partition_for_accel(fuse=True)``): conv + batch norm +
  activation (+ pooling) as one fused chain per layer, run on the simulator;
* **decomposed** — the same with ``fuse=False``: one accelerator op per source op,
  intermediates through memory;
* **host** — TVM's own CPU build of the same module (``build_host``: batch norm decomposed by
  TVM, untuned LLVM code);
* **pytorch** — PyTorch eager (when the model came from PyTorch).

Each mode is built, warmed up, then timed over ``repeat`` rounds that interleave the modes
(fused, decomposed, host, pytorch, fused, ...), so that the machine's background load hits them
alike; the result is the median, min and max wall time per mode. The accelerator modes also
report what the simulator counted for one inference (cycles, frames/s at the configuration's
clock, bytes read and written, MAC utilisation) and, on request, per layer; with
``per_layer_wall`` every layer is also timed alone on the simulator, fused against decomposed.

Threads: the simulator's kernels use ``ACCEL_NUM_THREADS`` (else every online CPU); PyTorch is
set to the same count; TVM's untuned host build has no parallel loops (one thread whatever
``TVM_NUM_THREADS`` says).

>>> result = run_bench("resnet18", repeat=10)
>>> print(format_table(result)); result["modes"]["fused"]["wall_ms"]["median"]
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..sim.costs import CostTotals, engine_names
from ..tables import Column, render_table

# The MODEL grammar and loading live in model_spec; these names stay importable from here.
from .model_spec import LoadedModel, load_callable, load_model, zoo_names  # noqa: F401
from .progress import ProgressCallback, progress_callback, steps

MODES = ("fused", "decomposed", "host", "pytorch")
ACCEL_MODES = ("fused", "decomposed")


# --- timing -----------------------------------------------------------------------------------

def accel_threads() -> int:
    """The thread count of the simulator's kernels (ACCEL_NUM_THREADS, else the CPUs)."""
    from ..sim import Device

    return Device("nv_full").num_threads


def _summary(times_s: Sequence[float]) -> Dict[str, float]:
    ms = [t * 1e3 for t in times_s]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms), "runs": len(ms)}


def _accel_figures(records, config) -> Dict[str, Any]:
    totals = CostTotals.of(records)
    return {"cycles": totals.cycles, "simulated_ms": totals.seconds(config.clock_hz) * 1e3,
            "frames_per_s": totals.frames_per_s(config.clock_hz),
            "bytes_read": totals.bytes_read, "bytes_written": totals.bytes_written,
            "macs": totals.macs, "utilization": totals.utilization(config.macs_per_cycle("fp32")),
            "layers": len(records)}


def _layer_row(record) -> Dict[str, Any]:
    return {"label": record.label, "engines": engine_names(record),
            "ops": len(record.ops), "macs": record.macs, "cycles": record.cycles,
            "bytes_read": record.bytes_read, "bytes_written": record.bytes_written,
            "utilization": record.utilization}


def _materialise(ops: list, in_shape, config, mode: str, rng) -> list:
    """Engine ops with random data in place of the shape-only operands (for timing alone)."""
    from ..sim import Device
    from ..sim.ops import SHAPE_ONLY, Conv, Sdp

    device = Device(config)
    result = []
    shape = tuple(in_shape)
    for op in ops:
        if isinstance(op, Conv):
            k, c, r, s = op.weight_shape
            op = dataclasses.replace(op, weight_shape=None, weights=(
                rng.standard_normal((k, c, r, s)) / np.sqrt(c * r * s)).astype(np.float32))
        elif isinstance(op, Sdp):
            channels = shape[1]
            fields = {}
            for name in ("scale", "shift", "prelu_slope"):
                if getattr(op, name) is SHAPE_ONLY:
                    fields[name] = rng.uniform(0.5, 1.5, channels).astype(np.float32)
            if op.operand is SHAPE_ONLY:
                fields["operand"] = rng.standard_normal(shape).astype(np.float32)
            op = dataclasses.replace(op, **fields)
        result.append(op)
        shape = device.output_shape(result, in_shape, mode=mode)
    return result


def _per_layer_wall(layers: list, config, repeat: int, step: Callable[[], None]) -> List[dict]:
    """Every accelerator layer (``(label, primitive, layer)`` of the fused partition) timed
    alone on the simulator, fused against decomposed."""
    from ..sim import Device

    rng = np.random.default_rng(0)
    device = Device(config)
    rows = []
    for label, primitive, layer in layers:
        x = rng.standard_normal(layer.in_shape).astype(np.float32)
        runs = {}
        for name, fuse in (("fused", True), ("decomposed", False)):
            mode = "fused" if layer.fused(fuse) else "independent"
            ops = _materialise(layer.engine_ops(fuse), layer.in_shape, config, mode, rng)
            out = np.empty(device.output_shape(ops, layer.in_shape, mode=mode), np.float32)
            device.run(ops, x, mode=mode, out=out)  # warm-up
            runs[name] = (ops, mode, out)
        times = {name: [] for name in runs}
        for _ in range(repeat):
            for name, (ops, mode, out) in runs.items():
                start = time.perf_counter()
                device.run(ops, x, mode=mode, out=out)
                times[name].append(time.perf_counter() - start)
        rows.append({"label": label, "primitive": primitive,
                     **{f"{name}_wall_ms": _summary(t) for name, t in times.items()}})
        step()
    return rows


def _check_arguments(modes: Sequence[str], repeat: int, host_repeat: int, warmup: int,
                     threads: Optional[int]) -> List[str]:
    """The modes without repeats; AccelInvalidError for an unknown mode or a bad count."""
    from ..errors import AccelInvalidError

    modes = list(dict.fromkeys(modes))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise AccelInvalidError(f"unknown modes {unknown}: choose among {', '.join(MODES)}")
    if repeat < 1 or host_repeat < 1 or warmup < 0:
        raise AccelInvalidError(f"repeat = {repeat} and host_repeat = {host_repeat} must be >= 1, "
                                f"warmup = {warmup} >= 0")
    if threads is not None and threads < 1:
        raise AccelInvalidError(f"threads = {threads} must be >= 1")
    return modes


def _runner(mode: str, model: LoadedModel, config, threads: int) -> Callable[[], Any]:
    """One inference of the model in a mode, built (the build is what compile_s times)."""
    if mode in ACCEL_MODES or mode == "host":
        import tvm

        from ..compiler import toolchain

        if mode == "host":
            vm = tvm.relax.VirtualMachine(toolchain.build_host(model.mod, model.params),
                                          tvm.cpu())
        else:
            vm = toolchain.virtual_machine(toolchain.build(model.mod, model.params,
                                                           config=config, fuse=mode == "fused"))
        tvm_inputs = [tvm.runtime.tensor(a) for a in model.inputs]
        return lambda: vm["main"](*tvm_inputs)
    import torch

    torch.set_num_threads(threads)
    torch_model = model.torch_model.eval()

    def run_torch():
        with torch.no_grad():
            return torch_model(*model.torch_inputs)
    return run_torch


def _timed_rounds(runners: Dict[str, Callable[[], Any]], rounds: Dict[str, int], warmup: int,
                  step: Callable[[], None]) -> Dict[str, List[float]]:
    """Warm-up runs, then the timed rounds, interleaving the modes (a mode drops out once it
    has its rounds): the wall times per mode, in seconds."""
    for run in runners.values():
        for _ in range(warmup):
            run()
            step()
    times: Dict[str, List[float]] = {m: [] for m in runners}
    for round_index in range(max(rounds.values())):
        for mode, run in runners.items():
            if round_index >= rounds[mode]:
                continue
            start = time.perf_counter()
            run()
            times[mode].append(time.perf_counter() - start)
            step()
    return times


def _thread_notes(threads: int) -> Dict[str, str]:
    return {
        "fused": f"simulator kernels, {threads} thread(s) (ACCEL_NUM_THREADS, else the CPUs)",
        "decomposed": f"simulator kernels, {threads} thread(s)",
        "host": "TVM untuned LLVM build: 1 thread (it has no parallel loops, no call of "
                "TVMBackendParallelLaunch, so TVM_NUM_THREADS changes nothing)",
        "pytorch": f"torch.set_num_threads({threads})"}


def run_bench(model: Any, inputs: Optional[Sequence] = None, *,
              modes: Sequence[str] = MODES, config: Any = "nv_full", repeat: int = 10,
              host_repeat: int = 3, warmup: int = 1, per_layer: bool = False,
              per_layer_wall: bool = False, threads: Optional[int] = None,
              progress: Union[None, bool, ProgressCallback] = None) -> Dict[str, Any]:
    """Benchmark a model in several modes, side by side.

    Parameters
    ----------
    model, inputs
        As for :func:`load_model`: a zoo name, an ``.onnx`` path, ``file.py:function``, a torch
        module or a Relax module (with ``inputs``).
    modes : sequence of str
        Among "fused", "decomposed", "host", "pytorch".
    config : AccelConfig or str
        The accelerator configuration of the accelerator modes.
    repeat : int
        Timed runs per mode (after ``warmup`` untimed runs).
    host_repeat : int
        Timed runs of the host mode (TVM's untuned build is slow: ~3 s per ResNet-18).
    per_layer : bool
        Include the per-layer simulated figures of the accelerator modes.
    per_layer_wall : bool
        Also time every layer alone on the simulator, fused against decomposed.
    threads : int, optional
        Threads of the simulator and of PyTorch (default: ACCEL_NUM_THREADS, else the CPUs).
    progress : callable or bool, optional
        ``progress(done, total)``, called as builds, runs and layer timings finish (``done``
        from 0 to ``total``); or a bool: show a progress bar on stderr (default: when stderr
        is a terminal).

    Returns
    -------
    dict
        The JSON contract: ``threads``, ``modes`` (per mode ``wall_ms`` with ``median``,
        ``min``, ``max``; for the accelerator modes ``cycles``, ``frames_per_s``,
        ``bytes_read``, ``bytes_written``, ``utilization``), plus ``model``, ``config``,
        ``thread_notes``, ``compile_s`` and, on request, ``layers``.
    """
    from ..sim.config import AccelConfig

    modes = _check_arguments(modes, repeat, host_repeat, warmup, threads)
    if threads is not None:
        os.environ["ACCEL_NUM_THREADS"] = str(threads)  # read when the simulator makes a device
    config = AccelConfig.resolve(config)

    from ..sim.profiling import profile
    from .estimation import model_layers

    model = load_model(model, inputs)
    skipped = {}
    if "pytorch" in modes and model.torch_model is None:
        modes.remove("pytorch")
        skipped["pytorch"] = "the model did not come from PyTorch"
    threads = accel_threads()
    rounds = {m: (host_repeat if m == "host" else repeat) for m in modes}
    wall_layers = (model_layers(model.mod, model.params, config=config, fuse=True)
                   if per_layer_wall else [])
    step = steps(progress_callback(progress, f"bench {model.name}"),
                 len(modes) * (1 + warmup) + sum(rounds.values()) + len(wall_layers))
    runners: Dict[str, Callable[[], Any]] = {}
    compile_s: Dict[str, float] = {}
    for mode in modes:
        start = time.perf_counter()
        runners[mode] = _runner(mode, model, config, threads)
        compile_s[mode] = time.perf_counter() - start
        step()

    result: Dict[str, Any] = {
        "model": model.name, "config": config.to_dict(), "threads": threads,
        "thread_notes": _thread_notes(threads),
        "repeat": repeat, "host_repeat": host_repeat, "warmup": warmup,
        "compile_s": compile_s, "skipped": skipped, "modes": {}}
    load_before = os.getloadavg()[0]
    times = _timed_rounds(runners, rounds, warmup, step)
    # The machine may be shared: a busy neighbour slows the multi-threaded modes most.
    result["load_average"] = {"before": load_before, "after": os.getloadavg()[0],
                              "cpus": os.cpu_count()}

    layers: Dict[str, list] = {}
    for mode in modes:
        entry: Dict[str, Any] = {"wall_ms": _summary(times[mode])}
        if mode in ACCEL_MODES:
            with profile() as prof:  # one more run, to read what the simulator counted
                runners[mode]()
            entry.update(_accel_figures(prof.records, config))
            layers[mode] = [_layer_row(r) for r in prof.records]
        result["modes"][mode] = entry
    if per_layer or per_layer_wall:
        result["layers"] = _merge_layers(layers)
    if per_layer_wall:
        walls = {row["label"]: row for row in _per_layer_wall(wall_layers, config, repeat, step)}
        for row in result["layers"]:
            row.update({k: v for k, v in walls.get(row["label"], {}).items()
                        if k.endswith("_wall_ms")})
    return result


def _merge_layers(layers: Dict[str, list]) -> List[dict]:
    """One row per layer label: the fused and decomposed figures side by side."""
    rows: Dict[str, dict] = {}
    for mode, records in layers.items():
        for record in records:
            row = rows.setdefault(record["label"], {"label": record["label"]})
            row[mode] = {k: v for k, v in record.items() if k != "label"}
    return list(rows.values())


# --- output -----------------------------------------------------------------------------------

_MODE_COLUMNS = (Column("mode", 11, "<"), Column("wall ms", 10, spec=",.2f"),
                 Column("min", 9, spec=",.2f"), Column("max", 9, spec=",.2f"),
                 Column("vs pytorch", 10), Column("sim cycles", 12, spec=","),
                 Column("sim ms", 8, spec=".3f"), Column("frames/s", 9, spec=".1f"),
                 Column("MB read", 8, spec=".2f"), Column("MB written", 10, spec=".2f"),
                 Column("MAC util", 8, spec=".1%"))


def _mode_row(mode: str, entry: Dict[str, Any], reference: Optional[float]) -> list:
    wall = entry["wall_ms"]
    ratio = f"{wall['median'] / reference:.2f}x" if reference else "-"
    row = [mode, wall["median"], wall["min"], wall["max"], ratio]
    if "cycles" in entry:
        row += [entry["cycles"], entry["simulated_ms"], entry["frames_per_s"],
                entry["bytes_read"] / 1e6, entry["bytes_written"] / 1e6, entry["utilization"]]
    return row


def format_table(result: Dict[str, Any]) -> str:
    """The terminal table: one row per mode, then per layer when present."""
    cfg = result["config"]
    modes = result["modes"]
    load = result["load_average"]
    title = (f"{result['model']} on {cfg['name']} ({cfg['atomic_c']}x{cfg['atomic_k']} MACs, "
             f"{cfg['dram_bytes_per_s'] / 1e9:g} GB/s, {cfg['clock_hz'] / 1e9:g} GHz); "
             f"threads: simulator and PyTorch {result['threads']}, TVM host 1; "
             f"{result['repeat']} timed rounds ({result['host_repeat']} for host) after "
             f"{result['warmup']} warm-up; load average {load['before']:.2f} "
             f"before, {load['after']:.2f} after ({load['cpus']} CPUs)")
    reference = modes.get("pytorch", {}).get("wall_ms", {}).get("median")
    rows = [_mode_row(mode, entry, reference) for mode, entry in modes.items()]
    rows += [f"{mode:<11} skipped: {why}" for mode, why in result.get("skipped", {}).items()]
    lines = [title, render_table(_MODE_COLUMNS, rows)]
    if "fused" in modes and "decomposed" in modes:
        f, d = modes["fused"], modes["decomposed"]
        moved = lambda e: e["bytes_read"] + e["bytes_written"]  # noqa: E731
        lines.append(f"fused vs decomposed: {moved(d) / moved(f):.2f}x fewer bytes, "
                     f"{d['cycles'] / f['cycles']:.2f}x fewer cycles, "
                     f"{d['wall_ms']['median'] / f['wall_ms']['median']:.2f}x wall time")
    if "host" in modes and "fused" in modes:
        lines.append(f"fused vs TVM host build: "
                     f"{modes['host']['wall_ms']['median'] / modes['fused']['wall_ms']['median']:.1f}x "
                     "faster")
    if result.get("layers"):
        lines.append("")
        lines.append(format_layers(result["layers"]))
    return "\n".join(lines)


_LAYER_COLUMNS = (Column("#", 3), Column("layer", 44, "<", clip=True),
                  Column("KB fused", 9, spec=".1f"), Column("KB decomp", 10, spec=".1f"),
                  Column("ratio", 6), Column("kcyc fused", 10, spec=".1f"),
                  Column("kcyc decomp", 11, spec=".1f"))
_WALL_COLUMNS = (Column("ms fused", 9, spec=".3f"), Column("ms decomp", 9, spec=".3f"))


def format_layers(rows: List[dict]) -> str:
    """The per-layer table of a benchmark: bytes and cycles fused against decomposed (and the
    wall time of every layer alone, when measured)."""
    wall = any("fused_wall_ms" in row for row in rows)
    kb = lambda e: (e["bytes_read"] + e["bytes_written"]) / 1e3 if e else None  # noqa: E731
    kcycles = lambda e: e["cycles"] / 1e3 if e else None  # noqa: E731
    cells = []
    for i, row in enumerate(rows):
        f, d = row.get("fused"), row.get("decomposed")
        kf, kd = kb(f), kb(d)
        cells.append([i, row["label"], kf, kd, f"{kd / kf:.2f}" if kf and kd else "-",
                      kcycles(f), kcycles(d)])
        if wall:
            cells[-1] += [row.get(f"{mode}_wall_ms", {}).get("median")
                          for mode in ("fused", "decomposed")]
    return render_table(_LAYER_COLUMNS + (_WALL_COLUMNS if wall else ()), cells)
