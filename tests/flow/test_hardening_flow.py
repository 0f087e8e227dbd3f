"""Hardening of the compiled-model boundary (#9): one VM shared by threads, damaged library
files, typed errors from compiled modules and the code generator, argument errors that name
the argument, export errors, and the command line's one-line errors."""
import ast
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from tvm.script import relax as R

import accel_codegen as ac
from accel_codegen import cli, frontend, toolchain
from accel_codegen.compiler import link, packed_imports
from accel_codegen.errors import (AccelError, AccelInvalidError, AccelLibraryError,
                                  AccelShapeError)
from conftest import random_inputs, run_cli, run_main

PACKAGE = Path(ac.__file__).resolve().parent
IN_SHAPE = (1, 3, 16, 16)


class Small(torch.nn.Module):
    """conv + batch norm + ReLU + max pool, then a 1x1 conv with a bias: two accelerator
    layers, packed weights in int8 and fp16, scratch buffers between them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2))


def _inputs(count, seed=0):
    return random_inputs(IN_SHAPE, count, seed)


@pytest.fixture(scope="module")
def small_mod():
    torch.manual_seed(0)
    model = Small().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    mod, _ = frontend.from_pytorch(model, (torch.from_numpy(_inputs(1)[0]),))
    return mod


@pytest.fixture(scope="module")
def exported(small_mod, tmp_path_factory):
    """precision -> the small model's exported library."""
    directory = tmp_path_factory.mktemp("hardening")
    paths = {}
    for precision in ("fp32", "fp16", "int8"):
        calibration = [(x,) for x in _inputs(4, seed=1)] if precision == "int8" else None
        exe = ac.build(small_mod, precision=precision, calibration=calibration)
        paths[precision] = ac.export_library(exe, directory / f"small_{precision}.so")
    return paths


# --- item 4: one VM, several threads ------------------------------------------------------------

def _stress(vm, threads=8, calls=100):
    """Every thread calls the VM (half through a handle taken by the main thread, half through
    vm["main"] of its own) on inputs whose single-thread results are known."""
    inputs = _inputs(8, seed=2)
    expected = [run_main(vm, x) for x in inputs]
    shared = vm["main"]
    errors, wrong, done = [], [], []

    def work(t):
        for k in range(calls):
            i = (t + k) % len(inputs)
            try:
                function = shared if k % 2 else vm["main"]
                y = function(tvm.runtime.tensor(inputs[i])).numpy()
            except Exception as error:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(error).__name__}: {str(error)[:200]}")
                continue
            done.append(1)
            if not np.array_equal(y, expected[i]):
                wrong.append(i)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == [], f"{len(errors)} errors, e.g. {sorted(set(errors))[:3]}"
    assert wrong == [], f"{len(wrong)} results differ from the single-thread ones"
    assert len(done) == threads * calls


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_exported_library_vm_is_thread_safe(exported, precision):
    """8 threads x 100 calls on one VM of one library: TVM's own VM gives register errors,
    'run into invalid section' and wrong results; the generated code serialises its scratch
    buffers and packed weights."""
    vm = ac.virtual_machine(exported[precision])
    assert isinstance(vm, toolchain.AccelVirtualMachine)
    _stress(vm)


def test_jit_vm_is_thread_safe(small_mod):
    _stress(ac.virtual_machine(ac.build(small_mod)), threads=4, calls=60)


