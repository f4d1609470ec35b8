"""Built-in defaults from ``BACKENDS_<DOTTED_NAME>`` variables (and CuPy's ``CUPY_TF32``)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from .table import FLAGS, Flag, Value

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
        raise ValueError(f"environment variable {variable}={text!r} does not parse: {error}") from None


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
        shown = text if len(text) <= 40 else text[:40] + "..."
        warnings.warn(
            f"CUPY_TF32={shown!r} is ignored: CuPy reads it as int(CUPY_TF32) > 0, which fails for this "
            "value (at CuPy's first float32 matrix product); set it to 0 or 1, or set "
            "BACKENDS_CUDA_MATMUL_ALLOW_TF32",
            UserWarning,
            stacklevel=3,  # where backends reads the environment at import
        )
        return None


def read(environ: Mapping[str, str]) -> dict[str, Value]:
    """The flags that ``environ`` sets, by dotted name. An empty ``BACKENDS_*`` variable
    counts as unset; ``CUPY_TF32`` counts as set whenever it is present, as for CuPy.

    Raises ``ValueError`` naming the variable for a ``BACKENDS_*`` value that does not
    parse or a misspelt flag variable; warns (``UserWarning``) for a ``CUPY_TF32`` that
    CuPy's parse rejects, which is then ignored. ``BACKENDS_CUDA_MATMUL_ALLOW_TF32`` wins
    over ``CUPY_TF32``.
    """
    found: dict[str, Value] = {}
    _refuse_misspelt(environ)
    cupy_tf32 = environ.get("CUPY_TF32")
    if cupy_tf32 is not None and (allow_tf32 := _cupy_tf32(cupy_tf32)) is not None:
        found["cuda.matmul.allow_tf32"] = allow_tf32
    for flag in FLAGS:
        text = environ.get(flag.env_var, "")
        if text.strip():
            found[flag.name] = parse(flag, flag.env_var, text)
    return found


def _refuse_misspelt(environ: Mapping[str, str]) -> None:
    """A ``BACKENDS_`` variable close to a flag's variable is a typo that would silently
    change nothing: refuse it. Unrelated ``BACKENDS_*`` variables are left alone."""
    known = {flag.env_var for flag in FLAGS}
    unknown = [name for name in environ if name.startswith("BACKENDS_") and name not in known]
    if not unknown:
        return
    from .errors import closest

    for name in unknown:
        best = closest(name, known)
        if best is not None:
            raise ValueError(f"environment variable {name} is not a backends flag; did you mean {best}?")
