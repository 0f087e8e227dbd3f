"""``accel-codegen``: the command-line tool (also ``python -m accel_codegen``), in the manner of
TVM's tvmc: one subcommand per step, files in and out, errors on stderr, non-zero exit status.

    accel-codegen partition MODEL [--config CFG] [--no-fuse] [--precision P] [CALIBRATION]
                                  [--target-sqnr DB] [--host-cost] [--csv out.csv]
                                  [--program out.json]
    accel-codegen compile MODEL -o model.so [--config CFG] [--no-fuse] [--save-input x.npy]
                                [--precision P] [CALIBRATION] [--target-sqnr DB]
    accel-codegen run model.so --input x.npy [--output y.npy] [--profile] [--config CFG]
                               [--precision P] [--trace out.json] [--trace-plot out.png]
    accel-codegen accuracy MODEL --precision int8|fp16|mixed [--config CFG] [--no-fuse]
                                 [--inputs M] [CALIBRATION] [--target-sqnr DB] [--no-ort]
                                 [--json out.json]
    accel-codegen bench MODEL [--modes fused,decomposed,host,pytorch,fused_int8,ort_fp32,ort_int8]
                              [--repeat N] [--threads T] [CALIBRATION] [--json out.json]
                              [--plot out.png] [--per-layer]
    accel-codegen sweep MODEL --macs 64,256,1024,2048 --dram-gbps 1,5,10,20 [--cbuf-kib ...]
                              [--precision P] [--json out.json] [--plot out.png]
    accel-codegen estimate MODEL [--config CFG] [--no-fuse] [--precision P] [--json out.json]
                                 [--csv out.csv] [--trace out.json] [--trace-plot out.png]
    accel-codegen debug MODEL [--precision int8|fp16] [--inputs N|DATA.npz] [--threshold DB]
                              [CALIBRATION] [--json out.json] [--csv out.csv]

partition takes --host-cost (the host operators ranked by what an accelerator primitive would
spend on each, beside their host time) and --program (the accelerator program the code is
generated from, as JSON: every run and the planning passes' choices); run --csv, bench --csv and estimate --csv write the
per-layer figures as CSV; every --json carries "schema": "accel-codegen/<kind>/1"
(docs/report-schema.md).

MODEL is a zoo model name, an ``.onnx`` file, or ``file.py:function`` returning
``(torch_module, example_inputs_tuple)``. CFG is a preset (nv_small, nv_large, nv_full) or a
JSON file (``{"base": "nv_full", "dram_bytes_per_s": 5e9}``). P is fp32 (default), fp16 or
int8; partition, compile and accuracy also take mixed (int8 or fp16 per layer, the assignment
that reaches ``--target-sqnr DB`` of output SQNR against fp32 at every output, on the
calibration inputs and on the quarter of them held back from calibration, in the fewest
cycles: docs/mixed-precision.md). int8 and mixed are calibrated (CALIBRATION:
``--calibration N`` random N(0, 1) inputs of the model's input shapes, default 32, drawn with
``--seed``, default 1234; ``--calibration-method`` mse, percentile, max or entropy);
``accuracy`` evaluates on inputs drawn with seed + 1, never the calibration ones; for int8 it
also quantises the model with ONNX Runtime (static QDQ) on the same calibration inputs and
prints its SQNR beside ours. bench's
int8 modes (fused_int8, ort_int8) calibrate on the same CALIBRATION inputs; it prints ONNX
Runtime's time over the simulator's (>= 1.00: the simulator at least as fast). Without
onnxruntime (``pip install 'accel-codegen[ort]'``) the ONNX Runtime parts are skipped, and
one line says so.

``import tvm`` takes seconds: it is imported only once the arguments are known to be good.
Exit status: 0 success, 1 an error (one line on stderr: ``accel-codegen COMMAND: error: ...``),
2 a usage error (argparse), 3 an internal error (a bug: the traceback, then one line saying so).
Errors in the user's files (a model function that raises or exits, an unreadable ONNX file, a
damaged library) are errors (1), not internal ones.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .config_files import resolve_config
from .model_spec import parse_model_spec, random_inputs

PROG = "accel-codegen"
MODEL_HELP = ("a zoo model name (resnet50, mobilenet_v2, efficientnet_b0, densenet121, ...: "
              "an unknown name lists them all), an .onnx file, or file.py:function returning "
              "(torch_module, example_inputs_tuple)")
CONFIG_HELP = ("a preset (nv_small, nv_large, nv_full), a config JSON file or JSON text "
               "(default nv_full)")
DEFAULT_CALIBRATION = 32   # random calibration inputs of an int8 build
DEFAULT_SEED = 1234        # of the calibration inputs; accuracy evaluates on seed + 1


class UserError(Exception):
    """A mistake in the command line or its files: reported in one line, no traceback."""


# --- argument helpers (no tvm) ----------------------------------------------------------------

def _int_list(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 64,256,1024")
    return values


def _float_list(text: str) -> List[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive numbers, e.g. 1,5,10,20")
    return values


def _at_least(minimum: int):
    """An argparse type: an integer >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value
    return parse


_positive = _at_least(1)


def _modes(text: str) -> List[str]:
    from .bench import MODES

    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown mode(s) {', '.join(map(repr, bad)) or repr(text)}: choose among {', '.join(MODES)}")
    return modes


def check_precision_args(args, config) -> None:
    """The precision against the configuration, and the calibration options against the
    precision, before anything heavy is imported (fp16 on nv_small fails here, at once)."""
    from ..sim.config import check_precision

    target = getattr(args, "target_sqnr", None)
    if args.precision == "mixed":
        for precision in ("int8", "fp16"):
            check_precision(config, precision)
        if target is None:
            raise UserError("--precision mixed needs --target-sqnr DB (the output SQNR to "
                            "reach against fp32, e.g. 40)")
        from ..flows.mixed import check_target
        check_target(target)
    else:
        check_precision(config, args.precision)
        if target is not None:
            raise UserError(f"--target-sqnr: for --precision mixed only (the precision is "
                            f"{args.precision})")
    given = [flag for flag, value in (("--calibration", args.calibration),
                                      ("--calibration-method", args.calibration_method))
             if value is not None]
    if given and args.precision not in ("int8", "mixed"):
        raise UserError(f"{' and '.join(given)}: for int8 and mixed only (the precision is "
                        f"{args.precision})")
    switches = [flag for flag, on in (("--no-equalize", getattr(args, "no_equalize", False)),
                                      ("--no-bias-correction",
                                       getattr(args, "no_bias_correction", False)),
                                      ("--weight-rounding gptq",
                                       getattr(args, "weight_rounding", "nearest") == "gptq"))
                if on]
    if switches and args.precision != "int8":
        raise UserError(f"{' and '.join(switches)}: for int8 only (the precision is "
                        f"{args.precision})")
    data = getattr(args, "calibration_data", None)
    if data is not None:
        if args.precision not in ("int8", "mixed"):
            raise UserError(f"--calibration-data: for int8 and mixed only (the precision is "
                            f"{args.precision})")
        if args.calibration is not None:
            raise UserError("give --calibration N (random inputs) or --calibration-data "
                            "DATA.npz, not both")
    keep = getattr(args, "keep_float", None)
    if keep:
        if args.precision != "int8":
            raise UserError(f"--keep-float keeps layers of an int8 build in fp16; the "
                            f"precision is {args.precision}")
        if not config.supports("fp16"):
            raise UserError(f"--keep-float runs the kept layers in fp16, which configuration "
                            f"{config.name} does not have (its precisions: fp32, "
                            f"{', '.join(config.precisions)})")
        if getattr(args, "weight_rounding", "nearest") == "gptq":
            raise UserError("--keep-float builds int8 and fp16 layers together, whose int8 "
                            "weights round to nearest: not with --weight-rounding gptq")


