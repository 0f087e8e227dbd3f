"""The benchmark: one model, side by side in one process, in up to seven modes.

* **fused** — the accelerator flow (``partition_for_accel(fuse=True)``): conv + batch norm +
  activation (+ pooling) as one fused chain per layer, run on the simulator;
* **decomposed** — the same with ``fuse=False``: one accelerator op per source op,
  intermediates through memory;
* **host** — TVM's own CPU build of the same module (``build_host``: batch norm decomposed by
  TVM, untuned LLVM code);
* **pytorch** — PyTorch eager (when the model came from PyTorch);
* **fused_int8** — the fused accelerator flow in int8, calibrated on ``calibration`` inputs
  (default: 32 random N(0, 1) inputs drawn with seed 1234, as the command line's int8 builds);
* **ort_fp32** — ONNX Runtime on the ONNX export of the same model (``export_onnx``; an
  ``.onnx`` MODEL as given);
* **ort_int8** — ONNX Runtime's static int8 quantisation of that file (QDQ, per-channel
  weights), calibrated on the same calibration inputs as fused_int8
  (:mod:`accel_codegen.quantization.ort_baseline` holds the settings).

What users run today is ONNX Runtime, so the result also holds the ratios ``vs_ort``: ONNX
Runtime's wall time over the simulator's (fused against ort_fp32, fused_int8 against
ort_int8), median over median and min over min; >= 1.0 means the simulator is at least as
fast. onnxruntime is optional: without it the ORT modes are skipped, with the reason. Beside
it, each simulator mode's ``slowdown``: its wall time over the modelled accelerator's time for
the same inference (the cost model's cycles at the configuration's clock, ``simulated_ms``),
how many times slower than the hardware it models the simulation runs (below 1, a small net
on a fast CPU: the simulation runs faster than the hardware would).

Each mode is built, warmed up, then timed over ``repeat`` rounds that interleave the modes
(fused, decomposed, host, pytorch, fused, ...), so that the machine's background load hits them
alike (with more than one thread, each timed run directly after an untimed one of its mode,
so that thread pools start warm); the result is the median, min and max wall time per mode. The accelerator modes also
report what the simulator counted for one inference (cycles, frames/s at the configuration's
clock, bytes read and written, MAC utilisation) and, on request, per layer; with
``per_layer_wall`` every layer is also timed alone on the simulator, fused against decomposed.

Threads: the simulator's kernels use ``ACCEL_NUM_THREADS`` (else every online CPU); PyTorch and
ONNX Runtime (``intra_op_num_threads``, sequential execution) are set to the same count; TVM's
untuned host build has no parallel loops (one thread whatever ``TVM_NUM_THREADS`` says).

>>> result = run_bench("resnet18", repeat=10)
>>> print(format_table(result)); result["modes"]["fused"]["wall_ms"]["median"]
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..sim.costs import CostTotals, engine_names
from ..sim.device import int8_amx
from ..sim.cost_report import FP32_BYTES_NOTE
from ..tables import LAYER_WIDTH, Column, render_row, render_table, wrap_label

# The MODEL grammar and loading live in model_spec; these names stay importable from here.
from .model_spec import (ONNX, LoadedModel, ModelSpec, load_callable, load_model,  # noqa: F401
                         parse_model_spec, random_inputs, zoo_names)
from .progress import ProgressCallback, progress_callback, steps
from .report import layer_rows, schema, source_ops

MODES = ("fused", "decomposed", "host", "pytorch", "fused_int8", "ort_fp32", "ort_int8")
ACCEL_MODES = ("fused", "decomposed", "fused_int8")
ORT_MODES = ("ort_fp32", "ort_int8")
#: The simulator's mode each ONNX Runtime mode is held against (``vs_ort``).
ORT_PAIRS = {"fp32": ("fused", "ort_fp32"), "int8": ("fused_int8", "ort_int8")}
DEFAULT_CALIBRATION = 32   # random calibration inputs of the int8 modes
DEFAULT_SEED = 1234        # their seed (the command line's int8 builds use the same)


# --- timing -----------------------------------------------------------------------------------

def accel_threads() -> int:
    """The thread count of the simulator's kernels (ACCEL_NUM_THREADS, else the CPUs)."""
    from ..sim import Device

    return Device("nv_full").num_threads


