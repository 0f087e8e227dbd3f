"""The timeline of a profile as a Chrome trace (sim/timeline.py): its structure, the layout
model (fused engines overlap from the run's start, independent ops follow one another, a
memory-bound run shows its waits), its length against the runs' cycles, and the checks."""
import dataclasses
import json

import numpy as np
import pytest

import accel_codegen as ac
from accel_codegen import AccelConfig, AccelInvalidError
from accel_codegen.sim import Bdma, Conv, Device, Lrn, Pool, Sdp
from accel_codegen.sim.timeline import MEMORY_TRACK, RUNS_TRACK, TRACKS, WAIT, layout
from accel_codegen.sim.vocabulary import ENGINES

FIELDS = ("name", "ph", "ts", "dur", "pid", "tid")


def _chain(rng, channels=16, k=32):
    w = rng.standard_normal((k, channels, 3, 3), dtype=np.float32)
    return [Conv(w, padding=1), Sdp(scale=np.ones(k, np.float32), shift=np.zeros(k, np.float32),
                                    act="relu"), Pool("max", kernel=2, stride=2)]


def _profile(config, rng):
    """A fused chain, the same chain independent, a CDP run and a BDMA copy."""
    dev = Device(config)
    x = rng.standard_normal((1, 16, 32, 32), dtype=np.float32)
    with ac.profile() as prof:
        dev.run(_chain(rng), x, label="f0.0 accel.conv2d_bn_relu_maxpool")
        dev.run(_chain(rng), x, mode="independent", label="f0.1 accel.conv2d_bn_relu_maxpool")
        dev.run([Lrn(size=5)], x, label="f0.2 accel.lrn")
        dev.run([Bdma(channels=8, src_offset=0, dst_offset=0)], x, label="f0.3c0 accel.concat")
    return prof


@pytest.fixture
def profiled(rng):
    return _profile("nv_full", rng)


@pytest.fixture
def slow(rng):
    """The same runs on a configuration whose DRAM makes the fused run memory-bound."""
    config = AccelConfig.preset("nv_full").replace(name="slow_dram", dram_bytes_per_s=2e8)
    return config, _profile(config, rng)


