"""The code generator's memory choices (compiler/codegen/memory.py): the sparse weight format
where it saves bytes, the CBUF split, feature maps in SRAM; in the generated code, in the
estimate, and in a profiled run (the two equal cycle for cycle), values unchanged."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen import AccelConfig, frontend
from accel_codegen.compiler.partition import match_composites
from accel_codegen.compiler.walk import runs
from accel_codegen.tools.estimation import sweep
from conftest import random_inputs, run_main

SRAM = AccelConfig.preset("nv_full").replace(sram_bytes=1 << 20)


class _TwoConvs(torch.nn.Module):
    """conv -> relu -> conv -> relu; the second conv's weights 80 % pruned."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1)
        with torch.no_grad():
            keep = torch.rand(self.b.weight.shape) < 0.2
            self.b.weight.mul_(keep)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))))


@pytest.fixture(scope="module")
def two_convs():
    x = random_inputs((1, 16, 20, 20), 1, seed=5)[0]
    mod, params = frontend.from_pytorch(_TwoConvs().eval(), (torch.from_numpy(x),))
    return mod, params, x


def _profiled(mod, params, x, config, **options):
    partitioned = ac.partition_for_accel(mod, params, config=config, **options)
    source = "\n".join(ac.generated_sources(partitioned).values())
    vm = ac.virtual_machine(ac.build(partitioned))
    with ac.profile() as prof:
        y = run_main(vm, x)
    return source, prof, y


def test_sram_and_sparse_weights_where_they_pay_and_estimate_equals_profile(two_convs):
    mod, params, x = two_convs
    # Direct convolution (Winograd's weights are never sparse: the test after this one).
    source, prof, y = _profiled(mod, params, x, SRAM, winograd=False)
    # The first layer's output is the second's input: in SRAM, written and read there; both
    # convs' weights fit beside it, resident.
    assert source.count("ACCEL_SRAM_OUTPUT") == 1 and source.count("ACCEL_SRAM_INPUT") == 1
    assert source.count("ACCEL_SRAM_WEIGHTS") == 2
    # Only the pruned conv is sparse (fp32 charged as 2-byte: mask 1/16 + 20 % < dense).
    assert source.count("ACCEL_WEIGHTS_SPARSE") == 1
    assert source.count("OP.conv.data_banks") + source.count("].conv.data_banks") == 2
    report = ac.estimate(mod, params, config=SRAM, winograd=False)
    assert [r.cycles for r in prof.records] == [layer.cycles for layer in report.layers]
    assert prof.totals["sram_bytes"] == report.cost_totals.sram_bytes > 0
    first, second = prof.records
    assert first.ops[-1].sram_write_bytes > 0 and second.ops[0].sram_read_bytes > 0
    assert second.ops[0].weight_bytes < 32 * 32 * 9 * 2  # fewer bytes than dense
    # resident weights come from SRAM; the function's input from DRAM
    assert first.ops[0].sram_read_bytes == first.ops[0].weight_bytes > 0
    assert first.ops[0].dram_read_bytes >= first.ops[0].input_bytes
    _, _, plain = _profiled(mod, params, x, "nv_full", winograd=False)
    np.testing.assert_array_equal(y, plain)  # the same values


def test_winograd_convs_keep_dense_weights_and_estimate_equals_profile(two_convs):
    """Where Winograd mode pays, the pruned conv runs it with dense (pre-transformed) weights:
    NVDLA's compiler never compresses Winograd weights, and the library refuses the pair."""
    mod, params, x = two_convs
    source, prof, y = _profiled(mod, params, x, SRAM)
    assert "ACCEL_CONV_WINOGRAD" in source and "ACCEL_WEIGHTS_SPARSE" not in source
    report = ac.estimate(mod, params, config=SRAM)
    assert [r.cycles for r in prof.records] == [layer.cycles for layer in report.layers]
    _, _, direct = _profiled(mod, params, x, SRAM, winograd=False)
    np.testing.assert_allclose(y, direct, rtol=1e-4, atol=1e-4)


def test_no_sram_no_compression_where_the_configuration_lacks_them(two_convs):
    mod, params, x = two_convs
    tiny = SRAM.replace(sram_bytes=2048)  # smaller than the feature map and either weights
    for config in (tiny, AccelConfig.preset("nv_large")):
        source = "\n".join(ac.generated_sources(
            ac.partition_for_accel(mod, params, config=config, winograd=False)).values())
        assert "ACCEL_SRAM_" not in source
        assert ("ACCEL_WEIGHTS_SPARSE" in source) == ("weight_compression" in config.features)


def test_int8_counts_the_quantised_weights(two_convs):
    """int8 weights are folded and quantised per channel before they are counted, in the
    generated code and in the estimate alike (the run checks the count)."""
    mod, params, x = two_convs
    calibration = random_inputs((1, 16, 20, 20), 4, seed=6)
    source, prof, _ = _profiled(mod, params, x, SRAM, precision="int8",
                                calibration=calibration, winograd=False)
    assert "ACCEL_WEIGHTS_SPARSE" in source
    report = ac.estimate(mod, params, config=SRAM, precision="int8", winograd=False)
    assert [r.cycles for r in prof.records] == [layer.cycles for layer in report.layers]


