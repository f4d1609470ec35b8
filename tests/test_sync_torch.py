"""torch as a sync target (issue 35), on the CPU build of torch: torch's own getters read the
effective value of the code running (scopes, decorated functions, asyncio tasks with install(),
trio tasks with the instrument, pytest markers), torch's own values outside; threads that
disagree warn, threads that agree do not; torch's deterministic mode reaches a CPU op per scope.

torch is process-wide: each test here installs a fresh torch mirror and takes it out after, so
the rest of the suite (threads in different scopes) runs as without torch.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        f"torch 2.13.0's CPU wheel in this project's wheel folder is for CPython 3.11 only (this is "
        f"{sys.version_info[0]}.{sys.version_info[1]})",
        allow_module_level=True,
    )
torch: Any = pytest.importorskip("torch", reason="torch is not installed (pip install --group torch)")

import backends  # noqa: E402
from backends._engine import mirror as engine_mirror  # noqa: E402
from backends.sync import torch as target  # noqa: E402

from ._helpers import new_thread  # noqa: E402

engine_mirror.install(None)  # installed by the import of torch: each test below installs its own
C = torch._C
cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul


@pytest.fixture(autouse=True)
def torch_follows() -> Iterator[engine_mirror.Mirror]:
    """A fresh torch mirror for the test (no thread or conflict remembered from another one),
    taken out after it, giving torch back its own values."""
    mirror = engine_mirror.Mirror("torch", target.settings(torch), backends.TorchFlagConflictWarning)
    target.mirror = mirror
    engine_mirror.install(mirror)
    try:
        yield mirror
    finally:
        engine_mirror.install(None)


def torch_deterministic() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


# -- scopes, assignment, defaults ----------------------------------------------------------------
def test_torch_getters_read_the_scope_and_torch_own_value_outside() -> None:
    assert cudnn.deterministic is False and cudnn.benchmark is False
    with backends.cudnn.flags(deterministic=True):
        assert cudnn.deterministic is True
        assert cudnn.benchmark is False  # not set through backends: torch's own
        with backends.cudnn.flags(deterministic=False, benchmark=True):
            assert (cudnn.deterministic, cudnn.benchmark) == (False, True)
        assert (cudnn.deterministic, cudnn.benchmark) == (True, False)
    assert cudnn.deterministic is False


def test_leaving_a_scope_gives_torch_back_its_own_value() -> None:
    cudnn.enabled = False  # torch's own API
    try:
        with backends.cudnn.flags(enabled=True):
            assert cudnn.enabled is True
        assert cudnn.enabled is False
        assert backends.cudnn.enabled is True  # backends' default is its own: torch's stood
    finally:
        cudnn.enabled = True


def test_a_torch_api_change_inside_a_scope_lasts_until_the_next_push_and_the_exit() -> None:
    """The decision of item 3: torch's API inside a scope that holds the flag changes torch's
    value until backends next pushes that flag; leaving the scope restores what torch had before
    it (as torch's own cudnn.flags() does)."""
    with backends.cudnn.flags(deterministic=True):
        cudnn.deterministic = False
        assert cudnn.deterministic is False
        with backends.cudnn.flags(benchmark=True):  # pushes benchmark only
            assert cudnn.deterministic is False
        with backends.cudnn.flags(deterministic=True):  # the same value: nothing to push
            assert cudnn.deterministic is False
        backends.cudnn.deterministic = False
        backends.cudnn.deterministic = True  # a push of that flag
        assert cudnn.deterministic is True
    assert cudnn.deterministic is False


def test_assignment_inside_a_scope_and_process_defaults_reach_torch() -> None:
    with backends.cudnn.flags(benchmark=False):
        backends.cudnn.benchmark = True
        assert cudnn.benchmark is True
    assert cudnn.benchmark is False
    backends.set_defaults({"cudnn.benchmark": True})
    try:
        assert cudnn.benchmark is True
        with backends.cudnn.flags(benchmark=False):
            assert cudnn.benchmark is False
        assert cudnn.benchmark is True
    finally:
        backends.reset_defaults()
    assert cudnn.benchmark is False  # source "default" again: torch's own value back


def test_snapshot_entry_and_bind_reach_torch() -> None:
    with backends.cudnn.flags(deterministic=True), backends.algorithms.flags(deterministic=True):
        snap = backends.snapshot()
        bound = backends.bind(torch_deterministic)
    assert cudnn.deterministic is False
    with snap:
        assert cudnn.deterministic is True and torch_deterministic() == (True, False)
    assert bound() == (True, False)
    assert torch_deterministic() == (False, False)


def test_use_deterministic_algorithms_pair() -> None:
    with backends.algorithms.flags(deterministic=True):
        assert torch_deterministic() == (True, False)
        backends.algorithms.warn_only = True
        assert torch_deterministic() == (True, True)
    assert torch_deterministic() == (False, False)
    with backends.algorithms.flags(warn_only=True):  # deterministic stays torch's own
        assert torch_deterministic() == (False, True)
    assert torch_deterministic() == (False, False)


def test_fp32_precision_api_only_and_a_legacy_user_keeps_working() -> None:
    assert matmul.fp32_precision == "none"
    with backends.cuda.matmul.flags(allow_tf32=True):
        assert matmul.fp32_precision == "tf32"
        assert cudnn.conv.fp32_precision == "tf32"  # torch's own (its default)
        with backends.cudnn.flags(allow_tf32=False):
            assert (cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision) == ("ieee", "ieee")
        assert (cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision) == ("tf32", "tf32")
    assert matmul.fp32_precision == "none"
    assert matmul.allow_tf32 is False  # torch's legacy getter: no mix left behind
    matmul.allow_tf32 = True  # a user of torch's legacy API
    try:
        with backends.cuda.matmul.flags(allow_tf32=False):
            assert matmul.fp32_precision == "ieee"
            with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
                matmul.allow_tf32  # noqa: B018  (torch's own rule, documented)
        assert matmul.allow_tf32 is True and matmul.fp32_precision == "tf32"
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        matmul.allow_tf32 = False


def test_decorated_function_reads_its_flags_in_torch() -> None:
    @backends.cudnn.flags(deterministic=True)
    def inside() -> bool:
        return bool(cudnn.deterministic)

    assert inside() is True
    assert cudnn.deterministic is False


def test_deterministic_mode_changes_a_cpu_op_per_scope() -> None:
    """torch.empty fills new float memory with NaN in deterministic mode
    (torch.utils.deterministic.fill_uninitialized_memory), on the CPU too."""
    n = 4096
    with backends.algorithms.flags(deterministic=True):
        assert bool(torch.empty(n).isnan().all())
    torch.full((n,), 7.0)  # (freed memory that empty() may get back: not NaN)
    assert not bool(torch.empty(n).isnan().all())


def test_a_push_that_torch_refuses_refuses_the_entry(torch_follows: engine_mirror.Mirror) -> None:
    def refuse(value: object) -> None:
        raise RuntimeError(f"refused {value!r}")

    index = torch_follows.names.index("cudnn.benchmark")
    get, put, _ = torch_follows.accessors[index]
    torch_follows.accessors = (*torch_follows.accessors[:index], (get, put, refuse),
                               *torch_follows.accessors[index + 1:])
    engine_mirror.install(None)
    engine_mirror.install(torch_follows)  # the engine takes the new accessors
    scope = backends.cudnn.flags(benchmark=True)
    with pytest.raises(RuntimeError, match="refused True"):
        scope.__enter__()
    assert backends.cudnn.benchmark is False  # not entered
    with pytest.raises(RuntimeError, match="not active"):
        scope.__exit__(None, None, None)


# -- tasks -----------------------------------------------------------------------------------------
def test_asyncio_tasks_each_see_their_own_flags_in_torch_at_every_await() -> None:
    log: list[tuple[str, bool, bool]] = []

    async def task(name: str, value: bool, started: asyncio.Event, other: asyncio.Event) -> None:
        async with backends.cudnn.flags(deterministic=value):
            started.set()
            await other.wait()
            for _ in range(3):
                log.append((name, value, bool(cudnn.deterministic)))
                await asyncio.sleep(0)

    async def main() -> None:
        backends.asyncio.install()
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task("a", True, a, b), task("b", False, b, a))
        log.append(("main", False, bool(cudnn.deterministic)))

    asyncio.run(main())
    assert [(name, seen) for name, _, seen in log] == [(name, value) for name, value, _ in log]
    assert {name for name, _, _ in log} == {"a", "b", "main"} and len(log) == 7