def _summary(times_s: Sequence[float]) -> Dict[str, float]:
    ms = [t * 1e3 for t in times_s]
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms), "runs": len(ms)}


def _accel_figures(records, config, precision: str = "fp32") -> Dict[str, Any]:
    totals = CostTotals.of(records)
    return {"cycles": totals.cycles, "simulated_ms": totals.seconds(config.clock_hz) * 1e3,
            "frames_per_s": totals.frames_per_s(config.clock_hz),
            "bytes_read": totals.bytes_read, "bytes_written": totals.bytes_written,
            "macs": totals.macs,
            "utilization": totals.utilization(config.macs_per_cycle(precision)),
            "energy_pj": totals.energy_pj, "frames_per_joule": totals.frames_per_joule(),
            "layers": len(records)}


def slowdown(entry: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """A simulator mode's wall time over the modelled hardware's time (``simulated_ms``: its
    cycles at the configuration's clock), median and min; None without a modelled time."""
    hardware = entry.get("simulated_ms")
    if not hardware:
        return None
    wall = entry["wall_ms"]
    return {"median": wall["median"] / hardware, "min": wall["min"] / hardware}


def _times(ratio: float) -> str:
    """A slowdown as text: whole times from 10 up, one decimal from 1, two significant digits
    below 1 (where one decimal would round a 0.04 to nothing)."""
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    return f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2g}x"


def _layer_row(record) -> Dict[str, Any]:
    return {"label": record.label, "engines": engine_names(record),
            "ops": len(record.ops), "macs": record.macs, "cycles": record.cycles,
            "bytes_read": record.bytes_read, "bytes_written": record.bytes_written,
            "utilization": record.utilization, "energy_pj": record.energy_pj}


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
    """Every accelerator layer (``(label, primitive, layer, modes)`` of the fused partition:
    :func:`~.estimation.model_runs`) timed alone on the simulator, fused against decomposed,
    each with the CONV modes its planned Program gives it."""
    from ..sim import Device

    rng = np.random.default_rng(0)
    device = Device(config)
    rows = []
    for label, primitive, layer, modes in layers:
        x = rng.standard_normal(layer.in_shape).astype(np.float32)
        runs = {}
        for name, fuse in (("fused", True), ("decomposed", False)):
            mode = "fused" if layer.fused(fuse) else "independent"
            ops = _materialise(layer.engine_ops(fuse, modes=modes[name]), layer.in_shape, config,
                               mode, rng)
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


@dataclasses.dataclass
class _Setting:
    """What every mode's build needs: the model, the configuration, the threads, the int8
    calibration inputs, and (for the ONNX Runtime modes) a scratch directory."""

    model: LoadedModel
    config: Any
    threads: int
    calibration: List[tuple]
    calibration_method: str
    directory: Path
    onnx_source: Optional[str] = None     # an .onnx MODEL: the file itself
    onnx_path: Optional[Path] = None      # the fp32 ONNX file, once made
    ort: Dict[str, Any] = dataclasses.field(default_factory=dict)


class _Skip(Exception):
    """A mode that cannot run here (its reason is the message): skipped, not an error."""


def onnx_file(model: LoadedModel, directory, source: Optional[str] = None) -> Path:
    """The ONNX file of a model for ONNX Runtime: ``source`` (an ``.onnx`` MODEL) as given, else
    the project's export (:func:`accel_codegen.frontend.export_onnx`) of the PyTorch model
    into ``directory``. AccelUnsupportedError when there is none (a bare Relax module) or the
    export fails."""
    from ..errors import AccelUnsupportedError

    if source is not None:
        return Path(source)
    if model.torch_model is None:
        raise AccelUnsupportedError("no ONNX model: the model came from neither PyTorch nor an "
                                    "ONNX file")
    from ..compiler import frontend

    return frontend.export_onnx(model.torch_model, model.torch_inputs,
                                Path(directory) / f"{model.name}.onnx")


