"""Answers kept until what they depend on changes.

An availability answer is expensive to compute (``importlib.util.find_spec`` walks ``sys.path``,
threadpoolctl walks every loaded library) and almost never changes, yet code asks on every request
or every call. Each ``Remembered`` keeps its answer with a *token*: a cheap reading of what the
answer depends on (the ``cupy`` entry of ``sys.modules``, the number of imported modules). Asking
again costs reading the token and comparing it with the kept one; the answer is computed again only
when they differ, and in a child process made by ``os.fork()`` (see ``forget_all``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Generic, TypeVar

    T = TypeVar("T")
else:  # Generic[T] for the type checkers only: at run time a plain base

    class Generic:
        def __class_getitem__(cls, item: object) -> type:
            return cls

    T = None

_everything: list[Remembered[object]] = []


class Remembered(Generic[T]):
    """``compute()``'s answer, kept while ``token()`` returns what it returned right after computing."""

    __slots__ = ("_compute", "_kept", "_token")

    def __init__(self, compute: Callable[[], T], token: Callable[[], object]) -> None:
        self._compute = compute
        self._token = token
        # (token, answer) in one tuple, replaced whole: a reader in another thread sees either the
        # old pair or the new one, never a token of one answer with another answer.
        self._kept: tuple[object, T] | None = None
        _everything.append(self)  # type: ignore[arg-type]  # forget_all() only clears it

    def __call__(self) -> T:
        kept = self._kept
        # ``==``: a module token compares by identity (modules define no equality), a count by value.
        if kept is not None and kept[0] == self._token():
            return kept[1]
        answer = self._compute()
        # The token after computing: computing may itself change it (importing CuPy, or NumPy), and
        # the answer is the one for that new state. Two threads racing here compute the same answer.
        self._kept = (self._token(), answer)
        return answer

    def forget(self) -> None:
        """Compute the answer again on the next call."""
        self._kept = None


def forget_all() -> None:
    """Forget every kept answer (the next query of each computes it again)."""
    for remembered in _everything:
        remembered.forget()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork()
    # A forked child starts from its parent's answers, but not necessarily from its parent's
    # situation (CUDA initialised in the parent cannot be used in the child, a library may be
    # loaded differently): the child's first query of each kind asks again.
    os.register_at_fork(after_in_child=forget_all)
