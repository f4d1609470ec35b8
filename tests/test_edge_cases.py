"""Edge cases found by trying the library as a new user would; each was a bug or a poor message."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import backends

from ._helpers import state


def test_public_scope_and_snapshot_constructors_check_their_values() -> None:
    before = state()
    with pytest.raises(TypeError, match=r"cudnn\.benchmark must be a bool.*got 'yes'"):
        backends.Scope({"cudnn.benchmark": "yes"})
    with pytest.raises(TypeError, match=r"cudnn\.benchmark must be a bool.*got 1 \(int\)"):
        backends.Snapshot({**backends.snapshot().to_dict(), "cudnn.benchmark": 1})
    with pytest.raises(KeyError, match="missing"):
        backends.Snapshot({"cudnn.benchmark": True})
    assert state() == before


def test_a_scope_above_staticmethod_or_classmethod_keeps_the_method_working() -> None:
    class Model:
        @backends.cudnn.flags(deterministic=True)
        @staticmethod
        def static() -> bool:
            return backends.cudnn.deterministic

        @backends.cudnn.flags(deterministic=True)
        @classmethod
        def klass(cls) -> bool:
            return backends.cudnn.deterministic

    assert Model().static() is True and Model.static() is True
    assert Model.klass() is True
    assert backends.cudnn.deterministic is False


def test_decorating_a_class_is_refused_with_advice() -> None:
    with pytest.raises(TypeError, match="decorate its methods"):
        backends.cudnn.flags(deterministic=True)(type("Model", (), {}))


def test_huge_ints_are_refused_before_they_reach_c() -> None:
    with pytest.raises(ValueError, match=r"cudnn\.benchmark_limit must be an int >= 0 and <= "):
        backends.cudnn.benchmark_limit = 2**63
    assert backends.cudnn.benchmark_limit == 10


@pytest.mark.parametrize("value", [None, 1, True])
def test_a_view_given_a_non_string_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError, match=r"cuda\.matmul\.fp32_precision must be 'tf32' or 'ieee'"):
        backends.cuda.matmul.fp32_precision = value
    assert backends.cuda.matmul.allow_tf32 is False


def test_a_view_in_a_mapping_says_which_flag_to_use() -> None:
    with pytest.raises(KeyError, match=r"is a view, not a flag: use \{'cuda\.matmul\.allow_tf32': True\}"):
        backends.flags({"cuda.matmul.fp32_precision": "tf32"})


def test_positional_arguments_to_flags_get_advice_not_an_internal_name() -> None:
    with pytest.raises(TypeError, match=r"backends\.cudnn\.flags\(\) takes keyword arguments only"):
        backends.cudnn.flags(True)
    with pytest.raises(TypeError, match=r"@backends\.deterministic\(\) with parentheses"):
        backends.deterministic(lambda: None)  # type: ignore[call-arg]


def test_a_namespace_without_flags_does_not_suggest_another_namespaces_flag() -> None:
    with pytest.raises(AttributeError, match=r"backends\.openmp has no flags") as raised:
        backends.openmp.enabled = True
    assert "cudnn" not in str(raised.value)


def test_assigning_an_unknown_top_level_name_is_refused() -> None:
    with pytest.raises(AttributeError, match=r"did you mean 'deterministic'\?"):
        backends.cudnn_deterministic = True  # type: ignore[attr-defined]
    assert not hasattr(backends, "cudnn_deterministic")


def test_a_misspelt_environment_variable_is_ignored_at_import_and_listed_by_the_report() -> None:
    # contract section 7 (docs/contract.md): a BACKENDS_* name that is no flag's variable never breaks the import
    # (it used to raise ValueError here); `python -m backends` lists it with a did-you-mean.
    env = {**os.environ, "BACKENDS_CUDNN_DETERMINSTIC": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import backends; print(backends.cudnn.deterministic)"],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    report = subprocess.run([sys.executable, "-m", "backends"], capture_output=True, text=True, env=env)
    assert "  BACKENDS_CUDNN_DETERMINSTIC='1': did you mean BACKENDS_CUDNN_DETERMINISTIC?" in report.stdout


def test_an_unrelated_backends_variable_is_left_alone() -> None:
    env = {**os.environ, "BACKENDS_HOME": "/opt/x"}
    done = subprocess.run(
        [sys.executable, "-c", "import backends; print(backends.cudnn.deterministic)"],
        capture_output=True, text=True, env=env,
    )
    assert done.returncode == 0 and done.stdout.strip() == "False"


def test_python_m_backends_has_help() -> None:
    done = subprocess.run([sys.executable, "-m", "backends", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage: python -m backends" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "backends", "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr


def test_plan_cache_device_must_be_an_int(standin_cupy: object) -> None:
    for device in (True, "0", 1.0, None):
        with pytest.raises(TypeError, match="device must be an int"):
            backends.cuda.cufft_plan_cache[device]  # type: ignore[index]
