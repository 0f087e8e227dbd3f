"""Where a whole network's time goes on the simulator: every accel_run of one inference timed
from the outside (an LD_PRELOAD timer, examples/whole_network_time/run_timer.c), against the
whole VM call: per layer, per engine, the gaps between runs (generated glue, TVM's VM) and what
lies outside them (host ops and the border conversions, accel_convert).

    python examples/whole_network_time.py resnet18 [--precision int8] [--threads 1]
        [--repeat 20] [--clock thread|wall] [--layers] [--classes] [--ort] [--ort-layers]
    python examples/whole_network_time.py mobilenet_v2 --precision int8 --compare-threads 2
    RUN_TIMER_LIB=build/libaccel.so python examples/whole_network_time.py mobilenet_v1 \
        --compare-env MY_KNOB=0,1 --layers
    ACCEL_CONV_IMPL=packed_avx512 python examples/whole_network_time.py resnet50 --layers

--clock thread (the default with 1 thread) reads the calling thread's CPU time, which other
processes on a shared machine barely move; with more threads only wall time means anything.
The script compiles the timer with the C compiler the project builds with and re-runs itself
with it preloaded. --ort times ONNX Runtime's session of `accel-codegen bench` (fp32, or its
static QDQ int8 model calibrated on the same inputs) on the same clock, interleaved call by call
with the simulator's, and prints the ratio; --ort-layers prints ONNX Runtime's per-node times
from its profiler (a second session, run after the timed calls). --compare-threads N runs
every round once with 1 thread and once with N (in alternating order, wall clock, one process)
and prints each layer's two medians side by side: on a shared machine the two counts see the
same load, so the layers that scale badly stand out. --compare-env VAR=A,B does the same with
an environment variable that a build of the library reads on every call (RUN_TIMER_LIB: that
build, preloaded in place of the installed one), so that two variants of a kernel meet the
same machine and the same network; a change timed alone on one layer can gain where the
network does not. The library's own switches (ACCEL_CONV_IMPL, ACCEL_VERBOSE, ACCEL_L1D_BYTES,
ACCEL_L2_BYTES, ACCEL_INT8_AMX, ACCEL_NUM_THREADS) are read once per process, so --compare-env
refuses them: set one for a whole run instead (ACCEL_CONV_IMPL=name forces a CONV implementation,
docs/kernels.md) and compare two runs. Results: docs/whole_network_time.md (the decisions)
and its raw log, docs/notebook/whole_network_time_log.md.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINES = ["CONV", "SDP", "PDP", "CDP", "BDMA", "RUBIK"]  # accel.h's accel_engine order


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    ap.add_argument("--calibration", type=int, default=None, metavar="N",
                    help="int8: N random calibration inputs (default: the bench's default; "
                         "examples/bench_issue32.py calibrates on 8)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--clock", choices=["thread", "wall"], default=None)
    ap.add_argument("--layers", action="store_true", help="print every layer's median")
    ap.add_argument("--classes", action="store_true",
                    help="sum the runs by class (the label's primitive and pass, heads and "
                         "halving-tree levels merged), each with the gaps before its runs")
    ap.add_argument("--ort", action="store_true",
                    help="time ONNX Runtime on the same clock, interleaved")
    ap.add_argument("--ort-layers", action="store_true",
                    help="also print ONNX Runtime's nodes (medians from its profiler, in a "
                         "second session run after the timed calls)")
    ap.add_argument("--fifo", action="store_true",
                    help="time under SCHED_FIFO (root only): the machine's other processes "
                         "then cannot take this process's cores, as on a quiet machine")
    ap.add_argument("--compare-threads", type=int, default=0, metavar="N",
                    help="interleave calls with 1 and N threads; per-layer speed-ups")
    ap.add_argument("--compare-env", default="", metavar="VAR=A,B",
                    help="interleave calls with VAR=A and VAR=B in the environment (a knob "
                         "the library reads on every call, not one of its switches read once "
                         "per process such as ACCEL_CONV_IMPL); per-layer medians of both")
    return ap.parse_args()


def relaunch(args) -> None:
    """Compile the timer and run this script again with it preloaded."""
    from accel_codegen.compiler import link

    # RUN_TIMER_LIB: another build of the library, preloaded in place of the installed one
    # (e.g. a build with experimental knobs for --compare-env)
    other = os.environ.get("RUN_TIMER_LIB")
    lib = other or str(link.PACKAGE_DIR / "lib" / "libaccel.so")
    build = Path(tempfile.mkdtemp(prefix="run-timer-"))
    timer = build / "run_timer.so"
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC",
                    f"-I{link.PACKAGE_DIR / 'include'}", str(HERE / "whole_network_time" /
                                                           "run_timer.c"),
                    "-o", str(timer), "-ldl"], check=True)
    clock = args.clock or ("thread" if args.threads == 1 and not args.compare_threads else "wall")
    preload = " ".join(p for p in (str(timer), other, os.environ.get("LD_PRELOAD")) if p)
    env = dict(os.environ, LD_PRELOAD=preload, RUN_TIMER_LIB=str(lib),
               RUN_TIMER_CLOCK=clock, ACCEL_NUM_THREADS=str(args.threads),
               RUN_TIMER_CHILD="1")
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def build_runner(model_name: str, precision: str, calibration=None):
    import tvm

    from accel_codegen.compiler import toolchain
    from accel_codegen.flows import pipeline
    from accel_codegen.tools.bench import calibration_inputs, load_model

    model = load_model(model_name, None)
    if precision == "int8":
        exe = pipeline.build(model.mod, model.params, config="nv_full", precision="int8",
                             calibration=calibration_inputs(model, calibration, 1234))
    else:
        exe = pipeline.build(model.mod, model.params, config="nv_full", fuse=True)
    vm = toolchain.virtual_machine(exe)
    inputs = [tvm.runtime.tensor(a) for a in model.inputs]
    return model, lambda: vm["main"](*inputs)


def ort_model(model, precision: str, source=None) -> Path:
    """The model's ONNX file as `accel-codegen bench` runs it (ort_fp32 or ort_int8's QDQ):
    ``source`` itself where the MODEL is an .onnx file."""
    from accel_codegen.quantization import ort_baseline
    from accel_codegen.tools.bench import calibration_inputs, onnx_file

    directory = tempfile.mkdtemp(prefix="whole-network-ort-")
    path = onnx_file(model, directory, source)
    if precision == "int8":
        path = ort_baseline.quantize_int8(path, calibration_inputs(model, None, 1234), directory,
                                          ort_baseline.Int8Settings())
    return Path(path)


def build_ort(model, path: Path, threads: int):
    """ONNX Runtime's session of `accel-codegen bench` on `path`, as a callable."""
    from accel_codegen.quantization import ort_baseline

    sess = ort_baseline.session(path, threads)
    feeds = ort_baseline.feeds([i.name for i in sess.get_inputs()], model.inputs)
    return lambda: sess.run(None, feeds)


