"""Error measures of a reduced-precision result against its reference."""
from __future__ import annotations

import numpy as np


def sqnr_db(signal_power: float, noise_power: float) -> float:
    """10 log10(signal / noise); inf when there is no noise."""
    if noise_power == 0:
        return float("inf")
    if signal_power == 0:
        return float("-inf")
    return float(10.0 * np.log10(signal_power / noise_power))