def _calibration(args, model) -> dict:
    """The calibration keywords of partition_for_accel / accuracy_report (int8's, and mixed's
    with its target)."""
    from ..quantization import DEFAULT_METHOD

    if args.precision not in ("int8", "mixed"):
        return {}
    method = args.calibration_method or DEFAULT_METHOD
    keep = getattr(args, "keep_float", None)
    if getattr(args, "calibration_data", None) is not None:
        examples, what = _npz_examples(args.calibration_data, model, "--calibration-data")
    else:
        count = args.calibration or DEFAULT_CALIBRATION
        examples = random_inputs(model, count, args.seed)
        what = f"{count} random N(0, 1) inputs (seed {args.seed})"
    _say(f"int8 calibration: {method} on {what}"
         + "".join(f"; {what} off" for what, off in (
             ("cross-layer equalisation", args.no_equalize or bool(keep)),
             ("bias correction", args.no_bias_correction)) if off)
         + ("; weights rounded by GPTQ" if args.weight_rounding == "gptq" else ""))
    keywords = {"calibration": examples, "calibration_method": method}
    if keep:
        # the mixed build with the kept layers in fp16, which equalises no weights
        _say(f"kept in fp16: {', '.join(keep)}")
        keywords.update(keep_float=list(keep), bias_correction=not args.no_bias_correction)
        return keywords
    if args.precision == "mixed":
        _say(f"mixed precision: searching for {args.target_sqnr:g} dB SQNR at every output on "
             f"the calibration inputs and those held back from it (a build per layer)")
        keywords["target_sqnr_db"] = args.target_sqnr
    else:
        keywords.update(equalize=not args.no_equalize,
                        bias_correction=not args.no_bias_correction,
                        weight_rounding=args.weight_rounding)
    return keywords


def _partition(args, config, model):
    """The model partitioned (and code generated) as the command line asks."""
    from ..flows.pipeline import partition_for_accel

    return partition_for_accel(model.mod, model.params, config=config, fuse=not args.no_fuse,
                               precision=args.precision, winograd=not args.no_winograd,
                               **_calibration(args, model))


def _output_path(path: str, suffix: str, what: str) -> Path:
    out = Path(path)
    if out.suffix != suffix:
        raise UserError(f"{what} path '{out}' must end in {suffix}")
    if out.parent != Path("") and not out.parent.is_dir():
        raise UserError(f"directory '{out.parent}' of {what} path '{out}' does not exist")
    if out.is_dir():
        raise UserError(f"{what} path '{out}' is a directory")
    try:  # before the long work: the one reliable test (root passes os.access; /proc refuses)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".accel-write-test-"):
            pass
    except OSError as error:
        raise UserError(f"cannot write {what} path '{out}': directory '{out.parent}' is not "
                        f"writable ({error.strerror or error})") from None
    return out


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _user_code_error(error: BaseException, spec: str) -> Optional[str]:
    """Why an exception is the user's model's doing (a one-line message), or None.

    It is when its traceback (or that of an exception it was raised from) passes through the
    user's ``file.py``, or, for an ``.onnx`` MODEL, through the ONNX reader or TVM's ONNX
    importer: the file's content is the cause. Anything else is ours: an internal error."""
    head, colon, _ = spec.rpartition(":")
    user_file = Path(head).resolve() if colon and head.endswith(".py") else None
    onnx = spec.endswith(".onnx")
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if user_file is not None and Path(filename).resolve() == user_file:
                return f"the model function {spec} raised {_first_line(error)}"
            if onnx and any(part in filename for part in ("/onnx/", "/google/protobuf/")):
                return f"ONNX file '{spec}' cannot be imported: {_first_line(error)}"
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    return None


class _UserModel:
    """Around code that runs the user's model (its file, its function, its forward): an
    exception from the model's code, or its exit, is a UserError naming it."""

    def __init__(self, spec: str):
        self.spec = spec

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None or isinstance(error, (UserError, KeyboardInterrupt)):
            return False
        if isinstance(error, SystemExit):
            raise UserError(f"the model {self.spec} exited (SystemExit({error.code!r})) "
                            "instead of returning (torch_module, example_inputs_tuple)") from None
        if isinstance(error, Exception):
            from ..errors import AccelError

            message = None if isinstance(error, AccelError) else \
                _user_code_error(error, self.spec)
            if message is not None:
                raise UserError(message) from None
        return False


def _load_model(spec: str):
    """The model of a MODEL argument; the user's code failing is a UserError."""
    from .model_spec import load_model

    with _UserModel(spec):
        return load_model(spec)


def _say(*args) -> None:
    """Progress notes: on stderr, so that stdout holds only the results."""
    print(*args, file=sys.stderr, flush=True)


# --- subcommands ------------------------------------------------------------------------------

def cmd_partition(args) -> int:
    config = resolve_config(args.config)
    check_precision_args(args, config)
    parse_model_spec(args.model)
    from ..flows.pipeline import partition_report

    csv_out = _output_path(args.csv, ".csv", "--csv") if args.csv else None
    program_out = _output_path(args.program, ".json", "--program") if args.program else None
    graph_out = None
    if args.graph:
        suffix = Path(args.graph).suffix
        if suffix not in (".svg", ".html"):
            raise UserError(f"--graph path '{args.graph}' must end in .svg or .html")
        graph_out = _output_path(args.graph, suffix, "--graph")
    from .report import format_op_type_summary, op_type_summary

    model = _load_model(args.model)
    partitioned = _partition(args, config, model)
    _show_mixed(partitioned)
    report = partition_report(partitioned)
    summary = op_type_summary(report)
    print(report)
    print()
    print(format_op_type_summary(summary))
    if graph_out is not None:
        from ..compiler.partition import match_composites
        from .graph_view import write_graph

        # the same matching as the build's (int8 and mixed builds match int8's chains)
        chains = "int8" if args.precision in ("int8", "mixed") else args.precision
        matched = match_composites(model.mod, model.params, config=config,
                                   fuse=not args.no_fuse, precision=chains)
        write_graph(matched, report, graph_out,
                    f"{parse_model_spec(args.model).name} on {config.name}, {args.precision}")
        _say(f"wrote {graph_out}")
    data = {**report.to_dict(), "op_types": summary}
    if args.host_cost or csv_out:
        from .host_cost import host_costs, format_host_costs, write_host_costs_csv

        costs = host_costs(partitioned, config, measure=True)
        print()
        print(format_host_costs(costs, config))
        data["host_costs"] = [cost.to_dict() for cost in costs]
        if csv_out:
            write_host_costs_csv(costs, csv_out)
            _say(f"wrote {csv_out}")
    _write_json("partition", data, args.json)
    if program_out is not None:
        from ..compiler.partition import program_of

        _write_json("program", program_of(partitioned), program_out)
        _say(f"wrote {program_out}")
    return 0