def ort_layers(model, path: Path, threads: int, repeat: int) -> None:
    """ONNX Runtime's own profile of `repeat` runs (after 3 warm-up runs) of the bench's
    session with profiling on: each node's median kernel time, in execution order. ORT's
    profiler reads the wall clock."""
    import json

    import onnxruntime as ort

    from accel_codegen.quantization import ort_baseline

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = True
    options.profile_file_prefix = str(path.parent / "ort-profile")
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = ort_baseline.feeds([i.name for i in sess.get_inputs()], model.inputs)
    for _ in range(3 + repeat):
        sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    times = collections.defaultdict(list)
    ops = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            ops[name] = e["args"].get("op_name", "")
            times[name].append(e["dur"] * 1e-3)
    runs = [e["dur"] * 1e-3 for e in events if e.get("name") == "model_run"][3:]
    print(f"  ONNX Runtime's profile ({repeat} runs, wall clock): model_run "
          f"{statistics.median(runs):.2f} ms, its nodes:")
    for name, ms in times.items():
        print(f"  {name[:48]:48s} {ops[name][:18]:18s} {statistics.median(ms[3:]):8.3f} ms")


def realtime() -> None:
    """Every thread of this process (and the threads it starts later) under SCHED_FIFO: on a
    shared machine the timed calls then run as on a quiet one (the kernel still leaves other
    processes 5 % of each second, sched_rt_runtime_us). Call it after the build, so that only
    the timed calls compete this way."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(1))


def run_class(label: str) -> str:
    """A run's class: its label without the function and layer (``f0.12p3 ``), the head
    (``.h7.`` -> ``.h*.``) and the number of a repeated pass (a halving tree's level
    ``mean.add2``, a Newton step: ``mean.lo`` / ``mean.hi`` / ``mean.add`` stay apart, their
    repeats merge)."""
    from accel_codegen.sim.labels import pass_kind

    kind = pass_kind(label.split(" ", 1)[-1])
    return re.sub(r"\.h\d+(?=\.|$)", ".h*", kind)


def print_classes(nets: list, by_label: dict) -> None:
    """Per class of run: how many runs a call makes, their median time summed, and the gaps
    before them (the generated glue that sets each run up), summed over the first call's
    runs with each run's median gap."""
    runs, gaps, count = collections.Counter(), collections.Counter(), collections.Counter()
    gap_of = collections.defaultdict(list)
    for n in nets:
        for r in n[1:]:
            gap_of[r[0]].append(float(r[4]))
    for r in nets[0]:
        key = run_class(r[0])
        count[key] += 1
        runs[key] += statistics.median(by_label[r[0]])
        if gap_of[r[0]]:
            gaps[key] += statistics.median(gap_of[r[0]])
    print(f"  {'class of run':48s} {'runs':>5s} {'run ms':>8s} {'gaps ms':>8s}")
    for key, seconds in sorted(runs.items(), key=lambda kv: -(kv[1] + gaps[kv[0]])):
        print(f"  {key[:48]:48s} {count[key]:5d} {seconds * 1e3:8.2f} {gaps[key] * 1e3:8.2f}")


