"""Shared test helpers: one comparison that checks shape, then dtype, then values."""
import os

import numpy as np
import pytest

# A pattern check that fails with anything but a stated reason is a compiler bug: raise it.
os.environ["ACCEL_CODEGEN_STRICT"] = "1"


def assert_close(actual, expected, rtol=1e-5, what="output"):
    """Shape, then dtype, then max |actual - expected| within rtol of the expected's scale."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == np.float32, f"{what}: dtype {actual.dtype} is not float32"
    scale = max(float(np.max(np.abs(expected))), 1e-30)
    error = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    assert error <= rtol * scale, f"{what}: max error {error:.3g} > {rtol} x scale {scale:.3g}"


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
