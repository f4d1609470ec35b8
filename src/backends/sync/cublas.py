"""cuBLAS: math mode on the launching thread's handle, and the per-call compute type.

Flags: ``cuda.matmul.allow_tf32`` and the two reduced-precision-reduction flags.

CuPy keeps one cuBLAS handle per (Python thread, device), shared by every asyncio
task on that thread, and looks each function of ``cupy_backends.cuda.libs.cublas``
up by name when it calls it. The math mode is a property of the handle, so it would
outlive the scope that set it; instead, right before **every** call of a function
that takes a handle and launches work (GEMMs, ``?trsm``, ``?syrk``, ``?gemv``,
``?getrfBatched``, ``?geam``, ``?dot``, ``?nrm2``, ...: every public function whose
first parameter is the handle, found at install time, less the handle, stream,
pointer-mode and math-mode management), the wrapper:

1. sets the handle's math mode from the launching context's flags, if the mode it
   last saw on that handle differs (``setMathMode`` is wrapped too, so a change by
   CuPy or anyone else is seen);
2. for a float32 GEMM that passes a compute type (``gemmEx``, ``gemmStridedBatchedEx``),
   rewrites ``CUBLAS_COMPUTE_32F`` <-> ``CUBLAS_COMPUTE_32F_FAST_TF32`` to match
   ``allow_tf32`` (a per-call argument, so this is thread-safe where changing CuPy's
   process-wide compute type is not). Only these two are swapped: they take the same
   float alpha/beta. Pedantic, reduced and legacy compute types are passed as given.

Math modes: ``CUBLAS_TF32_TENSOR_OP_MATH`` (3) when ``allow_tf32`` else
``CUBLAS_DEFAULT_MATH`` (0), OR ``CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION``
(16) when the GEMM's input type (fp16 or bf16) is not allowed reduced-precision
reductions. Where the input type is not known (other routines, ``backends.sync()``),
the fp16 flag decides the bit, as in torch.

Below compute capability 8.0 (of the device the handle was made on) no TF32 is asked
for, neither math mode nor compute type, as CuPy stores ``COMPUTE_TYPE_DEFAULT`` for
TF32 there. On a ROCm/HIP build nothing is wrapped: hipBLAS has no math mode (CuPy's
shim answers ``setMathMode`` with ``HIPBLAS_STATUS_NOT_SUPPORTED``, and CuPy raises),
and CuPy never passes a cuBLAS compute type there; the cuBLAS flags do nothing.

A handle made by the wrapped ``create`` (CuPy makes one on a thread's first use of a
device) starts in the creating context's mode and is recorded for its thread and
device, so ``sync()`` finds it without asking CuPy (which would create one). A handle
made before this module wrapped ``create`` is recorded at its first launch here.

Streams. The cuBLAS guide ("Results reproducibility") says its same-bits guarantee "no longer
holds when multiple CUDA streams are active or fixed-point emulation is used" (CuPy never asks
for emulation): with several concurrent streams on one handle cuBLAS may pick other internal
workspaces and implementations, unless ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:8`` or
``:16:8``. When cuBLAS reads that variable NVIDIA does not document (not when the library
loads); the rule takes its value when the handle is made.
CuPy keeps one handle per thread for all its streams (each routine first sets the handle's
stream to the thread's current one). So every wrapped routine notes the stream it launches on
(what CuPy's routine sets on the handle: its exported ``get_current_stream_ptr()``, so under
``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1`` the null stream is the per-thread default stream;
``cudaStreamLegacy`` counts as the null stream),
per handle, in every context; and where ``algorithms.deterministic`` is on, a float GEMM (any
routine with ``gemm`` in its name, less integer ``gemmEx``) on a handle that has been used from
more than one stream, this one included, raises (or warns, with ``algorithms.warn_only``)
unless the handle has a deterministic workspace configuration. A handle used from one stream
only, default or not, passes. "Used" is counted over the handle's life, not only while
streams overlap: whether another stream's work is still running cannot be told without
synchronizing, and cuBLAS's workspace choice depends on the streams it has served.
A refused GEMM does not count as a use. A handle made before this module wrapped ``create``
is taken to have been used on a default stream (its earlier launches were not seen).

The cost when nothing changed (CuPy 14.2's module on the CPU, its stream query replaced by a C
function; benchmarks/bench_sync.py): about 70 ns per routine and 90 ns per float32 GEMM in a tf32
scope with the compiled accelerator, which does ``_wrap``'s work (the reference) in C for the calls
CuPy makes (``wrapper``); about 0.5 and 1 us on the pure engine. Paid per call: a ContextVar
read and five dict lookups (the defaults' version, the handle's ``_seen`` record and ``_mode_on``,
``sys.modules`` for ``cupy.cuda.stream``, ``_stream_of``), CuPy's stream query (the C function its
routine calls next; on a GPU, a thread-local read and ``cudaGetDevice``), and where the compute
type is swapped, a copy of the argument vector.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._engine import state
from .._engine.state import current, read
from . import compiled, device_has_tf32, invalidate, quietly
from .nondeterministic import alert
from .wrapping import original, replace

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
_INTEGER_TYPES = {3, 7, 8, 9, 10, 11, 12, 13}  # CUDA_R_8I ... CUDA_C_32U: integer GEMMs are exact

# cuBLAS's condition for bitwise-identical GEMMs when several streams run: a fixed workspace
# configuration, read from the environment by cuBLAS (set it before the first GEMM).
DETERMINISTIC_WORKSPACES = (":4096:8", ":16:8")
DEFAULT_STREAMS = (0, 1, 2)  # CuPy's null stream, cudaStreamLegacy, cudaStreamPerThread
LEGACY_STREAM = 1  # cudaStreamLegacy: the null stream by another name
PER_THREAD_STREAM = 2  # cudaStreamPerThread
SEVERAL = -1  #: in _stream_of: the handle has been used from more than one stream
SOME_DEFAULT = -2  #: in _stream_of: a handle met after its creation, assumed used on a default stream

FP16, BF16 = 0, 1  # index into the modes tuple

# (positional index of Atype, of computeType) for the GEMMs CuPy's matmul/dot call; every
# other routine is wrapped too (see _takes_handle), without a type to read or rewrite.
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

# Take a handle but launch nothing: cuBLAS's create/destroy and its getters and setters
# (cublasGetVersion, Get/SetPointerMode, Get/SetStream, Get/SetMathMode).
_MANAGEMENT = re.compile(r"(create|destroy|(get|set)[A-Z]\w*)\Z")

#: handle -> (frame, version, modes, allow_tf32, algorithms.deterministic): the flags last seen for it
Seen = tuple[Any, int, tuple[int, int], bool, bool]
_seen: dict[int, Seen] = {}
#: handle -> the math mode we know is set on it (also: the live handles we know of)
_mode_on: dict[int, int] = {}
#: handle -> whether its device has TF32 (compute capability >= 8.0)
_has_tf32: dict[int, bool] = {}
#: handle -> CUBLAS_WORKSPACE_CONFIG when it was made (when cuBLAS reads it is not documented), or when first seen
_workspace: dict[int, str | None] = {}
#: handle -> the one stream it has been used from, or SEVERAL (or SOME_DEFAULT); absent: unused
_stream_of: dict[int, int] = {}
#: .handles: {device: [handle, ...]}, this thread's handles, for sync()
_mine = threading.local()
_set_math_mode: Callable[[int, int], None] | None = None
_runtime: Any = None  # cupy_backends.cuda.api.runtime
#: what the null stream launches on: PER_THREAD_STREAM under CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1
_null_stream = 0
#: cupy_backends.cuda.stream's exported C get_current_stream_ptr, the function CuPy's routines ask
#: for their stream: its capsule (read by the compiled wrappers) and a ctypes function calling it
_stream_ptr_capi: Any = None
_stream_ptr: Callable[[], int] | None = None
STREAM_PTR_SIGNATURE = "intptr_t (void)"  # the capsule's name: Cython's rendering of the C signature
hip: bool = False  #: whether the installed CuPy is a ROCm/HIP build (then nothing is wrapped)


def modes(tf32_possible: bool = True) -> tuple[tuple[int, int], bool]:
    """The math modes (for fp16-or-other GEMMs, for bf16 GEMMs) and ``allow_tf32``,
    from the flags effective in the current context; ``allow_tf32`` is False where
    ``tf32_possible`` is not."""
    tf32 = tf32_possible and bool(read("cuda.matmul.allow_tf32"))
    base = TF32_TENSOR_OP_MATH if tf32 else DEFAULT_MATH
    strict = base | DISALLOW_REDUCED_PRECISION_REDUCTION
    fp16 = base if read("cuda.matmul.allow_fp16_reduced_precision_reduction") else strict
    bf16 = base if read("cuda.matmul.allow_bf16_reduced_precision_reduction") else strict
    return (fp16, bf16), tf32


def _adopt(handle: int) -> bool:
    """Note ``handle`` as this thread's, on the current device (CuPy's key for it: CuPy
    makes the device current around ``create()``, and launches on the current device's
    handle); return whether that device has TF32: compute capability >= 8.0, CuPy's own
    test (``_routines_linalg.pyx`` ``set_compute_type``)."""
    device = _runtime.getDevice()
    has_tf32 = _has_tf32[handle] = device_has_tf32(_runtime, device)
    _workspace.setdefault(handle, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    _stream_of.setdefault(handle, SOME_DEFAULT)  # made before we wrapped create(): launches unseen
    handles: dict[int, list[int]] = _mine.__dict__.setdefault("handles", {})
    handles.setdefault(device, []).append(handle)
    invalidate()  # the last sync() did not cover this handle
    return has_tf32


def _prepare(handle: int, kind: int = FP16) -> Seen:
    """Put the current context's math mode on ``handle`` (``kind``: whose reduced-precision
    flag decides the bit, ``FP16`` or ``BF16``); return the flags seen for it (``[3]``: the
    ``allow_tf32`` to use on it, ``[4]``: ``algorithms.deterministic``).

    Raises what CuPy's ``setMathMode`` raises (``CUBLASError``, ...) when a push fails."""
    frame, version = current(), state.version
    seen = _seen.get(handle)
    if seen is None or seen[0] is not frame or seen[1] != version:
        has_tf32 = _has_tf32.get(handle)
        if has_tf32 is None:  # first sight of a handle CuPy made before we wrapped create()
            has_tf32 = _adopt(handle)
        seen = _seen[handle] = (frame, version, *modes(has_tf32), bool(read("algorithms.deterministic")))
    mode = seen[2][kind]
    if _mode_on.get(handle) != mode and _set_math_mode is not None:
        _set_math_mode(handle, mode)
        _mode_on[handle] = mode
        invalidate()  # this thread's last sync() no longer describes the handle
    return seen