def read_events(timer) -> list:
    with tempfile.NamedTemporaryFile(suffix=".tsv") as f:
        assert timer.run_timer_dump(f.name.encode()) == 0
        return [line.rstrip("\n").split("\t") for line in open(f.name)]


def interleaved(args, run, timer, conditions, apply):
    """Rounds of one call under each of two conditions (apply(c) sets condition c; which goes
    first alternates): the calls' times per condition, each layer's run times per condition,
    and the first call's records (the layers in order)."""
    for c in conditions * 3:
        apply(c)
        run()
    timer.run_timer_reset()
    order, calls = [], {c: [] for c in conditions}
    for i in range(args.repeat):
        for c in (conditions if i % 2 == 0 else conditions[::-1]):
            apply(c)
            start = timer.run_timer_now()
            run()
            calls[c].append(timer.run_timer_now() - start)
            order.append(c)
    rows = read_events(timer)
    per_call = len(rows) // len(order)
    layers = {c: collections.defaultdict(list) for c in conditions}
    for k, c in enumerate(order):
        for r in rows[k * per_call:(k + 1) * per_call]:
            layers[c][r[0]].append(float(r[3]))
    return calls, layers, rows[:per_call]


def compare_threads(args, run, timer) -> None:
    """Rounds of one call with 1 thread and one with N (alternating which goes first); each
    layer's median wall time at both counts, its speed-up, and its loss against a perfect
    N-fold speed-up (time at N - time at 1 / N)."""
    counts = (1, args.compare_threads)
    calls, layers, first = interleaved(args, run, timer, counts, timer.run_timer_set_threads)
    timer.run_timer_set_threads(0)
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    one, many = counts
    print(f"{args.model} {args.precision}, 1 against {many} threads, wall clock, medians of "
          f"{args.repeat} interleaved rounds, load average {os.getloadavg()[0]:.1f}")
    runs = {n: sum(ms(v) for v in layers[n].values()) for n in counts}
    print(f"  whole call {ms(calls[one]):.2f} -> {ms(calls[many]):.2f} ms (x"
          f"{ms(calls[one]) / ms(calls[many]):.2f}; minima {min(calls[one]) * 1e3:.2f} -> "
          f"{min(calls[many]) * 1e3:.2f}); sum of the layers' medians {runs[one]:.2f} "
          f"-> {runs[many]:.2f} ms (x{runs[one] / runs[many]:.2f})")
    losses = collections.Counter()
    table = []
    for r in first:
        t1, tn = ms(layers[one][r[0]]), ms(layers[many][r[0]])
        key = ENGINES[int(r[1])] + (" chain" if int(r[2]) > 1 else "")
        losses[key] += tn - t1 / many
        table.append((r[0], t1, tn, tn - t1 / many))
    print(f"  loss against a perfect x{many} (ms): " +
          ", ".join(f"{k} {v:.2f}" for k, v in losses.most_common()))
    if args.layers:
        print(f"  {'layer':56s} {'1 thr ms':>9s} {many} thr ms  speed-up  loss ms")
        for label, t1, tn, loss in table:
            print(f"  {label[:56]:56s} {t1:9.3f} {tn:9.3f} {t1 / tn:8.2f} {loss:8.3f}")


#: The library's switches read once per process (csrc/conv/impl.c, f32_impls.c, i8_amx.c,
#: runtime/src/device.c): changing them between calls changes nothing.
READ_ONCE = ("ACCEL_CONV_IMPL", "ACCEL_VERBOSE", "ACCEL_L1D_BYTES", "ACCEL_L2_BYTES",
             "ACCEL_INT8_AMX", "ACCEL_NUM_THREADS")


