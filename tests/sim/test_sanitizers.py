"""The C library under AddressSanitizer and UndefinedBehaviorSanitizer.

Builds libaccel with -fsanitize=address,undefined, runs the C tests (tests/c: rejections,
engines against naive loops, a fuzz loop of random chains; the thread pool; the generated
code's glue), then runs the Python engine,
validation, cost-model, hardening and property-based tests again with that library preloaded in
place of the installed one.
Any out-of-bounds access or undefined behaviour aborts the run and fails the test.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent        # tests/sim: the suites below live next to this file
ROOT = HERE.parents[1]
CHECKED_SUITES = ["test_conv_engine.py", "test_sdp_engine.py", "test_pdp_engine.py",
                  "test_bdma_engine.py", "test_device_runs.py", "test_validation.py",
                  "test_cost_model.py", "test_hardening_sim.py", "test_properties.py",
                  "test_lut.py", "test_cdp_engine.py", "test_conv_amx.py",
                  "test_c16_layout.py", "test_c16_winograd.py", "test_c16_pool.py",
                  "test_c16_conv3x3.py", "test_c16_stem.py",
                  # the AVX2 int8 kernels forced on edge geometries (children inherit the preload)
                  "test_conv_i8_gemm16.py", "test_conv_i8_direct.py",
                  # every ordered fp32 implementation forced on edge geometries
                  "test_conv_order.py",
                  # the token transposes' vector blocks and scalar edges, the replicated CONV
                  "test_transpose.py", "test_conv_replicated.py",
                  # the SDP's rows of one value a plane and its FP16 chunks, kept accumulators
                  "test_sdp_rows.py", "test_kept_accumulators.py"]


def _run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {result.returncode}\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


@pytest.fixture(scope="module")
def sanitized_build(tmp_path_factory):
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed to build the sanitized library (pip install cmake)")
    build = tmp_path_factory.mktemp("sanitize")
    import tvm_ffi.libinfo  # the generated code's glue includes tvm-ffi's C header

    _run(["cmake", "-S", ROOT, "-B", build, "-DACCEL_SANITIZE=ON", "-DACCEL_BUILD_TESTS=ON",
          "-DCMAKE_BUILD_TYPE=Debug", f"-DPython_EXECUTABLE={sys.executable}",
          f"-DACCEL_TVM_FFI_INCLUDE={tvm_ffi.libinfo.find_include_path()}"])
    _run(["cmake", "--build", build, "-j2"])
    return build


def _runtime_library(name):
    path = _run(["cc", f"-print-file-name={name}"]).stdout.strip()
    assert os.path.isabs(path), f"the compiler has no {name}"
    return path


def test_c_tests_are_clean_under_sanitizers(sanitized_build):
    result = _run([sanitized_build / "test_runtime"],
                  env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"})
    summary = result.stdout.strip().splitlines()[-1]
    passed, failed = (int(word) for word in summary.replace(",", "").split()[::2])
    assert failed == 0 and passed > 100, summary


def test_thread_pool_is_clean_under_sanitizers(sanitized_build):
    """csrc/pool.c on its own (tests/c/test_pool.c): items once each, sleeping workers waking,
    nested and concurrent loops, fork."""
    result = _run([sanitized_build / "test_pool"],
                  env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"})
    summary = result.stdout.strip().splitlines()[-1]
    passed, failed = (int(word) for word in summary.replace(",", "").split()[::2])
    assert failed == 0 and passed >= 140, summary


def test_generated_code_glue_is_clean_under_sanitizers(sanitized_build):
    """accel/tvm_glue.h (the fixed C of every generated function) with a stand-in tvm-ffi."""
    result = _run([sanitized_build / "test_glue"],
                  env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"})
    summary = result.stdout.strip().splitlines()[-1]
    passed, failed = (int(word) for word in summary.replace(",", "").split()[::2])
    assert failed == 0 and passed >= 14, summary


def test_python_suites_are_clean_under_sanitizers(sanitized_build):
    preload = " ".join([_runtime_library("libasan.so"), _runtime_library("libubsan.so"),
                        str(sanitized_build / "libaccel.so")])
    env = {**os.environ, "LD_PRELOAD": preload, "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    probe = _run([sys.executable, "-c",
                  "import accel_codegen, sys; maps = open('/proc/self/maps').read(); "
                  "sys.exit(0 if sys.argv[1] in maps else 1)", str(sanitized_build / "libaccel.so")],
                 env=env, cwd=ROOT / "tests")  # not the root: its source tree would shadow
    assert probe.returncode == 0
    suites = [HERE / name for name in CHECKED_SUITES]
    assert all(path.is_file() for path in suites), [p.name for p in suites if not p.is_file()]
    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites],
                  env=env, cwd=ROOT / "tests")
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, summary
