"""examples/whole_network_time.py's side-by-side modes: --compare-env sets the variable to
each value for every other call and files each call's runs under the value it ran with;
--compare-threads likewise with thread counts. No assertion is about how fast anything is."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import load_example

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "whole_network_time.py"


@pytest.fixture(scope="module")
def wnt():
    return load_example("whole_network_time")


class FakeTimer:
    """The preloaded timer's interface: each run() records two layers whose times say which
    value of the variable the call saw (1 ms and 2 ms for "a", 3 ms and 5 ms for "b")."""

    def __init__(self, var):
        self.var, self.rows, self.clock = var, [], 0.0

    def run(self):
        value = os.environ[self.var]
        for label, ms in (("f0.0", 1.0 if value == "a" else 3.0),
                          ("f0.1", 2.0 if value == "a" else 5.0)):
            self.rows.append((label, 0, 2, ms * 1e-3, 0.0))
            self.clock += ms * 1e-3

    def run_timer_reset(self):
        self.rows = []

    def run_timer_now(self):
        return self.clock

    def run_timer_dump(self, path):
        with open(path.decode(), "w") as f:
            for r in self.rows:
                f.write("\t".join(str(x) for x in r) + "\n")
        return 0


def test_compare_env_files_each_call_under_its_value(wnt, monkeypatch, capsys):
    monkeypatch.setenv("RUN_TIMER_CLOCK", "thread")
    monkeypatch.delenv("WNT_KNOB", raising=False)
    timer = FakeTimer("WNT_KNOB")
    args = SimpleNamespace(model="fake", precision="fp32", threads=1, repeat=6, layers=True,
                           compare_env="WNT_KNOB=a,b")
    wnt.compare_environment(args, timer.run, timer)
    out = capsys.readouterr().out
    assert "WNT_KNOB=a against WNT_KNOB=b, medians of 6 interleaved rounds" in out
    assert "whole call 3.00 -> 8.00 ms (x2.667" in out
    lines = {line.split()[0]: line.split()[-3:] for line in out.splitlines()
             if line.strip().startswith("f0.")}
    assert lines == {"f0.0": ["1.000", "3.000", "3.000"], "f0.1": ["2.000", "5.000", "2.500"]}


def test_interleaved_alternates_which_condition_goes_first(wnt, monkeypatch):
    seen = []
    timer = FakeTimer("WNT_UNUSED")
    monkeypatch.setenv("WNT_UNUSED", "a")
    args = SimpleNamespace(repeat=4)
    calls, layers, first = wnt.interleaved(args, timer.run, timer, ("x", "y"), seen.append)
    assert seen == ["x", "y"] * 3 + ["x", "y", "y", "x", "x", "y", "y", "x"]
    assert [len(calls[c]) for c in ("x", "y")] == [4, 4]
    assert [r[0] for r in first] == ["f0.0", "f0.1"]
    assert len(layers["x"]["f0.0"]) == 4


@pytest.mark.parametrize("spec", ["WNT_KNOB=a", "WNT_KNOB=a,a", "=a,b", "WNT_KNOB=a,b,c"])
def test_compare_env_needs_two_different_values(wnt, monkeypatch, spec):
    monkeypatch.setenv("RUN_TIMER_CLOCK", "thread")
    args = SimpleNamespace(model="fake", precision="fp32", threads=1, repeat=2, layers=False,
                           compare_env=spec)
    with pytest.raises(SystemExit, match="VAR=A,B with two different values"):
        wnt.compare_environment(args, None, None)


@pytest.mark.parametrize("var", ["ACCEL_CONV_IMPL", "ACCEL_L1D_BYTES"])
def test_compare_env_refuses_a_switch_the_library_reads_once(wnt, var):
    """ACCEL_CONV_IMPL and the like are read at the first call: alternating them in one
    process would time the first value twice."""
    args = SimpleNamespace(model="fake", precision="fp32", threads=1, repeat=2, layers=False,
                           compare_env=f"{var}=packed_avx512,implicit_avx512")
    with pytest.raises(SystemExit, match=f"reads {var} once per process"):
        wnt.compare_environment(args, None, None)


def test_compare_env_on_a_real_network():
    """The script end to end (timer compiled and preloaded, lenet5 built): every layer of the
    network is listed with both medians."""
    env = dict(os.environ)
    env.pop("RUN_TIMER_CHILD", None)
    done = subprocess.run([sys.executable, str(EXAMPLE), "lenet5", "--compare-env",
                           "WNT_KNOB=a,b", "--repeat", "3", "--layers"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    layers = [line for line in done.stdout.splitlines() if line.strip().startswith("f0.")]
    assert len(layers) == 5
    for line in layers:
        assert all(float(x) > 0 for x in line.split()[-3:])


def test_classes_merge_heads_and_layers_and_count_gaps(wnt, capsys):
    assert wnt.run_class("f0.12p3 accel.attention:attention.h11.softmax.exp") == \
        "accel.attention:attention.h*.softmax.exp"
    assert wnt.run_class("f0.4p2 accel.layer_norm:layer_norm.center.mean.lo2") == \
        "accel.layer_norm:layer_norm.center.mean.lo"
    assert wnt.run_class("f0.12p4 accel.attention:attention.h3.softmax.max2") == \
        "accel.attention:attention.h*.softmax.max"
    # two calls of three runs: (label, engine, ops, seconds, gap before it)
    call = [("f0.1p0 accel.attention:attention.h0.scores", 0, 2, 2e-3, 1e-3),
            ("f0.1p1 accel.attention:attention.h1.scores", 0, 2, 4e-3, 3e-3),
            ("f0.2 accel.add", 1, 1, 1e-3, 5e-3)]
    nets = [call, call]
    by_label = {r[0]: [r[3], r[3]] for r in call}
    wnt.print_classes(nets, by_label)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["accel.attention:attention.h*.scores", "2", "6.00", "3.00"]
    assert out[2].split() == ["accel.add", "1", "1.00", "5.00"]