def compare_environment(args, run, timer) -> None:
    """Rounds of one call with VAR=A and one with VAR=B in the environment (alternating which
    goes first), for a knob a build of the library reads on every call (a getenv in a kernel
    of an experimental build, preloaded with RUN_TIMER_LIB): the two medians of the whole call
    and of every layer. Side by side in one process, both see the same machine: this VM's
    speed drifts by 10 % within minutes, and a kernel change that gained 5-10 % timed alone
    measured nothing in the network (docs/whole_network_time.md). The switches in READ_ONCE
    are refused: the first call would fix them for both conditions."""
    var, _, values = args.compare_env.partition("=")
    conditions = tuple(values.split(","))
    if not var or len(set(conditions)) != 2 or len(conditions) != 2:
        raise SystemExit("--compare-env takes VAR=A,B with two different values")
    if var in READ_ONCE:
        raise SystemExit(f"--compare-env {var}: the library reads {var} once per process, so "
                         "both conditions would run with the first value; set it for a whole "
                         f"run instead ({var}=... python {Path(__file__).name} ...) and "
                         "compare two runs")

    def apply(value):
        os.environ[var] = value

    calls, layers, first = interleaved(args, run, timer, conditions, apply)
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    a, b = conditions
    clock = os.environ["RUN_TIMER_CLOCK"]
    print(f"{args.model} {args.precision}, {args.threads} thread(s), {clock} clock, {var}={a} "
          f"against {var}={b}, medians of {args.repeat} interleaved rounds, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"  whole call {ms(calls[a]):.2f} -> {ms(calls[b]):.2f} ms (x"
          f"{ms(calls[b]) / ms(calls[a]):.3f}; minima {min(calls[a]) * 1e3:.2f} -> "
          f"{min(calls[b]) * 1e3:.2f})")
    if args.layers:
        print(f"  {'layer':56s} {var + '=' + a:>12s} {var + '=' + b:>12s}    ratio")
        for r in first:
            ta, tb = ms(layers[a][r[0]]), ms(layers[b][r[0]])
            print(f"  {r[0][:56]:56s} {ta:12.3f} {tb:12.3f} {tb / ta:8.3f}")


def main() -> None:
    args = parse_args()
    if not os.environ.get("RUN_TIMER_CHILD"):
        relaunch(args)
    model, run = build_runner(args.model, args.precision, args.calibration)
    timer = ctypes.CDLL(None)
    timer.run_timer_now.restype = ctypes.c_double
    if args.compare_threads or args.compare_env:
        if args.fifo:
            realtime()
        (compare_threads if args.compare_threads else compare_environment)(args, run, timer)
        return
    onnx_source = args.model if args.model.endswith(".onnx") else None
    ort_path = (ort_model(model, args.precision, onnx_source) if args.ort or args.ort_layers
                else None)
    ort_run = build_ort(model, ort_path, args.threads) if args.ort else None
    if args.fifo:
        realtime()
    for _ in range(3):
        run()
        if ort_run is not None:
            ort_run()
    timer.run_timer_reset()
    calls, ort_calls = [], []
    for _ in range(args.repeat):
        start = timer.run_timer_now()
        run()
        calls.append(timer.run_timer_now() - start)
        if ort_run is not None:  # no accel_run inside: the timer's records stay the model's
            start = timer.run_timer_now()
            ort_run()
            ort_calls.append(timer.run_timer_now() - start)
    rows = read_events(timer)
    per_call = len(rows) // args.repeat
    nets = [rows[i * per_call:(i + 1) * per_call] for i in range(args.repeat)]
    runs = [sum(float(r[3]) for r in n) for n in nets]
    gaps = [sum(float(r[4]) for r in n[1:]) for n in nets]
    outside = [c - r - g for c, r, g in zip(calls, runs, gaps)]
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    clock = os.environ["RUN_TIMER_CLOCK"]
    print(f"{args.model} {args.precision}, {args.threads} thread(s), {clock} clock, "
          f"medians of {args.repeat} calls, load average {os.getloadavg()[0]:.1f}")
    print(f"  whole call {ms(calls):.2f} ms = accel_run x {per_call} {ms(runs):.2f} + gaps "
          f"between runs {ms(gaps):.2f} + outside the runs {ms(outside):.2f}")
    if ort_calls:
        print(f"  ONNX Runtime {ms(ort_calls):.2f} ms (same clock, interleaved): ORT time / "
              f"simulator time = {ms(ort_calls) / ms(calls):.2f} (min/min "
              f"{min(ort_calls) / min(calls):.2f}; >= 1.00: the simulator at least as fast)")
    by_label = collections.defaultdict(list)
    for n in nets:
        for r in n:
            by_label[r[0]].append(float(r[3]))
    by_engine = collections.Counter()
    for r in nets[0]:
        key = ENGINES[int(r[1])] + (" chain" if int(r[2]) > 1 else "")
        by_engine[key] += statistics.median(by_label[r[0]])
    for key, seconds in by_engine.most_common():
        print(f"  {key:12s} {seconds * 1e3:8.2f} ms")
    if args.classes:
        print_classes(nets, by_label)
    if args.layers:
        for r in nets[0]:
            print(f"  {r[0][:56]:56s} {ms(by_label[r[0]]):8.3f} ms")
    if args.ort_layers:
        ort_layers(model, ort_path, args.threads, args.repeat)


if __name__ == "__main__":
    main()