def _show_mixed(partitioned) -> None:
    """A mixed build's search: the two ends and the chosen assignment."""
    from ..flows.pipeline import mixed_precision_of

    search = mixed_precision_of(partitioned)
    if search is not None:
        print(search)


def cmd_compile(args) -> int:
    config = resolve_config(args.config)
    check_precision_args(args, config)
    out = _output_path(args.output, ".so", "output")
    save_input = _output_path(args.save_input, ".npy", "--save-input") if args.save_input else None
    dump_dir = _dump_directory(args.dump_code) if args.dump_code else None
    parse_model_spec(args.model)
    import numpy as np

    from ..compiler.partition import generated_sources
    from ..compiler.toolchain import export_library
    from ..flows.pipeline import build, partition_report

    timings = {}
    start = time.perf_counter()
    model = _load_model(args.model)
    timings["import"] = time.perf_counter() - start
    start = time.perf_counter()
    partitioned = _partition(args, config, model)
    generation = "partition + " + {"int8": "calibration + ",
                                   "mixed": "calibration + precision search + "}.get(
        args.precision, "") + "codegen"
    timings[generation] = time.perf_counter() - start
    if dump_dir is not None:
        _dump_code(generated_sources(partitioned), dump_dir)
    start = time.perf_counter()
    exe = build(partitioned)
    export_library(exe, out)
    timings["build + export"] = time.perf_counter() - start
    report = partition_report(partitioned)
    _show_mixed(partitioned)
    print(str(report).splitlines()[0])
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); " +
          ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()) +
          f"; compile ({generation} + build + export) "
          f"{timings[generation] + timings['build + export']:.2f} s")
    if save_input is not None:
        if len(model.inputs) != 1:
            raise UserError(f"the model has {len(model.inputs)} inputs: --save-input writes one")
        np.save(save_input, model.inputs[0])
        print(f"wrote {save_input} (example input {list(model.inputs[0].shape)})")
    return 0


def _dump_directory(text: str) -> Path:
    """--dump-code's directory: made now (with its parents), before the long compile."""
    directory = Path(text)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--dump-code '{directory}' exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create --dump-code directory '{directory}': "
                        f"{error.strerror or error}") from None
    return directory


def _dump_code(sources: dict, directory: Path) -> None:
    """The generated C, one file per external function: fN.c for the function whose runs are
    labelled fN.* in the profile and the trace (the symbols, hundreds of characters long,
    are listed in functions.txt)."""
    index = []
    for i, (symbol, source) in enumerate(sources.items()):
        (directory / f"f{i}.c").write_text(source)
        index.append(f"f{i}.c {symbol}\n")
    (directory / "functions.txt").write_text("".join(index))
    _say(f"wrote the generated C of {len(sources)} external function(s) to {directory}/ "
         "(f0.c, ...; functions.txt: their symbols)")


def _named_inputs(named: dict, params: List[str], path: str) -> list:
    """An .npz's arrays in the order of the function's parameters: by the parameters' names,
    or by position when the archive has np.savez's own names (arr_0, arr_1, ...)."""
    positional = [f"arr_{i}" for i in range(len(named))]
    if sorted(named) == sorted(positional) and not set(named) & set(params):
        keys = positional
    else:
        keys = params
        missing = [p for p in params if p not in named]
        unknown = [k for k in named if k not in params]
        if missing or unknown:
            raise UserError(
                f"input file '{path}' has arrays {sorted(named)}; the library's inputs are "
                f"{params}" + (f" (missing: {missing})" if missing else "") +
                (f" (unknown: {unknown})" if unknown else ""))
    if len(keys) != len(params):
        raise UserError(f"input file '{path}' has {len(keys)} arrays; the library takes "
                        f"{len(params)} inputs: {params}")
    return [named[k] for k in keys]


def cmd_run(args) -> int:
    library = Path(args.library)
    if library.suffix != ".so":
        raise UserError(f"'{library}' is not a .so library (compile writes one)")
    if library.is_dir():
        raise UserError(f"library '{library}' is a directory, not a library file")
    if not library.is_file():
        raise UserError(f"library '{library}' does not exist")
    from ..compiler.library import library_info

    info = library_info(library)  # checks the file first: a damaged one is refused
    config = _library_config(args.config, info, library)
    if args.output and Path(args.output).suffix not in (".npy", ".npz"):
        raise UserError(f"output path '{args.output}' must end in .npy (or .npz for several)")
    _check_trace_paths(args)
    csv_out = _output_path(args.csv, ".csv", "--csv") if args.csv else None
    arrays, named = _read_run_inputs(args)
    import contextlib

    import numpy as np
    import tvm

    from ..sim.profiling import profile
    from ..compiler.toolchain import virtual_machine

    from ..errors import AccelError

    try:
        vm = virtual_machine(library)  # checks the file first: a damaged one never loads
    except AccelError:
        raise
    except Exception as error:  # pylint: disable=broad-except  (TVM's own error types)
        raise UserError(f"cannot load '{library}': {_first_line(error)}") from None
    if named is not None:
        arrays = _named_inputs(named, vm._param_names("main"), args.input[0])
    elif args.random:
        specs = vm.input_specs("main")
        (arrays,) = random_inputs([np.zeros(shape, dtype) for _, shape, dtype in specs], 1,
                                  args.seed)
        print("inputs: N(0, 1), seed " + str(args.seed) + ": " + ", ".join(
            f"{name} {list(shape)} {dtype}" for name, shape, dtype in specs))
    data = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays]
    traced = args.trace is not None or args.trace_plot is not None
    profiled = args.profile or args.precision is not None or traced or csv_out is not None
    try:
        if args.profile:
            vm["main"](*data)  # warm-up: the first run allocates scratch memory
        start = time.perf_counter()
        with profile() if profiled else contextlib.nullcontext() as prof:
            result = vm["main"](*data)
        elapsed = time.perf_counter() - start
    except (RuntimeError, ValueError, TypeError) as error:  # TVM's argument checks
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        raise UserError(f"running '{library}' failed: {lines[0] if lines else error}") from None
    if profiled:
        _check_ran_precision(prof, args.precision, library)
    _write_run_outputs(args, result, elapsed)
    sources = info.sources if info is not None else None
    if args.profile:
        print()
        print(prof.table(clock_hz=config.clock_hz, sources=sources))
        t = prof.totals
        if t["cycles"]:
            print(f"{config.name} clock: {config.clock_hz / t['cycles']:,.1f} frames/s")
    if csv_out is not None:
        prof.csv(csv_out, config, sources=sources)
        print(f"wrote {csv_out} (one row per accelerator run)")
    if traced:
        from ..errors import AccelInvalidError
        from .report import name_trace

        try:
            trace = prof.chrome_trace(config)
        except AccelInvalidError as error:  # the library was compiled for another configuration
            raise UserError(f"--trace: {error} (--config)") from None
        if info is not None:
            trace = name_trace(trace, info.names)
        _write_trace(trace, config, args.trace, args.trace_plot)
    return 0


