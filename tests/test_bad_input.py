"""Bad input gets a clear error and nothing changes; environment variables at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import backends

from ._helpers import state

cudnn = backends.cudnn
matmul = backends.cuda.matmul
cache = backends.cuda.cufft_plan_cache

# What each kind of flag says it allows (a fragment of every message about it).
BOOL = "bool"
INT = "int"
NON_NEGATIVE = ">= 0"
AT_LEAST_MINUS_ONE = ">= -1"  # the plan cache size: -1 is CuPy's "unlimited"
LINALG = ("'default'", "'cusolver'", "'magma'")
PRECISION = ("'tf32'", "'ieee'")


def full_dict() -> dict[str, object]:
    return backends.snapshot().to_dict()


def assert_nothing_changes(
    action: Callable[[], object], error: type[BaseException], fragments: tuple[str, ...]
) -> BaseException:
    """Run ``action``; it must raise ``error`` whose message holds every fragment, and
    leave every flag's value and source, as ``backends.describe()`` reports them, as it was."""
    before = state()
    with pytest.raises(error) as info:
        action()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert state() == before, "a refused input changed the flags"
    return info.value


@contextmanager
def some_state(where: str) -> Iterator[None]:
    """Flags that are not all built-in defaults, so "nothing changed" means something."""
    backends.set_defaults({"cudnn.benchmark": True, "cuda.cufft_plan_cache.max_size": 5})
    if where == "in scope":
        with backends.flags({"cudnn.deterministic": True, "cudnn.benchmark_limit": 4}):
            yield
    else:
        yield


def _full_with(**changes: object) -> Callable[[], object]:
    def action() -> object:
        data = full_dict()
        for key, value in changes.items():
            data[key.replace("__", ".")] = value
        return backends.Snapshot.from_dict(data)

    return action


def _full_without(name: str) -> Callable[[], object]:
    def action() -> object:
        data = full_dict()
        del data[name]
        return backends.Snapshot.from_dict(data)

    return action


def _full_plus(name: str, value: object) -> Callable[[], object]:
    def action() -> object:
        return backends.Snapshot.from_dict({**full_dict(), name: value})

    return action


class RaisingIndex:
    """Looks like an exact integer (it has ``__index__``), but converting it raises."""

    def __index__(self) -> int:
        raise RuntimeError("no integer here")


class StrIndex:
    """An ``__index__`` that returns a str: Python refuses it."""

    def __index__(self) -> object:
        return "3"


def _decorate(scope_factory: Callable[[], object], target: object) -> Callable[[], object]:
    return lambda: scope_factory()(target)  # type: ignore[operator]


