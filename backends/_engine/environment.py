"""Built-in defaults from ``BACKENDS_<DOTTED_NAME>`` variables (and CuPy's ``CUPY_TF32``)."""

from __future__ import annotations

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


def _cupy_tf32(text: str) -> bool:
    # CuPy reads it as `int(os.getenv("CUPY_TF32", "0")) > 0` (cupy/_core/_routines_linalg.pyx).
    try:
        return int(text.strip(), 10) > 0
    except ValueError:
        raise ValueError(
            f"environment variable CUPY_TF32={text!r} does not parse: CuPy takes an integer (0 or 1)"
        ) from None


def read(environ: Mapping[str, str]) -> dict[str, Value]:
    """The flags that ``environ`` sets, by dotted name. An empty variable counts as unset."""
    found: dict[str, Value] = {}
    _refuse_misspelt(environ)
    cupy_tf32 = environ.get("CUPY_TF32", "")
    if cupy_tf32.strip():
        found["cuda.matmul.allow_tf32"] = _cupy_tf32(cupy_tf32)
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