def _library_config(config_arg: Optional[str], info, library: Path):
    """The configuration run reports on: the one the library was compiled for (its record of
    its build), which --config may name again but not contradict; --config, else nv_full, for
    a library without the record (nothing offloaded, or written before libraries kept it)."""
    if info is None:
        return resolve_config(config_arg or "nv_full")
    if config_arg is None:
        return info.config
    config = resolve_config(config_arg)
    if config.to_dict() != info.config.to_dict():
        raise UserError(f"library '{library}' was compiled for configuration "
                        f"{info.config.name}, not {config.name} (--config): leave --config "
                        "out, run reports on the library's own")
    return config


def _read_run_inputs(args) -> tuple:
    """run's --input files: the .npy arrays in order, and an .npz's arrays by name (None
    without one; ordered once the library is loaded)."""
    import numpy as np

    if not args.input and not args.random:
        raise UserError("give the inputs: --input x.npy (repeated, in order), --input "
                        "inputs.npz (named), or --random")
    if args.input and args.random:
        raise UserError("give --input or --random, not both")
    inputs = args.input or []
    if any(Path(path).suffix == ".npz" for path in inputs) and len(inputs) > 1:
        raise UserError(f"an .npz input holds every input: give it alone, not with "
                        f"{len(inputs) - 1} other --input")
    arrays, named = [], None  # named: an .npz's arrays by name, ordered once the VM is loaded
    for path in inputs:
        if not Path(path).is_file():
            raise UserError(f"input file '{path}' does not exist")
        archive = Path(path).suffix == ".npz"
        kind = ".npz archive" if archive else ".npy array"
        try:
            loaded = np.load(path, allow_pickle=False)
            if archive and hasattr(loaded, "files"):
                with loaded:
                    named = {key: loaded[key] for key in loaded.files}
        except (ValueError, OSError) as error:
            raise UserError(f"input file '{path}' is not a {kind}: {error}") from None
        if isinstance(loaded, np.ndarray) != (not archive):
            raise UserError(f"input file '{path}' is not a {kind}")
        if not archive:
            arrays.append(loaded)
    return arrays, named


def _write_run_outputs(args, result, elapsed: float) -> None:
    """Print run's outputs and wall time, and write them to --output."""
    import numpy as np

    outputs = [result] if hasattr(result, "numpy") else list(result)
    outputs = [o.numpy() for o in outputs]
    for i, o in enumerate(outputs):
        flat = o.reshape(-1)
        print(f"output {i}: shape {list(o.shape)} {o.dtype}, argmax {int(np.argmax(flat))}, "
              f"first values {np.array2string(flat[:5], precision=4)}")
    print(f"wall time {elapsed * 1e3:.2f} ms")
    if args.output:
        if Path(args.output).suffix == ".npz":
            np.savez(args.output, *outputs)
        elif len(outputs) != 1:
            raise UserError(f"{len(outputs)} outputs: give --output with a .npz path")
        else:
            np.save(args.output, outputs[0])
        print(f"wrote {args.output}")


def _check_trace_paths(args) -> None:
    """--trace and --trace-plot name a .json and a .png (checked before the long work)."""
    for flag, path, suffix in (("--trace", args.trace, ".json"),
                               ("--trace-plot", args.trace_plot, ".png")):
        if path is not None and Path(path).suffix != suffix:
            raise UserError(f"{flag} path '{path}' must end in {suffix}")


def _trace_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--trace", metavar="out.json",
                   help=f"write {what} in simulated time as a Chrome trace (one track per "
                   "engine and the memory; open it in ui.perfetto.dev)")
    p.add_argument("--trace-plot", metavar="out.png",
                   help="draw the same timeline as a PNG")


def _write_trace(trace: dict, config, trace_path: Optional[str],
                 plot_path: Optional[str]) -> None:
    """A timeline: the Chrome trace (for Perfetto) and/or its PNG rendering."""
    from ..sim.timeline import save_trace

    runs = trace["otherData"]["runs"]
    if trace_path is not None:
        save_trace(trace, trace_path)
        print(f"wrote {trace_path} (timeline of {runs} accelerator runs in simulated time at "
              f"{config.clock_hz / 1e9:g} GHz: open it in ui.perfetto.dev or chrome://tracing)")
    if plot_path is not None:
        from .plotting import plot_timeline

        plot_timeline(trace, plot_path)
        print(f"wrote {plot_path} (the timeline of {runs} accelerator runs)")


def _check_ran_precision(prof, expected: Optional[str], library: Path) -> None:
    """Say which precision the accelerator ran in; a library compiled for another precision
    than ``expected`` is an error (the precision is fixed when the library is compiled)."""
    ran = sorted({op.precision for op in prof.ops})
    if not ran:
        print("accelerator precision: - (no accelerator run)")
    else:
        print(f"accelerator precision: {', '.join(ran)}")
    allowed = [["fp16"], ["int8"], ["fp16", "int8"]] if expected == "mixed" else [[expected]]
    if expected is not None and ran and [p for p in ran if p != "fp32"] not in allowed:
        raise UserError(f"'{library}' runs {', '.join(ran)} on the accelerator, not {expected}: "
                        f"the precision is chosen at compile time (compile --precision "
                        f"{expected})")


def cmd_accuracy(args) -> int:
    config = resolve_config(args.config)
    check_precision_args(args, config)
    parse_model_spec(args.model)
    from ..flows.accuracy import accuracy_report

    model = _load_model(args.model)
    examples, what = _npz_examples(args.inputs, model, "--inputs", args.seed + 1)
    calibration = _calibration(args, model)
    precision = args.precision
    if "keep_float" in calibration:  # the mixed build that keeps them in fp16
        from ..flows.pipeline import keep_float_assignment

        precision, calibration["layer_precisions"] = keep_float_assignment(
            model.mod, model.params, config, not args.no_fuse, precision,
            calibration.pop("keep_float"), None, None)
    _say(f"evaluation: {what}")
    with tempfile.TemporaryDirectory(prefix="accel-accuracy-") as directory:
        onnx_model, skipped = _onnx_for_ort(args, model, directory)
        report = accuracy_report(model.mod, model.params, examples, config=config,
                                 precision=precision, fuse=not args.no_fuse,
                                 onnx_model=onnx_model, **calibration)
    if skipped:
        report.ort_skipped = skipped
    return _show_report(report, args.json, "accuracy")