def _slices(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _track(trace, tid):
    return next(e["args"]["name"] for e in trace["traceEvents"]
                if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == tid)


def _runs(trace):
    """{label: (run slice, [the slices within it])}."""
    runs = {}
    for e in _slices(trace):
        if e["cat"] == "run":
            runs[e["name"]] = (e, [])
        else:
            runs[e["args"]["label"]][1].append(e)
    return runs


def test_the_json_has_the_trace_event_format(profiled, tmp_path):
    path = profiled.to_chrome_trace(tmp_path / "run.json", config="nv_full")
    trace = json.loads(path.read_text())
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    for event in trace["traceEvents"]:
        assert all(field in event for field in FIELDS), event
        assert event["ph"] in ("X", "M")
        assert event["dur"] >= 0 and event["ts"] >= 0
    metadata = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert any(e["name"] == "process_name" for e in metadata)
    names = {e["tid"]: e["args"]["name"] for e in metadata if e["name"] == "thread_name"}
    assert list(names.values()) == [RUNS_TRACK, MEMORY_TRACK, *ENGINES.names] == list(TRACKS)
    for event in _slices(trace):  # every slice is on a named track, with a positive length
        assert event["tid"] in names and event["dur"] > 0
    assert trace == profiled.chrome_trace("nv_full")


def test_every_slice_carries_its_run_and_costs(profiled):
    trace = profiled.chrome_trace("nv_full")
    runs = _runs(trace)
    assert list(runs) == [r.label for r in profiled.records]
    compute = [e for e in _slices(trace) if e["cat"] == "compute"]
    assert {_track(trace, e["tid"]) for e in compute} == {"CONV", "SDP", "PDP", "CDP", "BDMA"}
    for e in compute:
        assert _track(trace, e["tid"]) == e["args"]["engine"]
        assert e["name"].startswith(e["args"]["label"].split()[0] + " ")  # "f0.1 conv2d"
        assert set(e["args"]) >= {"label", "op", "precision", "macs", "bytes_read",
                                  "bytes_written", "compute_cycles", "memory_cycles",
                                  "run_utilization", "start_cycle", "cycles"}
    conv = next(e for e in compute if e["args"]["op"] == "conv2d")
    assert conv["args"]["macs"] == profiled.records[0].ops[0].macs > 0
    assert conv["args"]["precision"] == "fp32"


def _check_runs_fit(trace, records, clock_hz):
    runs = _runs(trace)
    start = 0
    for record in records:
        run, inner = runs[record.label]
        assert run["args"]["start_cycle"] == start and run["args"]["cycles"] == record.cycles
        assert run["ts"] == pytest.approx(start / clock_hz * 1e6)
        assert run["dur"] == pytest.approx(record.cycles / clock_hz * 1e6)
        for e in inner:  # never outside the run
            assert start <= e["args"]["start_cycle"]
            assert e["args"]["start_cycle"] + e["args"]["cycles"] <= start + record.cycles
            assert e["ts"] >= run["ts"] - 1e-9
            assert e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1e-9
        start += record.cycles
    return start


@pytest.mark.parametrize("which", ["nv_full", "slow_dram"])
def test_runs_end_to_end_and_slices_stay_within_their_run(profiled, slow, which):
    config, prof = (AccelConfig.preset("nv_full"), profiled) if which == "nv_full" else slow
    trace = prof.chrome_trace(config)
    total = _check_runs_fit(trace, prof.records, config.clock_hz)
    assert total == prof.totals["cycles"] == trace["otherData"]["total_cycles"]
    end = max(e["ts"] + e["dur"] for e in _slices(trace))
    assert end == pytest.approx(prof.totals["cycles"] / config.clock_hz * 1e6)


def test_a_fused_run_overlaps_its_engines(profiled):
    trace = profiled.chrome_trace("nv_full")
    run, inner = _runs(trace)["f0.0 accel.conv2d_bn_relu_maxpool"]
    engines = {_track(trace, e["tid"]): e for e in inner if e["cat"] == "compute"}
    assert set(engines) == {"CONV", "SDP", "PDP"}
    config = AccelConfig.preset("nv_full")
    latency = config.dram_latency_cycles  # the compute starts with the first read's data
    for e in engines.values():  # all busy from then: they overlap
        assert e["args"]["start_cycle"] == run["args"]["start_cycle"] + latency
    record = profiled.records[0]
    pipeline = (config.conv_pipeline_cycles + config.sdp_pipeline_cycles +
                config.pdp_pipeline_cycles)  # the engines' fixed cycles per layer
    longest = max(e["args"]["cycles"] for e in engines.values())  # the long pole
    assert latency + longest + pipeline == record.cycles
    memory = [e for e in inner if e["cat"] == "memory"]
    assert len(memory) == 1 and memory[0]["ts"] == run["ts"]
    assert memory[0]["args"]["bytes_read"] == record.bytes_read
    assert not run["args"]["memory_bound"] and run["args"]["memory_bound_cycles"] == 0
    assert not [e for e in inner if e["cat"] == "wait"]


def test_an_independent_run_orders_its_ops(profiled):
    trace = profiled.chrome_trace("nv_full")
    run, inner = _runs(trace)["f0.1 accel.conv2d_bn_relu_maxpool"]
    record = profiled.records[1]
    compute = [e for e in inner if e["cat"] == "compute"]
    assert [e["args"]["op"] for e in compute] == [op.op for op in record.ops]
    start = run["args"]["start_cycle"]
    latency = AccelConfig.preset("nv_full").dram_latency_cycles
    for e, op in zip(compute, record.ops):  # each op starts when the previous one's slot ends
        # and computes from its first read's data on
        assert e["args"]["start_cycle"] == start + (latency if op.dram_read_bytes else 0)
        memory = [m for m in inner if m["cat"] == "memory" and m["args"]["op"] == op.op]
        assert len(memory) == 1 and memory[0]["args"]["start_cycle"] == start
        assert memory[0]["args"]["cycles"] == op.memory_cycles
        start += op.cycles
    assert start == run["args"]["start_cycle"] + record.cycles
    assert run["args"]["memory_bound_cycles"] == sum(
        op.cycles for op in record.ops
        if op.memory_cycles > op.compute_cycles + (latency if op.dram_read_bytes else 0))
    for a, b in zip(compute, compute[1:]):  # sequential: no two ops overlap
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-9


def test_a_memory_bound_run_waits_on_memory(slow):
    config, prof = slow
    trace = prof.chrome_trace(config)
    run, inner = _runs(trace)["f0.0 accel.conv2d_bn_relu_maxpool"]
    assert run["args"]["memory_bound"] and run["args"]["memory_bound_cycles"] == \
        run["args"]["cycles"]
    memory = [e for e in inner if e["cat"] == "memory"]
    pipeline = config.conv_pipeline_cycles + config.sdp_pipeline_cycles + config.pdp_pipeline_cycles
    assert len(memory) == 1 and memory[0]["args"]["cycles"] + pipeline == run["args"]["cycles"]
    for e in inner:
        if e["cat"] == "compute":  # each engine: the latency, busy, then waits on memory
            wait = [w for w in inner if w["cat"] == "wait" and w["tid"] == e["tid"]]
            assert len(wait) == 1 and wait[0]["name"] == WAIT
            assert wait[0]["args"]["start_cycle"] == e["args"]["start_cycle"] + e["args"]["cycles"]
            assert (config.dram_latency_cycles + e["args"]["cycles"] + wait[0]["args"]["cycles"]
                    == memory[0]["args"]["cycles"])


def test_a_bdma_copy_is_a_transfer(profiled):
    trace = profiled.chrome_trace("nv_full")
    run, inner = _runs(trace)["f0.3c0 accel.concat"]
    copy = [e for e in inner if e["cat"] == "compute"]
    assert len(copy) == 1 and _track(trace, copy[0]["tid"]) == "BDMA"
    assert copy[0]["args"]["compute_cycles"] == 0
    assert copy[0]["dur"] == pytest.approx(run["dur"])
    assert not [e for e in inner if e["cat"] == "wait"]


def test_a_record_whose_cycles_disagree_is_refused(profiled):
    """The layout takes memory cycles from the records (the cost model's DRAM model is not
    restated in Python); a run whose cycles are not its pipeline cycles plus its ops' and
    memory's long pole is no record of the cost model (forged with the utilisation those
    cycles give, so that the array is nv_full's)."""
    record = profiled.records[0]
    peak = AccelConfig.preset("nv_full").macs_per_cycle(record.ops[-1].precision)
    forged = dataclasses.replace(record, cycles=record.cycles + 1,
                                 utilization=record.macs / ((record.cycles + 1) * peak))
    with pytest.raises(AccelInvalidError, match="not a record of the cost model"):
        layout([forged], "nv_full")


def test_an_empty_profile_has_only_its_tracks():
    with ac.profile() as prof:
        pass
    trace = prof.chrome_trace()
    assert not _slices(trace) and trace["otherData"]["total_cycles"] == 0
    assert layout([], "nv_full") == []
