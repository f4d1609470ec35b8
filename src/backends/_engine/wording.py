"""How a value is written in an error message: ``brief()`` and ``show()``.

At the bottom of the engine (it imports none of it): the table's value checks and the errors'
hints both write values, and neither may import the other's module to do it.
"""

from __future__ import annotations

import reprlib

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


def brief(value: object) -> str:
    """``repr(value)`` cut short (60 characters), never raising (hostile ``__repr__``)."""
    try:
        return _short.repr(value)
    except Exception:
        return f"<{type(value).__qualname__} object>"


def show(value: object) -> str:
    """``repr(value)`` with its type, short, and never raising (hostile ``__repr__``)."""
    return f"{brief(value)} ({type(value).__qualname__})"
