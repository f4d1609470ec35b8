"""cuDNN: CuPy 13's ``cupyx.cudnn`` convolutions.

CuPy 14 removed cuDNN; CuPy 13's ``cupyx.cudnn.convolution_forward``,
``convolution_backward_filter`` and ``convolution_backward_data`` take required
keyword arguments ``auto_tune``, ``tensor_core`` and (backward) ``deterministic``.
Right before each call the wrapper combines them with the launching context's
flags, so the flags can only make a call stricter than its caller asked:

* ``cudnn.enabled`` False: the call raises ``RuntimeError`` (CuPy has no
  non-cuDNN fallback for these functions, so running cuDNN would disobey the flag);
* ``cudnn.deterministic`` True: ``deterministic=True``;
* ``cudnn.benchmark`` True: ``auto_tune=True``;
* ``cudnn.allow_tf32`` False: ``tensor_core="never"`` for float32 inputs.

``cudnn.benchmark_limit`` has no knob in CuPy 13: it is not pushed anywhere.
NVIDIA's cuDNN frontend is the target in ``cudnn_frontend.py``.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .._engine.state import read

MODULE = "cupyx.cudnn"

_CONVOLUTIONS = ("convolution_forward", "convolution_backward_filter", "convolution_backward_data")


def adjust(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the current context's flags applied (see the module doc)."""
    if not read("cudnn.enabled"):
        raise RuntimeError(f"cupyx.cudnn.{name}() called while backends.cudnn.enabled is False")
    kwargs = dict(kwargs)
    if "deterministic" in kwargs and read("cudnn.deterministic"):
        kwargs["deterministic"] = True
    if read("cudnn.benchmark"):
        kwargs["auto_tune"] = True
    # The first array: x for forward and backward_filter, W for backward_data.
    first = args[0] if args else kwargs.get("x", kwargs.get("W"))
    if not read("cudnn.allow_tf32") and str(getattr(first, "dtype", "")) == "float32":
        kwargs["tensor_core"] = "never"
    return kwargs


def _wrap(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def convolution(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **adjust(name, args, kwargs))

    convolution.__backends_wrapped__ = original  # type: ignore[attr-defined]
    return convolution


def install(module: ModuleType) -> None:
    for name in _CONVOLUTIONS:
        function = getattr(module, name, None)
        if function is not None:
            setattr(module, name, _wrap(name, getattr(function, "__backends_wrapped__", function)))


def sync() -> None:
    """Nothing to push ahead of time: the flags go in with each call."""