CASES = [
    # -- attribute assignment: wrong types and values ---------------------------------------
    pytest.param(
        lambda: setattr(cudnn, "deterministic", 1), TypeError, ("cudnn.deterministic", "1", BOOL), id="bool-flag=1"
    ),
    pytest.param(
        lambda: setattr(cudnn, "deterministic", None),
        TypeError,
        ("cudnn.deterministic", "None", BOOL),
        id="bool-flag=None",
    ),
    pytest.param(
        lambda: setattr(cudnn, "enabled", "yes"), TypeError, ("cudnn.enabled", "'yes'", BOOL), id="bool-flag='yes'"
    ),
    pytest.param(
        lambda: setattr(matmul, "allow_tf32", 0),
        TypeError,
        ("cuda.matmul.allow_tf32", "0", BOOL),
        id="matmul-bool-flag=0",
    ),
    pytest.param(
        lambda: setattr(matmul, "allow_fp16_reduced_precision_reduction", 1.0),
        TypeError,
        ("cuda.matmul.allow_fp16_reduced_precision_reduction", "1.0", BOOL),
        id="bool-flag=1.0",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", True),
        TypeError,
        ("cudnn.benchmark_limit", "True", INT),
        id="int-flag=True",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", 2.5),
        TypeError,
        ("cudnn.benchmark_limit", "2.5", INT),
        id="int-flag=2.5",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", "10"),
        TypeError,
        ("cudnn.benchmark_limit", "'10'", INT),
        id="int-flag='10'",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", np.float64(2.0)),
        TypeError,
        ("cudnn.benchmark_limit", "2.0", "float64", INT),
        id="int-flag=numpy.float64",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", np.bool_(True)),
        TypeError,
        ("cudnn.benchmark_limit", "True", "bool", INT),
        id="int-flag=numpy.bool_",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", RaisingIndex()),
        TypeError,
        ("cudnn.benchmark_limit", "RaisingIndex", "whose __index__ raised RuntimeError", INT),
        id="int-flag=raising-__index__",
    ),
    pytest.param(
        lambda: setattr(cache, "max_size", StrIndex()),
        TypeError,
        ("cuda.cufft_plan_cache.max_size", "StrIndex", INT),
        id="int-flag=__index__-returns-str",
    ),
    pytest.param(
        lambda: setattr(cache, "max_size", np.uint64(2**63)),
        ValueError,
        ("cuda.cufft_plan_cache.max_size", "9223372036854775808", "<= "),
        id="int-flag=numpy.uint64-too-big",
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmark_limit", -1),
        ValueError,
        ("cudnn.benchmark_limit", "-1", NON_NEGATIVE),
        id="int-flag=-1",
    ),
    pytest.param(
        lambda: setattr(cache, "max_size", -3),
        ValueError,
        ("cuda.cufft_plan_cache.max_size", "-3", AT_LEAST_MINUS_ONE),
        id="plan-cache-max-size=-3",
    ),
    pytest.param(
        lambda: setattr(cache, "max_size", None),
        TypeError,
        ("cuda.cufft_plan_cache.max_size", "None", INT),
        id="plan-cache-max-size=None",
    ),
    pytest.param(
        lambda: setattr(backends.cuda, "preferred_linalg_library", "MAGMA"),
        ValueError,
        ("cuda.preferred_linalg_library", "'MAGMA'", *LINALG),
        id="string-flag-attr='MAGMA'",
    ),
    pytest.param(
        lambda: backends.cuda.preferred_linalg_library("MAGMA"),
        ValueError,
        ("cuda.preferred_linalg_library", "'MAGMA'", *LINALG),
        id="string-flag-call('MAGMA')",
    ),
    pytest.param(
        lambda: backends.cuda.preferred_linalg_library(1),
        TypeError,
        ("cuda.preferred_linalg_library", "1", *LINALG),
        id="string-flag-call(1)",
    ),
    # -- scope builders: wrong values and unknown keywords --------------------------------------
    pytest.param(
        lambda: cudnn.flags(deterministic=1),
        TypeError,
        ("cudnn.deterministic", "1", BOOL),
        id="cudnn.flags(deterministic=1)",
    ),
    pytest.param(
        lambda: cudnn.flags(benchmark=True, benchmark_limit=-1),
        ValueError,
        ("cudnn.benchmark_limit", "-1", NON_NEGATIVE),
        id="cudnn.flags(benchmark_limit=-1)",
    ),
    pytest.param(
        lambda: cudnn.flags(benchmark_limit=RaisingIndex()),
        TypeError,
        ("cudnn.benchmark_limit", "whose __index__ raised RuntimeError"),
        id="cudnn.flags(benchmark_limit=raising-__index__)",
    ),
    pytest.param(
        lambda: cache.flags(max_size=np.float32(4)),
        TypeError,
        ("cuda.cufft_plan_cache.max_size", "4.0", INT),
        id="cufft_plan_cache.flags(max_size=numpy.float32)",
    ),
    pytest.param(
        lambda: matmul.flags(allow_tf32="yes"),
        TypeError,
        ("cuda.matmul.allow_tf32", "'yes'", BOOL),
        id="matmul.flags(allow_tf32='yes')",
    ),
    pytest.param(lambda: matmul.tf32(1), TypeError, ("allow_tf32", "1", BOOL), id="matmul.tf32(1)"),
    pytest.param(
        lambda: cudnn.tf32(None),
        TypeError,
        ("allow_tf32", "None", BOOL),
        id="cudnn.tf32(None)",
    ),
    pytest.param(
        lambda: cudnn.flags(determinstic=True),
        TypeError,
        ("'determinstic'", "did you mean", "deterministic"),
        id="cudnn.flags(typo)",
    ),
    pytest.param(
        lambda: matmul.flags(allow_tf33=True),
        TypeError,
        ("'allow_tf33'", "did you mean", "allow_tf32"),
        id="matmul.flags(typo)",
    ),
    pytest.param(
        lambda: backends.flags({"cudnn.determinstic": True}),
        KeyError,
        ("'cudnn.determinstic'", "did you mean", "cudnn.deterministic"),
        id="flags({typo})",
    ),
    pytest.param(
        lambda: backends.flags({"cudnn.deterministic": None}),
        TypeError,
        ("cudnn.deterministic", "None", BOOL),
        id="flags({name: None})",
    ),
    pytest.param(
        lambda: backends.flags({"cudnn.benchmark": True, "cuda.preferred_linalg_library": "MAGMA"}),
        ValueError,
        ("cuda.preferred_linalg_library", "'MAGMA'", *LINALG),
        id="flags({good, 'MAGMA'})",
    ),
    pytest.param(
        lambda: backends.flags({"cudnn.benchmark_limit": -5}),
        ValueError,
        ("cudnn.benchmark_limit", "-5", NON_NEGATIVE),
        id="flags({int: -5})",
    ),
    # -- attribute access and assignment of unknown names -------------------------------------
    pytest.param(
        lambda: cudnn.benchmak, AttributeError, ("'benchmak'", "did you mean", "cudnn.benchmark"), id="read-typo"
    ),
    pytest.param(
        lambda: setattr(cudnn, "benchmak", True),
        AttributeError,
        ("'benchmak'", "did you mean", "cudnn.benchmark"),
        id="assign-typo",
    ),
    pytest.param(
        lambda: setattr(matmul, "allow_tf_32", True),
        AttributeError,
        ("'allow_tf_32'", "did you mean", "cuda.matmul.allow_tf32"),
        id="assign-matmul-typo",
    ),
    # -- Snapshot.from_dict -----------------------------------------------------------------------
    pytest.param(
        _full_plus("cudnn.determinism", True),
        KeyError,
        ("'cudnn.determinism'", "cudnn.deterministic"),
        id="from_dict-unknown-name",
    ),
    pytest.param(
        _full_without("cudnn.benchmark_limit"),
        KeyError,
        ("cudnn.benchmark_limit", "missing"),
        id="from_dict-missing-name",
    ),
    pytest.param(
        _full_with(cudnn__enabled=None), TypeError, ("cudnn.enabled", "None", BOOL), id="from_dict-None-value"
    ),
    pytest.param(
        _full_with(cuda__cufft_plan_cache__max_size=-2),
        ValueError,
        ("cuda.cufft_plan_cache.max_size", "-2", AT_LEAST_MINUS_ONE),
        id="from_dict-negative",
    ),
    pytest.param(
        _full_with(cuda__preferred_linalg_library="cuSOLVER"),
        ValueError,
        ("cuda.preferred_linalg_library", "'cuSOLVER'", *LINALG),
        id="from_dict-bad-choice",
    ),
    pytest.param(
        _full_with(cudnn__benchmark_limit=RaisingIndex()),
        TypeError,
        ("cudnn.benchmark_limit", "whose __index__ raised RuntimeError"),
        id="from_dict-raising-__index__",
    ),
    # -- set_defaults ---------------------------------------------------------------------------
    pytest.param(
        lambda: backends.set_defaults({"cudnn.benchmark": True, "cudnn.benchmark_limit": RaisingIndex()}),
        TypeError,
        ("cudnn.benchmark_limit", "whose __index__ raised RuntimeError"),
        id="set_defaults-good-then-raising-__index__",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cuda.cufft_plan_cache.max_size": np.bool_(False)}),
        TypeError,
        ("cuda.cufft_plan_cache.max_size", "False", INT),
        id="set_defaults-int-flag-numpy.bool_",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cudnn.benchmark_limit": -1}),
        ValueError,
        ("cudnn.benchmark_limit", "-1", NON_NEGATIVE),
        id="set_defaults-negative",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cudnn.enabled": 1}),
        TypeError,
        ("cudnn.enabled", "1", BOOL),
        id="set_defaults-int-for-bool",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cudnn.enabld": False}),
        KeyError,
        ("'cudnn.enabld'", "cudnn.enabled"),
        id="set_defaults-typo",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cudnn.deterministic": True, "cudnn.allow_tf32": None}),
        TypeError,
        ("cudnn.allow_tf32", "None", BOOL),
        id="set_defaults-good-then-None",
    ),
    pytest.param(
        lambda: backends.set_defaults({"cudnn.benchmark": False, "cuda.matmul.allow_tf32": "on"}),
        TypeError,
        ("cuda.matmul.allow_tf32", "'on'", BOOL),
        id="set_defaults-good-then-'on'",
    ),
    # -- fp32_precision views ---------------------------------------------------------------------
    pytest.param(
        lambda: setattr(matmul, "fp32_precision", "TF32"),
        ValueError,
        ("cuda.matmul.fp32_precision", "'TF32'", *PRECISION),
        id="matmul.fp32_precision='TF32'",
    ),
    pytest.param(
        lambda: setattr(matmul, "fp32_precision", "bf16"),
        ValueError,
        ("cuda.matmul.fp32_precision", "'bf16'", *PRECISION),
        id="matmul.fp32_precision='bf16'",
    ),
    pytest.param(
        lambda: setattr(cudnn.conv, "fp32_precision", "highest"),
        ValueError,
        ("cudnn.conv.fp32_precision", "'highest'", *PRECISION),
        id="cudnn.conv.fp32_precision='highest'",
    ),
    # -- decorating something that is not callable ------------------------------------------------
    pytest.param(
        _decorate(lambda: cudnn.flags(deterministic=True), 42), TypeError, ("42", "callable"), id="decorate-int"
    ),
    pytest.param(
        _decorate(backends.deterministic, "not a function"),
        TypeError,
        ("'not a function'", "callable"),
        id="decorate-str",
    ),
    pytest.param(_decorate(backends.snapshot, None), TypeError, ("None", "callable"), id="snapshot-decorate-None"),
    pytest.param(
        lambda: backends.bind(None),
        TypeError,
        ("None", "callable"),
        id="bind-None",
    ),
]