def _npz_examples(spec: str, model, flag: str, seed: Optional[int] = None) -> tuple:
    """Examples of the model's inputs from the command line: (examples, what they are).
    ``spec``: an .npz holding the model's inputs by name (or in order: np.savez(path, a, b)),
    each array one input or a stack of examples of it; or, where ``seed`` is given, a count
    of random N(0, 1) inputs drawn with it."""
    import numpy as np

    if seed is not None and spec.isdigit():
        count = int(spec)
        if count < 1:
            raise UserError(f"{flag} {spec}: give at least one input")
        return random_inputs(model, count, seed), f"{count} random N(0, 1) inputs (seed {seed})"
    path = Path(spec)
    if path.suffix != ".npz":
        raise UserError(f"{flag} '{spec}': " + ("a count of random inputs or " if seed
                                                 is not None else "") + "an .npz file")
    if not path.is_file():
        raise UserError(f"input file '{spec}' does not exist")
    try:
        with np.load(path, allow_pickle=False) as loaded:
            named = {key: loaded[key] for key in loaded.files}
    except (ValueError, OSError) as error:
        raise UserError(f"input file '{spec}' is not an .npz archive: {error}") from None
    names = [str(p.name) for p in model.mod["main"].params][:len(model.inputs)]
    arrays = _named_inputs(named, names, spec)
    examples = []
    for array, example in zip(arrays, model.inputs):
        shape = tuple(np.shape(example))
        if array.shape == shape:  # one input
            examples.append([array])
        elif array.shape[1:] == shape:  # a stack of inputs
            examples.append(list(array))
        elif shape[:1] == (1,) and array.shape[1:] == shape[1:]:  # a batch of batch-1 inputs
            examples.append([array[i:i + 1] for i in range(array.shape[0])])
        else:
            raise UserError(f"{flag} file '{spec}': an array of shape {list(array.shape)} for "
                            f"an input of shape {list(shape)} (or a stack of them)")
    counts = {len(e) for e in examples}
    if len(counts) != 1:
        raise UserError(f"{flag} file '{spec}': the inputs' stacks differ in length")
    examples = [tuple(np.asarray(e[i], dtype=np.asarray(x).dtype) for e, x in
                      zip(examples, model.inputs)) for i in range(counts.pop())]
    return examples, f"{len(examples)} input(s) from {spec}"


def cmd_debug(args) -> int:
    config = resolve_config(args.config)
    check_precision_args(args, config)
    parse_model_spec(args.model)
    json_out = _output_path(args.json, ".json", "--json") if args.json else None
    csv_out = _output_path(args.csv, ".csv", "--csv") if args.csv else None
    from .debug import debug_report

    model = _load_model(args.model)
    examples, what = _npz_examples(args.inputs, model, "--inputs", args.seed + 1)
    calibration = _calibration(args, model)
    _say(f"evaluation: {what}")
    report = debug_report(model.mod, model.params, examples, config=config,
                          precision=args.precision, fuse=not args.no_fuse,
                          threshold_db=args.threshold, **calibration)
    print(report)
    if json_out:
        json_out.write_text(json.dumps(report.to_dict(), indent=2))
        _say(f"wrote {json_out}")
    if csv_out:
        from .debug import CSV_COLUMNS
        from .report import write_csv

        write_csv(report.csv_rows(), csv_out, CSV_COLUMNS)
        _say(f"wrote {csv_out}")
    return 0


def _onnx_for_ort(args, model, directory):
    """accuracy's ONNX file for the ONNX Runtime comparison (int8 only, unless --no-ort):
    (path, None), or (None, why there is none)."""
    if args.precision != "int8" or args.no_ort:
        return None, None
    from ..errors import AccelUnsupportedError
    from ..quantization import ort_baseline
    from .bench import onnx_file

    reason = ort_baseline.unavailable()
    if reason:
        return None, reason
    source = args.model if parse_model_spec(args.model).kind == "onnx" else None
    try:
        with _UserModel(args.model):
            return onnx_file(model, directory, source), None
    except AccelUnsupportedError as error:
        return None, str(error)


def cmd_estimate(args) -> int:
    config = resolve_config(args.config)
    parse_model_spec(args.model)
    _check_trace_paths(args)
    csv_out = _output_path(args.csv, ".csv", "--csv") if args.csv else None
    from .estimation import estimate

    model = _load_model(args.model)
    report = estimate(model.mod, model.params, config=config, precision=args.precision,
                      fuse=not args.no_fuse, winograd=not args.no_winograd)
    _show_report(report, args.json, "estimate")
    if csv_out:
        report.to_csv(csv_out)
        _say(f"wrote {csv_out}")
    if args.trace is not None or args.trace_plot is not None:
        from .report import name_trace, source_names

        _write_trace(name_trace(report.chrome_trace(), source_names(report.source_ops)),
                     config, args.trace, args.trace_plot)
    return 0


def _show_report(report, json_path, kind: str) -> int:
    """Print a report (estimate or accuracy) and, when asked, write its JSON form."""
    print(report)
    if json_path:  # a large model's JSON form takes a while to build: only when asked
        _write_json(kind, report.to_dict(), json_path)
    return 0


def _write_json(kind: str, data: dict, json_path) -> None:
    """A report's JSON form, tagged ``"schema": "accel-codegen/<kind>/1"``
    (docs/report-schema.md)."""
    if json_path:
        from .report import tagged

        Path(json_path).write_text(json.dumps(tagged(kind, data), indent=2))


def _result_paths(args):
    """The --json and --plot paths of bench and sweep, checked before the long run."""
    return (_output_path(args.json, ".json", "--json") if args.json else None,
            _output_path(args.plot, ".png", "--plot") if args.plot else None)


def cmd_bench(args) -> int:
    config = resolve_config(args.config)
    parse_model_spec(args.model)
    json_out, plot_out = _result_paths(args)
    csv_out = _output_path(args.csv, ".csv", "--csv") if args.csv else None
    from . import bench

    with _UserModel(args.model):
        result = bench.run_bench(args.model, modes=args.modes, config=config,
                                 repeat=args.repeat, host_repeat=args.host_repeat,
                                 warmup=args.warmup,
                                 per_layer=args.per_layer or plot_out is not None
                                 or csv_out is not None,
                                 per_layer_wall=args.per_layer, threads=args.threads,
                                 calibration=args.calibration,
                                 calibration_method=args.calibration_method, seed=args.seed)
    shown = result if args.per_layer else {k: v for k, v in result.items() if k != "layers"}
    print(bench.format_table(shown))
    if csv_out:
        from .report import CSV_COLUMNS, write_csv

        write_csv(result.get("layer_rows", []), csv_out, ("bench_mode",) + CSV_COLUMNS)
        _say(f"wrote {csv_out}")
    _write_outputs(result, json_out, plot_out, "plot_bench")
    return 0


def cmd_sweep(args) -> int:
    base = resolve_config(args.config)
    parse_model_spec(args.model)
    json_out, plot_out = _result_paths(args)
    from ..sim.config import check_precision
    from .estimation import sweep_configs

    try:
        points = sweep_configs(base, args.macs, args.dram_gbps, args.cbuf_kib)
    except ValueError as error:
        raise UserError(str(error)) from None
    check_precision(points[0][1], args.precision)
    from .estimation import format_sweep, sweep

    model = _load_model(args.model)
    result = sweep(model.mod, model.params, points, precision=args.precision,
                   fuse=not args.no_fuse, winograd=not args.no_winograd, model_name=model.name)
    print(format_sweep(result))
    _write_outputs(result, json_out, plot_out, "plot_sweep")
    return 0


def _write_outputs(result: dict, json_out, plot_out, plotter: str) -> None:
    """The result as JSON and as a plot (matplotlib is imported only for a plot)."""
    if json_out:
        json_out.write_text(json.dumps(result, indent=2))
        _say(f"wrote {json_out}")
    if plot_out:
        from . import plotting

        getattr(plotting, plotter)(result, plot_out)
        _say(f"wrote {plot_out}")