def test_trio_tasks_with_the_instrument() -> None:
    trio = pytest.importorskip("trio")
    log: list[tuple[bool, bool]] = []

    async def task(value: bool, started: Any, other: Any) -> None:
        with backends.cudnn.flags(deterministic=value):
            started.set()
            await other.wait()
            for _ in range(3):
                log.append((value, bool(cudnn.deterministic)))
                await trio.lowlevel.checkpoint()

    async def main() -> None:
        a, b = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(task, True, a, b)
            nursery.start_soon(task, False, b, a)

    trio.run(main, instruments=[backends.trio.Instrument()])
    assert len(log) == 6 and all(value == seen for value, seen in log)


@pytest.mark.backends({"cudnn.deterministic": True, "algorithms.deterministic": True})
def test_the_pytest_marker_reaches_torch() -> None:
    assert cudnn.deterministic is True and torch_deterministic() == (True, False)


def test_the_fixture_reaches_torch(backends_flags: Any) -> None:
    backends_flags.cudnn.benchmark = True
    assert cudnn.benchmark is True


# -- threads ---------------------------------------------------------------------------------------
def _two_threads(first: bool, second: bool) -> dict[str, bool]:
    """Thread A enters a scope of cudnn.deterministic=first, then B one of =second while A is
    still inside; each reads torch while both are in. Returns what each read."""
    a_inside, b_inside, a_read = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}
    errors: list[BaseException] = []

    def a() -> None:
        try:
            with backends.cudnn.flags(deterministic=first):
                a_inside.set()
                assert b_inside.wait(30)
                seen["A"] = bool(cudnn.deterministic)
        except BaseException as error:
            errors.append(error)
        finally:
            a_inside.set()
            a_read.set()

    def b() -> None:
        try:
            assert a_inside.wait(30)
            with backends.cudnn.flags(deterministic=second):
                seen["B"] = bool(cudnn.deterministic)
                b_inside.set()
                assert a_read.wait(30)
        except BaseException as error:
            errors.append(error)
        finally:
            b_inside.set()

    threads = [new_thread(a), new_thread(b)]
    for thread, name in zip(threads, "AB", strict=True):
        thread.name = name
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return seen