@pytest.mark.parametrize("where", ["outside", "in scope"])
@pytest.mark.parametrize(("action", "error", "fragments"), CASES)
def test_bad_input_raises_a_clear_error_and_changes_nothing(
    action: Callable[[], object], error: type[BaseException], fragments: tuple[str, ...], where: str
) -> None:
    with some_state(where):
        assert_nothing_changes(action, error, fragments)


def test_there_are_at_least_25_bad_inputs() -> None:
    assert len(CASES) >= 25


def test_unknown_dotted_name_is_a_key_error_that_names_the_closest_flag() -> None:
    raised = assert_nothing_changes(
        lambda: backends.flags({"cuda.matmul.allow_tf31": True}), KeyError, ("cuda.matmul.allow_tf32",)
    )
    assert isinstance(raised, KeyError)


def test_unknown_attribute_error_is_an_attribute_error_so_getattr_default_works() -> None:
    assert getattr(cudnn, "benchmak", "fallback") == "fallback"
    assert not hasattr(matmul, "allow_tf_32")


def test_strict_mode_refusal_changes_nothing() -> None:
    backends.disable_global_flags()
    with some_state("outside"):
        error = assert_nothing_changes(lambda: setattr(cudnn, "deterministic", True), RuntimeError, ("flags(",))
    assert "flags(" in str(error).replace("disable_global_flags(", "")