#: prepare(): the reference above, or with the compiled sync layer a C object that returns the
#: handle's record when it says this frame, this version and this math mode, else calls it
prepare: Callable[..., Seen] = _prepare
if compiled() is not None:
    prepare = compiled().fast_prepare(_seen, _mode_on, _prepare)


def current_stream() -> int:
    """The stream the next routine launches on: what CuPy's routine gives the handle first
    (``cupy_backends.cuda.stream.get_current_stream_ptr()``, in ``_setStream``), the thread's
    current CuPy stream, where the null stream is the per-thread default stream under
    ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``; ``cudaStreamLegacy`` counted as the null stream.
    That very C function where CuPy exports it (``__pyx_capi__``), else the same value from
    ``cupy.cuda.stream``. The null stream where ``cupy.cuda.stream`` is not imported, as nothing
    else can change CuPy's current stream.

    Raises what CuPy's query raises (``CUDARuntimeError`` without a driver). CuPy 14.0 and older
    build that C function to report an error as unraisable and answer 0 (the null stream), as it
    then does inside its own routine."""
    streams = sys.modules.get("cupy.cuda.stream")
    if streams is None:
        ptr = _null_stream
    elif _stream_ptr is not None:
        ptr = _stream_ptr()
    else:
        ptr = streams.get_current_stream().ptr or _null_stream
    return 0 if ptr == LEGACY_STREAM else ptr


