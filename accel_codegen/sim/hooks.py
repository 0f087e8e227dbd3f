"""A Python callback in one of the simulator's C hooks (``accel_set_observer``,
``accel_set_recorder``), installed for the duration of a ``with`` block.

cffi cannot let an exception cross the simulator's C frames (it would print it and go on), so
the first exception a callback raises is kept and raised when the block ends: the runs being
watched finish first. One block at a time per hook: a second one waits for the first.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional, TypeVar

T = TypeVar("T")


class CallbackHook:
    """``install(True)`` puts the cffi callback in the C hook, ``install(False)`` removes it."""

    def __init__(self, install: Callable[[bool], None]):
        self._install = install
        self._lock = threading.Lock()
        self._target: Optional[object] = None
        self._raised: Optional[BaseException] = None

    def call(self, handler: Callable[..., None], *args) -> None:
        """From the cffi callback: ``handler(target, *args)`` while a block is active and
        nothing has raised yet; an exception is kept for the block's end."""
        target = self._target
        if target is None or self._raised is not None:
            return
        try:
            handler(target, *args)
        except BaseException as error:  # noqa: BLE001 - re-raised by active()
            self._raised = error

    @contextlib.contextmanager
    def active(self, target: T) -> Iterator[T]:
        """Hand every callback to ``target`` while the block runs; raise what a callback
        raised when it ends (unless the block raised its own)."""
        with self._lock:
            self._target, self._raised = target, None
            self._install(True)
            try:
                yield target
            finally:
                self._install(False)
                self._target = None
            raised, self._raised = self._raised, None
            if raised is not None:
                raise raised