def test_threads_that_disagree_warn_once_naming_flag_values_and_threads() -> None:
    with pytest.warns(backends.TorchFlagConflictWarning) as record:
        seen = _two_threads(True, False)
    messages = [str(w.message) for w in record if issubclass(w.category, backends.TorchFlagConflictWarning)]
    assert len(messages) == 1, messages
    assert "backends.cudnn.deterministic" in messages[0]
    assert "thread 'B' now pushes False while thread 'A' holds True" in messages[0]
    assert seen == {"B": False, "A": False}  # torch runs with the last push: said, not silent
    assert cudnn.deterministic is False


def test_threads_that_agree_are_silent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", backends.TorchFlagConflictWarning)
        seen = _two_threads(True, True)
    assert seen == {"A": True, "B": True}
    assert cudnn.deterministic is False  # the last one out gave torch its own value back


def test_a_process_default_set_through_backends_against_a_scope_warns() -> None:
    backends.set_defaults({"cudnn.deterministic": False})  # this thread holds False
    try:
        seen: list[bool] = []
        with pytest.warns(backends.TorchFlagConflictWarning, match="holds False"):
            thread = new_thread(lambda: seen.append(_enter_and_read(True)))
            thread.start()
            thread.join(60)
        assert seen == [True]
    finally:
        backends.reset_defaults()


def _enter_and_read(value: bool) -> bool:
    with backends.cudnn.flags(deterministic=value):
        return bool(cudnn.deterministic)


def test_a_warnings_filter_makes_the_conflict_refuse_the_entry() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", backends.TorchFlagConflictWarning)
        with pytest.raises(backends.TorchFlagConflictWarning):
            _two_threads(True, False)
    assert cudnn.deterministic is False


# -- visible ---------------------------------------------------------------------------------------
def test_python_m_backends_shows_torch_and_its_values() -> None:
    from backends.__main__ import torch_report, torch_rows

    with backends.cudnn.flags(deterministic=True):
        rows = {row["name"]: row for row in torch_rows() or []}
        report = "\n".join(torch_report(torch_rows()))
    assert rows["cudnn.deterministic"] == {"name": "cudnn.deterministic", "reaches": True, "value": "True",
                                           "in_force": "backends"}
    assert rows["cudnn.benchmark"]["in_force"] == "torch's own"
    assert rows["cuda.cufft_plan_cache.max_size"]["reaches"] is False  # no CUDA in this torch
    assert f"torch {torch.__version__}" in report


@pytest.mark.parametrize("order", ["torch first", "backends first"])
def test_either_import_order(order: str) -> None:
    imports = "import torch, backends" if order == "torch first" else "import backends, torch"
    code = textwrap.dedent(f"""
        {imports}
        with backends.cudnn.flags(deterministic=True):
            inside = torch.backends.cudnn.deterministic
        print(inside, torch.backends.cudnn.deterministic)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["True", "False"]


def test_import_backends_imports_no_torch() -> None:
    code = "import sys, backends; backends.TorchFlagConflictWarning; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_the_leak_check_reports_torch_settings_changed_through_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky="""
        import torch

        def test_sets_torch_itself():
            torch.backends.cudnn.deterministic = True

        def test_next():
            assert torch.backends.cudnn.deterministic is False
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "default", "-q")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*test_sets_torch_itself changed torch's own settings and did not restore them: "
                                 "torch.backends.cudnn.deterministic: False -> True*"])


def test_a_decorated_generator_pushes_its_flags_for_its_steps_only() -> None:
    @backends.cudnn.flags(deterministic=True)
    def steps() -> Iterator[bool]:
        for _ in range(3):
            yield bool(cudnn.deterministic)

    generator = steps()
    assert cudnn.deterministic is False  # made, not started: the caller's
    seen = []
    for inside in generator:
        seen.append((inside, bool(cudnn.deterministic)))
    assert seen == [(True, False)] * 3
    assert cudnn.deterministic is False
