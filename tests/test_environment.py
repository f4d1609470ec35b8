"""CuPy's own ``CUPY_TF32`` at import (contract section 7), parsed exactly as CuPy parses it.

CuPy reads it as ``int(os.getenv('CUPY_TF32', '0')) > 0`` (``cupy/_core/_routines_linalg.pyx``,
``get_compute_type``), lazily at the first float32 GEMM: Python's ``int()`` takes
surrounding whitespace, a sign, underscores between digits and any Unicode decimal digits,
and rejects everything else, the empty string included. A value CuPy would reject must not
break ``import backends`` (``import cupy`` does not break either): it warns once and is
ignored. The parse is checked in-process against ``environment.read``; what ``import
backends`` does is checked in fresh interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from backends._engine import environment

TF32 = "cuda.matmul.allow_tf32"

ACCEPTED = ["0", "1", "2", "-1", " 1 ", "+1", "1_0", "00", "\t0\n", "\u0661", "\uff11", "-0"]
REJECTED = ["true", "yes", "on", "", " ", "1.0", "0x1", "1e3", "1__0", "_1", "one", "1 1", "9" * 5000]


def cupy_parse(text: str) -> bool:
    """CuPy's own expression, with the variable set to ``text``."""
    return int(text) > 0


def read(environ: dict[str, str]) -> tuple[dict[str, object], list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = environment.read(environ)
    return found, caught


@pytest.mark.parametrize("text", ACCEPTED, ids=repr)
def test_cupy_tf32_is_parsed_as_cupy_parses_it(text: str) -> None:
    found, caught = read({"CUPY_TF32": text})
    assert found == {TF32: cupy_parse(text)}
    assert caught == []


@pytest.mark.parametrize("text", REJECTED, ids=lambda text: repr(text[:12]))
def test_a_cupy_tf32_that_cupy_rejects_warns_and_is_ignored(text: str) -> None:
    with pytest.raises(ValueError):
        cupy_parse(text)  # CuPy's own parse fails: its first float32 GEMM would raise
    found, caught = read({"CUPY_TF32": text})
    assert found == {}
    [warning] = caught
    assert warning.category is UserWarning
    message = str(warning.message)
    assert "CUPY_TF32" in message and "ignored" in message and "CuPy" in message
    assert repr(text[:20])[:-1] in message  # the value, cut short when it is long
    assert len(message) < 400


def test_backends_variable_still_wins_over_an_unparsable_cupy_tf32() -> None:
    found, caught = read({"CUPY_TF32": "true", "BACKENDS_CUDA_MATMUL_ALLOW_TF32": "1"})
    assert found == {TF32: True}
    assert len(caught) == 1  # CuPy itself still fails at its first float32 GEMM: say so


def test_unset_cupy_tf32_reads_nothing() -> None:
    assert read({}) == ({}, [])


def run_import(**variables: str) -> dict[str, object]:
    """``import backends`` in a fresh interpreter with ``variables`` set; what it reports."""
    code = textwrap.dedent(
        """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import backends
        row = {r.name: [r.value, r.source] for r in backends.describe()}["cuda.matmul.allow_tf32"]
        print(json.dumps({"row": row, "warnings": [[w.category.__name__, str(w.message)] for w in caught]}))
        """
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("BACKENDS_", "CUPY_"))}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**environ, **variables}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_import_backends_survives_cupy_tf32_true_and_warns_once() -> None:
    out = run_import(CUPY_TF32="true")
    assert out["row"] == [False, "default"]
    [(category, message)] = out["warnings"]  # type: ignore[misc]
    assert category == "UserWarning" and "CUPY_TF32='true'" in message


def test_import_backends_with_a_valid_cupy_tf32_is_silent() -> None:
    out = run_import(CUPY_TF32=" +1 ")
    assert out == {"row": [True, "environment"], "warnings": []}
