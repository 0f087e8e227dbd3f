"""estimate_chain's memo (sim/device.py: chain_key): a partition checks every run of every
layer, and a window attention's runs repeat, so an equal chain on an equal configuration is
costed once; what the cost depends on (every field, a small operand's content, the shape,
the configuration) tells chains apart, and a chain with a large array operand is not kept."""
import dataclasses

import numpy as np

from accel_codegen import AccelConfig, Conv, Sdp, estimate_chain
from accel_codegen.sim import device
from accel_codegen.sim.ops import SHAPE_ONLY


def _chain(stride=1, scale=None):
    return [Conv(None, weight_shape=(8, 4, 3, 3), stride=(stride, stride), padding=(1,) * 4),
            Sdp(scale=SHAPE_ONLY if scale is None else scale, act="relu")]


def test_equal_chains_are_costed_once_and_what_differs_is_costed_again():
    device._ESTIMATES.clear()
    first = estimate_chain("nv_full", _chain(), (1, 4, 16, 16))
    assert estimate_chain("nv_full", _chain(), (1, 4, 16, 16)) is first  # kept
    assert len(device._ESTIMATES) == 1
    strided = estimate_chain("nv_full", _chain(stride=2), (1, 4, 16, 16))
    assert strided.macs == first.macs // 4  # a field of an op
    assert estimate_chain("nv_full", _chain(), (1, 4, 32, 32)).macs == first.macs * 4
    small = estimate_chain("nv_small", _chain(), (1, 4, 16, 16))
    assert small.cycles != first.cycles  # the configuration
    slow = dataclasses.replace(AccelConfig.preset("nv_full"), dram_bytes_per_s=1e8)
    assert estimate_chain(slow, _chain(), (1, 4, 16, 16)).cycles > first.cycles
    assert len(device._ESTIMATES) == 5
    ones, twos = np.ones(8, np.float32), np.full(8, 2, np.float32)
    keys = {device.chain_key(_chain(scale=s), (1, 4, 16, 16), "fp32", "fused")
            for s in (ones, twos, ones.copy(), SHAPE_ONLY)}
    assert len(keys) == 3  # a small operand by its content
    large = np.zeros(1 << 15, np.float32)  # past _KEYED_BYTES: not kept
    assert device.chain_key([Sdp(operand=large, ew_op="add")], (1, 1, 128, 256), "fp32",
                            "fused") is None
