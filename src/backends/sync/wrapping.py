"""The idioms every target shares: replace a function of CuPy's (or the frontend's) with a
wrapper of it, exactly once; and say once per process that a flag cannot be honoured.

A wrapper keeps what it wraps as ``__backends_wrapped__``. Installing a target again
(the module re-imported, or reached under a second name) therefore wraps the original
function, never a wrapper of ours, and a test or a user can always reach the original.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

Make = Callable[[Any], Callable[..., Any]]


def original(function: Any) -> Any:
    """``function`` itself, or what it wraps if it is a wrapper of ours."""
    return getattr(function, "__backends_wrapped__", function)


def mark(wrapper: Callable[..., Any], wrapped: Any) -> Callable[..., Any]:
    """Give ``wrapper`` the name, docstring and ``__wrapped__`` of ``wrapped`` (as
    ``functools.wraps`` does) and record ``wrapped`` as its original; return it."""
    functools.update_wrapper(wrapper, wrapped)
    wrapper.__backends_wrapped__ = wrapped  # type: ignore[attr-defined]
    return wrapper


def replace(owner: Any, name: str, make: Make) -> None:
    """Set ``owner.name`` to ``make(original)``, marked (see ``mark``). ``owner`` is a module
    or a class; for a class the function is read as the class holds it (not a bound
    method). Nothing happens if ``owner`` has no such name."""
    current = inspect.getattr_static(owner, name, None)
    if current is not None:
        wrapped = original(current)
        setattr(owner, name, mark(make(wrapped), wrapped))


#: the keys of the warnings already given (see ``warn_once``)
warned: set[str] = set()


def warn_once(key: str, message: str, library: tuple[str, ...]) -> None:
    """Warn ``message`` (``UserWarning``) the first time ``key`` is seen in this process: a
    flag that cannot be honoured where it is used says so once, not at every launch.

    The warning points at the user's line: the first caller outside ``backends`` and the
    wrapped ``library`` (top-level package names, e.g. ``("cupy", "cupyx")``), however
    deep inside them the launch was made."""
    if key in warned:
        return
    warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=user_frame(library)[1])


def user_frame(library: tuple[str, ...]) -> tuple[FrameType, int]:
    """The frame of the user's line that led here (the first caller of our caller outside
    ``backends`` and ``library``, top-level package names), and the ``stacklevel`` that makes
    a ``warnings.warn`` in our caller point at it."""
    inside = ("backends", *library)
    frame, level = sys._getframe(2), 2  # our caller's caller, which is level 2 for our caller
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in inside:
        frame, level = frame.f_back, level + 1
    return frame, level
