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
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

MODES = ("fused", "decomposed", "host", "pytorch")
ACCEL_MODES = ("fused", "decomposed")


# --- progress ---------------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on stderr when it is a terminal; silent when piped."""

    def __init__(self, total: int, label: str = "", enabled: Optional[bool] = None,
                 stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = max(int(total), 1)
        self.done = 0
        self.label = label
        self._draw()

    def step(self, label: Optional[str] = None, count: int = 1) -> None:
        self.done = min(self.done + count, self.total)
        if label is not None:
            self.label = label
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total)
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{self.label[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 90 + "\r")
            self.stream.flush()


# --- models -----------------------------------------------------------------------------------

@dataclasses.dataclass
class LoadedModel:
    """A model ready for every mode: the Relax module, its inputs, and the torch original."""

    name: str
    mod: Any                      # tvm.IRModule
    params: Dict[str, np.ndarray]
    inputs: List[np.ndarray]
    torch_model: Any = None       # torch.nn.Module, when the model came from PyTorch
    torch_inputs: Optional[tuple] = None


def zoo_names() -> List[str]:
    from .models import MODELS

    return sorted(MODELS)


def _from_torch(name: str, model, inputs) -> LoadedModel:
    from . import frontend
    from .errors import AccelInvalidError

    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    try:
        arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    except AttributeError:
        raise AccelInvalidError(f"{name}: the example inputs must be torch tensors") from None
    mod, params = frontend.from_pytorch(model, inputs)
    return LoadedModel(name, mod, params, arrays, model, inputs)


def _onnx_inputs(path: Path) -> List[np.ndarray]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    arrays = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        arrays.append(rng.standard_normal(dims).astype(dtype))
    return arrays


def load_callable(spec: str) -> Callable[[], Any]:
    """``path/to/file.py:function`` -> the function (the file is imported as a module)."""
    from .errors import AccelInvalidError

    path_text, _, function = spec.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise AccelInvalidError(f"model file '{path}' does not exist")
    module_spec = importlib.util.spec_from_file_location(f"_accel_user_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # the user's file: say which and why, keep the cause
        raise AccelInvalidError(f"importing '{path}' failed: {type(error).__name__}: "
                                f"{error}") from error
    fn = getattr(module, function, None)
    if not callable(fn):
        raise AccelInvalidError(f"'{path}' has no function {function!r}")
    return fn


def load_model(spec: Any, inputs: Optional[Sequence] = None) -> LoadedModel:
    """A model for the benchmark and the command-line tool.

    Parameters
    ----------
    spec : str or torch.nn.Module or tvm.IRModule or LoadedModel
        A zoo model name, an ``.onnx`` path, ``file.py:function`` (the function returns
        ``(torch_module, example_inputs_tuple)``), a torch module (with ``inputs``), or a Relax
        module (with ``inputs`` as NumPy arrays; no PyTorch mode then).
    inputs : sequence, optional
        The example inputs for a module given as an object.
    """
    from .errors import AccelInvalidError

    if isinstance(spec, LoadedModel):
        return spec
    if not isinstance(spec, str):
        import tvm

        if isinstance(spec, tvm.IRModule):
            if inputs is None:
                raise AccelInvalidError("a Relax module needs its example inputs")
            return LoadedModel("module", spec, {}, [np.ascontiguousarray(a) for a in inputs])
        if inputs is None:
            raise AccelInvalidError(f"a {type(spec).__name__} needs its example inputs")
        return _from_torch(type(spec).__name__, spec, tuple(inputs))
    if spec.endswith(".onnx"):
        path = Path(spec)
        if not path.is_file():
            raise AccelInvalidError(f"ONNX file '{path}' does not exist")
        from . import frontend

        mod, params = frontend.from_onnx(path)
        return LoadedModel(path.stem, mod, params, _onnx_inputs(path))
    if ":" in spec and spec.rpartition(":")[0].endswith(".py"):
        result = load_callable(spec)()
        if not (isinstance(result, tuple) and len(result) == 2):
            raise AccelInvalidError(f"{spec} must return (torch_module, example_inputs_tuple), "
                                    f"got {type(result).__name__}")
        return _from_torch(spec.rpartition(":")[2], *result)
    from .models import MODELS, get_model

    if spec not in MODELS:
        raise AccelInvalidError(
            f"unknown model {spec!r}: give a zoo model ({', '.join(sorted(MODELS))}), an .onnx "
            "file, or file.py:function")
    model, example = get_model(spec)
    return _from_torch(spec, model, example)


# --- timing -----------------------------------------------------------------------------------

def accel_threads() -> int:
    """The thread count of the simulator's kernels (ACCEL_NUM_THREADS, else the CPUs)."""
    from .sim import Device

    return Device("nv_full").num_threads


def _summary(times_s: Sequence[float]) -> Dict[str, float]:
    ms = [t * 1e3 for t in times_s]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms), "runs": len(ms)}


