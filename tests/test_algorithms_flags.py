"""``backends.algorithms`` and torch's spellings of it (contract section 10), without CuPy:
the two flags behave like every flag, and ``use_deterministic_algorithms`` and its two
readers behave like torch's, scoped, with torch's error types."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import numpy
import pytest

import backends
from tests._helpers import run_threads


def both() -> tuple[bool, bool]:
    return backends.are_deterministic_algorithms_enabled(), backends.is_deterministic_algorithms_warn_only_enabled()


def test_both_flags_are_off_by_default_and_listed_by_describe() -> None:
    assert both() == (False, False)
    rows = {row.name: (row.value, row.source) for row in backends.describe()}
    assert rows["algorithms.deterministic"] == (False, "default")
    assert rows["algorithms.warn_only"] == (False, "default")


def test_use_deterministic_algorithms_outside_a_scope_sets_the_process_default_seen_by_other_threads() -> None:
    backends.use_deterministic_algorithms(True, warn_only=True)
    seen: list[tuple[bool, bool]] = []
    thread = threading.Thread(target=lambda: seen.append(both()))
    thread.start()
    thread.join()
    assert seen == [(True, True)]
    sources = {row.name: row.source for row in backends.describe()}
    assert sources["algorithms.deterministic"] == sources["algorithms.warn_only"] == "process default"


def test_inside_a_scope_it_lasts_for_the_rest_of_that_scope_only() -> None:
    with backends.cudnn.flags(benchmark=True):
        backends.use_deterministic_algorithms(True)
        assert both() == (True, False)
        assert backends.cudnn.benchmark is True
    assert both() == (False, False)
    assert backends.algorithms.deterministic is False


def test_every_call_sets_both_flags_and_mode_false_also_turns_warn_only_off() -> None:
    backends.use_deterministic_algorithms(True, warn_only=True)
    backends.use_deterministic_algorithms(True)  # as torch: warn_only goes back to False
    assert both() == (True, False)
    backends.use_deterministic_algorithms(True, warn_only=True)
    backends.use_deterministic_algorithms(False, warn_only=True)  # torch would keep warn_only True here
    assert both() == (False, False)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: backends.use_deterministic_algorithms(1), "argument 'mode' (position 1) must be bool, not int"),
        (
            lambda: backends.use_deterministic_algorithms(None),
            "argument 'mode' (position 1) must be bool, not NoneType",
        ),
        (lambda: backends.use_deterministic_algorithms("True"), "argument 'mode' (position 1) must be bool, not str"),
        (
            lambda: backends.use_deterministic_algorithms(True, warn_only=0),
            "argument 'warn_only' must be bool, not int",
        ),
    ],
)
def test_only_real_bools_are_accepted_as_in_torch_and_nothing_changes(call, message) -> None:  # type: ignore[no-untyped-def]
    backends.use_deterministic_algorithms(True, warn_only=True)
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value).startswith("backends.use_deterministic_algorithms(): ")
    assert message in str(raised.value)
    assert both() == (True, True)


def test_numpy_bools_are_taken_as_torch_takes_them() -> None:
    backends.use_deterministic_algorithms(numpy.bool_(True), warn_only=numpy.bool_(True))
    assert both() == (True, True)
    assert type(backends.algorithms.deterministic) is bool


def test_warn_only_is_keyword_only_as_in_torch() -> None:
    with pytest.raises(TypeError, match="positional argument"):
        backends.use_deterministic_algorithms(True, True)  # type: ignore[misc]
    assert both() == (False, False)


def test_frozen_global_flags_refuse_it_outside_a_scope_and_name_the_scope_to_use() -> None:
    backends.disable_global_flags()
    with pytest.raises(RuntimeError) as raised:
        backends.use_deterministic_algorithms(True)
    message = str(raised.value)
    assert "backends.algorithms.deterministic and backends.algorithms.warn_only cannot be assigned" in message
    assert "`with backends.algorithms.flags(deterministic=True, warn_only=False):`" in message
    assert both() == (False, False)
    with backends.algorithms.flags(warn_only=True):
        backends.use_deterministic_algorithms(True)  # inside a scope it still works
        assert both() == (True, False)


def test_the_flags_have_attributes_a_flags_scope_and_errors_that_name_the_flag() -> None:
    with backends.algorithms.flags(deterministic=True, warn_only=True):
        assert (backends.algorithms.deterministic, backends.algorithms.warn_only) == (True, True)
        assert both() == (True, True)
    with pytest.raises(TypeError, match=r"algorithms\.deterministic must be a bool \(True or False\), got 1"):
        backends.algorithms.flags(deterministic=1)
    with pytest.raises(TypeError, match=r"algorithms\.warn_only must be a bool"):
        backends.algorithms.warn_only = "yes"
    assert both() == (False, False)


def test_deterministic_preset_turns_it_on_and_leaves_warn_only_alone() -> None:
    with backends.algorithms.flags(warn_only=True), backends.deterministic():
        assert both() == (True, True)
        assert backends.cudnn.deterministic is True
    with backends.deterministic():
        assert both() == (True, False)


def test_threads_and_tasks_each_see_their_own_setting() -> None:
    barrier = threading.Barrier(2)
    seen: dict[str, tuple[bool, bool]] = {}

    def worker(name: str, mode: bool, warn_only: bool) -> None:
        with backends.algorithms.flags(deterministic=False):
            backends.use_deterministic_algorithms(mode, warn_only=warn_only)
            barrier.wait()  # both have set theirs before either reads
            seen[name] = both()

    run_threads(lambda: worker("a", True, True), lambda: worker("b", False, False), unblock=[barrier])
    assert seen == {"a": (True, True), "b": (False, False)}

    async def task(mode: bool, event: asyncio.Event, other: asyncio.Event) -> tuple[bool, bool]:
        with backends.algorithms.flags(deterministic=mode):
            event.set()
            await other.wait()
            return both()

    async def main() -> list[tuple[bool, bool]]:
        first, second = asyncio.Event(), asyncio.Event()
        return list(await asyncio.gather(task(True, first, second), task(False, second, first)))

    assert asyncio.run(main()) == [(True, False), (False, False)]


def test_environment_variables_set_the_built_in_defaults() -> None:
    environment = {**os.environ, "BACKENDS_ALGORITHMS_DETERMINISTIC": "1", "BACKENDS_ALGORITHMS_WARN_ONLY": "true"}
    code = (
        "import backends; print(backends.are_deterministic_algorithms_enabled(), "
        "[r.source for r in backends.describe() if r.name.startswith('algorithms.')])"
    )
    output = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    assert output.stdout.strip() == "True ['environment', 'environment']"