def _exported_stream_ptr(streams: Any) -> tuple[Any, Callable[[], int] | None]:
    """``streams`` (``cupy_backends.cuda.stream``)'s exported C ``get_current_stream_ptr``: its
    capsule (for the compiled wrappers) and a ``ctypes`` function that calls it (for the pure
    ones); ``(None, None)`` where it is not exported with that signature."""
    capsule = getattr(streams, "__pyx_capi__", {}).get("get_current_stream_ptr")
    if capsule is None:
        return None, None
    try:
        import ctypes

        pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
            ("PyCapsule_GetPointer", ctypes.pythonapi)
        )
        address = pointer_of(capsule, STREAM_PTR_SIGNATURE.encode())  # ValueError for another signature
        # PYFUNCTYPE: called with the GIL held, and an exception CuPy's function sets is raised
        return capsule, ctypes.PYFUNCTYPE(ctypes.c_ssize_t)(address)
    except (ImportError, AttributeError, ValueError):  # no ctypes, no pythonapi, another signature
        return None, None


def _other_stream(handle: int, stream: int) -> bool:
    """Whether ``handle`` has been used from a stream other than ``stream``."""
    used = _stream_of.get(handle, stream)
    return used != stream and not (used == SOME_DEFAULT and stream in DEFAULT_STREAMS)


