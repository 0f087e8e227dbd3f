"""Shared test helpers and fixtures for every folder of the suite.

pytest puts tests/ on sys.path for this file, so a test module in any folder imports the plain
helpers with ``from conftest import ...``; the fixtures (``rng``, ``zoo``) need no import.
Nothing here imports TVM or torch when the module loads: the simulator's suites (tests/sim)
run without them, and test_sanitizers.py runs them again with a sanitized libaccel preloaded.
"""
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# A pattern check that fails with anything but a stated reason is a compiler bug: raise it.
os.environ["ACCEL_CODEGEN_STRICT"] = "1"

# The zoo's import cache (accel_codegen/tools/import_cache.py) in a folder of the session's own,
# not the user's: shared by every command-line process the tests start (the README's commands
# import resnet18 once, not nine times), removed at the end. ACCEL_CODEGEN_CACHE set by the
# caller (another folder, or "off") is kept.
_SESSION_CACHE = None
if "ACCEL_CODEGEN_CACHE" not in os.environ:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="accel-codegen-cache-")
    os.environ["ACCEL_CODEGEN_CACHE"] = _SESSION_CACHE


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


# --- the quick subset: pytest -m quick ----------------------------------------------------------

#: The fastest representative tests of every layer (simulator, compiler, flow, quantisation,
#: tools), marked ``quick`` at collection: a whole module, or a test (with all its parameters)
#: as ``module::test_name``, relative to tests/. Keep each entry small (no ResNet builds; LeNet-5
#: and one-layer models) and the subset under 3 minutes on two cores;
#: tests/tools/test_quick_subset.py checks that every entry names a test that exists.
QUICK = (
    # sim: the engines against the reference, validation, configurations, costs, the timeline
    "sim/test_config.py",
    "sim/test_validation.py",
    "sim/test_vocabulary.py",
    "sim/test_sdp_engine.py",
    "sim/test_pdp_engine.py",
    "sim/test_bdma_engine.py",
    "sim/test_cdp_engine.py",
    "sim/test_convert_sdp.py",
    "sim/test_cost_model.py",
    "sim/test_timeline.py",
    "sim/test_device_runs.py",
    "sim/test_conv_impls.py::test_forced_implementations_compute_the_reference",
    "sim/test_nvdla_traces.py::test_trace_matches_golden_crc[pdp_8x8x64_2x2_ave_int8_0]",
    # compiler: partitioning and its reasons, the code generator's units, the frontends
    "compiler/test_codegen_units.py",
    "compiler/test_partition.py::test_conv_bias_bn_relu_is_one_primitive",
    "compiler/test_partition.py::test_host_ops_with_reasons",
    "compiler/test_partition.py::test_config_limits_decide_what_is_offloaded",
    "compiler/test_partition.py::test_partitioning_twice_is_an_error",
    "compiler/test_partition.py::test_unknown_config_is_a_clear_error",
    "compiler/test_frontend.py::test_from_pytorch_rejects_bad_arguments",
    "compiler/test_wide_kernel_convs.py::test_a_grouped_wide_kernel_keeps_its_groups",
    # flow: built, run and compared, in each precision, and the typed errors
    "flow/test_flow.py::test_standalone_primitives_and_prelu",
    "flow/test_flow.py::test_concat_split_and_channel_shuffle_run_on_the_bdma[1]",
    "flow/test_precision_flow.py::test_reduced_precision_matches_fp32",
    "flow/test_precision_flow.py::test_precision_errors",
    "flow/test_hardening_flow.py::test_export_library_refuses_a_bad_destination",
    "flow/test_hardening_flow.py::test_cli_config_with_wrong_types",
    # quantisation maths
    "quantization/test_gptq.py::test_receptive_fields_are_the_convolution",
    "quantization/test_gptq.py::test_inverse_cholesky_factor",
    "quantization/test_gptq.py::test_too_few_rows_round_to_nearest",
    # tools: the command line, estimation, model loading, library paths
    "tools/test_cli.py::test_every_subcommand_has_help",
    "tools/test_cli.py::test_partition_zoo_model",
    "tools/test_cli.py::test_estimate_command",
    "tools/test_tools_shared.py::test_model_spec_rejects",
    "tools/test_tools_shared.py::test_resolve_config_forms",
    "tools/test_tools_shared.py::test_render_table_layout",
    "tools/test_estimate_bench.py::test_estimate_equals_a_profiled_decomposed_run",
    "tools/test_estimate_bench.py::test_mac_array_mapping",
    "tools/test_library_paths.py",
    "tools/test_code_size.py",
    "tools/test_models.py::test_registry_lists_the_zoo",
    "tools/test_models.py::test_bad_zoo_arguments",
    "tools/test_quick_subset.py",
)


