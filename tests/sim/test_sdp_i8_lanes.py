"""The INT8 converter's 8-lane forms (csrc/sdp_i8_lanes.h, AVX2) against sdp_one, bit for bit.

tests/c/test_sdp_i8_lanes.c runs every form each prepared converter allows, on values within
the accumulator bound a conv kernel gives (the forms without a clamp, the conv forms and the
bias folded into the accumulators, which sdp_i8_span alone never reaches), for random layers'
converters and residual adds, and a LUT activation's lane form (each input converter form, its
t checked against sdp_one's as well as its codes), and requires every form to have run. Built from the converter's
sources with the library's flags (-O3 -ffp-contract=off) for x86-64-v3 on a host with AVX2 (what an
AVX2-only host's build runs: with -march=native an AVX-512 host's build has no 8-lane forms, and
the program did not link there), else -march=native; a build without AVX2 checks that the
preparations decline instead.
"""
import pathlib

import pytest

from conftest import build_c_program, run_c_program

SOURCES = ["csrc/sdp_i8.c", "csrc/sdp_i8_avx2.c", "csrc/sdp_i8_avx512.c", "csrc/sdp_i8_lanes.c",
           "csrc/sdp_i8_lut.c", "csrc/lut.c", "csrc/lut_tables.c", "csrc/pool.c",
           "runtime/src/errors.c"]


@pytest.fixture(scope="module")
def lanes_test(tmp_path_factory):
    try:
        flags = " ".join(line for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("flags"))
    except OSError:  # no /proc (not Linux): the host's own build
        flags = ""
    march = "-march=x86-64-v3" if " avx2 " in flags + " " else "-march=native"
    return build_c_program(tmp_path_factory, "test_sdp_i8_lanes.c", SOURCES,
                           ["-O3", march, "-ffp-contract=off"])


def test_lane_forms_match_sdp_one(lanes_test):
    passed, lines = run_c_program(lanes_test)
    if lines[0] == "AVX2 lanes":
        assert passed >= 10000, "\n".join(lines[-40:])