# --- the parser -------------------------------------------------------------------------------

def _model_args(p: argparse.ArgumentParser, fuse: bool = True, winograd: bool = True) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--config", default="nv_full", help=CONFIG_HELP)
    if fuse:
        p.add_argument("--no-fuse", action="store_true",
                       help="decomposed: every source op its own accelerator op")
    if fuse and winograd:
        p.add_argument("--no-winograd", action="store_true",
                       help="every convolution direct (default: Winograd where the "
                            "configuration has it and the convolution qualifies)")


def _precision_args(p: argparse.ArgumentParser, choices=None, calibrated: bool = True,
                    **kwargs) -> None:
    from ..quantization import METHODS
    from ..sim.config import GENERATED_PRECISIONS  # the C bindings, not tvm

    kwargs = {"default": "fp32", **kwargs}
    p.add_argument("--precision", choices=choices or GENERATED_PRECISIONS, **kwargs,
                   help="the accelerator's precision" + (
                       f" (default {kwargs['default']})" if kwargs["default"] else "") +
                   ("; int8 is calibrated, see --calibration" if calibrated else
                    "; costs need no calibration"))
    if not calibrated:
        return
    p.add_argument("--calibration", type=_positive, metavar="N",
                   help=f"int8: calibrate on N random N(0, 1) inputs of the model's input "
                   f"shapes (default {DEFAULT_CALIBRATION})")
    p.add_argument("--calibration-method", choices=METHODS,
                   help="int8: how activation ranges become scales (default mse: the "
                   "clipping range of least quantisation error, per tensor)")
    p.add_argument("--seed", type=_at_least(0), default=DEFAULT_SEED,
                   help=f"seed of the random calibration inputs (default {DEFAULT_SEED})")
    p.add_argument("--no-equalize", action="store_true",
                   help="int8: no cross-layer equalisation of the convolution weights "
                   "(default: equalised where exact, see docs/ptq.md)")
    p.add_argument("--no-bias-correction", action="store_true",
                   help="int8: no bias correction of the weights' rounding shift")
    p.add_argument("--weight-rounding", choices=("nearest", "gptq"), default="nearest",
                   help="int8: how the convolution weights round to their codes (default "
                   "nearest; gptq: on the calibration inputs, see docs/ptq.md)")
    p.add_argument("--calibration-data", metavar="DATA.npz",
                   help="int8: calibrate on these inputs instead of random ones: an .npz of "
                   "the model's inputs by name (np.savez(path, x=...)) or in order, each array "
                   "one input or a stack of them")


def _keep_float_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-float", nargs="+", metavar="NAME",
                   help="int8: keep these layers out of int8 (in fp16; the configuration "
                   "must have it), named as the source model names them (a module path "
                   "such as layer1.0.conv1, or a module for every layer under it, an ONNX "
                   "node name, a wildcard) or by key (f0.3): the partition report shows "
                   "the names")


def _decibels(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dB") from None


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-sqnr", type=_decibels, metavar="DB",
                   help="--precision mixed: the SQNR against fp32 (dB, at every output, on "
                   "the calibration inputs and the quarter of them held back from "
                   "calibration) that the int8/fp16 assignment must reach, e.g. 40")


def _csv_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--csv", metavar="out.csv",
                   help=f"also write {what} as CSV (columns: docs/report-schema.md)")


def _output_args(p: argparse.ArgumentParser, what: str, plot: bool = False) -> None:
    p.add_argument("--json", metavar="PATH", help=f"also write the {what} as JSON")
    if plot:
        p.add_argument("--plot", metavar="out.png", help=f"write a PNG plot of the {what}")


def _build_commands(sub) -> None:
    """partition, compile, run, accuracy."""
    from ..sim.config import GENERATED_PRECISIONS

    mixed = GENERATED_PRECISIONS + ("mixed",)
    _partition_command(sub, mixed)
    _compile_command(sub, mixed)
    _run_command(sub, mixed)
    _accuracy_command(sub, mixed)
    _debug_command(sub)


def _partition_command(sub, mixed) -> None:
    """The partition command's parser."""
    p = sub.add_parser("partition", help="print what is offloaded as which primitive, and why "
                       "the rest is not", description="Print the partition report of a model.")
    _model_args(p)
    _precision_args(p, choices=mixed)
    _keep_float_arg(p)
    _target_args(p)
    _output_args(p, "report")
    p.add_argument("--host-cost", action="store_true",
                   help="also rank the host operators by what the accelerator would spend on "
                   "each if it had a primitive for it (a roofline: docs/report-schema.md), "
                   "beside the host time each costs today")
    _csv_arg(p, "the host operators' costs (implies --host-cost)")
    p.add_argument("--graph", metavar="out.svg",
                   help="also draw the partitioned graph (.svg, or .html: a page holding it): "
                   "one box per accelerator layer, coloured by external function, and per "
                   "host operator, marked, with its reason; arrows for the tensors")
    p.add_argument("--program", metavar="out.json",
                   help="also write the accelerator program the code is generated from: every "
                   "run in execution order with the tensors it reads and writes and what the "
                   "planning passes chose (conv modes, SRAM, CBUF split, layouts)")
    p.set_defaults(func=cmd_partition)


def _compile_command(sub, mixed) -> None:
    """The compile command's parser."""
    p = sub.add_parser("compile", help="partition, generate C, build and export a .so",
                       description="Partition a model, generate the accelerator C code, build "
                       "it with TVM and export a shared library that `run` (or any process "
                       "with tvm) loads.")
    _model_args(p)
    p.add_argument("-o", "--output", required=True, metavar="model.so",
                   help="the shared library to write")
    p.add_argument("--save-input", metavar="x.npy",
                   help="also write the model's example input, for `run`")
    p.add_argument("--dump-code", metavar="DIR",
                   help="also write the generated C, one file per external function (DIR/f0.c "
                   "for the runs labelled f0.*, ...; DIR/functions.txt: their symbols)")
    _precision_args(p, choices=mixed)
    _keep_float_arg(p)
    _target_args(p)
    p.set_defaults(func=cmd_compile)


def _run_command(sub, mixed) -> None:
    """The run command's parser."""
    p = sub.add_parser("run", help="run an exported .so on the simulator",
                       description="Load a library written by `compile` and run it on inputs "
                       "from .npy files (in-process: tvm.runtime.load_module + VirtualMachine).")
    p.add_argument("library", metavar="model.so", help="a library written by `compile`")
    p.add_argument("-i", "--input", action="append", metavar="x.npy",
                   help="an input array (repeat for several inputs, in order), or one .npz "
                   "holding every input by its name in the model (np.savez(path, x=...)) or "
                   "in order (np.savez(path, a, b))")
    p.add_argument("--random", action="store_true",
                   help="instead of --input: N(0, 1) values of the shapes and dtypes the "
                   "library's inputs have, drawn with --seed")
    p.add_argument("--seed", type=_at_least(0), default=0,
                   help="seed of --random (default 0)")
    p.add_argument("-o", "--output", metavar="y.npy", help="write the output (.npz: several)")
    p.add_argument("--profile", action="store_true",
                   help="print the per-layer cost table of the run")
    p.add_argument("--config", default=None,
                   help="the configuration the library was compiled for (default: the one "
                   "the library records; nv_full for a library without that record)")
    p.add_argument("--precision", choices=mixed,
                   help="the precision the library was compiled for: checked against what "
                   "its accelerator runs execute (an error if they differ)")
    _trace_args(p, "the run's timeline")
    _csv_arg(p, "the run's per-layer costs")
    p.set_defaults(func=cmd_run)


