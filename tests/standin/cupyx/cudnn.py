"""Stand-in for CuPy 13's ``cupyx.cudnn`` convolutions (removed in CuPy 14).

Same names and keyword-only arguments as CuPy 13.6's ``cupyx/cudnn.pyx``; each call
records the keyword arguments it received in ``RECORDER.calls``.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

CUDNN_TENSOR_NCHW = 0


class ConvolutionCall(NamedTuple):
    function: str
    deterministic: bool | None
    auto_tune: bool
    tensor_core: str
    thread: int


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: list[ConvolutionCall] = []

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()

    def record(self, function: str, deterministic: bool | None, auto_tune: bool, tensor_core: str) -> None:
        with self.lock:
            self.calls.append(
                ConvolutionCall(function, deterministic, auto_tune, tensor_core, threading.get_ident())
            )


RECORDER = _Recorder()


def convolution_forward(
    x: Any, W: Any, b: Any, y: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, auto_tune: bool, tensor_core: str, d_layout: int = CUDNN_TENSOR_NCHW,
    w_layout: int = CUDNN_TENSOR_NCHW,
) -> Any:
    RECORDER.record("convolution_forward", None, auto_tune, tensor_core)
    return y


def convolution_backward_filter(
    x: Any, gy: Any, gW: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, deterministic: bool, auto_tune: bool, tensor_core: str, d_layout: int = CUDNN_TENSOR_NCHW,
    w_layout: int = CUDNN_TENSOR_NCHW,
) -> Any:
    RECORDER.record("convolution_backward_filter", deterministic, auto_tune, tensor_core)
    return gW


def convolution_backward_data(
    W: Any, x: Any, b: Any, y: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, deterministic: bool, auto_tune: bool, tensor_core: str, d_layout: int = CUDNN_TENSOR_NCHW,
    w_layout: int = CUDNN_TENSOR_NCHW,
) -> Any:
    RECORDER.record("convolution_backward_data", deterministic, auto_tune, tensor_core)
    return y