def note_stream(handle: int, stream: int) -> None:
    """Record that ``handle`` launches on ``stream``."""
    used = _stream_of.setdefault(handle, stream)  # (setdefault: one atomic step for a first use)
    if used != stream and used != SEVERAL:
        _stream_of[handle] = stream if used == SOME_DEFAULT and stream in DEFAULT_STREAMS else SEVERAL


def check_streams(name: str, handle: int, stream: int) -> None:
    """Refuse the float GEMM ``name`` (``algorithms.deterministic`` is on) on ``stream`` if
    ``handle`` has been used from another stream and was made without one of cuBLAS's
    deterministic ``CUBLAS_WORKSPACE_CONFIG`` settings (as the variable was when the handle was
    made: when cuBLAS reads it is not documented). CuPy keeps one handle per thread for all its streams."""
    if _workspace.get(handle) in DETERMINISTIC_WORKSPACES or not _other_stream(handle, stream):
        return
    alert(
        f"cuBLAS {name} (a float GEMM: cupy.matmul, cupy.dot, ...) on a cuBLAS handle used from more "
        "than one CUDA stream",
        "cuBLAS gives the same bits only while one stream uses a handle, unless the handle was made "
        "with CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8; CuPy keeps one handle per thread for all its "
        "streams",
        "Set that environment variable before the first cuBLAS call of the process, or keep each "
        "thread's cuBLAS work on one stream",
    )


def sync(device: int) -> None:
    """Put the current context's math mode on this thread's handles for ``device``.
    Creates none (a handle CuPy creates later starts in its creator's mode).

    Raises what CuPy's ``setMathMode`` raises when a push fails."""
    for handle in getattr(_mine, "handles", {}).get(device, ()):
        if handle in _mode_on:  # alive: a mode was set on it, and it was not destroyed (elsewhere) since
            prepare(handle)


