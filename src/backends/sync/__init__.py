"""The sync layer: push the effective flags into CuPy right before each launch.

Each target is one small module that knows one CUDA library and nothing else:

=============== ====================================== =================================================
target          module it wraps                        flags
=============== ====================================== =================================================
cublas          cupy_backends.cuda.libs.cublas         cuda.matmul.*: math mode before every call that
                (CuPy 13 and 14; nothing on ROCm)      takes a handle, compute type of 2-D float32 GEMMs
cutensor        cupyx.cutensor (contraction)           cuda.matmul.allow_tf32: TF32 compute descriptor of
                                                       float32 / complex64 contractions (einsum)
cufft           cupy.fft._fft                          cuda.cufft_plan_cache.max_size
cusolver        cupy_backends.cuda.libs.cusolver       cuda.preferred_linalg_library ("magma" warns)
cudnn           cupyx.cudnn (CuPy 13), and its         cudnn.enabled, deterministic, benchmark;
                cupy.cudnn alias (same wrappers)       allow_tf32=False warns (CuPy cannot forbid TF32)
cudnn_frontend  cudnn: NVIDIA's cuDNN frontend, 1.23   cudnn.enabled, deterministic, allow_tf32 (graphs
                (pybind pygraph) and newer (Python)    with float32 I/O); algorithms.deterministic too
scatter         cupy._core.core (ndarray._scatter_op)  algorithms.*: float ufunc.at / scatter_add
cub             cupy.cuda.cub (cub_scan)               algorithms.deterministic: float cumsum/cumprod
                                                       take CuPy's own scan
histogram       cupy._statistics.histogram             algorithms.*: weighted bincount / histogram
ndimage         cupyx.scipy.ndimage._measurements      algorithms.*: label sums, means, variances
sparse          cupyx.scipy.sparse._coo, ._compressed  algorithms.*: summing duplicate entries; minor-axis
                                                       fancy indexing takes CuPy's sorted path (14.2)
cusparse        cupy_backends.cuda.libs.cusparse,      algorithms.*: SpMV / SpMM take cuSPARSE's
                cupyx.cusparse (spmv)                  deterministic algorithms; transposed ones refuse;
                                                       one-row / one-column SpMV computed without them
torch           torch (its own process-wide settings,  every flag torch has, through torch's own
                through ``torch._C``)                  setters; see ``torch.py`` and the engine's
                                                       ``mirror.py`` for when and whose value wins
=============== ====================================== =================================================

The ``algorithms.*`` targets share one check (``nondeterministic.alert``): where
``algorithms.deterministic`` is on, an operation whose result can vary raises
``RuntimeError`` before it launches, or warns with ``algorithms.warn_only``. The cuBLAS
target also refuses a float GEMM there on a handle that has been used from more than one CUDA
stream, unless ``CUBLAS_WORKSPACE_CONFIG`` was ``:4096:8`` or ``:16:8`` when it was made.

A target is installed by a post-import hook when its CuPy module is imported, so
``import backends`` never imports CuPy, and the order of ``import backends`` and
``import cupy`` does not matter. A target whose CuPy module does not import (without CuPy, or
without the CUDA library it loads) wraps nothing; without a driver the others are still wrapped,
and CuPy raises its own error at its first CUDA call.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from .._engine import accelerator, state
from .._engine.mirror import sync as _mirror_sync
from .._engine.state import current
from . import hooks

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any

#: CuPy module -> the target module (in this package) that wraps it
TARGETS = {
    "cupy_backends.cuda.libs.cublas": "cublas",
    "cupyx.cutensor": "cutensor",
    "cupy.fft._fft": "cufft",
    "cupy_backends.cuda.libs.cusolver": "cusolver",
    "cupyx.cudnn": "cudnn",
    "cudnn": "cudnn_frontend",
    "cupy._core.core": "scatter",
    "cupy.cuda.cub": "cub",
    "cupy._statistics.histogram": "histogram",
    "cupyx.scipy.ndimage._measurements": "ndimage",
    "cupyx.scipy.sparse._coo": "sparse",
    "cupyx.scipy.sparse._compressed": "sparse",
    "cupy_backends.cuda.libs.cusparse": "cusparse",
    "cupyx.cusparse": "cusparse",
    "torch": "torch",  # torch's own settings (not CuPy's): see torch.py
}

#: target name -> its module, once its CuPy module is imported and wrapped
installed: dict[str, Any] = {}
_last = threading.local()  # (frame, version, device) last pushed by sync() in this thread
_device_query: Any = None  # cupy.cuda.device.get_device_id, once CuPy has imported it


def _watch_device(module: Any) -> None:
    global _device_query
    _device_query = module.get_device_id
    compiled()  # CuPy is here: sync() is worth its C path


def _installer(target: str) -> hooks.Hook:
    def install(module: Any) -> None:
        implementation = importlib.import_module(f"{__name__}.{target}")
        implementation.install(module)
        installed[target] = implementation

    return install


def install_hooks() -> None:
    """Watch for CuPy's modules (idempotent: hooks are registered once)."""
    if not getattr(install_hooks, "done", False):
        install_hooks.done = True  # type: ignore[attr-defined]
        hooks.when_imported("cupy.cuda.device", _watch_device)
        for module, target in TARGETS.items():
            hooks.when_imported(module, _installer(target))