def _accel_figures(records, config) -> Dict[str, Any]:
    cycles = sum(r.cycles for r in records)
    macs = sum(r.macs for r in records)
    peak = config.macs_per_cycle("fp32")
    return {"cycles": cycles, "simulated_ms": cycles / config.clock_hz * 1e3,
            "frames_per_s": config.clock_hz / cycles if cycles else None,
            "bytes_read": sum(r.bytes_read for r in records),
            "bytes_written": sum(r.bytes_written for r in records),
            "macs": macs, "utilization": macs / (cycles * peak) if cycles else 0.0,
            "layers": len(records)}


def _layer_row(record) -> Dict[str, Any]:
    return {"label": record.label, "engines": "+".join(op.engine for op in record.ops),
            "ops": len(record.ops), "macs": record.macs, "cycles": record.cycles,
            "bytes_read": record.bytes_read, "bytes_written": record.bytes_written,
            "utilization": record.utilization}


def _materialise(ops: list, in_shape, config, mode: str, rng) -> list:
    """Engine ops with random data in place of the shape-only operands (for timing alone)."""
    from .ops import SHAPE_ONLY, Conv, Sdp
    from .sim import Device

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


def _per_layer_wall(model: LoadedModel, config, repeat: int, progress: Progress) -> List[dict]:
    """Every accelerator layer timed alone on the simulator, fused against decomposed."""
    from .estimation import model_layers
    from .sim import Device

    rng = np.random.default_rng(0)
    device = Device(config)
    fused = model_layers(model.mod, model.params, config=config, fuse=True)
    rows = []
    for label, primitive, layer in fused:
        x = rng.standard_normal(layer.in_shape).astype(np.float32)
        runs = {}
        for name, fuse, mode in (("fused", True, "fused"), ("decomposed", False, "independent")):
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
        progress.step(f"layer {label}")
    return rows


