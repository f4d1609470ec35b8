"""One idiom for every target: replace a function of CuPy's (or the frontend's) with a
wrapper of it, exactly once.

A wrapper keeps what it wraps as ``__backends_wrapped__``. Installing a target again
(the module re-imported, or reached under a second name) therefore wraps the original
function, never a wrapper of ours, and a test or a user can always reach the original.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
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
