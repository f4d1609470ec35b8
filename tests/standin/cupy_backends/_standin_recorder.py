"""Not a CuPy module: the thread-safe call list behind the stand-in's newer recorders."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class CallRecorder(Generic[T]):
    """``calls``: every record, in order; ``reset()`` empties it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: list[T] = []

    def record(self, call: T) -> None:
        with self.lock:
            self.calls.append(call)

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
