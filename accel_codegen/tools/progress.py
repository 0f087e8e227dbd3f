"""Progress reporting of the long tools (benchmark, sweep): a callback protocol and one renderer.

A long-running function takes ``progress``: a callable ``progress(done, total)`` that it calls
with ``done`` counting up from 0 to ``total`` (its units of work), and that knows nothing of
terminals. :class:`ProgressBar` is the renderer the tools use: tqdm's one-line bar on stderr
when stderr is a terminal, silent when piped (tqdm is then not even imported); it clears its
line once ``done`` reaches ``total``. The long tools report through it: calibration (per
example), the mixed-precision search (per build), sweeps (per configuration) and benches (per
build and timed run).

For compatibility the tools also accept ``progress`` as ``None`` (a bar when stderr is a
terminal), ``True`` (always a bar) or ``False`` (nothing): :func:`progress_callback` turns any
of these into a callback.

>>> sweep(mod, params, points, progress=lambda done, total: print(f"{done}/{total}"))
"""
from __future__ import annotations

import sys
from typing import Callable, Optional, TextIO, Union

from ..errors import AccelInvalidError

#: ``progress(done, total)``: ``done`` units of work out of ``total`` are finished.
ProgressCallback = Callable[[int, int], None]

class ProgressBar:
    """A :data:`ProgressCallback` that draws a tqdm bar (``label: 40%|####  | 2/5 [...]``)
    on one line.

    Parameters
    ----------
    label : str
        What is in progress, shown before the bar.
    enabled : bool, optional
        Draw at all (default: when ``stream`` is a terminal).
    stream : text stream, optional
        Where to draw (default: ``sys.stderr``).
    """

    def __init__(self, label: str = "", enabled: Optional[bool] = None,
                 stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else bool(enabled)
        self.label = label
        self._bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        finished = done >= total
        total = max(int(total), 1)
        done = min(max(int(done), 0), total)
        if self._bar is None or self._bar.total != total:
            from tqdm import tqdm

            self.close()
            # leave=False: the line is cleared when the work is done, as the tools print
            # their results after it; mininterval=0: every step is drawn (steps are seconds)
            self._bar = tqdm(total=total, desc=self.label or None, file=self.stream,
                             leave=False, mininterval=0, dynamic_ncols=True)
        self._bar.n = done
        self._bar.refresh()
        if finished:
            self.close()

    def close(self) -> None:
        """Clear the bar's line (done by the last step; for work cut short)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _silent(done: int, total: int) -> None:
    """The callback of ``progress=False``."""


def progress_callback(progress: Union[None, bool, ProgressCallback],
                      label: str = "") -> ProgressCallback:
    """``progress`` as the tools accept it -> a callback: a callable is kept, ``False`` is
    silence, ``None`` and ``True`` a :class:`ProgressBar` (``None``: when stderr is a
    terminal)."""
    if callable(progress):
        return progress
    if progress is False:
        return _silent
    if progress is None or progress is True:
        return ProgressBar(label, enabled=None if progress is None else True)
    raise AccelInvalidError(f"progress = {progress!r}: give None, a bool, or a "
                            "callable(done, total)")


def steps(progress: ProgressCallback, total: int) -> Callable[[], None]:
    """Report ``(0, total)`` now, and return a function to call after each unit of work: it
    reports ``(1, total)``, ``(2, total)``, ..."""
    done = 0
    progress(0, total)

    def step() -> None:
        nonlocal done
        done += 1
        progress(done, total)
    return step
