"""The code generator's memory choices (compiler/codegen/memory.py): the sparse weight format
where it saves bytes, the CBUF split, feature maps in SRAM; in the generated code, in the
estimate, and in a profiled run (the two equal cycle for cycle), values unchanged."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen import AccelConfig, frontend
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
