"""cuBLAS: math mode on the launching thread's handle, and the per-call compute type.

Flags: ``cuda.matmul.allow_tf32`` and the two reduced-precision-reduction flags.

CuPy keeps one cuBLAS handle per (Python thread, device), shared by every asyncio
task on that thread, and its 2-D GEMMs pass an explicit compute type taken from
a process-wide setting (``CUPY_TF32=1`` makes it ``CUBLAS_COMPUTE_32F_FAST_TF32``,
which overrides the handle's math mode). So right before each GEMM, the wrapper:

1. sets the handle's math mode from the launching context's flags, if the mode it
   last saw on that handle differs (``setMathMode`` is wrapped too, so a change by
   CuPy or anyone else is seen);
2. rewrites a float32 GEMM's compute type to ``CUBLAS_COMPUTE_32F_FAST_TF32`` or
   ``CUBLAS_COMPUTE_32F`` to match ``allow_tf32`` (a per-call argument, so this is
   thread-safe where changing CuPy's process-wide compute type is not).
   Pedantic and explicitly reduced compute types chosen with
   ``cupy._core.set_compute_type`` are left alone.

Math modes: ``CUBLAS_TF32_TENSOR_OP_MATH`` (3) when ``allow_tf32`` else
``CUBLAS_DEFAULT_MATH`` (0), OR ``CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION``
(16) when the GEMM's input type (fp16 or bf16) is not allowed reduced-precision
reductions. Where the input type is not known (``backends.sync()``), the fp16 flag
decides the bit, as in torch.

The cost when nothing changed: one frame-identity comparison, one version
comparison and one dict lookup per GEMM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._engine import state
from .._engine.state import current, read
from . import invalidate

MODULE = "cupy_backends.cuda.libs.cublas"

DEFAULT_MATH = 0
TF32_TENSOR_OP_MATH = 3
DISALLOW_REDUCED_PRECISION_REDUCTION = 16
COMPUTE_32F = 68
COMPUTE_32F_FAST_TF32 = 77

# CUDA data types (library_types.h): which reduced-precision flag a GEMM's input type obeys.
_FP16_TYPES = {2, 6}  # CUDA_R_16F, CUDA_C_16F
_BF16_TYPES = {14, 15}  # CUDA_R_16BF, CUDA_C_16BF
_FP32_TYPES = {0, 4}  # CUDA_R_32F, CUDA_C_32F

FP16, BF16 = 0, 1  # index into the modes tuple

# (positional index of Atype, of computeType) for the functions that have them.
_GEMMS: dict[str, tuple[int | None, int | None]] = {
    "gemmEx": (8, 17),
    "sgemmEx": (8, None),
    "gemmStridedBatchedEx": (8, 21),
    "sgemm": (None, None),
    "dgemm": (None, None),
    "cgemm": (None, None),
    "zgemm": (None, None),
    "sgemmBatched": (None, None),
    "dgemmBatched": (None, None),
    "cgemmBatched": (None, None),
    "zgemmBatched": (None, None),
    "sgeam": (None, None),
    "dgeam": (None, None),
}

#: handle -> (frame, version, modes, allow_tf32): the flags last seen for that handle
_seen: dict[int, tuple[Any, int, tuple[int, int], bool]] = {}
#: handle -> the math mode we know is set on it
_mode_on: dict[int, int] = {}
_set_math_mode: Callable[[int, int], None] | None = None


def modes() -> tuple[tuple[int, int], bool]:
    """The math modes (for fp16-or-other GEMMs, for bf16 GEMMs) and ``allow_tf32``,
    from the flags effective in the current context."""
    tf32 = bool(read("cuda.matmul.allow_tf32"))
    base = TF32_TENSOR_OP_MATH if tf32 else DEFAULT_MATH
    strict = base | DISALLOW_REDUCED_PRECISION_REDUCTION
    fp16 = base if read("cuda.matmul.allow_fp16_reduced_precision_reduction") else strict
    bf16 = base if read("cuda.matmul.allow_bf16_reduced_precision_reduction") else strict
    return (fp16, bf16), tf32


def prepare(handle: int, kind: int = FP16) -> bool:
    """Put the current context's math mode on ``handle``; return ``allow_tf32``."""
    frame, version = current(), state.version
    seen = _seen.get(handle)
    if seen is None or seen[0] is not frame or seen[1] != version:
        seen = _seen[handle] = (frame, version, *modes())
    mode = seen[2][kind]
    if _mode_on.get(handle) != mode and _set_math_mode is not None:
        _set_math_mode(handle, mode)
        _mode_on[handle] = mode
        invalidate()  # this thread's last sync() no longer describes the handle
    return seen[3]


def _wrap_gemm(original: Callable[..., Any], type_at: int | None, compute_at: int | None) -> Callable[..., Any]:
    @functools.wraps(original)
    def launch(*args: Any, **kwargs: Any) -> Any:
        atype = args[type_at] if type_at is not None and len(args) > type_at else kwargs.get("Atype")
        kind = BF16 if atype in _BF16_TYPES else FP16
        handle = args[0] if args else kwargs["handle"]
        allow_tf32 = prepare(handle, kind)
        if compute_at is not None and atype in _FP32_TYPES:
            wanted = COMPUTE_32F_FAST_TF32 if allow_tf32 else COMPUTE_32F
            if len(args) > compute_at:
                if args[compute_at] in (COMPUTE_32F, COMPUTE_32F_FAST_TF32) and args[compute_at] != wanted:
                    args = (*args[:compute_at], wanted, *args[compute_at + 1:])
            elif kwargs.get("computeType") in (COMPUTE_32F, COMPUTE_32F_FAST_TF32):
                kwargs["computeType"] = wanted
        return original(*args, **kwargs)

    launch.__backends_wrapped__ = original  # type: ignore[attr-defined]
    return launch


def install(module: ModuleType) -> None:
    """Wrap the GEMM launch points and the handle life cycle of ``module`` (CuPy's
    ``cupy_backends.cuda.libs.cublas``)."""
    global _set_math_mode
    original_set = _unwrapped(module.setMathMode)
    _set_math_mode = original_set
    _mode_on.clear()
    _seen.clear()

    @functools.wraps(original_set)
    def setMathMode(handle: int, mode: int) -> Any:
        result = original_set(handle, mode)
        _mode_on[handle] = mode  # someone else changed it: the next launch resyncs
        invalidate()
        return result

    original_create, original_destroy = _unwrapped(module.create), _unwrapped(module.destroy)

    @functools.wraps(original_create)
    def create(*args: Any, **kwargs: Any) -> Any:
        handle = original_create(*args, **kwargs)
        _mode_on[handle] = DEFAULT_MATH  # a new handle starts in the default math mode
        _seen.pop(handle, None)
        return handle

    @functools.wraps(original_destroy)
    def destroy(handle: int, *args: Any, **kwargs: Any) -> Any:
        _mode_on.pop(handle, None)  # the pointer may be reused by a later create()
        _seen.pop(handle, None)
        return original_destroy(handle, *args, **kwargs)

    for name, wrapper in (("setMathMode", setMathMode), ("create", create), ("destroy", destroy)):
        wrapper.__backends_wrapped__ = wrapper.__wrapped__  # type: ignore[attr-defined]
        setattr(module, name, wrapper)
    for name, (type_at, compute_at) in _GEMMS.items():
        original = getattr(module, name, None)
        if original is not None:
            setattr(module, name, _wrap_gemm(_unwrapped(original), type_at, compute_at))


def _unwrapped(function: Any) -> Any:
    return getattr(function, "__backends_wrapped__", function)

