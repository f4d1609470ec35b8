"""The one check every determinism wrapper makes right before CuPy launches an operation
whose result can vary from run to run (``algorithms.deterministic``, torch's
``use_deterministic_algorithms``).

As torch's ``alertNotDeterministic``: in a context where ``algorithms.deterministic`` is
on, ``alert()`` raises ``RuntimeError``, or with ``algorithms.warn_only`` warns
``NondeterministicAlgorithmWarning``, once per call site (the user's line that led to the
launch, however deep inside CuPy the launch is). Elsewhere it costs one flag read.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from .._engine.state import read
from .wrapping import replace, user_frame

#: Top-level packages a launch is made from inside; the call site is the first frame outside them.
LIBRARIES = ("cupy", "cupyx", "cupy_backends", "numpy")
HOW_TO_ALLOW = "with backends.algorithms.flags(deterministic=False):"


class NondeterministicAlgorithmWarning(UserWarning):
    """Warned, instead of raising ``RuntimeError``, when a CuPy operation whose result can
    vary from run to run is launched where ``algorithms.deterministic`` and
    ``algorithms.warn_only`` are both on (torch warns a plain ``UserWarning`` there).
    Once per call site and operation."""


#: (operation, file name, line number) of the call sites already warned
warned: set[tuple[str, str, int]] = set()


def enabled() -> bool:
    """Whether ``algorithms.deterministic`` is on in the current context."""
    return bool(read("algorithms.deterministic"))


def alert(operation: str, why: str) -> None:
    """Refuse ``operation`` (a CuPy name as users call it, e.g. ``"cupy.bincount(x, weights)"``)
    in a context where ``algorithms.deterministic`` is on; ``why`` says when its result varies.

    Raises:
        RuntimeError: ``algorithms.deterministic`` is on and ``algorithms.warn_only`` is off.
    """
    if not read("algorithms.deterministic"):
        return
    if not read("algorithms.warn_only"):
        raise RuntimeError(
            f"{operation} does not have a deterministic implementation ({why}), but "
            f"backends.algorithms.deterministic is True in this context. To allow it here, call it "
            f"inside `{HOW_TO_ALLOW}`; or set warn_only=True to warn instead of raise."
        )
    frame, level = user_frame(LIBRARIES)
    site = (operation, frame.f_code.co_filename, frame.f_lineno)
    if site in warned:
        return
    warned.add(site)
    warnings.warn(
        f"{operation} does not have a deterministic implementation ({why}), but "
        f"backends.algorithms.deterministic is True (warn_only=True) in this context. To allow it "
        f"without this warning, call it inside `{HOW_TO_ALLOW}`.",
        NondeterministicAlgorithmWarning,
        stacklevel=level,
    )


def kind(array: object) -> str:
    """NumPy's dtype kind of ``array`` (``"f"`` float, ``"c"`` complex, ...), or ``""``."""
    return str(getattr(getattr(array, "dtype", None), "kind", ""))


def guard(owner: Any, name: str, operation: str, why: str, varies: Callable[..., bool]) -> None:
    """Wrap CuPy's ``owner.name`` (a module's kernel or function, or a class's method) so that,
    where ``algorithms.deterministic`` is on and ``varies(*args, **kwargs)`` says this call's
    result can vary, ``alert(operation, why)`` runs before it. ``varies`` is only asked inside
    such a context, so what it costs (a check of the data, a device sync) is paid only there."""

    def make(launch: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if read("algorithms.deterministic") and varies(*args, **kwargs):
                alert(operation, why)
            return launch(*args, **kwargs)

        return guarded

    replace(owner, name, make)
