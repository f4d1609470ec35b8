"""Stand-in for CuPy 13's ``cupyx.cudnn`` convolutions (removed in CuPy 14).

Same names, parameters and keyword-only arguments as CuPy 13.6's ``cupyx/cudnn.pyx``,
and the same decisions about tensor cores and the math type, which is what the cuDNN
flags can and cannot reach:

* ``_should_use_tensor_core`` (``cudnn.pyx:1643``): ``"auto"`` and ``"always"`` mean
  ``is_tensor_core_available(dtype)``, which is true only for float16 on compute
  capability 7.0 (``cudnn.pyx:1246``); ``"never"`` means False; anything else raises
  ``ValueError``. So for float32 all three values are the same.
* The backward functions drop tensor cores under ``deterministic`` and only autotune
  when not deterministic (``auto_tune and not deterministic``).
* The math type the convolution runs with is the one cuDNN's algorithm search returns
  (``perf.mathType``, set with ``setConvolutionMathType``), never one CuPy forces. CuPy
  13 exposes only ``CUDNN_DEFAULT_MATH`` and ``CUDNN_TENSOR_OP_MATH``
  (``cupy_backends/cuda/libs/cudnn.pxd:13``), never ``CUDNN_FMA_MATH``, the one math
  type that forbids TF32; under ``CUDNN_DEFAULT_MATH`` cuDNN 8 may use TF32 for float32
  on compute capability 8.0 and newer. The stand-in's "algorithm search" returns
  ``CUDNN_TENSOR_OP_MATH`` when tensor cores were asked for, else ``CUDNN_DEFAULT_MATH``.

Each call records what it received and decided in ``RECORDER.calls``.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

_CUDNN_TENSOR_NCHW = 0
_CUDNN_DEFAULT_MATH = 0
_CUDNN_TENSOR_OP_MATH = 1
_CUDNN_FMA_MATH = 3  # cuDNN's value; not exposed by CuPy 13


class ConvolutionCall(NamedTuple):
    function: str
    deterministic: bool | None  # None for convolution_forward, which has no such argument
    auto_tune: bool
    tensor_core: str
    dtype: str
    use_tensor_core: bool  # what CuPy derived from tensor_core, dtype and deterministic
    autotuned: bool  # whether CuPy ran cudnnFind (auto_tune, and not deterministic for backward)
    math_type: int  # what the convolution ran with: chosen by cuDNN, never forced to FMA
    thread: int


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: list[ConvolutionCall] = []

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()

    def record(self, call: ConvolutionCall) -> None:
        with self.lock:
            self.calls.append(call)


RECORDER = _Recorder()


def is_tensor_core_available(dtype: Any) -> bool:
    from cupy.cuda import device

    return str(dtype) == "float16" and int(device.get_compute_capability()) == 70


def _should_use_tensor_core(tensor_core_mode: Any, dtype: Any) -> bool:
    if tensor_core_mode in ("auto", "always"):
        return is_tensor_core_available(dtype)
    elif tensor_core_mode == "never":
        return False
    else:
        raise ValueError('tensor_code_mode must be either of "always", "auto", or "never".')


def _convolve(function: str, x: Any, deterministic: bool | None, auto_tune: bool, tensor_core: str) -> None:
    use_tensor_core = not deterministic and _should_use_tensor_core(tensor_core, x.dtype)
    autotuned = bool(auto_tune) and not deterministic
    math_type = _CUDNN_TENSOR_OP_MATH if use_tensor_core else _CUDNN_DEFAULT_MATH  # perf.mathType
    RECORDER.record(ConvolutionCall(
        function, deterministic, auto_tune, tensor_core, str(x.dtype), use_tensor_core, autotuned, math_type,
        threading.get_ident(),
    ))  # fmt: skip


def convolution_forward(
    x: Any, W: Any, b: Any, y: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, auto_tune: bool, tensor_core: str, d_layout: int = _CUDNN_TENSOR_NCHW,
    w_layout: int = _CUDNN_TENSOR_NCHW,
) -> Any:
    _convolve("convolution_forward", x, None, auto_tune, tensor_core)
    return y


def convolution_backward_filter(
    x: Any, gy: Any, gW: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, deterministic: bool, auto_tune: bool, tensor_core: str, d_layout: int = _CUDNN_TENSOR_NCHW,
    w_layout: int = _CUDNN_TENSOR_NCHW,
) -> Any:
    _convolve("convolution_backward_filter", x, deterministic, auto_tune, tensor_core)
    return gW


def convolution_backward_data(
    W: Any, x: Any, b: Any, y: Any, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
    groups: int, *, deterministic: bool, auto_tune: bool, tensor_core: str, d_layout: int = _CUDNN_TENSOR_NCHW,
    w_layout: int = _CUDNN_TENSOR_NCHW,
) -> Any:
    _convolve("convolution_backward_data", x, deterministic, auto_tune, tensor_core)
    return y