def _is_quick(nodeid: str) -> bool:
    """Whether ``nodeid`` (tests/... ::name[params]) is one of QUICK's entries: its module, the
    test with any parameters, or the exact parametrised test."""
    relative = nodeid.removeprefix("tests/")
    module, _, test = relative.partition("::")
    name = test.split("[", 1)[0]
    return (module in QUICK or f"{module}::{name}" in QUICK or relative in QUICK)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_quick(item.nodeid):
            item.add_marker(pytest.mark.quick)


# --- comparisons --------------------------------------------------------------------------------

def ideal_dram(config):
    """A configuration whose DRAM moves any byte count at its bandwidth: no bursts to round
    to, no turnaround, no latency (for figures about something else than DRAM efficiency)."""
    from accel_codegen import AccelConfig
    return AccelConfig.resolve(config).replace(dram_burst_bytes=1, dram_latency_cycles=0,
                                               dram_turnaround_cycles=0.0)


def assert_close(actual, expected, rtol=1e-5, what="output"):
    """Shape, then dtype, then max |actual - expected| within rtol of the expected's scale."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == np.float32, f"{what}: dtype {actual.dtype} is not float32"
    scale = max(float(np.max(np.abs(expected))), 1e-30)
    error = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    assert error <= rtol * scale, f"{what}: max error {error:.3g} > {rtol} x scale {scale:.3g}"


def assert_same(actual, expected, what="output"):
    """Shape, dtype, then every element equal; on failure say where and how many differ."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if np.array_equal(actual, expected, equal_nan=actual.dtype.kind == "f"):
        return
    differ = actual != expected
    if actual.dtype.kind == "f":
        differ &= ~(np.isnan(actual) & np.isnan(expected))
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    raise AssertionError(
        f"{what}: {int(differ.sum())} of {differ.size} elements differ; first at {first}: "
        f"got {actual[first]!r}, expected {expected[first]!r}")


def sqnr(actual, expected) -> float:
    """SQNR in dB of ``actual`` against ``expected``: the package's sqnr_db (the accuracy
    report's) of their powers, summed in float64."""
    from accel_codegen.quantization.metrics import sqnr_db

    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return sqnr_db(float(np.sum(expected ** 2)), float(np.sum((actual - expected) ** 2)))


def ort_int8_outputs(model, xs, calibration, tmp_path) -> list:
    """ONNX Runtime's static int8 quantisation of ``model``'s ONNX export (exported with
    ``xs[0]``), calibrated on ``calibration`` (input tuples, ours), run on each of ``xs``: what a
    user would otherwise get, the yardstick of an int8 figure that depends on the weights."""
    import torch

    from accel_codegen.compiler.frontend import export_onnx
    from accel_codegen.quantization import ort_baseline

    path = export_onnx(model, (torch.from_numpy(xs[0]),), tmp_path / "int8_baseline.onnx")
    quantized, _ = ort_baseline.quantize_int8_as_ort_can(path, calibration, tmp_path)
    session = ort_baseline.session(quantized, threads=1)
    return [ort_baseline.run(session, [x]) for x in xs]


def int8_sqnrs_held_back(model, partitioned, held, calibration, tmp_path) -> tuple:
    """(ours, ONNX Runtime's) int8 output SQNR against PyTorch over the inputs ``held`` back
    from calibration, both stacked: ``partitioned`` built and run, and ort_int8_outputs."""
    import tvm

    import accel_codegen as ac

    vm = ac.virtual_machine(tvm.compile(partitioned, target="llvm"))
    expected = np.stack([torch_forward(model, h) for h in held])
    ours = sqnr(np.stack([run_main(vm, h) for h in held]), expected)
    theirs = sqnr(np.stack(ort_int8_outputs(model, held, calibration, tmp_path)), expected)
    return ours, theirs


def fp16_and_half_sqnrs(mod, params, model, x) -> tuple:
    """(ours, PyTorch's ``.half()``) fp16 output SQNR against PyTorch's fp32 on ``x``: the
    fp16 build of ``mod`` and a half copy of ``model``."""
    import copy

    expected = torch_forward(model, x)
    ours = sqnr(build_and_run(mod, np.asarray(x), params=params, precision="fp16"), expected)
    half = sqnr(torch_forward(copy.deepcopy(model).half(), x.half()).astype(np.float32),
                expected)
    return ours, half


