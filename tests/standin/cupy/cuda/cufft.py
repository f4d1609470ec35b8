"""Stand-in for ``cupy.cuda.cufft``: fake plans whose executions are recorded.

Executions go to ``cupy.fft._cache.RECORDER.executions``.
"""

from __future__ import annotations

import threading
from typing import Any

from cupy_backends.cuda.libs._check import require as _require

_require("cufft")

CUFFT_C2C = 0x29
CUFFT_R2C = 0x2A
CUFFT_C2R = 0x2C
CUFFT_Z2Z = 0x69
CUFFT_D2Z = 0x6A
CUFFT_Z2D = 0x6C

CUFFT_FORWARD = -1
CUFFT_INVERSE = 1

_OUT_DTYPE = {
    CUFFT_C2C: "complex64",
    CUFFT_R2C: "complex64",
    CUFFT_C2R: "float32",
    CUFFT_Z2Z: "complex128",
    CUFFT_D2Z: "complex128",
    CUFFT_Z2D: "float64",
}

_thread_local = threading.local()


def get_current_plan() -> Any:
    """The plan entered as a context manager in this thread, or None."""
    stack = getattr(_thread_local, "plans", None)
    return stack[-1] if stack else None


class _Plan:
    gpus = None
    work_area = None

    def __enter__(self) -> _Plan:
        stack = getattr(_thread_local, "plans", None)
        if stack is None:
            stack = _thread_local.plans = []
        stack.append(self)
        return self

    def __exit__(self, *args: object) -> None:
        _thread_local.plans.pop()

    def _execute(self, direction: int) -> None:
        from cupy_backends.cuda.api import runtime

        from cupy.fft._cache import RECORDER, Execution

        with RECORDER.lock:
            RECORDER.executions.append(Execution(self, direction, runtime.getDevice(), threading.get_ident()))


class Plan1d(_Plan):
    def __init__(self, nx: int, fft_type: int, batch: int, *, devices: Any = None, out: Any = None) -> None:
        self.nx = nx
        self.fft_type = fft_type
        self.batch = batch
        self.gpus = list(devices) if devices else None

    def get_output_array(self, a: Any) -> Any:
        import cupy

        n = self.nx // 2 + 1 if self.fft_type in (CUFFT_R2C, CUFFT_D2Z) else self.nx
        return cupy.ndarray((*a.shape[:-1], n), _OUT_DTYPE[self.fft_type])

    def check_output_array(self, a: Any, out: Any) -> None:
        pass

    def fft(self, a: Any, out: Any, direction: int) -> None:
        self._execute(direction)


class PlanNd(_Plan):
    def __init__(
        self, shape: Any, inembed: Any, istride: Any, idist: Any, onembed: Any, ostride: Any, odist: Any,
        fft_type: int, batch: int, order: str, last_axis: int, last_size: int | None,
    ) -> None:  # fmt: skip
        self.shape = tuple(shape)
        self.fft_type = fft_type
        self.batch = batch
        self.order = order
        self.last_axis = last_axis
        self.last_size = last_size

    def get_output_array(self, a: Any, order: str = "C") -> Any:
        import cupy

        shape = list(a.shape)
        if self.last_size is not None:
            shape[self.last_axis] = self.last_size
        return cupy.ndarray(tuple(shape), _OUT_DTYPE[self.fft_type])

    def check_output_array(self, a: Any, out: Any) -> None:
        pass

    def fft(self, a: Any, out: Any, direction: int) -> None:
        self._execute(direction)
