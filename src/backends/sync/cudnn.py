"""cuDNN: CuPy 13's ``cupyx.cudnn`` convolutions, and its deprecated ``cupy.cudnn`` alias.

CuPy 14 removed cuDNN. CuPy 13's ``convolution_forward``, ``convolution_backward_filter``
and ``convolution_backward_data`` take the keyword-only arguments ``auto_tune``,
``tensor_core`` and (backward only) ``deterministic``. Right before each call the wrapper
combines them with the launching context's flags, so a flag can only make a call stricter
than its caller asked. What each flag reaches in CuPy 13.6 (``cupyx/cudnn.pyx``):

* ``cudnn.enabled`` False: the call raises ``RuntimeError`` (CuPy has no non-cuDNN
  fallback for these functions, so running cuDNN would disobey the flag);
* ``cudnn.deterministic`` or ``algorithms.deterministic`` True (torch's convolutions honour
  either): ``deterministic=True`` for the backward functions, so CuPy
  takes the first algorithm cuDNN reports deterministic, and does not autotune them.
  ``convolution_forward`` has no such argument: cuDNN's forward algorithms are
  deterministic by design;
* ``cudnn.benchmark`` True: ``auto_tune=True`` (``cudnnFind``), for the backward functions
  only when not deterministic (CuPy's own rule);
* ``cudnn.allow_tf32`` False: cannot be honoured. CuPy asks for tensor cores only for
  float16 on compute capability 7.0, so for float32 ``tensor_core="never"`` is the same as
  ``"auto"``, and the convolution runs with the math type cuDNN's algorithm search returns;
  CuPy cannot set ``CUDNN_FMA_MATH``, the one math type that rules out TF32. The first
  float32 convolution under ``allow_tf32=False`` warns once (``UserWarning``) and runs
  unchanged: the caller's ``tensor_core`` is passed as it is, since rewriting it would
  change nothing but what CuPy's error messages report.

``cudnn.benchmark_limit`` has no knob in CuPy 13 (``cudnnFind`` tries every algorithm): a limit
other than the default under ``benchmark=True`` warns once (``UserWarning``).
``cupy.cudnn`` (filled by ``from cupyx.cudnn import *``) is wrapped too, with the very same
wrapper objects, whichever of it, ``cupyx.cudnn`` and ``backends`` is imported first.
NVIDIA's cuDNN frontend is the target in ``cudnn_frontend.py``.
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any

from .._engine.state import read
from .._engine.table import BY_NAME
from . import hooks
from .wrapping import mark, original, warn_once

MODULE = "cupyx.cudnn"
ALIAS = "cupy.cudnn"  # CuPy 13's deprecated alias; it imports MODULE, so it is always imported after it

_CONVOLUTIONS = ("convolution_forward", "convolution_backward_filter", "convolution_backward_data")
#: id(original) -> its wrapper, so the alias gets the same object; the wrapper keeps its
#: original alive, so an id here is never reused while its entry exists.
_wrappers: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_alias_watched = False
_BENCHMARK_LIMIT = BY_NAME["cudnn.benchmark_limit"].default


def _cannot_honour() -> None:
    """Warn once for each flag that CuPy 13 cannot honour, when it is in force."""
    if not read("cudnn.allow_tf32"):
        warn_once(
            "cupyx.cudnn allow_tf32",
            "backends.cudnn.allow_tf32 is False, but CuPy 13's cupyx.cudnn cannot forbid TF32: for float32 "
            "convolutions cuDNN chooses the math type (TF32 on compute capability 8.0 and newer); use NVIDIA's "
            "cuDNN frontend (cudnn.pygraph) for float32 convolutions without TF32",
            library=("cupy", "cupyx"),
        )


def adjust(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the current context's flags applied (see the module doc).

    Raises ``RuntimeError`` while ``cudnn.enabled`` is False; warns once (``UserWarning``)
    for a float32 convolution under ``cudnn.allow_tf32=False``.
    """
    if not read("cudnn.enabled"):
        raise RuntimeError(f"cupyx.cudnn.{name}() called while backends.cudnn.enabled is False")
    kwargs = dict(kwargs)
    if "deterministic" in kwargs and (read("cudnn.deterministic") or read("algorithms.deterministic")):
        kwargs["deterministic"] = True
    if read("cudnn.benchmark"):
        kwargs["auto_tune"] = True
        if read("cudnn.benchmark_limit") != _BENCHMARK_LIMIT:
            warn_once(
                "cupyx.cudnn benchmark_limit",
                "backends.cudnn.benchmark_limit is set, but CuPy 13's auto_tune has no limit: cuDNN's "
                "algorithm search (cudnnFind) tries every algorithm",
                library=("cupy", "cupyx"),
            )
    # Every array of a convolution shares one dtype: the first positional one, or any keyword one.
    first = args[0] if args else next((kwargs[k] for k in ("x", "W") if k in kwargs), None)
    if str(getattr(first, "dtype", "")) == "float32":
        _cannot_honour()
    return kwargs


def _wrap(name: str, function: Any) -> Any:
    wrapper = _wrappers.get(id(function))
    if wrapper is None:

        def convolution(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **adjust(name, args, kwargs))

        wrapper = _wrappers[id(function)] = mark(convolution, function)
    return wrapper


def install(module: ModuleType) -> None:
    """Wrap the convolutions of ``module`` (``cupyx.cudnn`` or its alias); idempotent."""
    global _alias_watched
    for name in _CONVOLUTIONS:
        function = getattr(module, name, None)
        if function is not None:
            setattr(module, name, _wrap(name, original(function)))
    if not _alias_watched:
        # Now, not in TARGETS: the alias can only exist once MODULE is imported. If it is being
        # imported right now, its `import *` copies the wrappers just made; if it is already
        # imported (before backends), the hook runs on it at once; if it comes later, after.
        _alias_watched = True
        hooks.when_imported(ALIAS, install)


def sync() -> None:
    """Nothing to push ahead of time: the flags go in with each call."""