def _ort_runner(mode: str, setting: _Setting) -> Callable[[], Any]:
    from ..errors import AccelError
    from ..quantization import ort_baseline

    reason = ort_baseline.unavailable()
    if reason:
        raise _Skip(reason)
    if setting.onnx_path is None:
        try:
            setting.onnx_path = onnx_file(setting.model, setting.directory, setting.onnx_source)
        except AccelError as error:
            raise _Skip(str(error)) from error
    path = setting.onnx_path
    if mode == "ort_int8":
        try:
            path, settings = ort_baseline.quantize_int8_as_ort_can(path, setting.calibration,
                                                                   setting.directory)
        except AccelError as error:
            raise _Skip(str(error)) from error
        setting.ort.update({"int8": dataclasses.asdict(settings),
                            "int8_model": ort_baseline.qdq_summary(path),
                            "calibration_samples": len(setting.calibration)})
    setting.ort["version"] = ort_baseline.version()
    sess = ort_baseline.session(path, setting.threads)
    feeds = ort_baseline.feeds([i.name for i in sess.get_inputs()], setting.model.inputs)
    return lambda: sess.run(None, feeds)


def _runner(mode: str, setting: _Setting) -> Callable[[], Any]:
    """One inference of the model in a mode, built (the build is what compile_s times)."""
    model, config = setting.model, setting.config
    if mode in ORT_MODES:
        return _ort_runner(mode, setting)
    if mode in ACCEL_MODES or mode == "host":
        import tvm

        from ..compiler import toolchain
        from ..errors import AccelError
        from ..flows import pipeline

        if mode == "host":
            vm = tvm.relax.VirtualMachine(toolchain.build_host(model.mod, model.params),
                                          tvm.cpu())
        elif mode == "fused_int8":
            try:
                vm = toolchain.virtual_machine(pipeline.build(
                    model.mod, model.params, config=config, precision="int8",
                    calibration=setting.calibration,
                    calibration_method=setting.calibration_method))
            except AccelError as error:
                raise _Skip(f"the int8 build failed: {error}") from error
        else:
            vm = toolchain.virtual_machine(pipeline.build(model.mod, model.params,
                                                          config=config, fuse=mode == "fused"))
        tvm_inputs = [tvm.runtime.tensor(a) for a in model.inputs]
        return lambda: vm["main"](*tvm_inputs)
    import torch

    torch.set_num_threads(setting.threads)
    torch_model = model.torch_model.eval()

    def run_torch():
        with torch.no_grad():
            return torch_model(*model.torch_inputs)
    return run_torch


def _timed_rounds(runners: Dict[str, Callable[[], Any]], rounds: Dict[str, int], warmup: int,
                  step: Callable[[], None]) -> Dict[str, List[float]]:
    """Warm-up runs, then the timed rounds, interleaving the modes (a mode drops out once it
    has its rounds): the wall times per mode, in seconds.

    With more than one thread, every timed run (but the host build's, single-threaded and
    slow) directly follows an untimed run of the same mode: thread pools (ONNX Runtime's, the
    simulator's) then start as warm as in a stream of inferences, and the previous mode's
    spinning threads are gone. Without it, ONNX Runtime's 2-thread int8 ResNet-18 measured
    20 ms interleaved against 5.7 ms alone."""
    for run in runners.values():
        for _ in range(warmup):
            run()
            step()
    rewarm = accel_threads() > 1
    times: Dict[str, List[float]] = {m: [] for m in runners}
    for round_index in range(max(rounds.values())):
        for mode, run in runners.items():
            if round_index >= rounds[mode]:
                continue
            if rewarm and mode != "host":
                run()
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
        "pytorch": f"torch.set_num_threads({threads})",
        "fused_int8": f"simulator kernels, {threads} thread(s)",
        "ort_fp32": f"ONNX Runtime CPU: intra_op_num_threads={threads} (workers not "
                    "spinning), inter_op_num_threads=1, ORT_SEQUENTIAL",
        "ort_int8": f"ONNX Runtime CPU: intra_op_num_threads={threads} (workers not "
                    "spinning), inter_op_num_threads=1, ORT_SEQUENTIAL"}