def test_bad_value_inside_a_scope_keeps_earlier_scope_assignments() -> None:
    with cudnn.flags(deterministic=True):
        cudnn.benchmark = True
        assert_nothing_changes(lambda: setattr(cudnn, "benchmark", "no"), TypeError, ("cudnn.benchmark",))
        assert cudnn.benchmark is True
    assert cudnn.benchmark is False


def test_error_message_for_a_hostile_repr_still_names_the_flag() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("repr exploded")

    assert_nothing_changes(lambda: setattr(cudnn, "deterministic", Hostile()), TypeError, ("cudnn.deterministic",))


# -- environment variables at import ----------------------------------------------------------------

_REPORT = """
import json, backends
rows = lambda: {r.name: [r.value, r.source] for r in backends.describe()}
at_import = rows()
backends.set_defaults({
    "cudnn.deterministic": False, "cudnn.enabled": True, "cudnn.benchmark_limit": 10,
    "cuda.matmul.allow_tf32": False, "cuda.preferred_linalg_library": "default",
})
changed = rows()
backends.reset_defaults()
print(json.dumps({"import": at_import, "changed": changed, "reset": rows()}))
"""


def clean_environ(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_") and k != "CUPY_TF32"}
    env.update(variables)
    return env


def run_python(code: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=clean_environ(**variables), capture_output=True, text=True, timeout=60
    )


def report(**variables: str) -> dict[str, dict[str, list[object]]]:
    done = run_python(_REPORT, **variables)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("BACKENDS_CUDNN_DETERMINISTIC", "maybe"),
        ("BACKENDS_CUDNN_ENABLED", "2"),
        ("BACKENDS_CUDNN_BENCHMARK_LIMIT", "-3"),
        ("BACKENDS_CUDNN_BENCHMARK_LIMIT", "ten"),
        ("BACKENDS_CUDNN_BENCHMARK_LIMIT", "2.5"),
        ("BACKENDS_CUDA_PREFERRED_LINALG_LIBRARY", "MAGMA"),
        ("BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE", "-2"),
    ],
)
def test_unparsable_environment_variable_fails_import_with_value_error_naming_it(variable: str, text: str) -> None:
    done = run_python("import backends", **{variable: text})
    assert done.returncode != 0
    assert "ValueError" in done.stderr
    assert variable in done.stderr
    assert text in done.stderr


