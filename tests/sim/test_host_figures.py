"""The host-speed figures the layout plan weighs are the runtime's (runtime/src/host.c, issue 28
item 5): their defaults give the savings the compiler's former table gave, bit for bit, and
ACCEL_HOST_C16 replaces rows of them (a child process: the runtime reads it once)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accel_codegen.errors import AccelInvalidError
from accel_codegen.sim.device import c16_saving, conversion_seconds_per_byte

#: (kernel, groups, group channels, stride, winograd, out_shape) -> the former table's row
#: (fraction, FLOP/s) or None (saves nothing)
CASES = [
    ((1, 1), 1, 64, 1, False, (1, 64, 56, 56), (0.2, 150e9)),
    ((1, 1), 1, 64, 1, False, (2, 64, 28, 28), (0.2, 150e9)),
    ((1, 1), 1, 256, 2, False, (1, 128, 14, 14), (0.0, 150e9)),
    ((1, 1), 1, 512, 1, False, (1, 512, 7, 7), (-0.1, 150e9)),
    ((3, 3), 32, 1, 1, False, (1, 32, 112, 112), (0.3, 35e9)),
    ((5, 5), 96, 1, 2, False, (1, 96, 14, 14), (0.4, 13e9)),
    ((3, 3), 1, 64, 1, True, (1, 64, 14, 14), (0.28, 215e9)),
    ((3, 3), 1, 64, 1, False, (1, 64, 28, 28), (0.1, 150e9)),
    ((3, 3), 1, 256, 1, False, (1, 256, 14, 14), None),  # a dense 3x3 below 784 positions
    ((7, 7), 1, 3, 2, False, (1, 64, 112, 112), None),
    ((3, 3), 4, 8, 1, False, (1, 32, 56, 56), None),  # grouped, not depthwise
]


def _former(row, kernel, group_channels, out_shape):
    """The compiler's former formula (codegen/layouts.py before issue 28 item 5)."""
    if row is None:
        return 0.0
    n = 1
    for d in out_shape:
        n *= d
    fraction, rate = row
    return fraction * 2 * n * group_channels * kernel[0] * kernel[1] / rate


def test_default_figures_are_the_former_tables():
    for kernel, groups, cg, stride, winograd, out_shape, row in CASES:
        got = c16_saving(kernel, groups, cg, stride, winograd=winograd, out_shape=out_shape)
        assert got == _former(row, kernel, cg, out_shape), (kernel, groups, stride, out_shape)
    assert conversion_seconds_per_byte() == 2 / 29e9


def test_bad_geometry_is_refused_naming_it():
    with pytest.raises(AccelInvalidError, match="groups 0"):
        c16_saving((1, 1), 0, 16, 1, winograd=False, out_shape=(1, 16, 8, 8))
    with pytest.raises(AccelInvalidError, match="kernel 3x-1"):
        c16_saving((3, -1), 1, 16, 1, winograd=False, out_shape=(1, 16, 8, 8))


CHILD = """
import json, sys
from accel_codegen.errors import AccelInvalidError
from accel_codegen.sim.device import c16_saving, conversion_seconds_per_byte
out = {}
try:
    out["pointwise"] = c16_saving((1, 1), 1, 64, 1, winograd=False, out_shape=(1, 64, 56, 56))
    out["depthwise"] = c16_saving((3, 3), 32, 1, 1, winograd=False, out_shape=(1, 32, 56, 56))
    out["per_byte"] = conversion_seconds_per_byte()
except AccelInvalidError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def _child(setting):
    env = dict(os.environ, ACCEL_HOST_C16=setting)
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                            env=env, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_environment_replaces_the_rows_it_names():
    got = _child("pointwise_784=0.1:120e9,convert=40e9")
    assert got["pointwise"] == 0.1 * 2 * (64 * 56 * 56) * 64 * 1 * 1 / 120e9
    assert got["depthwise"] == 0.3 * 2 * (32 * 56 * 56) * 1 * 3 * 3 / 35e9  # the default row
    assert got["per_byte"] == 2 / 40e9


@pytest.mark.parametrize("setting", ["pointwise_784=1.5:120e9", "nosuch=0.1:1e9",
                                     "depthwise_s1=0.1", "convert=-3", "winograd=0.1:0"])
def test_a_malformed_entry_fails_every_query_naming_it(setting):
    got = _child(f"pointwise_196=0.05:100e9,{setting}")
    assert set(got) == {"error"}
    assert f"entry '{setting}'" in got["error"]
