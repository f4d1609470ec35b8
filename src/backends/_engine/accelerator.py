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

Each compiled module carries the version of the interface between it and this Python code that it
was built for (its ``INTERFACE``): one built from other C sources (an editable checkout not rebuilt
since the interface changed) is not used, and the pure path runs instead, with the reason in
``python -m backends``; ``import backends`` warns only where ``BACKENDS_PURE_PYTHON`` asked for
the accelerator (``0``, ...), as it does for any other reason the accelerator is not in use then.
"""

from __future__ import annotations

import importlib
import os
import warnings

from .environment import _FALSE, _TRUE, refused, reporting
from .wording import brief

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any

VARIABLE = "BACKENDS_PURE_PYTHON"
#: The interface each compiled module must have been built for (its ``INTERFACE``, a C macro of
#: the same name in its source): bump both with any change of what the C code or this Python code
#: expects of the other (a function added, an argument changed), so that a module built before the
#: change is left unused, with a reason, instead of being called in ways it does not know.
INTERFACES = {"backends._engine._speedups": 3, "backends.sync._speedups": 2}


def _pure_python_wanted(text: str) -> bool | None:
    """``True``: the variable asks for the pure path; ``False``: for the accelerator; ``None``: unset
    (or a value that is no answer, which warns)."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    if word:
        problem = f"{VARIABLE}={brief(text)} is ignored: it takes 1/0/true/false/yes/no/on/off in any case"
        if not refused(VARIABLE, problem, raises=False):  # python -m backends lists it instead
            warnings.warn(problem, UserWarning, stacklevel=2)
    return None


def load(name: str) -> tuple[Any, str]:
    """The compiled module ``name`` (``backends.sync._speedups``), built for this code's interface
    (``INTERFACES``); or ``None`` and why it is not used. Raises ``ModuleNotFoundError`` where it is
    not installed, for the caller to say why."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        raise
    except ImportError as error:  # built, but this interpreter refuses to load it
        return None, f"the compiled accelerator cannot be loaded in this interpreter ({error})"
    built, needed = getattr(module, "INTERFACE", None), INTERFACES[name]
    if built != needed:
        where = getattr(module, "__file__", None) or name
        made = "before interfaces were numbered" if built is None else f"for interface {built!r}"
        return None, (
            f"the compiled accelerator {where} was built {made}, and this code needs interface {needed} "
            f"(it is stale: rebuild it with `pip install -e .`, or `python setup.py build_ext --inplace`)"
        )
    return module, ""


def _build_note() -> str:
    """Why the build left the accelerator out, as setup.py wrote it into the package; ``""`` if
    it did not (a source checkout never built, or an install by other means)."""
    try:
        path = os.path.join(os.path.dirname(__file__), "_build_note.txt")
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.readline(300).strip()
    except (OSError, TypeError):  # no note; or no __file__ to find it by
        return ""


def warn_if_wanted(why_not: str) -> None:
    """Warn that the accelerator is not in use, ``why_not``, where ``BACKENDS_PURE_PYTHON`` asked for it
    (but in ``python -m backends``, whose engine line says it)."""
    if wanted is False and not reporting():
        shown = brief(os.environ.get(VARIABLE, ""))
        warnings.warn(
            f"{VARIABLE}={shown} asks for the compiled accelerator, but {why_not}: the pure-Python engine "
            f"runs instead (python -m backends says which engine runs, and why)",
            UserWarning,
            stacklevel=3,
        )


speedups: Any = None
#: why the pure path is in use (``""`` when the accelerator is)
reason = ""
#: what BACKENDS_PURE_PYTHON asks for (see _pure_python_wanted)
wanted = _pure_python_wanted(os.environ.get(VARIABLE, ""))
if wanted:
    reason = f"{VARIABLE} is set"
else:
    try:
        speedups, reason = load(f"{__package__}._speedups")
    except ModuleNotFoundError:  # not built: no C compiler at install, or a source checkout never built
        note = _build_note()
        reason = (
            f"the accelerator was not built at install: {note}" if note else "the compiled accelerator is not installed"
        )
    if reason:
        warn_if_wanted(reason)

#: whether the compiled accelerator is in use
ACCELERATED = speedups is not None


def describe() -> str:
    """One line for ``python -m backends``: which path is in use, and why."""
    if ACCELERATED:
        return "compiled accelerator (C, backends._engine._speedups)"
    return f"pure Python ({reason})"
