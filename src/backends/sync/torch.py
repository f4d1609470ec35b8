"""torch: the flags torch has reach torch's own settings, following the code that runs.

Installed when ``torch`` is imported (before or after ``backends``; this module never imports
torch itself). Every flag below follows its effective value in the running context into torch's
process-wide setting, through the engine's mirror (``backends/_engine/mirror.py``, which says when
and how): at every scope entry and exit, assignment, process-default write and ``snapshot()``
entry, and with ``backends.asyncio.install()`` or the trio instrument at every task step.

=================================================== ==============================================
flag                                                torch's setting (through ``torch._C``)
=================================================== ==============================================
cudnn.enabled / benchmark / deterministic           ``torch.backends.cudnn.*``
cudnn.benchmark_limit                               ``torch.backends.cudnn.benchmark_limit`` (torch
                                                    built with cuDNN only, as torch's own attribute)
cudnn.allow_tf32                                    ``cudnn.conv`` and ``cudnn.rnn.fp32_precision``
                                                    ("tf32" / "ieee"), as torch's legacy setter sets
                                                    both; before that API, ``cudnn.allow_tf32``
cuda.matmul.allow_tf32                              ``cuda.matmul.fp32_precision``; before that API,
                                                    ``cuda.matmul.allow_tf32``
cuda.matmul.allow_fp16/bf16_reduced_precision_...   the same attributes (torch's split-K half kept)
cuda.preferred_linalg_library                       ``torch.backends.cuda.preferred_linalg_library()``
                                                    (torch built with CUDA only: a CPU build refuses
                                                    every value but "default")
cuda.cufft_plan_cache.max_size                      the current device's ``cufft_plan_cache.max_size``
                                                    (where torch has a CUDA device)
algorithms.deterministic / warn_only                ``torch.use_deterministic_algorithms(d, warn_only=w)``
                                                    (its C setting; not ``torch._inductor.config``)
=================================================== ==============================================

On torch versions with the ``fp32_precision`` API (2.9 and newer), the TF32 flags go through that
API only: torch raises where its legacy and new records disagree, and a push through the new API
never changes the legacy one, so a user's legacy ``allow_tf32 = True`` comes back unchanged when
the scope is left. Inside such a scope, torch's legacy ``allow_tf32`` getter raises torch's own
"mix of the legacy and new APIs" error where the scope's value differs from the legacy record:
read ``fp32_precision`` there.
"""

from __future__ import annotations

import functools
from types import ModuleType

from .._engine import mirror as _mirror
from .._engine.mirror import Setting

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any


class TorchFlagConflictWarning(RuntimeWarning):
    """Two threads hold different values of a flag that reaches torch at the same time: torch's
    setting is one for the whole process, so it runs with the value of the thread that pushed last.
    Warned once per conflict, by the push that makes it (a scope's entry or exit, an assignment, a
    process-default write, a task step); ``warnings.simplefilter("error", TorchFlagConflictWarning)``
    makes that push raise instead (refusing a scope's entry or an assignment)."""


TorchFlagConflictWarning.__module__ = "backends"  # its public name (repr, pickling by reference)

_FP32 = {True: "tf32", False: "ieee"}


def _has_fp32_precision(C: Any) -> bool:
    """Whether torch has the ``fp32_precision`` API with the values this target pushes (2.9+)."""
    try:
        return C._get_fp32_precision_getter("cuda", "matmul") in ("none", "ieee", "tf32")
    except (AttributeError, RuntimeError, TypeError):
        return False


def _pair(get: Any, set_: Any, first: bool) -> tuple[Any, Any]:
    """(get, push) of one half of a setting torch sets as a pair: (deterministic, warn_only), or
    fp16/bf16 (allow reduced precision, allow split-K) where the getter returns a tuple."""
    if first:
        return (lambda: get()[0]), (lambda value: set_(value, get()[1]))
    return (lambda: get()[1]), (lambda value: set_(get()[0], value))


