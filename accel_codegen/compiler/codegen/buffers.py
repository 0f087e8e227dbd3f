"""Scratch memory of one external function: intermediates live in buffers allocated once, and a
buffer whose value is dead is reused, so a deep network needs a few activations' worth of
scratch, not all of them. No TVM here: the planner sees sizes and layer indices only."""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import List, Tuple


class ScratchPlanner:
    """Buffers by size, each live until the layer after which its value is no longer read.

    The choice among free buffers is the smallest that fits, else the smallest of all (it is
    grown), the lowest index on a tie. A large transformer asks thousands of times, so the free
    buffers are kept sorted by (size, index), which orders them by exactly that choice, and the
    live ones in a heap by the layer after which they are free: a call costs a bisection, not a
    scan of every buffer."""

    def __init__(self) -> None:
        self.sizes: List[int] = []          # bytes of each buffer (its largest use)
        self._free_after: List[int] = []    # the layer after which each buffer is free
        self._now = -1 << 62                # the ``now`` of the last call
        self._free: List[Tuple[int, int]] = []   # (size, index) of the buffers free at _now
        self._live: List[Tuple[int, int]] = []   # heap of (free_after, index) of the others

    def _advance(self, now: int) -> None:
        """Sort the buffers into free (their value dead before layer ``now``) and live."""
        if now < self._now:
            # Layers are asked in order; if not, a buffer free later may be live now: re-sort.
            self._free = sorted((self.sizes[i], i)
                                for i, end in enumerate(self._free_after) if end < now)
            self._live = [(end, i) for i, end in enumerate(self._free_after) if end >= now]
            heapq.heapify(self._live)
        self._now = now
        live = self._live
        while live and live[0][0] < now:
            index = heapq.heappop(live)[1]
            insort(self._free, (self.sizes[index], index))

    def allocate(self, size: int, now: int, free_after: int) -> int:
        """A buffer of at least ``size`` bytes, live from layer ``now`` to ``free_after``: a free
        one large enough if there is one (the smallest such), else the smallest free one grown,
        else a new one; among equal sizes the lowest index. Returns its index."""
        self._advance(now)
        free = self._free
        if free:
            at = bisect_left(free, (size, -1))
            index = free.pop(at if at < len(free) else 0)[1]
            self.sizes[index] = max(self.sizes[index], size)
            self._free_after[index] = free_after
        else:
            index = len(self.sizes)
            self.sizes.append(size)
            self._free_after.append(free_after)
        heapq.heappush(self._live, (free_after, index))
        return index