def ort_int8_sqnr(model, x, calibration, tmp_path) -> float:
    """The output SQNR against PyTorch of ort_int8_outputs on ``x``."""
    return sqnr(ort_int8_outputs(model, [x], calibration, tmp_path)[0], torch_forward(model, x))


# --- inputs -------------------------------------------------------------------------------------

def random_inputs(shape, count, seed):
    """``count`` float32 N(0, 1) arrays of ``shape`` drawn with ``seed``: the CLI's own draw
    (model_spec.random_inputs) for a model of one input."""
    from accel_codegen.tools.model_spec import random_inputs as draw

    return [x for (x,) in draw([np.zeros(shape, np.float32)], count, seed)]


# --- running models -----------------------------------------------------------------------------

def run_main(vm, *inputs) -> np.ndarray:
    """``vm["main"]`` on NumPy arrays (or torch tensors); its output as a NumPy array."""
    import tvm

    return vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs)).numpy()


def run_profiled(partitioned, *inputs):
    """``partitioned`` built for the host and run once on ``inputs``: its output and the
    labels of the accelerator runs it made, in order."""
    import tvm

    import accel_codegen as ac
    from accel_codegen.sim.profiling import profile

    vm = ac.virtual_machine(tvm.compile(partitioned, target="llvm"))
    with profile() as runs:
        out = run_main(vm, *inputs)
    return out, [r.label for r in runs.records]


def run_all(vm, examples) -> np.ndarray:
    """run_main on every example (an array, or a tuple of the inputs), outputs stacked."""
    return np.stack([run_main(vm, *(e if isinstance(e, tuple) else (e,))) for e in examples])


def build_and_run(mod, *inputs, **build_options) -> np.ndarray:
    """``accel_codegen.build`` (partitioned or not), its VM, and run_main on ``inputs``."""
    import accel_codegen as ac

    return run_main(ac.virtual_machine(ac.build(mod, **build_options)), *inputs)


def torch_forward(model, *inputs) -> np.ndarray:
    """PyTorch's answer: ``model(*inputs)`` without autograd (NumPy inputs are converted)."""
    import torch

    inputs = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
    with torch.no_grad():
        return model(*inputs).numpy()


def trained_attention_biases(model, seed: int = 0):
    """``model`` with its attention projections' biases drawn from N(0, 0.1): torch starts
    them at zero, which the partitioner drops as x + 0 (rewrites.unit_affines); a trained
    model's are not zero. Returns ``model``."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for attention in model.modules():
            if isinstance(attention, torch.nn.MultiheadAttention):
                for bias in (attention.in_proj_bias, attention.out_proj.bias):
                    bias.copy_(torch.randn(bias.shape, generator=gen) * 0.1)
    return model


def count_batch_norms(model) -> int:
    import torch

    return sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


#: the repository's root (tests/..), for the C test programs' sources
ROOT = Path(__file__).resolve().parents[1]


def load_example(name: str):
    """examples/NAME.py as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_verbose_child(child: str, cases, cwd) -> tuple:
    """Run Python ``child`` with the JSON of ``cases`` as its argument and ACCEL_VERBOSE=1 (read
    once per process, hence a child), from ``cwd``: (its stderr's lines, the JSON it printed)."""
    environ = {k: v for k, v in os.environ.items() if k != "ACCEL_CONV_IMPL"}
    environ["ACCEL_VERBOSE"] = "1"
    result = subprocess.run([sys.executable, "-c", child, json.dumps(cases)],
                            capture_output=True, text=True, env=environ, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr.splitlines(), json.loads(result.stdout)


def build_c_program(tmp_path_factory, program: str, sources, flags) -> Path:
    """tests/c/``program`` built with the library's ``sources`` (paths from the repository's
    root) and ``flags`` (optimisation, -march, ...), warnings as errors, the library's include
    folders and libm: an executable in a fresh folder. No C compiler ($CC, else cc) fails the
    test: it is part of what CI has."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"a C compiler ({cc}) is needed to build tests/c/{program}")
    exe = tmp_path_factory.mktemp(Path(program).stem) / Path(program).stem
    subprocess.run([cc, *flags, "-Wall", "-Wextra", "-Werror", "-pthread",
                    f"-I{ROOT / 'csrc'}", f"-I{ROOT / 'runtime' / 'include'}",
                    f"-I{ROOT / 'runtime' / 'src'}", str(ROOT / "tests" / "c" / program),
                    *(str(ROOT / s) for s in sources), "-lm", "-o", str(exe)], check=True)
    return exe


def run_c_program(exe: Path, timeout: float = 600) -> tuple[int, list[str]]:
    """Runs a C test program whose last line is 'N passed, N failed'; asserts that it exited 0
    and that no check failed, and returns the passed count and its output's lines (the caller
    asserts how many checks must have run)."""
    result = subprocess.run([exe], capture_output=True, text=True, timeout=timeout)
    lines = result.stdout.strip().splitlines()
    assert lines, f"{exe.name} printed nothing (exit {result.returncode}): {result.stderr[-4000:]}"
    passed, failed = (int(word) for word in lines[-1].replace(",", "").split()[::2])
    assert result.returncode == 0 and failed == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return passed, lines


def run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of one in-process ``accel-codegen`` invocation."""
    from accel_codegen.tools import cli

    try:
        status = cli.main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse: --help (0) and usage errors (2)
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """A zoo model (seed 0, batch 1), its example input and its Relax import. Shared by the
    whole session: read it, do not modify it."""

    name: str
    model: object    # torch.nn.Module, in eval mode
    x: object        # the example input, a torch.Tensor
    mod: object      # frontend.from_pytorch(model, (x,), ...)
    params: dict     # {} unless imported with keep_params_as_input=True

    @property
    def x_np(self) -> np.ndarray:
        return self.x.numpy()

    @property
    def imported(self):
        """(mod, params, x as a NumPy array)."""
        return self.mod, self.params, self.x_np