# --- Winograd mode chosen with the memory plan --------------------------------------------------

class _ThreeConvs(torch.nn.Module):
    """16 -> 32 -> 32 -> 32 channels, 3x3, 20x20: the middle conv reads and writes feature maps
    that stay in SRAM, so with its weights resident its run is MAC-bound."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.convs = torch.nn.ModuleList([torch.nn.Conv2d(16, 32, 3, padding=1),
                                          torch.nn.Conv2d(32, 32, 3, padding=1),
                                          torch.nn.Conv2d(32, 32, 3, padding=1)])

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x


#: DRAM at 1 GB/s: with its weights in DRAM, Winograd's 16/9 larger fp32 (charged fp16)
#: weights make every conv slower; resident in SRAM, the middle conv's are read at 64 GB/s.
SLOW_DRAM = AccelConfig.preset("nv_full").replace(dram_bytes_per_s=1e9, name="slow-dram")
# fp16-charged bytes: feature maps 25,600 each (two live at the middle conv), direct weights
# 9,216 + 18,432 + 18,432, the middle conv's pre-transformed ones 32,768 (14,336 more)
ROOMY = SLOW_DRAM.replace(sram_bytes=1 << 20, name="roomy")
TIGHT = SLOW_DRAM.replace(sram_bytes=2 * 25_600 + 9_216 + 2 * 18_432 + 8_192, name="tight")


@pytest.fixture(scope="module")
def three_convs():
    x = random_inputs((1, 16, 20, 20), 1, seed=7)[0]
    mod, params = frontend.from_pytorch(_ThreeConvs().eval(), (torch.from_numpy(x),))
    return mod, params, x


def _modes(report):
    return ["wg" if "CONV(wg)" in layer.engines else "direct" for layer in report.layers]


def test_winograd_where_its_weights_fit_sram_and_estimate_equals_profile(three_convs):
    """The middle conv is slower in Winograd mode on its own (its weights from DRAM: the choice
    Layer.conv_mode makes for a layer alone) and faster with its weights resident: the code
    generator, the partition report, estimate() and a profiled run all take Winograd there;
    so does the first conv (its weights resident too, its time the input's CBUF loading from
    the slow DRAM plus its MACs, fewer in Winograd mode), not the last (bound by writing its
    output to DRAM). With too little SRAM left for the middle conv's larger weights (8,192 B
    spare: the first conv's 7,168 more fit, the middle's 14,336 do not), it stays direct."""
    mod, params, x = three_convs
    without = ac.estimate(mod, params, config=SLOW_DRAM)
    assert _modes(without) == ["direct"] * 3
    middle = [run.layer for run in runs(match_composites(mod, params, config=ROOMY))][1]
    assert middle.conv_mode(ROOMY, True)[0] == "direct"  # alone, with DRAM weights
    expected = {ROOMY: ["wg", "wg", "direct"], TIGHT: ["wg", "direct", "direct"]}
    for config, modes in expected.items():
        source, prof, y = _profiled(mod, params, x, config)
        report = ac.estimate(mod, params, config=config)
        assert _modes(report) == modes, config.name
        assert [r.cycles for r in prof.records] == [layer.cycles for layer in report.layers]
        assert source.count("ACCEL_CONV_WINOGRAD") == modes.count("wg")
        parts = ac.partition_report(mod, params, config=config)
        assert [op.conv_mode for op in parts.offloaded if op.op == "relax.nn.conv2d"] == [
            "winograd" if mode == "wg" else "direct" for mode in modes]
    roomy = ac.estimate(mod, params, config=ROOMY).layers
    tight = ac.estimate(mod, params, config=TIGHT).layers
    # resident Winograd weights: fewer cycles than the direct run the tight plan keeps
    assert roomy[1].cycles < tight[1].cycles < without.layers[1].cycles
    assert roomy[1].sram_bytes > tight[1].sram_bytes


def test_sweep_chooses_winograd_with_the_plan_as_estimate_does(three_convs):
    """Per configuration of a sweep, the same modes and figures as estimate(): the plan is
    shared by points of one memory layout, the choice made per point from its costs (a fast
    DRAM makes Winograd pay without SRAM too)."""
    mod, params, _ = three_convs
    points = [({"point": 0}, ROOMY), ({"point": 1}, TIGHT),
              ({"point": 2}, ROOMY.replace(dram_bytes_per_s=100e9, name="fast")),
              ({"point": 3}, ROOMY.replace(atomic_c=32, atomic_k=16, name="half")),
              ({"point": 4}, SLOW_DRAM)]
    rows = sweep(mod, params, points, progress=False)["points"]
    modes = set()
    for row, (_, config) in zip(rows, points):
        report = ac.estimate(mod, params, config=config)
        assert row["total_cycles"] == report.total_cycles, config.name
        assert row["sram_bytes"] == report.cost_totals.sram_bytes, config.name
        assert row["total_energy_pj"] == report.total_energy_pj, config.name
        modes.add(tuple(_modes(report)))
    assert len(modes) >= 3