def wrapper(cupy_routine: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The wrapper ``install()`` puts in place of CuPy's routine ``name``: ``_wrap``'s, or
    with the compiled sync layer a C object that does its work for the calls CuPy makes
    (positional, with int arguments) and calls it for every other call."""
    type_at, compute_at = _GEMMS.get(name, (None, None))
    reference = _wrap(cupy_routine, type_at, compute_at, name)
    if prepare is _prepare:  # the pure engine
        return reference
    return compiled().fast_routine(globals(), cupy_routine, reference, name, type_at, compute_at)  # type: ignore[no-any-return]


def _wrap(
    cupy_routine: Callable[..., Any], type_at: int | None, compute_at: int | None, name: str = ""
) -> Callable[..., Any]:
    """The wrapper of one routine (the reference): math mode; for GEMMs (``name`` has ``gemm``)
    the streams check of ``algorithms.deterministic``, and for GEMMs with types, the compute type.
    A call without a handle goes to CuPy as it is (which raises its ``TypeError``)."""
    if "gemm" not in name:

        def routine(*args: Any, **kwargs: Any) -> Any:
            handle = args[0] if args else kwargs.get("handle")
            if handle is not None:
                prepare(handle)
                note_stream(handle, current_stream())
            return cupy_routine(*args, **kwargs)

        return routine

    def gemm(*args: Any, **kwargs: Any) -> Any:
        handle = args[0] if args else kwargs.get("handle")
        if handle is None:
            return cupy_routine(*args, **kwargs)
        atype = args[type_at] if type_at is not None and len(args) > type_at else kwargs.get("Atype")
        seen = prepare(handle, BF16 if atype in _BF16_TYPES else FP16)
        allow_tf32 = seen[3]
        stream = current_stream()
        if seen[4] and atype not in _INTEGER_TYPES:
            check_streams(name, handle, stream)
        note_stream(handle, stream)
        if compute_at is not None and atype in _FP32_TYPES:
            wanted = COMPUTE_32F_FAST_TF32 if allow_tf32 else COMPUTE_32F
            if len(args) > compute_at:
                if args[compute_at] in (COMPUTE_32F, COMPUTE_32F_FAST_TF32) and args[compute_at] != wanted:
                    args = (*args[:compute_at], wanted, *args[compute_at + 1 :])
            elif kwargs.get("computeType") in (COMPUTE_32F, COMPUTE_32F_FAST_TF32):
                kwargs["computeType"] = wanted
        return cupy_routine(*args, **kwargs)

    return gemm


def _takes_handle(name: str, function: Any) -> bool:
    """Whether ``function`` (public attribute ``name`` of the cuBLAS module) is a routine
    to wrap: not management, and its first parameter is the handle.

    CuPy's functions are Cython builtins without ``inspect.signature``, but CuPy builds
    with ``embedsignature``: the first line of ``__doc__`` is ``name(intptr_t handle, ...)``.
    Without that line, the signature; without either, CuPy's naming (its routines are
    camelCase, its helpers such as ``check_status`` have an underscore)."""
    if name.startswith("_") or _MANAGEMENT.match(name) or not callable(function) or isinstance(function, type):
        return False
    doc = (function.__doc__ or "").lstrip()
    if doc.startswith(name + "("):
        first = doc[len(name) + 1 :].split(",", 1)[0].split(")", 1)[0]
        return first.split()[-1:] == ["handle"]
    try:
        return list(inspect.signature(function).parameters)[:1] == ["handle"]
    except (TypeError, ValueError):  # a builtin without a signature
        return "_" not in name


def routines(module: ModuleType) -> list[str]:
    """The names of ``module``'s functions that take a handle and launch work: the set
    the sync layer wraps."""
    return sorted(name for name in dir(module) if _takes_handle(name, original(getattr(module, name))))


def _start(handle: int) -> None:
    _adopt(handle)
    prepare(handle)


def _forget(handle: int) -> None:
    for table in (_mode_on, _seen, _has_tf32, _workspace, _stream_of):  # the pointer may be reused by a later create()
        table.pop(handle, None)
    for handles in getattr(_mine, "handles", {}).values():
        if handle in handles:
            handles.remove(handle)


def install(module: ModuleType) -> None:
    """Wrap every routine and the handle life cycle of ``module`` (CuPy's
    ``cupy_backends.cuda.libs.cublas``); on a HIP build, nothing."""
    global _set_math_mode, _runtime, hip, _null_stream, _stream_ptr_capi, _stream_ptr
    _runtime = importlib.import_module("cupy_backends.cuda.api.runtime")
    hip = bool(getattr(_runtime, "is_hip", False))
    try:  # (CuPy's cublas module imports it: cimported by cublas.pyx)
        streams: Any = importlib.import_module("cupy_backends.cuda.stream")
    except ImportError:
        streams = None
    # get_default_stream_ptr(): cudaStreamPerThread under CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1
    # (read by CuPy at import), else cudaStreamLegacy
    default_stream = getattr(streams, "get_default_stream_ptr", None)
    ptds = default_stream is not None and default_stream() == PER_THREAD_STREAM
    _null_stream = PER_THREAD_STREAM if ptds else 0
    _stream_ptr_capi, _stream_ptr = _exported_stream_ptr(streams)
    _set_math_mode = None
    for table in (_mode_on, _seen, _has_tf32, _workspace, _stream_of):
        table.clear()
    _mine.__dict__.clear()  # this thread's record (other threads' hold handles no longer in _mode_on)
    if hip:
        return
    _set_math_mode = original(module.setMathMode)

    def watched(set_math_mode: Any) -> Callable[..., Any]:
        def setMathMode(handle: int, mode: int) -> Any:
            result = set_math_mode(handle, mode)
            _mode_on[handle] = mode  # someone else changed it: the next launch resyncs
            invalidate()
            return result

        return setMathMode

    def started(create_handle: Any) -> Callable[..., Any]:
        def create(*args: Any, **kwargs: Any) -> Any:
            return _started(create_handle(*args, **kwargs))

        return create

    def forgotten(destroy_handle: Any) -> Callable[..., Any]:
        # At interpreter exit CuPy destroys the handles it still holds after this module's
        # globals are cleared: then only CuPy's destroy runs (a closure cell, as the check is).
        finalizing = sys.is_finalizing

        def destroy(handle: int, *args: Any, **kwargs: Any) -> Any:
            if not finalizing():
                quietly(_forget, handle)  # (CuPy destroys handles as their thread ends: nothing may stop that)
            return destroy_handle(handle, *args, **kwargs)

        return destroy

    replace(module, "setMathMode", watched)
    replace(module, "create", started)
    replace(module, "destroy", forgotten)
    for name in routines(module):
        replace(module, name, functools.partial(wrapper, name=name))


def _started(handle: int) -> int:
    """A handle just made by CuPy's ``create``: known, recorded, and in the creator's mode,
    for code that fetches CuPy's handle and calls cuBLAS its own way."""
    _mode_on[handle] = DEFAULT_MATH  # a new handle starts in the default math mode
    _workspace[handle] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    _seen.pop(handle, None)
    _has_tf32.pop(handle, None)
    # A failure must not lose the handle: CuPy has not stored it yet, and its first launch
    # here adopts it and pushes again.
    quietly(_start, handle)
    _stream_of.pop(handle, None)  # no launch yet (and all of them seen from now on)
    return handle