def _accuracy_command(sub, mixed) -> None:
    """The accuracy command's parser."""
    p = sub.add_parser("accuracy", help="SQNR of an int8, fp16 or mixed build against fp32",
                       description="Build a model in int8, fp16 or mixed int8/fp16 and in "
                       "fp32 (the same partition), run both on random N(0, 1) inputs drawn "
                       "with seed + 1 (int8 and mixed calibrate on inputs drawn with the "
                       "seed, and mixed searches its assignment on them), and print the SQNR "
                       "of every accelerator tensor and of the output, and the top-1 "
                       "agreement.")
    _model_args(p)
    _precision_args(p, choices=[c for c in mixed if c != "fp32"], default=None, required=True)
    _keep_float_arg(p)
    _target_args(p)
    p.add_argument("--inputs", default="16", metavar="M|DATA.npz",
                   help="evaluation inputs: M random N(0, 1) inputs drawn with seed + 1 "
                   "(default 16), or an .npz of the model's inputs by name or in order, each "
                   "array one input or a stack of them")
    p.add_argument("--no-ort", action="store_true",
                   help="int8: leave out the comparison with ONNX Runtime's static int8 "
                   "quantisation (QDQ, per-channel weights) calibrated on the same inputs")
    _output_args(p, "report")
    p.set_defaults(func=cmd_accuracy)


def _debug_command(sub) -> None:
    """The debug command's parser."""
    from ..sim.config import GENERATED_PRECISIONS

    p = sub.add_parser("debug", help="per layer: the error against fp32 (SQNR, max error) "
                       "and the simulated cost, the first layer below a threshold flagged",
                       description="Build a model in int8 (or fp16) and in fp32 (the same "
                       "partition), run both on the inputs, and print one row per "
                       "accelerator layer: the SQNR and largest error of its output against "
                       "the fp32 build's same tensor (cumulative: upstream errors included), "
                       "its cycles, and for int8 on a configuration with fp16 the cycles if "
                       "that layer alone ran in fp16; an operator the partition leaves on the "
                       "host has a row where it runs, with the partition's reason and no "
                       "figures (TVM runs it in fp32). In the table's first column, the first "
                       "layer whose SQNR is below --threshold is marked '!' and each later "
                       "one below it '<'. The builds are the code generator's "
                       "(Winograd where the configuration has it and it pays).")
    _model_args(p, winograd=False)
    _precision_args(p, choices=[c for c in GENERATED_PRECISIONS if c != "fp32"],
                    default="int8")
    p.add_argument("--inputs", default="4", metavar="N|DATA.npz",
                   help="evaluation inputs: N random N(0, 1) inputs drawn with seed + 1 "
                   "(default 4), or an .npz of the model's inputs by name (np.savez(path, "
                   "x=...)) or in order, each array one input or a stack of them")
    p.add_argument("--threshold", type=_decibels, default=30.0, metavar="DB",
                   help="mark the first layer whose SQNR is below DB '!' and later ones '<' "
                   "(default 30)")
    _output_args(p, "per-layer table")
    _csv_arg(p, "the per-layer table")
    p.set_defaults(func=cmd_debug)


def cmd_nvdla_trace(args) -> int:
    from ..sim.nvdla import main as play_trace
    return play_trace(args.cfg)


def cmd_export_nvdla(args) -> int:
    config = resolve_config(args.config)
    if config.name != "nv_small" or args.precision != "int8":
        raise UserError(f"export-nvdla writes nv_small int8 traces (NVDLA's trace tests are "
                        f"nv_small's): --config nv_small --precision int8, not "
                        f"{config.name} {args.precision}")
    check_precision_args(args, config)
    parse_model_spec(args.model)
    from ..flows.pipeline import build
    from ..compiler.vm import virtual_machine
    from ..sim.recorder import recording
    from .nvdla_export import export_runs

    model = _load_model(args.model)
    if any(x.shape[:1] != (1,) for x in model.inputs):
        raise UserError("export-nvdla writes one image per test: the model's inputs need a "
                        f"batch of 1, not {[list(x.shape) for x in model.inputs]}")
    partitioned = _partition(args, config, model)
    vm = virtual_machine(build(partitioned))
    with recording() as runs:
        vm["main"](*model.inputs)
    tests, refused = export_runs(runs, args.output, args.prefix)
    for test in tests:
        print(f"{test.name}: {test.cfg} crc {test.crc:#010x}, {test.cycles:,} cycles estimated "
              f"under NVDLA's testbench memory ({', '.join(test.units)})")
    for item in refused:
        print(f"refused {item.label}: {item.reason}")
    print(f"{len(runs) - len(refused)} of {len(runs)} accelerator runs written to "
          f"{args.output} as {len(tests)} NVDLA trace tests (one per hardware layer)"
          + (f"; {len(refused)} refused" if refused else ""))
    return 0 if tests else 1