def test_two_vms_of_one_library_run_at_once(exported):
    """Two VMs of the same library (one loaded module, one generated function) from two
    threads each."""
    first, second = (ac.virtual_machine(exported["int8"]) for _ in range(2))
    failures = []

    def run(vm):
        try:
            _stress(vm, threads=2, calls=40)
        except AssertionError as error:
            failures.append(str(error))

    workers = [threading.Thread(target=run, args=(vm,)) for vm in (first, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []


def test_vm_keeps_relax_vm_attributes(exported):
    """What used to be a relax.VirtualMachine still answers as one (the calling thread's)."""
    vm = ac.virtual_machine(exported["fp32"])
    assert isinstance(vm.vm, tvm.relax.VirtualMachine)
    assert vm._get_function_arity("main") == 1
    timer = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=1)
    assert timer(tvm.runtime.tensor(_inputs(1)[0])).mean > 0
    other = []
    thread = threading.Thread(target=lambda: other.append(vm.vm))
    thread.start()
    thread.join()
    assert other[0] is not vm.vm  # one VM per thread
    with pytest.raises(ac.AccelNotFoundError, match="no function 'nosuch'"):
        vm["nosuch"]


# --- item 5: damaged library files ---------------------------------------------------------------

def _elf_tables(data: bytes):
    phoff, shoff = (int.from_bytes(data[o:o + 8], "little") for o in (32, 40))
    phnum, shnum = (int.from_bytes(data[o:o + 2], "little") for o in (56, 60))
    return (phoff, phnum * 56), (shoff, shnum * 64)


def _without_checksum(data: bytes) -> bytes:
    assert data[-48:-32] == toolchain.CHECKSUM_MARKER
    return data[:-48]


def _overwrite(data: bytes, span, value: int) -> bytes:
    start, length = span
    return data[:start] + bytes([value]) * length + data[start + length:]


def _damaged(data: bytes):
    """case -> the bytes of a damaged copy of a good library (None: not a file)."""
    program, sections = _elf_tables(data)
    plain = _without_checksum(data)
    text = len(data) // 3  # past the header tables, before the section table: code or data
    return {
        "empty": b"",
        "ten-bytes": data[:10],
        "header-only": data[:64],
        "half": data[:len(data) // 2],
        "ninety-percent": data[:len(data) * 9 // 10],
        "program-headers-overwritten": _overwrite(plain, program, 0xFF),
        "section-headers-overwritten": _overwrite(plain, sections, 0xFF),
        "section-headers-zeroed": _overwrite(data, sections, 0x00),
        "one-byte-changed": data[:text] + bytes([data[text] ^ 0x40]) + data[text + 1:],
        "32-bit-class": data[:4] + b"\x01" + data[5:],
        "text-file": b"this is not a library\n" * 4,
    }


DAMAGED_MESSAGES = {
    "empty": "the file is empty",
    "ten-bytes": "too short for an ELF header",
    "header-only": "is not inside the file (64 bytes): the file is truncated or damaged",
    "half": "is not inside the file",
    "ninety-percent": "is not inside the file",
    "program-headers-overwritten": "segment 0 (type 0xffffffff) (bytes",
    "section-headers-overwritten": "section",
    "section-headers-zeroed": "SHA-256",
    "one-byte-changed": "SHA-256",
    "32-bit-class": "32-bit ELF file",
    "text-file": "no ELF header",
    "directory": "is a directory",
    "missing": "does not exist",
    "missing-dependency": "cannot load library",
}

# Runs in a child process: a damaged file that reached dlopen would kill the test session.
_LOAD_SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys
    import accel_codegen as ac
    from accel_codegen.tools.cli import main
    cases, x = json.loads(sys.argv[1]), sys.argv[2]
    for case, path in cases.items():
        print(json.dumps({"start": case}), flush=True)
        try:
            ac.virtual_machine(path)
            result = {"case": case, "type": None}
        except Exception as error:
            result = {"case": case, "type": type(error).__name__, "message": str(error),
                      "mro": [c.__name__ for c in type(error).__mro__]}
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            result["cli_status"] = main(["run", path, "--input", x])
        result["cli_stderr"] = err.getvalue()
        print(json.dumps(result), flush=True)
    """)


@pytest.fixture(scope="module")
def damaged_results(exported, tmp_path_factory):
    directory = tmp_path_factory.mktemp("damaged")
    data = exported["fp32"].read_bytes()
    cases = {}
    for case, content in _damaged(data).items():
        path = directory / f"{case}.so"
        path.write_bytes(content)
        cases[case] = str(path)
    (directory / "directory.so").mkdir()
    cases["directory"] = str(directory / "directory.so")
    cases["missing"] = str(directory / "missing.so")
    plain = _without_checksum(data)
    assert plain.count(b"libaccel.so") == 1
    (directory / "dependency.so").write_bytes(plain.replace(b"libaccel.so", b"libaccxl.so"))
    cases["missing-dependency"] = str(directory / "dependency.so")
    x = directory / "x.npy"
    np.save(x, _inputs(1)[0])
    # cwd away from the source tree: `python -c` puts the cwd first on sys.path
    proc = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, json.dumps(cases), str(x)],
                          capture_output=True, text=True, timeout=300, cwd=directory)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if "case" in record:
                results[record["case"]] = record
            else:
                results["_last_started"] = record["start"]
    results["_process"] = (proc.returncode, proc.stderr[-2000:])
    return results


@pytest.mark.parametrize("case", sorted(DAMAGED_MESSAGES))
def test_damaged_library_is_a_typed_error_naming_the_file(damaged_results, case):
    """virtual_machine(path) and `accel-codegen run` check the file before the dynamic loader
    sees it: no SIGBUS/SIGSEGV, an AccelLibraryError naming the file and the problem."""
    status, stderr = damaged_results["_process"]
    assert case in damaged_results, (
        f"the process died (status {status}) in case "
        f"{damaged_results.get('_last_started')}: {stderr}")
    result = damaged_results[case]
    assert result["type"] == "AccelLibraryError", result
    assert "AccelError" in result["mro"] and "ValueError" in result["mro"]
    assert f"{case if case != 'missing-dependency' else 'dependency'}.so" in result["message"]
    assert DAMAGED_MESSAGES[case] in result["message"], result["message"]
    assert result["cli_status"] == 1, result
    lines = result["cli_stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("accel-codegen run: error:"), lines
    assert "Traceback" not in result["cli_stderr"]


def test_every_corrupted_byte_of_an_exported_library_is_refused(exported, tmp_path):
    """The SHA-256 export_library appends: a change anywhere (here 64 seeded positions, the
    headers, the tables, code, data) is refused before loading; the untouched file passes."""
    data = exported["fp32"].read_bytes()
    toolchain.check_library(exported["fp32"])
    rng = np.random.default_rng(7)
    path = tmp_path / "corrupt.so"
    for position in rng.integers(0, len(data), 64):
        position = int(position)
        path.write_bytes(data[:position] + bytes([data[position] ^ 0xA5]) + data[position + 1:])
        with pytest.raises(AccelLibraryError, match="corrupt.so"):
            toolchain.check_library(path)


def test_structural_checks_pass_real_libraries():
    """No false alarm on the libraries this process itself loads (TVM's, the simulator's,
    NumPy's, torch's): they pass the checks that do not need a checksum."""
    libraries = [link.PACKAGE_DIR / "lib" / "libaccel.so",
                 *Path(tvm.__file__).parent.glob("lib/*.so"),
                 *Path(torch.__file__).parent.glob("lib/libtorch*.so"),
                 *Path(np.__file__).parent.glob("_core/*.so")]
    assert libraries[0].is_file()
    libraries = [p for p in libraries if p.is_file()]
    assert len(libraries) >= 4
    for library in libraries:
        toolchain.check_library(library)


# --- item 6: typed errors from compiled code and the code generator ------------------------------

@tvm.script.ir_module
class RuntimeBatchNorm:
    """Batch norm parameters as inputs: the generated code folds them on every call."""

    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
             gamma: R.Tensor((4,), "float32"), beta: R.Tensor((4,), "float32"),
             mean: R.Tensor((4,), "float32"), var: R.Tensor((4,), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=(1, 1))
            bn = R.nn.batch_norm(y, gamma, beta, mean, var, axis=1, training=False)
            z = bn[0]
            r = R.nn.relu(z)
            R.output(r)
        return r


def test_errors_raised_inside_generated_code_are_typed():
    """A status of the simulator inside a compiled module reaches Python as the AccelError of
    that status (registered with tvm-ffi by name), through the VM, with its message."""
    vm = ac.virtual_machine(ac.build(RuntimeBatchNorm))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
            rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32),
            np.ones(4, np.float32)]
    assert np.isfinite(vm["main"](*args).numpy()).all()
    args[5] = -np.ones(4, np.float32)
    with pytest.raises(AccelInvalidError, match=r"var\[0\] \+ epsilon .* is not positive "
                                                r"\[ACCEL_ERR_INVALID\]") as raised:
        vm["main"](*args)
    # the run first (no source names here), the external function's symbol only at the end
    message = str(raised.value)
    assert message.startswith("run f0.0 accel.conv2d_bn_relu: batch norm var[0]"), message
    assert message.endswith("_accel)") and "(external function f0, symbol fused_" in message


def test_errors_raised_inside_generated_code_name_the_source_layer():
    """Issue 30: an error during a run starts with the source model's name of its layer and
    the run's label; the 400-character symbol of a fused function is only its last detail."""
    from accel_codegen.compiler.source_names import Recorder, attach

    recorder = Recorder()
    for binding in RuntimeBatchNorm["main"].body.blocks[0].bindings:
        recorder.names[binding.var] = "block.conv" if binding.var.name == "y" else \
            "block.bn"
    vm = ac.virtual_machine(ac.build(attach(RuntimeBatchNorm, recorder, "torch")))
    args = [np.zeros((1, 3, 8, 8), np.float32), np.zeros((4, 3, 3, 3), np.float32),
            np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32),
            -np.ones(4, np.float32)]
    with pytest.raises(AccelInvalidError) as raised:
        vm["main"](*args)
    message = str(raised.value)
    assert message.startswith("block.{conv,bn} (run f0.0 accel.conv2d_bn_relu): batch norm "), \
        message
    assert message.index("(external function f0, symbol fused_relax_nn_conv2d") > \
        message.index("[ACCEL_ERR_INVALID]")


def test_generated_function_checks_raise_accel_errors(exported):
    """The external function's own checks (called directly, past the VM's)."""
    vm = ac.virtual_machine(exported["fp32"])  # the constant loader runs when the VM is made
    (name,) = _external_symbols(exported["fp32"])
    function = vm.library.get_function(name, query_imports=True)
    out = tvm.runtime.tensor(np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(AccelShapeError, match=r"input 0 \(x\) has size 15 in dimension 2"):
        function(tvm.runtime.tensor(np.zeros((1, 3, 15, 16), np.float32)), out)
    with pytest.raises(AccelInvalidError, match="expected float32"):
        function(tvm.runtime.tensor(np.zeros(IN_SHAPE, np.float64)), out)
    with pytest.raises(AccelInvalidError, match="1 arguments, expected 2"):
        function(out)


def _external_symbols(path: Path):
    """The generated functions' symbols in a library (``__tvm_ffi_<symbol>``, not the
    constant loaders)."""
    import re

    text = path.read_bytes().decode("latin-1")
    found = {m for m in re.findall(r"__tvm_ffi_(fused_\w+?_accel)\b", text)}
    assert found
    return sorted(found)


def test_the_code_generator_raises_no_untyped_errors_on_purpose():
    """Every `raise` in the package names an AccelError class (or re-raises), but for the
    protocols that need a builtin: AttributeError from __getattr__, ImportError at import."""
    builtin = {name for name in dir(__builtins__ if isinstance(__builtins__, dict) else
                                    __builtins__) if name.endswith("Error")}
    allowed = {"AttributeError", "ImportError"}
    modules = list(PACKAGE.rglob("*.py"))
    assert len(modules) > 30 and PACKAGE / "compiler" / "codegen" / "function.py" in modules
    for module in modules:
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                assert name not in builtin - allowed, f"{module}:{node.lineno} raises {name}"


# --- item 7: argument errors and export errors ---------------------------------------------------

@pytest.mark.parametrize("args, kind, message", [
    (lambda: (tvm.runtime.tensor(np.zeros((1, 3, 15, 16), np.float32)),), AccelShapeError,
     r"main: argument 0 \(x\) must be R.Tensor\(\(1, 3, 16, 16\), dtype=\"float32\"\), got a "
     r"tensor of shape \(1, 3, 15, 16\)"),
    (lambda: (np.zeros((3, 16, 16), np.float32),), AccelShapeError,
     r"argument 0 \(x\) .* got a tensor of shape \(3, 16, 16\) .*ndim 4 but get 3"),
    (lambda: (tvm.runtime.tensor(np.zeros(IN_SHAPE, np.float64)),), AccelInvalidError,
     r"argument 0 \(x\) .* dtype float64"),
    (lambda: (3,), AccelInvalidError, r"argument 0 \(x\) must be R.Tensor.*got 3 \(int\)"),
    (lambda: (), AccelInvalidError, r"main: takes 1 argument \(x\), got 0"),
    (lambda: (np.zeros(IN_SHAPE, np.float32),) * 2, AccelInvalidError,
     r"main: takes 1 argument \(x\), got 2"),
], ids=["shape", "rank", "dtype", "not-a-tensor", "too-few", "too-many"])
def test_wrong_arguments_name_the_argument(exported, args, kind, message):
    vm = ac.virtual_machine(exported["fp32"])
    with pytest.raises(kind, match=message) as info:
        vm["main"](*args())
    assert "Check failed" not in str(info.value) and "\n" not in str(info.value)


def test_export_library_refuses_a_bad_destination(small_mod, tmp_path):
    exe = ac.build(small_mod)
    (tmp_path / "x.so").mkdir()
    with pytest.raises(AccelLibraryError, match=r"x.so': it is a directory"):
        ac.export_library(exe, tmp_path / "x.so")
    with pytest.raises(AccelLibraryError, match=r"directory '/proc' is not writable"):
        ac.export_library(exe, "/proc/x.so")
    with pytest.raises(AccelLibraryError, match="does not exist"):
        ac.export_library(exe, tmp_path / "no" / "such" / "x.so")


def test_export_library_compile_failure_is_short_and_typed(small_mod, tmp_path, monkeypatch):
    exe = ac.build(small_mod)
    options = link.link_options()
    monkeypatch.setattr(packed_imports, "link_options", lambda: [*options, "-fno-such-option"])
    with pytest.raises(AccelLibraryError, match="cannot build library") as info:
        ac.export_library(exe, tmp_path / "m.so")
    message = str(info.value)
    assert "-fno-such-option" in message and "Command line" not in message
    assert "\n" not in message and len(message) < 1000


# --- item 8: the command line ------------------------------------------------------------------

def _one_error_line(err, command):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"accel-codegen {command}: error: "), err
    return lines[0]


MODEL_FILE = """
import sys

def broken():
    raise ValueError("the weights file is missing")

def leaves():
    raise SystemExit(0)

def leaves_with_status():
    sys.exit(3)
"""


@pytest.mark.parametrize("function, message", [
    ("broken", "model function {file}:broken raised ValueError: the weights file is missing"),
    ("leaves", "exited (SystemExit(0))"),
    ("leaves_with_status", "exited (SystemExit(3))"),
])
def test_cli_model_function_that_raises_or_exits(capsys, tmp_path, function, message):
    source = tmp_path / "model.py"
    source.write_text(MODEL_FILE)
    status, out, err = run_cli(capsys, "partition", f"{source}:{function}")
    assert status == 1 and out == ""
    assert message.format(file=source) in _one_error_line(err, "partition")


def test_cli_empty_onnx(capsys, tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    status, _, err = run_cli(capsys, "partition", path)
    assert status == 1 and "is empty" in _one_error_line(err, "partition")


@pytest.mark.parametrize("content, message", [
    ('{"name": 7}', "config file"),
    ('{"base": "nv_full", "atomic_c": "many"}', "atomic_c"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
], ids=["name-not-a-string", "field-not-a-number", "deeply-nested"])
def test_cli_config_with_wrong_types(capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    status, _, err = run_cli(capsys, "partition", "lenet5", "--config", path)
    assert status == 1 and message in _one_error_line(err, "partition")


@pytest.mark.parametrize("output, message", [
    ("/proc/x.so", "directory '/proc' is not writable"),
    ("{tmp}/dir.so", "is a directory"),
])
def test_cli_compile_to_an_unwritable_path(capsys, tmp_path, output, message):
    (tmp_path / "dir.so").mkdir()
    status, _, err = run_cli(capsys, "compile", "lenet5", "-o", output.format(tmp=tmp_path))
    line = _one_error_line(err, "compile")
    assert status == 1 and message in line and "g++" not in line


def test_cli_run_a_directory(capsys, tmp_path):
    (tmp_path / "dir.so").mkdir()
    np.save(tmp_path / "x.npy", _inputs(1)[0])
    status, _, err = run_cli(capsys, "run", tmp_path / "dir.so", "--input", tmp_path / "x.npy")
    assert status == 1 and "is a directory" in _one_error_line(err, "run")


def test_cli_internal_error_keeps_its_traceback(capsys, monkeypatch):
    """A bug of ours is not dressed as a user error: traceback, 'internal error', status 3."""
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_estimate", broken)
    status, _, err = run_cli(capsys, "estimate", "lenet5")
    assert status == 3
    assert "Traceback" in err and "accel-codegen estimate: internal error: KeyError" in err


def test_cli_errors_that_are_accel_errors_are_one_line(capsys, exported, tmp_path):
    """A wrong input shape given to `run`: the VM's typed message, on one line."""
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    status, _, err = run_cli(capsys, "run", exported["fp32"], "--input", tmp_path / "x.npy")
    line = _one_error_line(err, "run")
    assert status == 1 and "argument 0 (x) must be R.Tensor((1, 3, 16, 16)" in line
    assert isinstance(AccelShapeError("x"), AccelError)
