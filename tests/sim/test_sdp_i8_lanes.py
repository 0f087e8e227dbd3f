"""The INT8 converter's 8-lane forms (csrc/sdp_i8_lanes.h, AVX2) against sdp_one, bit for bit.

tests/c/test_sdp_i8_lanes.c runs every form each prepared converter allows, on values within
the accumulator bound a conv kernel gives (the forms without a clamp, the conv forms and the
bias folded into the accumulators, which sdp_i8_span alone never reaches), for random layers'
converters and residual adds, and a LUT activation's lane form (each input converter form, its
t checked against sdp_one's as well as its codes), and requires every form to have run. Built from the converter's
sources with the library's flags (-O3 -march=native); a build without AVX2 checks that the preparations decline instead.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["csrc/sdp_i8.c", "csrc/sdp_i8_avx2.c", "csrc/sdp_i8_avx512.c", "csrc/sdp_i8_lanes.c",
           "csrc/sdp_i8_lut.c", "csrc/lut.c", "csrc/pool.c", "runtime/src/errors.c"]


@pytest.fixture(scope="module")
def lanes_test(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.fail(f"a C compiler ({cc}) is needed to build tests/c/test_sdp_i8_lanes.c")
    exe = tmp_path_factory.mktemp("lanes") / "test_sdp_i8_lanes"
    subprocess.run([cc, "-O3", "-march=native", "-Wall", "-Wextra", "-Werror", "-pthread",
                    "-ffp-contract=off", f"-I{ROOT / 'csrc'}", f"-I{ROOT / 'runtime' / 'include'}",
                    f"-I{ROOT / 'runtime' / 'src'}", str(ROOT / "tests" / "c" / "test_sdp_i8_lanes.c"),
                    *(str(ROOT / s) for s in SOURCES), "-lm", "-o", str(exe)], check=True)
    return exe


def test_lane_forms_match_sdp_one(lanes_test):
    result = subprocess.run([lanes_test], capture_output=True, text=True, timeout=600)
    lines = result.stdout.strip().splitlines()
    passed, failed = (int(word) for word in lines[-1].replace(",", "").split()[::2])
    assert result.returncode == 0 and failed == 0, result.stdout[-4000:]
    if lines[0] == "AVX2 lanes":
        assert passed >= 10000, result.stdout[-4000:]
