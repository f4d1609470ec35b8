"""The one check every determinism wrapper makes right before CuPy launches an operation
whose result can vary from run to run (``algorithms.deterministic``, torch's
``use_deterministic_algorithms``).

As torch's ``alertNotDeterministic``: in a context where ``algorithms.deterministic`` is
on, ``alert()`` raises ``RuntimeError``, or with ``algorithms.warn_only`` warns
``NondeterministicAlgorithmWarning`` at the user's line that led to the launch (however deep
inside CuPy the launch is), which Python's default filter shows once per call site.
Elsewhere it costs one flag read.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from .._engine.state import read

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any

# .wrapping (which imports inspect) is imported where it is used: `import backends` imports this
# module for NondeterministicAlgorithmWarning, and must stay light.

#: Top-level packages a launch is made from inside; the call site is the first frame outside them.
LIBRARIES = ("cupy", "cupyx", "cupy_backends", "numpy")
HOW_TO_ALLOW = "with backends.algorithms.flags(deterministic=False):"


class NondeterministicAlgorithmWarning(UserWarning):  # public as backends.NondeterministicAlgorithmWarning
    """Warned, instead of raising ``RuntimeError``, when a CuPy operation whose result can
    vary from run to run is launched where ``algorithms.deterministic`` and
    ``algorithms.warn_only`` are both on (torch warns a plain ``UserWarning`` there).
    Python's warning filters decide how often it shows: under the default filter, once
    per call site and operation."""


def alert(operation: str, why: str, remedy: str = "") -> None:
    """Refuse ``operation`` (a CuPy name as users call it, e.g. ``"cupy.bincount(x, weights)"``)
    in a context where ``algorithms.deterministic`` is on; ``why`` says when its result varies,
    ``remedy`` (optional) how to make it deterministic instead.

    Raises:
        RuntimeError: ``algorithms.deterministic`` is on and ``algorithms.warn_only`` is off.
    """
    if not read("algorithms.deterministic"):
        return
    fix = f" {remedy}." if remedy else ""
    if not read("algorithms.warn_only"):
        raise RuntimeError(
            f"{operation} does not have a deterministic implementation ({why}), but "
            f"backends.algorithms.deterministic is True in this context.{fix} To allow it here, call it "
            f"inside `{HOW_TO_ALLOW}`; to warn instead of raise, use "
            f"backends.algorithms.flags(warn_only=True)."
        )
    # The user's line, however deep inside CuPy the launch is: the default filter then warns
    # once per call site, "always" every time, "error" raises every time.
    warnings.warn(
        f"{operation} does not have a deterministic implementation ({why}), but "
        f"backends.algorithms.deterministic is True (warn_only=True) in this context.{fix} To allow it "
        f"without this warning, call it inside `{HOW_TO_ALLOW}`.",
        NondeterministicAlgorithmWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    from .wrapping import user_frame

    # user_frame's levels are for a warn() here, one frame below alert's own call of warn()
    return user_frame(LIBRARIES)[1] - 1


def kind(array: object) -> str:
    """NumPy's dtype kind of ``array`` (``"f"`` float, ``"c"`` complex, ...), or ``""``."""
    return str(getattr(getattr(array, "dtype", None), "kind", ""))


def inexact_in_float64(array: object) -> bool:
    """Whether adding ``array``'s values into float64 totals can depend on the order: float and
    complex values, and 64-bit integers (which float64 does not hold exactly above 2**53).
    Smaller integers and bools are exact there while the totals stay below 2**53."""
    kind_ = kind(array)
    itemsize = getattr(getattr(array, "dtype", None), "itemsize", 8)
    return kind_ in ("f", "c") or (kind_ in ("i", "u") and itemsize >= 8)


def guard(owner: Any, name: str, operation: str, why: str, varies: Callable[..., bool]) -> None:
    """Wrap CuPy's ``owner.name`` (a module's kernel or function, or a class's method) so that,
    where ``algorithms.deterministic`` is on and ``varies(*args, **kwargs)`` says this call's
    result can vary, ``alert(operation, why)`` runs before it. ``varies`` is only asked inside
    such a context, so what it costs (a check of the data, a device sync) is paid only there."""

    from .wrapping import replace

    def make(launch: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if read("algorithms.deterministic") and varies(*args, **kwargs):
                alert(operation, why)
            return launch(*args, **kwargs)

        return guarded

    replace(owner, name, make)


NondeterministicAlgorithmWarning.__module__ = "backends"  # its public name (repr, pickling by reference)
