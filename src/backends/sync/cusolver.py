"""cuSOLVER: ``cuda.preferred_linalg_library``.

CuPy solves with cuSOLVER only, so the flag is a preference, as in torch: with
``"magma"`` effective when a cuSOLVER routine launches, a ``UserWarning`` says once
per process that cuSOLVER is used instead. ``"default"`` and ``"cusolver"`` are
what CuPy does anyway. The wrapped routines are every public function of
``cupy_backends.cuda.libs.cusolver`` except handle and stream management.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._engine.state import read
from .wrapping import replace, warn_once

MODULE = "cupy_backends.cuda.libs.cusolver"

_NOT_ROUTINES = ("create", "destroy", "spCreate", "spDestroy", "setStream", "getStream", "get", "set")


def check() -> None:
    if read("cuda.preferred_linalg_library") == "magma":
        warn_once(
            "magma",
            "backends.cuda.preferred_linalg_library is 'magma', but CuPy ships only cuSOLVER: "
            "using cuSOLVER (as torch falls back when a preferred library is unavailable)",
            library=("cupy", "cupyx", "cupy_backends"),
        )


def _checked(original: Any) -> Any:
    def routine(*args: Any, **kwargs: Any) -> Any:
        check()
        return original(*args, **kwargs)

    return routine


def install(module: ModuleType) -> None:
    for name in dir(module):
        function = getattr(module, name)
        if name.startswith(("_", *_NOT_ROUTINES)) or not callable(function) or isinstance(function, type):
            continue
        replace(module, name, _checked)


def sync() -> None:
    check()
