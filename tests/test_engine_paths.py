"""The two paths of the engine (contract: one behaviour): the compiled accelerator where it is
built, and the pure-Python reference, selected by ``BACKENDS_PURE_PYTHON=1``. CI runs the whole
suite once on each; these tests check the selection itself and what the accelerator touches."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import backends
from backends._engine import accelerator, environment


def engine_line(**environ: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    done = subprocess.run(
        [sys.executable, "-c", "from backends._engine import accelerator as a; print(a.ACCELERATED, a.describe())"],
        env={**env, **environ}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip() + done.stderr.strip()


def test_backends_pure_python_selects_the_reference_path_and_is_no_ignored_variable() -> None:
    assert engine_line(BACKENDS_PURE_PYTHON="1") == "False pure Python (BACKENDS_PURE_PYTHON is set)"
    assert engine_line(BACKENDS_PURE_PYTHON="TRUE").startswith("False ")
    assert environment.ignored({"BACKENDS_PURE_PYTHON": "1"}) == []


def test_a_value_it_does_not_take_warns_and_counts_as_unset() -> None:
    line = engine_line(BACKENDS_PURE_PYTHON="maybe")
    assert "BACKENDS_PURE_PYTHON='maybe' is ignored: it takes 1/0/true/false/yes/no/on/off" in line
    assert line.split()[0] == engine_line().split()[0]  # the path taken when it is unset


def test_python_m_backends_says_which_path_is_in_use() -> None:
    done = subprocess.run([sys.executable, "-m", "backends"], capture_output=True, text=True)
    assert done.stdout.splitlines()[0] == f"backends {backends.__version__}, engine: {accelerator.describe()}"


needs_accelerator = pytest.mark.skipif(not accelerator.ACCELERATED, reason=f"pure Python here: {accelerator.reason}")


@needs_accelerator
def test_the_accelerated_attribute_is_the_reference_property_for_everything_but_reads() -> None:
    descriptor = vars(type(backends.cudnn))["deterministic"]
    reference = type(backends.cudnn).deterministic  # class access: the property itself
    assert isinstance(reference, property)
    assert descriptor.property is reference and descriptor.__doc__ == reference.__doc__
    with pytest.raises(AttributeError):
        del backends.cudnn.deterministic
    with pytest.raises(TypeError, match=r"cudnn\.deterministic must be a bool"):
        backends.cudnn.deterministic = 1
    assert backends.cudnn.deterministic is False


@needs_accelerator
def test_the_compiled_exit_hands_every_other_case_to_the_reference() -> None:
    outer, inner = backends.cudnn.flags(benchmark=True), backends.cudnn.flags(deterministic=True)
    with pytest.raises(RuntimeError, match="innermost scope active in this context is"), outer:
        inner.__enter__()
    inner.__exit__(None, None, None)
    with pytest.raises(TypeError):
        outer.__exit__(None, None, None, None)  # as the pure path's signature refuses
    outer.__exit__(exc_type=None)  # keywords: the pure path's
    assert backends.cudnn.benchmark is False and backends.cudnn.deterministic is False
