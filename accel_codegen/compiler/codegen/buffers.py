"""Scratch memory of one external function: intermediates live in buffers allocated once, and a
buffer whose value is dead is reused, so a deep network needs a few activations' worth of
scratch, not all of them. No TVM here: the planner sees sizes and layer indices only."""
from __future__ import annotations

from typing import List


class ScratchPlanner:
    """Buffers by size, each live until the layer after which its value is no longer read."""

    def __init__(self) -> None:
        self.sizes: List[int] = []          # bytes of each buffer (its largest use)
        self._free_after: List[int] = []    # the layer after which each buffer is free

    def allocate(self, size: int, now: int, free_after: int) -> int:
        """A buffer of at least ``size`` bytes, live from layer ``now`` to ``free_after``: a free
        one large enough if there is one (the smallest such), else the largest free one grown,
        else a new one. Returns its index."""
        free = [i for i, end in enumerate(self._free_after) if end < now]
        if free:
            index = max(free, key=lambda i: (self.sizes[i] >= size, -self.sizes[i]))
            self.sizes[index] = max(self.sizes[index], size)
            self._free_after[index] = free_after
            return index
        self.sizes.append(size)
        self._free_after.append(free_after)
        return len(self.sizes) - 1