def test_environment_variable_sets_the_builtin_default_and_reset_returns_to_it() -> None:
    rows = report(BACKENDS_CUDNN_DETERMINISTIC="on", BACKENDS_CUDNN_BENCHMARK_LIMIT=" 0 ")
    assert rows["import"]["cudnn.deterministic"] == [True, "environment"]
    assert rows["import"]["cudnn.benchmark_limit"] == [0, "environment"]
    assert rows["import"]["cudnn.benchmark"] == [False, "default"]
    assert rows["changed"]["cudnn.deterministic"] == [False, "process default"]
    assert rows["reset"]["cudnn.deterministic"] == [True, "environment"]
    assert rows["reset"]["cudnn.benchmark_limit"] == [0, "environment"]
    assert rows["reset"] == rows["import"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("0", False),
        ("TRUE", True),
        ("False", False),
        ("Yes", True),
        ("nO", False),
        ("ON", True),
        ("off", False),
    ],
)
def test_boolean_environment_values_in_any_case(text: str, value: bool) -> None:
    rows = report(BACKENDS_CUDNN_ENABLED=text)
    assert rows["import"]["cudnn.enabled"] == [value, "environment"]


def test_string_and_int_environment_values() -> None:
    rows = report(BACKENDS_CUDA_PREFERRED_LINALG_LIBRARY="magma", BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE="64")
    assert rows["import"]["cuda.preferred_linalg_library"] == ["magma", "environment"]
    assert rows["import"]["cuda.cufft_plan_cache.max_size"] == [64, "environment"]
    assert rows["reset"]["cuda.preferred_linalg_library"] == ["magma", "environment"]


def test_cupy_tf32_sets_the_matmul_allow_tf32_default() -> None:
    rows = report(CUPY_TF32="1")
    assert rows["import"]["cuda.matmul.allow_tf32"] == [True, "environment"]
    assert rows["changed"]["cuda.matmul.allow_tf32"] == [False, "process default"]
    assert rows["reset"]["cuda.matmul.allow_tf32"] == [True, "environment"]
    assert rows["import"]["cudnn.allow_tf32"] == [True, "default"]


def test_backends_variable_wins_over_cupy_tf32() -> None:
    rows = report(CUPY_TF32="1", BACKENDS_CUDA_MATMUL_ALLOW_TF32="0")
    assert rows["import"]["cuda.matmul.allow_tf32"] == [False, "environment"]
    assert rows["reset"]["cuda.matmul.allow_tf32"] == [False, "environment"]


def test_no_environment_variables_means_builtin_defaults() -> None:
    rows = report()
    assert {source for _value, source in rows["import"].values()} == {"default"}
    assert rows["import"]["cuda.matmul.allow_tf32"] == [False, "default"]


def test_an_index_that_raises_is_the_cause_of_the_type_error() -> None:
    error = assert_nothing_changes(
        lambda: setattr(cudnn, "benchmark_limit", RaisingIndex()), TypeError, ("cudnn.benchmark_limit",)
    )
    assert isinstance(error.__cause__, RuntimeError) and str(error.__cause__) == "no integer here"
