"""Built-in defaults from ``BACKENDS_<DOTTED_NAME>`` variables (and CuPy's ``CUPY_TF32``)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping

from .errors import closest
from .table import BY_NAME, FLAGS, Flag, Value
from .wording import brief

_PREFIX = "BACKENDS_"
#: How alike (difflib ratio, on the upper-cased part after ``BACKENDS_``) an ignored name must be
#: to a flag's variable to be called a typo of it: CUDNN_DETERMINSTIC is (0.97), VERBOSE is near
#: nothing (0.30), DETERMINISTIC is not near CUDNN_DETERMINISTIC (0.81).
NEAR = 0.85

#: Variables of the engine itself, not flags (``accelerator.py``): never "ignored".
ENGINE_VARIABLES = ("BACKENDS_PURE_PYTHON",)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _running_the_report() -> bool:
    """Whether this import is ``python -m backends`` finding its module: Python sets
    ``sys.argv[0]`` to ``"-m"`` while it does, and the module's name is the word of
    ``sys.orig_argv`` just before the arguments that follow it (``-m backends``, ``-Im backends``,
    ``-mbackends``)."""
    argv, orig = sys.argv, sys.orig_argv
    if not argv or argv[0] != "-m" or len(orig) <= len(argv):
        return False
    word = orig[len(orig) - len(argv)]
    return word == "backends" or (word[:1] == "-" and word[1:2] != "-" and word[1:].partition("m")[2] == "backends")


_REPORTING = _running_the_report()
#: ``(variable, what is wrong with its value, whether import backends raises for it)`` for each
#: variable whose value does not parse, in ``python -m backends`` only: there the import neither
#: raises nor warns for it (the report lists it, and goes on without it). Empty elsewhere.
REFUSED: list[tuple[str, str, bool]] = []


def reporting() -> bool:
    """Whether this import is ``python -m backends``'s, whose report says what a warning would."""
    return _REPORTING


def refused(variable: str, problem: str, raises: bool) -> bool:
    """In ``python -m backends``: record ``variable`` in ``REFUSED`` and return ``True``, so that
    the caller neither raises nor warns. Elsewhere ``False``: the caller does."""
    if _REPORTING:
        REFUSED.append((variable, problem, raises))
    return _REPORTING


def parse(flag: Flag, variable: str, text: str) -> Value:
    """Parse one variable's text for ``flag``; ``ValueError`` names the variable."""
    word = text.strip()
    try:
        if flag.type is bool:
            if word.lower() in _TRUE:
                return True
            if word.lower() in _FALSE:
                return False
            raise ValueError(f"{flag.name} takes 1/0/true/false/yes/no/on/off in any case")
        if flag.type is int:
            try:
                number = int(word, 10)
            except ValueError:
                raise ValueError(f"{flag.name} must be {flag.allowed}") from None
            return flag.check(number)
        return flag.check(word)
    except (TypeError, ValueError) as error:
        raise ValueError(f"environment variable {variable}={brief(text)} does not parse: {error}") from None


def _cupy_tf32(text: str) -> bool | None:
    """``CUPY_TF32`` as CuPy reads it (``int(os.getenv("CUPY_TF32", "0")) > 0`` in
    ``cupy/_core/_routines_linalg.pyx``), or ``None`` for a value that parse rejects.

    CuPy parses it lazily, at the first float32 GEMM, so ``import cupy`` succeeds with any
    value: ``import backends`` must too. A rejected value warns (``UserWarning``) and is
    ignored, as the variable is only a default for ``cuda.matmul.allow_tf32``.
    """
    try:
        return int(text) > 0
    except ValueError:  # not an integer, or more digits than int() takes
        problem = (
            f"CUPY_TF32={brief(text)} is ignored: CuPy reads it as int(CUPY_TF32) > 0, which fails for this "
            "value (at CuPy's first float32 matrix product); set it to 0 or 1, or set "
            "BACKENDS_CUDA_MATMUL_ALLOW_TF32"
        )
        if not refused("CUPY_TF32", problem, raises=False):
            warnings.warn(problem, UserWarning, stacklevel=_outside_backends())
        return None


def _outside_backends() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in our caller point at the first line
    outside ``backends``: the user's ``import backends`` (or whatever led here). ``warnings``
    counts our caller as level 1 and skips importlib's bootstrap frames in between, so they are
    skipped here too."""

    def internal(frame: object) -> bool:  # as warnings' _is_internal_frame
        filename: str = frame.f_code.co_filename  # type: ignore[attr-defined]
        return "importlib" in filename and "_bootstrap" in filename

    frame, level = sys._getframe(1), 1  # our caller: level 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "backends":
        frame = frame.f_back
        while frame.f_back is not None and internal(frame):
            frame = frame.f_back
        level += 1
    return level


def read(environ: Mapping[str, str]) -> dict[str, Value]:
    """The flags that ``environ`` sets, by dotted name. An empty ``BACKENDS_*`` variable
    counts as unset; ``CUPY_TF32`` counts as set whenever it is present, as for CuPy.
    A ``BACKENDS_*`` name that is no flag's variable is ignored (see ``ignored()``): the
    environment never breaks ``import backends`` for that reason.

    Raises ``ValueError`` naming the variable for a flag variable whose value does not
    parse; warns (``UserWarning``) for a ``CUPY_TF32`` that CuPy's parse rejects, which is
    then ignored. ``BACKENDS_CUDA_MATMUL_ALLOW_TF32`` wins over ``CUPY_TF32``. In
    ``python -m backends`` neither: such a variable goes in ``REFUSED`` and is left out.
    """
    found: dict[str, Value] = {}
    cupy_tf32 = environ.get("CUPY_TF32")
    if cupy_tf32 is not None and (allow_tf32 := _cupy_tf32(cupy_tf32)) is not None:
        found["cuda.matmul.allow_tf32"] = allow_tf32
    for flag in FLAGS:
        text = environ.get(flag.env_var, "")
        if text.strip():
            try:
                found[flag.name] = parse(flag, flag.env_var, text)
            except ValueError as error:
                if not refused(flag.env_var, str(error), raises=True):
                    raise
    return found


def variable(name: str, environ: Mapping[str, str]) -> str:
    """The variable that set flag ``name``'s default (for reports): the flag's own, or
    ``CUPY_TF32`` for ``cuda.matmul.allow_tf32`` when its own is unset, as ``read()`` decides."""
    own = BY_NAME[name].env_var
    if name == "cuda.matmul.allow_tf32" and not environ.get(own, "").strip():
        return "CUPY_TF32"
    return own


def ignored(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``(name, the flag variable it is a near miss of, or None)`` for each name in ``environ``
    that starts with ``BACKENDS_`` (in any case) and is no flag's variable, sorted by name.
    ``read()`` ignores them all; ``python -m backends`` lists them."""
    by_suffix = {flag.env_var[len(_PREFIX):]: flag.env_var for flag in FLAGS}
    variables = {*by_suffix.values(), *ENGINE_VARIABLES}
    found = []
    for name in sorted(n for n in environ if n.upper().startswith(_PREFIX) and n not in variables):
        near = closest(name[len(_PREFIX):].upper(), by_suffix, cutoff=NEAR)
        found.append((name, None if near is None else by_suffix[near]))
    return found