def settings(torch: ModuleType) -> list[Setting]:
    """How each flag this torch has reaches it."""
    C: Any = torch._C
    found: list[Setting] = []

    def plain(name: str, get: Any, set_: Any, spelling: str = "") -> None:
        found.append(Setting(name, get, set_, set_, spelling or f"torch.backends.{name}"))

    plain("cudnn.enabled", C._get_cudnn_enabled, C._set_cudnn_enabled)
    plain("cudnn.benchmark", C._get_cudnn_benchmark, C._set_cudnn_benchmark)
    if getattr(C, "_has_cudnn", False) and hasattr(C, "_cuda_get_cudnn_benchmark_limit"):
        plain("cudnn.benchmark_limit", C._cuda_get_cudnn_benchmark_limit, C._cuda_set_cudnn_benchmark_limit)
    plain("cudnn.deterministic", C._get_cudnn_deterministic, C._set_cudnn_deterministic)
    if _has_fp32_precision(C):
        get_p, set_p = C._get_fp32_precision_getter, C._set_fp32_precision_setter

        def cudnn_get() -> tuple[str, str]:
            return get_p("cuda", "conv"), get_p("cuda", "rnn")

        def cudnn_put(own: tuple[str, str]) -> None:
            set_p("cuda", "conv", own[0])
            set_p("cuda", "rnn", own[1])

        def cudnn_push(value: bool) -> None:
            set_p("cuda", "conv", _FP32[value])
            set_p("cuda", "rnn", _FP32[value])

        found.append(Setting("cudnn.allow_tf32", cudnn_get, cudnn_put, cudnn_push,
                             "torch.backends.cudnn.conv/rnn.fp32_precision"))
        matmul_set = functools.partial(set_p, "cuda", "matmul")

        def matmul_push(value: bool, _set: Any = matmul_set) -> None:
            _set(_FP32[value])

        matmul_get = functools.partial(get_p, "cuda", "matmul")
        found.append(Setting("cuda.matmul.allow_tf32", matmul_get, matmul_set, matmul_push,
                             "torch.backends.cuda.matmul.fp32_precision"))
    else:
        plain("cudnn.allow_tf32", C._get_cudnn_allow_tf32, C._set_cudnn_allow_tf32)
        plain("cuda.matmul.allow_tf32", C._get_cublas_allow_tf32, C._set_cublas_allow_tf32)
    for kind in ("fp16", "bf16"):
        get = getattr(C, f"_get_cublas_allow_{kind}_reduced_precision_reduction")
        set_ = getattr(C, f"_set_cublas_allow_{kind}_reduced_precision_reduction")
        name = f"cuda.matmul.allow_{kind}_reduced_precision_reduction"
        if isinstance(get(), tuple):  # (allow reduced precision, allow split-K): the split-K half stays torch's
            own_get, push = _pair(get, set_, first=True)
            found.append(Setting(name, own_get, push, push, f"torch.backends.{name}"))
        else:
            plain(name, get, set_)
    if getattr(C, "_has_cuda", False):
        backends = {"default": C._LinalgBackend.Default, "cusolver": C._LinalgBackend.Cusolver,
                    "magma": C._LinalgBackend.Magma}
        get_linalg, set_linalg = C._get_linalg_preferred_backend, C._set_linalg_preferred_backend

        def linalg_push(value: str) -> None:
            before = get_linalg()
            try:
                set_linalg(backends[value])
            except RuntimeError:  # torch sets it before refusing (a build without MAGMA): put it back
                set_linalg(before)
                raise

        found.append(Setting("cuda.preferred_linalg_library", get_linalg, set_linalg, linalg_push,
                             "torch.backends.cuda.preferred_linalg_library()"))
        if torch.cuda.is_available():
            current = torch.cuda.current_device

            def cufft_get() -> int:
                return int(torch._cufft_get_plan_cache_max_size(current()))

            def cufft_set(value: int) -> None:
                torch._cufft_set_plan_cache_max_size(current(), value)

            found.append(Setting("cuda.cufft_plan_cache.max_size", cufft_get, cufft_set, cufft_set,
                                 "torch.backends.cuda.cufft_plan_cache.max_size"))
    set_det = C._set_deterministic_algorithms

    def get_det() -> tuple[bool, bool]:
        return C._get_deterministic_algorithms(), C._get_deterministic_algorithms_warn_only()

    def set_pair(deterministic: bool, warn_only: bool) -> None:
        set_det(deterministic, warn_only=warn_only)

    for name, first, spelling in (
        ("algorithms.deterministic", True, "torch.use_deterministic_algorithms()"),
        ("algorithms.warn_only", False, "torch.use_deterministic_algorithms(warn_only=)"),
    ):
        own_get, push = _pair(get_det, set_pair, first)
        found.append(Setting(name, own_get, push, push, spelling))
    return found


#: the mirror in force, once torch is imported
mirror: _mirror.Mirror | None = None


def install(torch: ModuleType) -> None:
    """The post-import hook on ``torch``: its settings follow the flags from now on, starting
    with the importing context's values."""
    global mirror
    if mirror is not None and mirror.label == "torch" and _mirror.mirror is mirror:
        return  # idempotent (hooks may run twice on one module)
    mirror = _mirror.Mirror("torch", settings(torch), TorchFlagConflictWarning)
    _mirror.install(mirror)


def current() -> dict[str, Any]:
    """torch's value of each flag that reaches it, as torch's getter gives it; ``{}`` before torch is imported."""
    return mirror.current() if mirror is not None else {}