def _analysis_commands(sub) -> None:
    """estimate, bench, sweep, nvdla-trace, export-nvdla."""
    p = sub.add_parser("estimate", help="the cost model's per-layer figures, without running",
                       description="Cost a model on a configuration without running kernels.")
    _model_args(p)
    _precision_args(p, calibrated=False)
    _output_args(p, "estimate")
    _csv_arg(p, "the per-layer estimate")
    _trace_args(p, "the estimated timeline (what a profiled run would show)")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("bench", help="the simulator (fp32, int8) vs TVM host vs PyTorch vs "
                       "ONNX Runtime (fp32, int8), side by side",
                       description="Benchmark a model in several modes, interleaved, after "
                       "warm-up: median (min, max) wall time per mode; for the accelerator "
                       "modes the simulated cycles, frames/s, bytes and MAC utilisation. "
                       "fused_int8 is the fused build in int8 (decomposed int8 is not "
                       "generated); ort_fp32 and ort_int8 are ONNX Runtime on the model's ONNX "
                       "export, ort_int8 its static QDQ int8 quantisation calibrated on the "
                       "same inputs as fused_int8. The simulator against ONNX Runtime is "
                       "printed as ORT time / simulator time: >= 1.00, the simulator is at "
                       "least as fast. Without onnxruntime the ORT modes are skipped.")
    _model_args(p, fuse=False)
    from ..quantization import METHODS
    from .bench import MODES

    p.add_argument("--modes", type=_modes, default=list(MODES),
                   help=f"comma-separated, among {','.join(MODES)} (default: all)")
    p.add_argument("--repeat", type=_positive, default=10, help="timed runs per mode (10)")
    p.add_argument("--host-repeat", type=_positive, default=3,
                   help="timed runs of the slow TVM host build (3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per mode first (1)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="threads of the simulator and PyTorch (default: ACCEL_NUM_THREADS, "
                   "else every CPU)")
    p.add_argument("--per-layer", action="store_true",
                   help="per-layer figures, and every layer timed alone, fused vs decomposed")
    p.add_argument("--calibration", type=_positive, metavar="N",
                   help=f"fused_int8 and ort_int8: both calibrate on N random N(0, 1) inputs "
                   f"(default {DEFAULT_CALIBRATION})")
    p.add_argument("--calibration-method", choices=METHODS,
                   help="fused_int8: how activation ranges become scales (default mse)")
    p.add_argument("--seed", type=_at_least(0), default=DEFAULT_SEED,
                   help=f"seed of the random calibration inputs (default {DEFAULT_SEED})")
    _output_args(p, "results", plot=True)
    _csv_arg(p, "the simulator modes' per-layer figures (one row per mode and run)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("sweep", help="design-space exploration: frames/s across configurations",
                       description="Estimate a model across accelerator configurations (MAC "
                       "array, DRAM bandwidth, CBUF size) from a base configuration. MACs are "
                       "int8 MACs per cycle, NVDLA's count (nv_full: 2048 = 64 x 32): atomic_c "
                       "= min(64, MACs / 8), atomic_k = MACs / atomic_c (64 -> 8x8 as "
                       "nv_small, 2048 -> 64x32 as nv_full); fp16/fp32 run at half that.")
    _model_args(p)
    p.add_argument("--macs", type=_int_list, required=True, metavar="LIST",
                   help="int8 MACs per cycle, powers of two >= 16, e.g. 64,256,1024,2048")
    p.add_argument("--dram-gbps", type=_float_list, required=True, metavar="LIST",
                   help="DRAM bandwidths in GB/s, e.g. 1,5,10,20")
    p.add_argument("--cbuf-kib", type=_int_list, default=None, metavar="LIST",
                   help="CBUF sizes in KiB (default: the base configuration's)")
    _precision_args(p, calibrated=False)
    _output_args(p, "results", plot=True)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("nvdla-trace", help="play one of NVDLA's trace tests (.cfg) on the "
                       "simulator: the CRC of each check_crc region and the estimated cycles",
                       description="Play one of NVDLA's register-level trace tests (its .cfg, "
                       "with its .dat files beside it) with NVDLA's nv_small register map and "
                       "int8 arithmetic, and print one JSON line: crc (the CRC-32 of each "
                       "check_crc region, in order), cycles (the cost model's estimate under "
                       "the testbench's memory), golden (the trace's CRCs), match. Exit status "
                       "1 when a CRC differs from the trace's.")
    p.add_argument("cfg", metavar="CFG", help="the trace test's .cfg file")
    p.set_defaults(func=cmd_nvdla_trace)

    p = sub.add_parser("export-nvdla", help="write a model's int8 accelerator program as "
                       "NVDLA trace tests (.cfg + .dat), one per hardware layer",
                       description="Compile a model for nv_small in int8, run it once on its "
                       "example input, and write each accelerator run as one of NVDLA's "
                       "register-level trace tests (.cfg of register writes, .dat memory "
                       "images, check_crc with the CRC of the output region), the kind NVDLA's "
                       "RTL testbench plays. Every test is played back on the simulator's "
                       "NVDLA front end and must give the run's output bits. Runs whose int8 "
                       "arithmetic NVDLA's units cannot reproduce exactly are refused, each "
                       "with the difference named (docs/nvdla_rtl.md). Exit status 1 when "
                       "nothing was written.")
    _model_args(p, winograd=False)
    _precision_args(p, choices=["int8"], default="int8")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the directory of the tests (one subdirectory per test)")
    p.add_argument("--prefix", default="layer",
                   help="the tests' name prefix (default layer: layer_00, layer_01, ...)")
    p.set_defaults(func=cmd_export_nvdla, no_winograd=True)


def version_text() -> str:
    """This package's version, its simulator library's ABI and the versions of the packages a
    build depends on, read from their metadata (nothing imported: no seconds-long tvm)."""
    import importlib.metadata

    from .. import __version__, _accel_ffi

    def installed(dist: str) -> str:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            return f"{dist} not installed"

    others = ", ".join(installed(d) for d in ("apache-tvm", "torch", "onnx", "onnxruntime"))
    return (f"{PROG} {__version__} (libaccel ABI {_accel_ffi.lib.accel_abi_version()}; "
            f"{others}; Python {sys.version.split()[0]})")


class _VersionAction(argparse.Action):
    """--version: the text is made only when asked (it reads package metadata)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):  # pylint: disable=redefined-builtin
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Compile models for a simulated NVDLA-like accelerator with "
        "TVM, run them on the simulator, benchmark them and explore hardware configurations.",
        epilog="MODEL: " + MODEL_HELP + ". Run '%(prog)s COMMAND --help' for a command's options.")
    parser.add_argument("--version", action=_VersionAction,
                        help="print the versions of accel-codegen, its simulator library, "
                        "TVM, torch, onnx and onnxruntime, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _build_commands(sub)
    _analysis_commands(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..errors import AccelError

    try:
        with terminal_progress():
            return args.func(args)
    except (UserError, AccelError, OSError) as error:  # OSError: a file we could not use
        message, details = shorten_symbols(_one_line(error))
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        for short, full in details.items():
            print(f"{PROG} {args.command}: details: {short} is {full}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exit_:  # code of the user's that exits where _UserModel did not look
        print(f"{PROG} {args.command}: error: the model's code exited "
              f"(SystemExit({exit_.code!r})) before the command finished", file=sys.stderr)
        return 1
    except Exception as error:  # pylint: disable=broad-except  (a bug of ours: say so)
        traceback.print_exc()
        print(f"{PROG} {args.command}: internal error: {_first_line(error)} (a bug in "
              f"{PROG}, not in the command line: the traceback above shows where)",
              file=sys.stderr)
        return 3


@contextlib.contextmanager
def terminal_progress():
    """While a command runs, calibration draws its progress (a bar on stderr when it is a
    terminal: :class:`~accel_codegen.tools.progress.ProgressBar`)."""
    from ..quantization import calibration
    from .progress import ProgressBar

    before = calibration.progress_factory
    calibration.progress_factory = ProgressBar
    try:
        yield
    finally:
        calibration.progress_factory = before


#: An external function's symbol: its composites' ops joined, often hundreds of characters.
_SYMBOL = re.compile(r"\bfused_[A-Za-z0-9_]+?_accel\d*\b")
SYMBOL_WIDTH = 40  # symbols longer than this are shortened in an error's line


def shorten_symbols(message: str) -> Tuple[str, Dict[str, str]]:
    """An error line with every external function symbol longer than :data:`SYMBOL_WIDTH`
    shortened to its start and end ("fused_relax_nn_conv2d_re...relu1_accel"), and the
    short names' full ones (printed on a details line)."""
    details: Dict[str, str] = {}

    def short(match) -> str:
        full = match.group(0)
        if len(full) <= SYMBOL_WIDTH:
            return full
        name = f"{full[:24]}...{full[-13:]}"
        details[name] = full
        return name

    return _SYMBOL.sub(short, message), details


def _one_line(error: BaseException) -> str:
    """An error's message on one line (a compiler's or TVM's message may hold several)."""
    return " | ".join(line.strip() for line in str(error).strip().splitlines() if line.strip())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