def invalidate() -> None:
    """Forget what this thread's last ``sync()`` pushed: a wrapper changed a handle or a
    plan cache (or a handle appeared), so the next ``sync()`` pushes again."""
    _last.key = None
    if _speedups is not None:
        _speedups.forget()


def quietly(call: Callable[..., object], *args: Any) -> None:
    """``call(*args)``, with any ``Exception`` it raises swallowed: for the pushes that must
    never fail what they run in (a task step, CuPy's creation of a handle), where the
    next launch through a wrapper pushes again and raises there, in the caller's code."""
    # Not contextlib.suppress: this runs before every task step, where a bare try costs nothing.
    try:  # noqa: SIM105
        call(*args)
    except Exception:
        pass


# cudaDevAttrComputeCapabilityMajor (CUDA's driver_types.h): CuPy's runtime module takes the
# attribute as a plain int and exports no name for it (CuPy's own code cimports the C enum).
COMPUTE_CAPABILITY_MAJOR = 75


def device_has_tf32(runtime: Any, device: int) -> bool:
    """Whether ``device`` has TF32 tensor cores (compute capability >= 8.0, CuPy's own test in
    ``_routines_linalg.pyx`` ``set_compute_type``), asked through CuPy's
    ``cupy_backends.cuda.api.runtime`` module ``runtime``.

    Raises what ``runtime.deviceGetAttribute`` raises (``CUDARuntimeError`` without a driver)."""
    return bool(runtime.deviceGetAttribute(COMPUTE_CAPABILITY_MAJOR, device) >= 8)


def sync() -> None:
    """Push the effective flags into the current thread's CuPy handles on the current
    device, now: the cuBLAS handles' math mode (``cuda.matmul.*``) and the cuFFT plan
    cache's capacity (``cuda.cufft_plan_cache.max_size``). For code that calls cuBLAS
    through its own bindings with CuPy's handle; CuPy's own launches, and every call of
    ``cupy_backends.cuda.libs.cublas``, are synced without it, and
    ``backends.asyncio.install()`` / ``backends.trio.Instrument`` call it before each
    task step (where nothing it raises reaches the task).

    Creates no cuBLAS handle (and so no CUDA context) and loads no CUDA library: a
    thread without a handle has nothing to push into, and the handle CuPy makes for it
    later starts with the flags of the context that makes it. The handles it knows are
    those made since ``backends`` wrapped cuBLAS, and older ones from their first
    launch through CuPy's cuBLAS module on.

    A no-op without CuPy, a driver, a GPU or the CUDA libraries; never raises for their
    absence. Costs CuPy's current-device query and one comparison when nothing changed
    since this thread's last sync.

    Raises:
        Exception: what CuPy raises when a push into an existing handle fails (such as
            ``cupy_backends.cuda.libs.cublas.CUBLASError``): the flags are then not in
            force on that handle, and the next ``sync()`` tries again.
    """
    if _speedups is not None:  # the same, with "nothing changed" answered in C
        return _speedups.sync()  # type: ignore[no-any-return]
    _mirror_sync()
    query = _device_query
    if query is None:  # CuPy is not imported: nothing to push into
        return
    try:
        device = query()
    except Exception:  # no driver or no device
        return
    key = (current(), state.version, device)
    try:
        # Tuple equality checks identity first: the same frame object means nothing changed.
        if _last.key == key:
            return
    except AttributeError:  # this thread's first sync
        pass
    _push(device)
    _last.key = key


def _push(device: int) -> None:
    """``sync()``'s pushes into this thread's handles and plan cache on ``device``."""
    if "cublas" in installed:
        installed["cublas"].sync(device)
    for name in ("cufft", "cusolver"):
        if name in installed:
            installed[name].sync()


# The compiled sync layer (backends/sync/_speedups.c), with the compiled engine: sync() (and the
# asyncio stepper, and cuBLAS's check) answer "nothing changed" in C and call the code above for
# everything else. Its record of this thread's last push is its own (so is invalidate()'s).
_speedups: Any = None
_loaded = False
#: why the compiled sync layer is not in use, once compiled() has looked (``""``: it is, or not looked yet)
reason = ""


def compiled() -> Any:
    """The compiled sync layer, or ``None`` (the pure path; ``reason`` says why where the compiled
    engine is in use). Loaded at the first need (CuPy's device module imported, the asyncio
    integration or the cuBLAS target imported), not at ``import backends``."""
    global _speedups, _loaded, reason
    if not _loaded:
        _loaded = True
        if accelerator.ACCELERATED:
            try:
                module, reason = accelerator.load(f"{__name__}._speedups")
            except ModuleNotFoundError:  # built without it (the engine's alone): the pure path
                module, reason = None, "the compiled sync layer is not installed"
            if module is None:
                _speedups = None  # the import system bound the submodule it loaded here: not to be used
                accelerator.warn_if_wanted(reason)
                return None
            module.configure(state.overrides, state.NO_SCOPE, vars(state), globals(), _push, accelerator.speedups)
            _speedups = module
    return _speedups