class ZooCache:
    """The session's zoo models: ``zoo(name)`` is the ZooModel, ``zoo.host_build(name)`` TVM's
    own CPU build of its import (accel_codegen.build_host); each made once, when first asked."""

    def __init__(self):
        self._models, self._imported, self._host = {}, {}, {}

    def __call__(self, name, keep_params_as_input=False) -> ZooModel:
        from accel_codegen import frontend
        from accel_codegen.tools import models

        if name not in self._models:
            self._models[name] = models.get_model(name)
        key = (name, bool(keep_params_as_input))
        if key not in self._imported:
            model, (x,) = self._models[name]
            mod, params = frontend.from_pytorch(model, (x,),
                                                keep_params_as_input=keep_params_as_input)
            self._imported[key] = ZooModel(name, model, x, mod, params)
        return self._imported[key]

    def host_build(self, name):
        import accel_codegen as ac

        if name not in self._host:
            self._host[name] = ac.build_host(self(name).mod)
        return self._host[name]


@pytest.fixture(scope="session")
def zoo():
    """The ZooCache of the session: each zoo model is built, imported (and host-built) once,
    whichever module asks first."""
    return ZooCache()


# --- engine ops shared by the engine tests (tests/sim) -----------------------------------------

def run_and_compare(device, chain, x, what):
    """Run ``chain`` fused, then independent: each gives the reference's output exactly.
    Returns the last (independent) output."""
    from accel_codegen import reference as ref

    for mode in ("fused", "independent"):
        y, _ = device.run(chain, x, mode=mode)
        assert_same(y, ref.run_chain(chain, x), f"{what} ({mode})")
    return y


FP16_EPILOGUES = ["bias", "bn_relu", "bn_relu6", "bn_prelu", "bn_add", "mul", "max_min",
                  "scale_only"]


def fp16_sdp(rng, spec, shape):
    """A random FP16 SDP of one of FP16_EPILOGUES for a tensor of ``shape`` (CONV + SDP and
    SDP-alone tests draw theirs from here)."""
    from accel_codegen import Sdp

    c = shape[1]
    half = lambda a: np.asarray(a, np.float16)  # noqa: E731
    scale = half(rng.uniform(0.5, 2, c) * rng.choice([-1, 1], c)) if spec in (
        "bn_relu", "bn_relu6", "bn_prelu", "bn_add", "scale_only") else None
    shift = half(rng.standard_normal(c) * 0.5) if spec not in ("scale_only", "mul",
                                                              "max_min") else None
    ew_op = {"bn_add": "add", "mul": "mul", "max_min": rng.choice(["max", "min"])}.get(spec)
    operand = half(rng.standard_normal(shape) * 1.5) if ew_op else None
    act = {"bn_relu": "relu", "bn_relu6": "clip", "bn_prelu": "prelu"}.get(spec)
    slope = half(rng.uniform(-1, 1, c)) if act == "prelu" else None
    return Sdp(scale=scale, shift=shift, ew_op=ew_op, operand=operand, act=act,
               clip=(-1.5, 2.25) if act == "clip" else None, prelu_slope=slope, precision="fp16")