def run_bench(model: Any, inputs: Optional[Sequence] = None, *,
              modes: Sequence[str] = MODES, config: Any = "nv_full", repeat: int = 10,
              host_repeat: int = 3, warmup: int = 1, per_layer: bool = False,
              per_layer_wall: bool = False, threads: Optional[int] = None,
              progress: Optional[bool] = None) -> Dict[str, Any]:
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
    progress : bool, optional
        Show a progress bar (default: when stderr is a terminal).

    Returns
    -------
    dict
        The JSON contract: ``threads``, ``modes`` (per mode ``wall_ms`` with ``median``,
        ``min``, ``max``; for the accelerator modes ``cycles``, ``frames_per_s``,
        ``bytes_read``, ``bytes_written``, ``utilization``), plus ``model``, ``config``,
        ``thread_notes``, ``compile_s`` and, on request, ``layers``.
    """
    from .config import AccelConfig
    from .errors import AccelInvalidError

    modes = list(dict.fromkeys(modes))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise AccelInvalidError(f"unknown modes {unknown}: choose among {', '.join(MODES)}")
    if repeat < 1 or host_repeat < 1 or warmup < 0:
        raise AccelInvalidError(f"repeat = {repeat} and host_repeat = {host_repeat} must be >= 1, "
                                f"warmup = {warmup} >= 0")
    if threads is not None:
        if threads < 1:
            raise AccelInvalidError(f"threads = {threads} must be >= 1")
        os.environ["ACCEL_NUM_THREADS"] = str(threads)  # read when the simulator makes a device
    config = AccelConfig.resolve(config)

    import tvm

    from . import toolchain
    from .profiling import profile

    model = load_model(model, inputs)
    if "pytorch" in modes and model.torch_model is None:
        modes.remove("pytorch")
        skipped = {"pytorch": "the model did not come from PyTorch"}
    else:
        skipped = {}
    threads = accel_threads()
    rounds = {m: (host_repeat if m == "host" else repeat) for m in modes}
    layer_work = 0
    bar = Progress(len(modes) + warmup * len(modes) + sum(rounds.values()) + layer_work,
                   "building", enabled=progress)
    runners: Dict[str, Callable[[], Any]] = {}
    compile_s: Dict[str, float] = {}
    tvm_inputs = [tvm.runtime.tensor(a) for a in model.inputs]
    for mode in modes:
        bar.step(f"building {mode}", 0)
        start = time.perf_counter()
        if mode in ACCEL_MODES:
            exe = toolchain.build(model.mod, model.params, config=config, fuse=mode == "fused")
            vm = toolchain.virtual_machine(exe)
            runners[mode] = (lambda vm=vm: vm["main"](*tvm_inputs))
        elif mode == "host":
            vm = tvm.relax.VirtualMachine(toolchain.build_host(model.mod, model.params), tvm.cpu())
            runners[mode] = (lambda vm=vm: vm["main"](*tvm_inputs))
        else:
            import torch

            torch.set_num_threads(threads)
            torch_model = model.torch_model.eval()

            def run_torch(m=torch_model, args=model.torch_inputs):
                with torch.no_grad():
                    return m(*args)
            runners[mode] = run_torch
        compile_s[mode] = time.perf_counter() - start
        bar.step(f"built {mode}")

    result: Dict[str, Any] = {
        "model": model.name, "config": config.to_dict(), "threads": threads,
        "thread_notes": {
            "fused": f"simulator kernels, {threads} thread(s) (ACCEL_NUM_THREADS, else the CPUs)",
            "decomposed": f"simulator kernels, {threads} thread(s)",
            "host": "TVM untuned LLVM build: 1 thread (it has no parallel loops, no call of "
                    "TVMBackendParallelLaunch, so TVM_NUM_THREADS changes nothing)",
            "pytorch": f"torch.set_num_threads({threads})"},
        "repeat": repeat, "host_repeat": host_repeat, "warmup": warmup,
        "compile_s": compile_s, "skipped": skipped, "modes": {}}
    load_before = os.getloadavg()[0]

    # Warm-up, then the interleaved timed rounds.
    for mode in modes:
        for _ in range(warmup):
            runners[mode]()
            bar.step(f"warm-up {mode}")
    times: Dict[str, List[float]] = {m: [] for m in modes}
    for round_index in range(max(rounds.values())):
        for mode in modes:
            if round_index >= rounds[mode]:
                continue
            start = time.perf_counter()
            runners[mode]()
            times[mode].append(time.perf_counter() - start)
            bar.step(f"round {round_index + 1}: {mode}")
    bar.close()
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
        wall_bar = Progress(len(result.get("layers", [])) or 1, "timing layers", enabled=progress)
        walls = {row["label"]: row for row in _per_layer_wall(model, config, repeat, wall_bar)}
        wall_bar.close()
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

def _fmt_ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.2f}"


def format_table(result: Dict[str, Any]) -> str:
    """The terminal table: one row per mode, then per layer when present."""
    cfg = result["config"]
    modes = result["modes"]
    lines = [f"{result['model']} on {cfg['name']} ({cfg['atomic_c']}x{cfg['atomic_k']} MACs, "
             f"{cfg['dram_bytes_per_s'] / 1e9:g} GB/s, {cfg['clock_hz'] / 1e9:g} GHz); "
             f"threads: simulator and PyTorch {result['threads']}, TVM host 1; "
             f"{result['repeat']} timed rounds ({result['host_repeat']} for host) after "
             f"{result['warmup']} warm-up; load average {result['load_average']['before']:.2f} "
             f"before, {result['load_average']['after']:.2f} after ({result['load_average']['cpus']} "
             "CPUs)"]
    header = (f"{'mode':<11} {'wall ms':>10} {'min':>9} {'max':>9} {'vs pytorch':>10} "
              f"{'sim cycles':>12} {'sim ms':>8} {'frames/s':>9} {'MB read':>8} "
              f"{'MB written':>10} {'MAC util':>8}")
    lines += [header, "-" * len(header)]
    reference = modes.get("pytorch", {}).get("wall_ms", {}).get("median")
    for mode, entry in modes.items():
        wall = entry["wall_ms"]
        ratio = f"{wall['median'] / reference:.2f}x" if reference else "-"
        line = (f"{mode:<11} {_fmt_ms(wall['median']):>10} {_fmt_ms(wall['min']):>9} "
                f"{_fmt_ms(wall['max']):>9} {ratio:>10}")
        if "cycles" in entry:
            line += (f" {entry['cycles']:>12,} {entry['simulated_ms']:>8.3f} "
                     f"{entry['frames_per_s']:>9.1f} {entry['bytes_read'] / 1e6:>8.2f} "
                     f"{entry['bytes_written'] / 1e6:>10.2f} {entry['utilization']:>8.1%}")
        lines.append(line)
    for mode, why in result.get("skipped", {}).items():
        lines.append(f"{mode:<11} skipped: {why}")
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


def format_layers(rows: List[dict]) -> str:
    wall = any("fused_wall_ms" in row for row in rows)
    header = (f"{'#':>3} {'layer':<44} {'KB fused':>9} {'KB decomp':>10} {'ratio':>6} "
              f"{'kcyc fused':>10} {'kcyc decomp':>11}")
    if wall:
        header += f" {'ms fused':>9} {'ms decomp':>9}"
    lines = [header, "-" * len(header)]
    for i, row in enumerate(rows):
        f, d = row.get("fused"), row.get("decomposed")
        kb = lambda e: (e["bytes_read"] + e["bytes_written"]) / 1e3 if e else None  # noqa: E731
        kf, kd = kb(f), kb(d)
        ratio = f"{kd / kf:.2f}" if kf and kd else "-"
        line = (f"{i:>3} {row['label'][:44]:<44} {_fmt(kf, '9.1f'):>9} {_fmt(kd, '10.1f'):>10} "
                f"{ratio:>6} {_fmt(f and f['cycles'] / 1e3, '10.1f'):>10} "
                f"{_fmt(d and d['cycles'] / 1e3, '11.1f'):>11}")
        if wall:
            line += (f" {_fmt(row.get('fused_wall_ms', {}).get('median'), '9.3f'):>9} "
                     f"{_fmt(row.get('decomposed_wall_ms', {}).get('median'), '9.3f'):>9}")
        lines.append(line)
    return "\n".join(lines)


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
