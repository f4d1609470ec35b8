"""Which path the engine's hot operations take: the compiled accelerator or pure Python.

``backends/_engine/_speedups.c`` does the common case of a flag read and of a scope's entry
and exit in C, and hands every other case (errors, refused exits, exits while an exception is
in flight) to the pure-Python code in ``state``, ``scope`` and ``namespace``, which defines
the behaviour: the pure path is the reference, as ``_pydecimal`` is for ``_decimal``. The
accelerator is built by ``pip install`` where a C compiler is available (``setup.py``);
elsewhere the package is pure Python and behaves the same, and the build leaves the reason in
``_build_note.txt`` beside this file, which ``describe()`` reports.

``BACKENDS_PURE_PYTHON=1`` (or ``true``/``yes``/``on``, in any case) selects the pure path even
where the accelerator is installed; ``0``/``false``/``no``/``off`` or unset, the accelerator when
there is one. Read once, at ``import backends``. Any other value warns and counts as unset
(``python -m backends`` lists it instead).
"""

from __future__ import annotations

import importlib
import os
import warnings

from .environment import _FALSE, _TRUE, refused
from .wording import brief

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any

VARIABLE = "BACKENDS_PURE_PYTHON"


def _pure_python_wanted(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word and word not in _FALSE:
        problem = f"{VARIABLE}={brief(text)} is ignored: it takes 1/0/true/false/yes/no/on/off in any case"
        if not refused(VARIABLE, problem, raises=False):  # python -m backends lists it instead
            warnings.warn(problem, UserWarning, stacklevel=2)
    return False


def _build_note() -> str:
    """Why the build left the accelerator out, as setup.py wrote it into the package; ``""`` if
    it did not (a source checkout never built, or an install by other means)."""
    try:
        path = os.path.join(os.path.dirname(__file__), "_build_note.txt")
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.readline(300).strip()
    except (OSError, TypeError):  # no note; or no __file__ to find it by
        return ""


speedups: Any = None
#: why the pure path is in use (``""`` when the accelerator is)
reason = ""
if _pure_python_wanted(os.environ.get(VARIABLE, "")):
    reason = f"{VARIABLE} is set"
else:
    try:
        # import_module, not `from . import`: that turns a missing module into a plain ImportError
        speedups = importlib.import_module(f"{__package__}._speedups")
    except ModuleNotFoundError:  # not built: no C compiler at install, or a source checkout never built
        note = _build_note()
        reason = (
            f"the accelerator was not built at install: {note}" if note else "the compiled accelerator is not installed"
        )
    except ImportError as error:  # built, but this interpreter refuses to load it
        reason = f"the compiled accelerator cannot be loaded in this interpreter ({error})"

#: whether the compiled accelerator is in use
ACCELERATED = speedups is not None


def describe() -> str:
    """One line for ``python -m backends``: which path is in use, and why."""
    if ACCELERATED:
        return "compiled accelerator (C, backends._engine._speedups)"
    return f"pure Python ({reason})"