def ort_ratios(modes: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The simulator against ONNX Runtime, per precision whose two modes were measured:
    ONNX Runtime's wall time over the simulator's, median over median and min over min
    (>= 1.0: the simulator is at least as fast)."""
    ratios = {}
    for precision, (ours, theirs) in ORT_PAIRS.items():
        if ours in modes and theirs in modes:
            a, b = modes[ours]["wall_ms"], modes[theirs]["wall_ms"]
            ratios[precision] = {"simulator": ours, "onnxruntime": theirs,
                                 "median": b["median"] / a["median"], "min": b["min"] / a["min"]}
            if modes[ours].get("slowdown"):
                ratios[precision]["slowdown"] = modes[ours]["slowdown"]["median"]
    return ratios


def _speed(ratio: float) -> str:
    """A time ratio (theirs / ours) as words: '1.25x faster', '2.00x slower'."""
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def run_bench(model: Any, inputs: Optional[Sequence] = None, *,
              modes: Sequence[str] = MODES, config: Any = "nv_full", repeat: int = 10,
              host_repeat: int = 3, warmup: int = 1, per_layer: bool = False,
              per_layer_wall: bool = False, threads: Optional[int] = None,
              calibration: Union[int, Sequence, None] = None,
              calibration_method: Optional[str] = None, seed: int = DEFAULT_SEED,
              progress: Union[None, bool, ProgressCallback] = None) -> Dict[str, Any]:
    """Benchmark a model in several modes, side by side.

    Parameters
    ----------
    model, inputs
        As for :func:`load_model`: a zoo name, an ``.onnx`` path, ``file.py:function``, a torch
        module or a Relax module (with ``inputs``).
    modes : sequence of str
        Among "fused", "decomposed", "host", "pytorch", "fused_int8", "ort_fp32", "ort_int8".
    config : AccelConfig or str
        The accelerator configuration of the accelerator modes.
    repeat : int
        Timed runs per mode (after ``warmup`` untimed runs).
    host_repeat : int
        Timed runs of the host mode (TVM's untuned build is slow: ~3 s per ResNet-18).
    per_layer : bool
        Include the per-layer simulated figures of the fp32 accelerator modes.
    per_layer_wall : bool
        Also time every layer alone on the simulator, fused against decomposed.
    threads : int, optional
        Threads of the simulator, PyTorch and ONNX Runtime (default: ACCEL_NUM_THREADS, else
        the CPUs).
    calibration : int or sequence, optional
        The int8 modes' calibration inputs (fused_int8 and ort_int8 both calibrate on them):
        example input tuples, or a count of random N(0, 1) inputs drawn with ``seed``
        (default 32).
    calibration_method : str, optional
        How fused_int8 turns activation ranges into scales (default: mse). ONNX
        Runtime's calibration is its own (see :mod:`accel_codegen.quantization.ort_baseline`).
    seed : int
        The seed of random calibration inputs (default 1234, as the command line).
    progress : callable or bool, optional
        ``progress(done, total)``, called as builds, runs and layer timings finish (``done``
        from 0 to ``total``); or a bool: show a progress bar on stderr (default: when stderr
        is a terminal).

    Returns
    -------
    dict
        The JSON contract: ``threads``, ``modes`` (per mode ``wall_ms`` with ``median``,
        ``min``, ``max``; for the accelerator modes ``cycles``, ``frames_per_s``,
        ``bytes_read``, ``bytes_written``, ``utilization``, ``energy_pj`` (picojoules per
        inference), ``frames_per_joule`` and ``slowdown`` ({``median``, ``min``} of the wall
        time over ``simulated_ms``, the modelled hardware's time)), ``vs_ort`` (per precision
        measured in both: ``median`` and ``min`` of ONNX Runtime's wall time over the
        simulator's, and the simulator mode's median ``slowdown``), plus ``model``,
        ``config``, ``thread_notes``, ``compile_s``,
        ``skipped`` (mode: why), ``calibration`` (int8 modes), ``onnxruntime`` (its version
        and the int8 model's settings and QDQ node counts) and, on request, ``layers``.
    """
    from ..quantization import DEFAULT_METHOD
    from ..sim.config import AccelConfig

    modes = _check_arguments(modes, repeat, host_repeat, warmup, threads)
    if threads is not None:
        os.environ["ACCEL_NUM_THREADS"] = str(threads)  # read when the simulator makes a device
    config = AccelConfig.resolve(config)

    from .estimation import model_runs

    model, onnx_source, skipped = _load_for_modes(model, inputs, modes)
    threads = accel_threads()
    int8 = [m for m in modes if m in ("fused_int8", "ort_int8")]
    examples = calibration_inputs(model, calibration, seed) if int8 else []
    method = calibration_method or DEFAULT_METHOD
    rounds = {m: (host_repeat if m == "host" else repeat) for m in modes}
    wall_layers = model_runs(model.mod, model.params, config=config) if per_layer_wall else []
    step = steps(progress_callback(progress, f"bench {model.name}"),
                 len(modes) * (1 + warmup) + sum(rounds.values()) + len(wall_layers))
    with tempfile.TemporaryDirectory(prefix="accel-bench-") as directory:
        setting = _Setting(model, config, threads, examples, method, Path(directory), onnx_source)
        runners, compile_s = _build_runners(modes, setting, rounds, warmup, skipped, step)

    result = _result_head(model.name, config, threads, modes, compile_s, skipped,
                          {"repeat": repeat, "host_repeat": host_repeat, "warmup": warmup})
    if int8:
        result["calibration"] = {"samples": len(examples),
                                 "inputs": "given" if _given(calibration) else
                                 f"random N(0, 1), seed {seed}",
                                 "method": method}
    if setting.ort:
        result["onnxruntime"] = setting.ort
    times = _timed_under_load(result, runners, rounds, warmup, step)
    layers, csv_rows = _mode_entries(result["modes"], model, config, modes, runners, times,
                                     per_layer)
    result["vs_ort"] = ort_ratios(result["modes"])
    if per_layer or per_layer_wall:
        _add_layers(result, layers, csv_rows, wall_layers, config, repeat, step, per_layer_wall)
    return result


def _result_head(name: str, config, threads: int, modes: List[str], compile_s: Dict[str, float],
                 skipped: Dict[str, str], repeats: Dict[str, int]) -> Dict[str, Any]:
    """The result's first keys, in the JSON contract's order; ``modes`` still empty."""
    return {
        "schema": schema("bench"), "model": name, "config": config.to_dict(), "threads": threads,
        "int8_amx": int8_amx(),
        "thread_notes": {m: note for m, note in _thread_notes(threads).items()
                         if m in modes},
        **repeats,
        "compile_s": compile_s, "skipped": skipped, "modes": {}}


def _timed_under_load(result: Dict[str, Any], runners: Dict[str, Callable[[], Any]],
                      rounds: Dict[str, int], warmup: int,
                      step: Callable[[], None]) -> Dict[str, List[float]]:
    """The timed rounds (:func:`_timed_rounds`), with the load average before and after them
    in ``result["load_average"]``."""
    load_before = os.getloadavg()[0]
    times = _timed_rounds(runners, rounds, warmup, step) if runners else {}
    # The machine may be shared: a busy neighbour slows the multi-threaded modes most.
    result["load_average"] = {"before": load_before, "after": os.getloadavg()[0],
                              "cpus": os.cpu_count()}
    return times


def _load_for_modes(model: Any, inputs: Optional[Sequence], modes: List[str]):
    """The loaded model, its ``.onnx`` source (a MODEL given as an ONNX file, else None) and the
    modes skipped for want of a source: pytorch when the model did not come from PyTorch
    (removed from ``modes``)."""
    onnx_source = None
    if isinstance(model, str) and parse_model_spec(model).kind == ONNX:
        onnx_source = model
    elif isinstance(model, ModelSpec) and model.kind == ONNX:
        onnx_source = model.path
    model = load_model(model, inputs)
    skipped: Dict[str, str] = {}
    if "pytorch" in modes and model.torch_model is None:
        modes.remove("pytorch")
        skipped["pytorch"] = "the model did not come from PyTorch"
    return model, onnx_source, skipped


def _build_runners(modes: List[str], setting: _Setting, rounds: Dict[str, int], warmup: int,
                   skipped: Dict[str, str], step: Callable[[], None]):
    """Every mode's runner, built, and its build time in seconds. A mode that cannot run here
    leaves ``modes`` and ``rounds`` for ``skipped`` with its reason, its progress steps taken."""
    runners: Dict[str, Callable[[], Any]] = {}
    compile_s: Dict[str, float] = {}
    for mode in list(modes):
        start = time.perf_counter()
        try:
            runners[mode] = _runner(mode, setting)
        except _Skip as why:
            skipped[mode] = str(why)
            modes.remove(mode)
            for _ in range(warmup + rounds.pop(mode)):
                step()
        else:
            compile_s[mode] = time.perf_counter() - start
        step()
    return runners, compile_s


def _mode_entries(entries: Dict[str, Any], model: LoadedModel, config, modes: List[str],
                  runners: Dict[str, Callable[[], Any]], times: Dict[str, List[float]],
                  per_layer: bool):
    """Fill ``entries`` with each mode's wall times and, for the simulator modes, what the
    simulator counted in one more run. Returns the fp32 modes' per-layer rows and every
    simulator mode's rows as the per-layer CSV has them."""
    from ..sim.profiling import profile

    layers: Dict[str, list] = {}
    csv_rows: Dict[str, list] = {}  # every simulator mode's runs, as the per-layer CSV has them
    sources: Dict[str, dict] = {}  # precision -> layer key -> its Relax operators

    def sources_of(precision: str) -> dict:
        """The layers' operators in the partition of ``precision`` (an int8 one may differ)."""
        if per_layer and precision not in sources:
            from ..compiler.partition import match_composites

            sources[precision] = source_ops(match_composites(
                model.mod, model.params, config=config, precision=precision))
        return sources.get(precision, {})

    for mode in modes:
        entry: Dict[str, Any] = {"wall_ms": _summary(times[mode])}
        if mode in ACCEL_MODES:
            with profile() as prof:  # one more run, to read what the simulator counted
                runners[mode]()
            precision = "int8" if mode == "fused_int8" else "fp32"
            entry.update(_accel_figures(prof.records, config, precision))
            entry["slowdown"] = slowdown(entry)
            if precision == "fp32":
                layers[mode] = [_layer_row(r) for r in prof.records]
            csv_rows[mode] = [{"bench_mode": mode, **row} for row in layer_rows(
                prof.records, peak_macs_per_cycle=config.macs_per_cycle(precision),
                sources=sources_of(precision))]
        entries[mode] = entry
    return layers, csv_rows


def _add_layers(result: Dict[str, Any], layers: Dict[str, list], csv_rows: Dict[str, list],
                wall_layers: list, config, repeat: int, step: Callable[[], None],
                per_layer_wall: bool) -> None:
    """The per-layer part of the result: the modes' layers side by side, the CSV rows and, with
    ``per_layer_wall``, every layer timed alone (fused against decomposed)."""
    result["layers"] = _merge_layers(layers)
    result["layer_rows"] = [row for rows in csv_rows.values() for row in rows]
    if per_layer_wall:
        walls = {row["label"]: row for row in _per_layer_wall(wall_layers, config, repeat, step)}
        for row in result["layers"]:
            row.update({k: v for k, v in walls.get(row["label"], {}).items()
                        if k.endswith("_wall_ms")})

def _given(calibration) -> bool:
    return calibration is not None and not isinstance(calibration, int)


def calibration_inputs(model: LoadedModel, calibration, seed: int) -> List[tuple]:
    """The int8 modes' calibration inputs: given ones as tuples, or ``calibration`` (default
    32) random N(0, 1) inputs drawn with ``seed``."""
    from ..errors import AccelInvalidError
    from ..quantization import examples_of

    if _given(calibration):
        return examples_of(calibration, "the benchmark's int8 calibration")
    count = DEFAULT_CALIBRATION if calibration is None else calibration
    if count < 1:
        raise AccelInvalidError(f"calibration = {count}: give at least one input")
    return random_inputs(model, count, seed)


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
                 Column("t/pytorch", 10), Column("sim cycles", 12, spec=","),
                 Column("sim ms", 8, spec=".3f"), Column("slowdown", 9),
                 Column("frames/s", 9, spec=".1f"),
                 Column("MB read", 8, spec=".2f"), Column("MB written", 10, spec=".2f"),
                 Column("MAC util", 8, spec=".1%"), Column("mJ/frame", 8, spec=".3f"))


def _mode_row(mode: str, entry: Dict[str, Any], reference: Optional[float]) -> list:
    wall = entry["wall_ms"]
    ratio = f"{wall['median'] / reference:.2f}x" if reference else "-"
    row = [mode, wall["median"], wall["min"], wall["max"], ratio]
    if "cycles" in entry:
        slow = entry.get("slowdown") or slowdown(entry)
        row += [entry["cycles"], entry["simulated_ms"],
                _times(slow["median"]) if slow else "-", entry["frames_per_s"],
                entry["bytes_read"] / 1e6, entry["bytes_written"] / 1e6, entry["utilization"],
                entry["energy_pj"] / 1e9]
    return row


def format_table(result: Dict[str, Any]) -> str:
    """The terminal table: one row per mode, then per layer when present."""
    cfg = result["config"]
    modes = result["modes"]
    load = result["load_average"]
    title = (f"{result['model']} on {cfg['name']} ({cfg['atomic_c']}x{cfg['atomic_k']} MACs, "
             f"{cfg['dram_bytes_per_s'] / 1e9:g} GB/s, {cfg['clock_hz'] / 1e9:g} GHz); "
             f"threads: simulator, PyTorch and ONNX Runtime {result['threads']}, TVM host 1; "
             f"{result['repeat']} timed rounds ({result['host_repeat']} for host) after "
             f"{result['warmup']} warm-up; load average {load['before']:.2f} "
             f"before, {load['after']:.2f} after ({load['cpus']} CPUs)"
             + ("; int8 convolutions on AMX tiles" if result.get("int8_amx") else ""))
    reference = modes.get("pytorch", {}).get("wall_ms", {}).get("median")
    rows = [_mode_row(mode, entry, reference) for mode, entry in modes.items()]
    rows += _skipped_lines(result.get("skipped", {}))
    lines = [title, render_table(_MODE_COLUMNS, rows)]
    if reference:
        lines.append("t/pytorch: the mode's median wall time over PyTorch's, both measured in "
                     "the same interleaved rounds of this run (a ratio of times on this "
                     "machine at this load, not a fixed baseline)")
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
    if any("slowdown" in entry or "simulated_ms" in entry for entry in modes.values()):
        lines.append("slowdown: the simulator's median wall time over the modelled "
                     "accelerator's time for the same inference (sim ms: its cycles at "
                     f"{cfg['clock_hz'] / 1e9:g} GHz), how many times slower than the "
                     "hardware the simulation runs (below 1: faster)")
    lines += format_ort(result)
    if any(mode in modes for mode in ("fused", "decomposed")):  # the simulator's fp32 modes
        lines.append(FP32_BYTES_NOTE)
    if result.get("layers"):
        lines.append("")
        lines.append(format_layers(result["layers"]))
    return "\n".join(lines)


def _skipped_lines(skipped: Dict[str, str]) -> List[str]:
    """One line per reason: modes skipped for the same reason (ONNX Runtime's two when it is
    not installed) share it."""
    reasons: Dict[str, List[str]] = {}
    for mode, why in skipped.items():
        reasons.setdefault(why, []).append(mode)
    return [f"{', '.join(modes)} skipped: {why}" for why, modes in reasons.items()]


def format_ort(result: Dict[str, Any]) -> List[str]:
    """The simulator against ONNX Runtime: one line per precision measured in both."""
    lines = []
    ort = result.get("onnxruntime", {})
    for precision, r in result.get("vs_ort", {}).items():
        how = ""
        if precision == "int8" and "int8" in ort:
            q = ort["int8"]
            how = (f"; ORT int8: static {q['quant_format']}, {q['activation_type']} activations, "
                   f"per-channel {q['weight_type']} weights, {q['calibrate_method']}, "
                   f"same {ort.get('calibration_samples', '?')} calibration inputs")
        slow = (f"; slowdown {_times(r['slowdown'])} (simulator wall time / modelled hardware "
                f"time)" if r.get("slowdown") else "")
        lines.append(f"simulator {precision} ({r['simulator']}) vs ONNX Runtime "
                     f"{ort.get('version', '')} {precision}: {_speed(r['median'])} "
                     f"(median; ORT time / simulator time = {r['median']:.2f}, "
                     f"min/min {r['min']:.2f}; >= 1.00: the simulator at least as fast)"
                     f"{slow}{how}")
    return lines


_LAYER_COLUMNS = (Column("#", 3), Column("layer", LAYER_WIDTH, "<"),
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
        label, *more = wrap_label(row["label"], LAYER_WIDTH)  # long labels continue below
        cells.append([i, label, kf, kd, f"{kd / kf:.2f}" if kf and kd else "-",
                      kcycles(f), kcycles(d)])
        if wall:
            cells[-1] += [row.get(f"{mode}_wall_ms", {}).get("median")
                          for mode in ("fused", "decomposed")]
        cells += [render_row(_LAYER_COLUMNS[:2], ["", part]).rstrip() for part in more]
    return render_table(_LAYER_COLUMNS + (_WALL_COLUMNS if wall else ()), cells)
