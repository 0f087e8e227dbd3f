"""MAC-array utilisation is the products the array performs over the products it could: never
above 1, in direct and Winograd mode alike, on every array shape a sweep builds."""
import numpy as np
import pytest

from accel_codegen import AccelConfig, Conv, Sdp, estimate_chain


@pytest.mark.parametrize("atomic_c, atomic_k", [(8, 8), (8, 16), (16, 8), (32, 32), (64, 32)])
@pytest.mark.parametrize("precision", ["int8", "fp16"])
@pytest.mark.parametrize("shape, kernel, stride", [((1, 64, 28, 28), 3, 1), ((1, 32, 14, 14), 3, 1),
                                                   ((1, 16, 16, 16), 5, 2)])  # 5x5/2: 3x3 folded
def test_winograd_and_direct_utilisation_stay_within_the_array(atomic_c, atomic_k, precision,
                                                                shape, kernel, stride):
    config = AccelConfig.preset("nv_full").replace(atomic_c=atomic_c, atomic_k=atomic_k)
    k = 64
    if precision == "int8":
        weights = np.ones((k, shape[1], kernel, kernel), np.int8)
        sdp = Sdp(precision="int8", bias=np.zeros(k, np.int32), mul=np.ones(k, np.int16),
                  rshift=np.full(k, 8, np.uint8), act="relu")
    else:
        weights = np.ones((k, shape[1], kernel, kernel), np.float32)
        sdp = Sdp(scale=np.ones(k, np.float32), shift=np.zeros(k, np.float32), act="relu",
                  precision=precision)
    runs = {}
    for mode in ("direct", "winograd"):
        conv = Conv(weights, stride=stride, padding=kernel // 2, mode=mode, precision=precision)
        chain = [conv, sdp]
        stats = estimate_chain(config, chain, shape, precision=precision)
        assert 0 < stats.utilization <= 1.0, (mode, stats.utilization)
        runs[mode] = stats
    # Winograd performs 16 products per 2x2 outputs (and per folded channel) where direct
    # performs 36: fewer products, the same bound
    assert runs["winograd"].macs < runs["direct"].macs
