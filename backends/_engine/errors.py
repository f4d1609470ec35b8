"""Error types and the wording shared by every error message."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


def show(value: object) -> str:
    """``repr(value)`` with its type, short, and never raising (hostile ``__repr__``)."""
    try:
        text = _short.repr(value)
    except Exception:
        text = f"<{type(value).__qualname__} object>"
    return f"{text} ({type(value).__qualname__})"


def closest(name: str, candidates: Iterable[str]) -> str | None:
    import difflib  # only on the error path: keeps `import backends` fast

    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    best = closest(name, candidates)
    return f"; did you mean {best!r}?" if best else ""


class UnknownFlagError(KeyError, AttributeError):
    """An unknown flag name: a ``KeyError`` for dotted names and an ``AttributeError``
    for attribute access, so either ``except`` catches it. The message names the
    closest valid flag."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def unknown_name(name: object, candidates: Iterable[str], what: str = "flag") -> UnknownFlagError:
    if not issubclass(type(name), str):
        return UnknownFlagError(f"flag names are dotted strings such as 'cudnn.deterministic', got {show(name)}")
    name = str.__str__(name)  # a plain str: a subclass's __eq__/__repr__ never runs
    return UnknownFlagError(f"unknown {what} {name!r}{did_you_mean(name, candidates)}")
