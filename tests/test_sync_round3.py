"""Sync layer, round 3 (issue 22, items 3 and 4), proved with the stand-in CuPy.

Item 3: ``import backends`` racing another thread's import of a watched module leaves it
wrapped, with no hook failure (``tests/import_race_probe.py`` holds real threads with Events,
in a fresh interpreter for each order; the hooks' own cases run here, in-process).

Item 4: a cuFFT plan cache size set through CuPy's own API stands wherever
``cuda.cufft_plan_cache.max_size`` is not set (contract section 8); the flag takes every size
CuPy takes (``-1`` too). The stand-in's ``PlanCache`` is CuPy 14.2's (``cupy/fft/_cache.pyx``):
``set_size`` accepts ``-1`` (unlimited) and ``0`` (caching off) and refuses less; every FFT
records the cache's size limit at its lookup.

Both engines: the suite runs this file under each (``BACKENDS_PURE_PYTHON``), and the
subprocesses inherit the engine of the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import backends
from backends.sync import hooks
from tests._helpers import run_threads
from tests.standin_fixture import STANDIN

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "tests" / "import_race_probe.py"
MAX_SIZE = "cuda.cufft_plan_cache.max_size"
TIMEOUT = 60.0  # a safety net on every wait, never reached when healthy


def fresh_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child, less CuPy's, the stand-in's and backends' own
    variables (the engine choice, BACKENDS_PURE_PYTHON, is kept), plus ``extra``."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("STANDIN_CUPY_", "CUPY_", "PYTHON"))
        and (not key.startswith("BACKENDS_") or key == "BACKENDS_PURE_PYTHON")
    }
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(REPO)])
    return {**environ, **extra}


def run_json(args: list[str], **extra: str) -> Any:
    done = subprocess.run(
        [sys.executable, *args], env=fresh_env(**extra), capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# == item 3: the import race =====================================================================

RACE_MODULES = ("cupy.fft._fft", "cupyx.scipy.ndimage._measurements", "cupyx.scipy.sparse._coo")
TARGET_OF = {
    "cupy.fft._fft": "cufft",
    "cupyx.scipy.ndimage._measurements": "ndimage",
    "cupyx.scipy.sparse._coo": "sparse",
}


@pytest.mark.parametrize("module", RACE_MODULES)
@pytest.mark.parametrize("order", ["module first", "backends first", "both held", "window"])
def test_import_backends_racing_a_watched_import_leaves_it_wrapped(order: str, module: str) -> None:
    report = run_json([str(PROBE), order, module])
    assert report["errors"] == [], report
    assert report["failures"] == [], report
    assert TARGET_OF[module] in report["installed"], report
    assert report["wrapped"] and all(state is True for state in report["wrapped"].values()), report
    assert report["spec class"] == "ModuleSpec"  # the spec's own class is back
    if order == "module first":
        # import backends returned while the body was held, and hooked nothing half-made
        assert report["early"]["in sys.modules"] is True
        assert all(state is None for state in report["early"]["wrap points"].values()), report


# -- the hooks themselves, in-process -------------------------------------------------------------


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on ``sys.path`` for this test's throw-away modules (removed after)."""
    sys.path.insert(0, str(tmp_path))
    made = set(sys.modules)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - made:
            if name.startswith("race_"):
                del sys.modules[name]
        with hooks._lock:
            for name in list(hooks._hooks):
                if name.startswith("race_"):
                    del hooks._hooks[name]


def write(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(body))


GATED = """
    import race_gate
    BEFORE = 1
    race_gate.reached.set()
    assert race_gate.release.wait(60)
    if race_gate.fail:
        raise RuntimeError("the module's body fails")
    AFTER = 2
"""


def gate(directory: Path, fail: bool = False) -> ModuleType:
    events = "import threading\nreached, release = threading.Event(), threading.Event()\n"
    write(directory, "race_gate", f"{events}fail = {fail}\n")
    import race_gate  # type: ignore[import-not-found]

    return race_gate  # type: ignore[no-any-return]


def test_a_hook_registered_while_the_body_runs_elsewhere_waits_for_the_end(module_dir: Path) -> None:
    race_gate = gate(module_dir)
    write(module_dir, "race_target", GATED)
    failures = len(hooks.failures)
    seen: list[tuple[str, object, object, str]] = []

    def hook(module: ModuleType) -> None:
        seen.append((threading.current_thread().name, getattr(module, "BEFORE", None), getattr(module, "AFTER", None),
                     type(module.__spec__).__qualname__))

    def importer() -> None:
        import race_target  # type: ignore[import-not-found]  # noqa: F401

    def registrar() -> None:
        assert race_gate.reached.wait(TIMEOUT)
        hooks.when_imported("race_target", hook)  # returns at once: the body is still held
        assert seen == [] and "race_target" in sys.modules
        race_gate.release.set()

    threads = [threading.Thread(target=importer, name="importer"), threading.Thread(target=registrar, name="registrar")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    # once, in the importing thread, with the whole module, the spec's own class back
    assert seen == [("importer", 1, 2, "ModuleSpec")]
    assert len(hooks.failures) == failures
    assert type(sys.modules["race_target"].__spec__).__qualname__ == "ModuleSpec"


def test_a_hook_registered_by_the_module_body_itself_runs_after_the_body(module_dir: Path) -> None:
    write(module_dir, "race_self", """
        from backends.sync import hooks
        BEFORE = 1
        SEEN = []
        hooks.when_imported("race_self", lambda module: SEEN.append(getattr(module, "AFTER", None)))
        AFTER = 2
    """)
    import race_self  # type: ignore[import-not-found]

    assert race_self.SEEN == [2]


def test_no_hook_runs_on_a_failed_import_and_the_next_import_is_hooked(module_dir: Path) -> None:
    race_gate = gate(module_dir, fail=True)
    write(module_dir, "race_failing", GATED)
    failures = len(hooks.failures)
    seen: list[object] = []
    errors: list[BaseException] = []

    def importer() -> None:
        try:
            import race_failing  # type: ignore[import-not-found]  # noqa: F401
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=importer)
    thread.start()
    assert race_gate.reached.wait(TIMEOUT)
    hooks.when_imported("race_failing", lambda module: seen.append(getattr(module, "AFTER", None)))
    race_gate.release.set()
    thread.join(TIMEOUT)
    assert len(errors) == 1 and "race_failing" not in sys.modules
    assert seen == [] and len(hooks.failures) == failures
    race_gate.fail = False  # the next import succeeds, through the finder
    import race_failing  # type: ignore[import-not-found]  # noqa: F401

    assert seen == [2]


def test_many_hooks_for_one_half_imported_module_all_run_once_it_completes(module_dir: Path) -> None:
    race_gate = gate(module_dir)
    write(module_dir, "race_many", GATED)
    seen: list[int] = []
    thread = threading.Thread(target=lambda: __import__("race_many"))
    thread.start()
    assert race_gate.reached.wait(TIMEOUT)
    barrier = threading.Barrier(4, timeout=TIMEOUT)

    def register(i: int) -> None:
        barrier.wait()
        hooks.when_imported("race_many", lambda module: seen.append(i))

    run_threads(*[lambda i=i: register(i) for i in range(4)], unblock=[barrier])
    assert seen == []
    race_gate.release.set()
    thread.join(TIMEOUT)
    assert sorted(seen) == [0, 1, 2, 3]


# == item 4: CuPy's own plan cache size ==========================================================


@pytest.fixture
def cupy(standin_cupy: ModuleType) -> Iterator[ModuleType]:
    try:
        yield standin_cupy
    finally:
        backends.reset_defaults()


def own_cache() -> Any:
    """This thread's cache on the current device, through CuPy's own API."""
    import cupy.fft.config

    return cupy.fft.config.get_plan_cache()


def fft_size(cupy: ModuleType, n: int = 8) -> int:
    """Run one FFT; the size limit its plan lookup saw."""
    from cupy.fft import _cache

    _cache.RECORDER.reset()
    cupy.fft.fft(cupy.ndarray((n,), "complex64"))
    with _cache.RECORDER.lock:
        return _cache.RECORDER.lookups[-1].max_size


@pytest.mark.parametrize("size", [0, -1, 64, 16, 1])
def test_a_size_set_through_cupy_stands_while_the_flag_is_not_set(cupy: ModuleType, size: int) -> None:
    own_cache().set_size(size)
    assert [fft_size(cupy, n) for n in (8, 16, 32)] == [size] * 3
    backends.sync()
    assert own_cache().get_size() == size
    assert backends.describe()[[row.name for row in backends.describe()].index(MAX_SIZE)].source == "default"


def test_a_scope_pushes_the_flag_and_cupys_own_size_comes_back_after_it(cupy: ModuleType) -> None:
    own_cache().set_size(0)
    with backends.flags({MAX_SIZE: 5}):
        assert fft_size(cupy) == 5
        with backends.cuda.cufft_plan_cache.flags(max_size=-1):
            assert fft_size(cupy) == -1  # unlimited, as CuPy takes it
        assert fft_size(cupy) == 5
    assert fft_size(cupy) == 0
    with backends.flags({MAX_SIZE: 16}):  # the built-in default's value, but set: pushed
        assert fft_size(cupy) == 16
    assert fft_size(cupy) == 0


def test_assignment_and_set_defaults_push_the_flag_everywhere_until_reset(cupy: ModuleType) -> None:
    own_cache().set_size(64)
    backends.cuda.cufft_plan_cache.max_size = 3
    assert fft_size(cupy) == 3
    backends.set_defaults({MAX_SIZE: 16})
    assert fft_size(cupy) == 16
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(fft_size(cupy)))  # another thread's cache too
    thread.start()
    thread.join(TIMEOUT)
    assert seen == [16]
    backends.reset_defaults()
    assert fft_size(cupy) == 64


def test_a_size_set_through_cupy_inside_a_scope_yields_to_the_flag_there_and_stands_after(cupy: ModuleType) -> None:
    """The decision (docs/sync.md, cuFFT): where the flag is set it is in force, so a size set
    through CuPy inside the scope is replaced at the next FFT there; it is CuPy's own size from
    then on, in force once the flag is no longer set."""
    with backends.flags({MAX_SIZE: 4}):
        assert fft_size(cupy) == 4
        own_cache().set_size(0)
        assert own_cache().get_size() == 0  # CuPy's call takes effect at once
        assert fft_size(cupy) == 4
    assert fft_size(cupy) == 0
    own_cache().set_size(32)  # and outside any scope, as before
    assert fft_size(cupy) == 32


def test_each_thread_keeps_its_own_cupy_size(cupy: ModuleType) -> None:
    barrier = threading.Barrier(3, timeout=TIMEOUT)
    seen: dict[int, list[int]] = {}

    def worker(own: int, flag: int | None) -> None:
        own_cache().set_size(own)
        barrier.wait()
        sizes = [fft_size(cupy)]
        if flag is not None:
            with backends.flags({MAX_SIZE: flag}):
                sizes.append(fft_size(cupy))
        barrier.wait()
        sizes.append(fft_size(cupy))
        seen[own] = sizes

    run_threads(lambda: worker(0, 7), lambda: worker(-1, None), lambda: worker(64, -1), unblock=[barrier])
    assert seen == {0: [0, 7, 0], -1: [-1, -1], 64: [64, -1, 64]}


def test_sync_follows_the_same_rule(cupy: ModuleType) -> None:
    own_cache().set_size(0)
    backends.sync()
    assert own_cache().get_size() == 0
    with backends.flags({MAX_SIZE: 9}):
        backends.sync()
        assert own_cache().get_size() == 9
    backends.sync()
    assert own_cache().get_size() == 0


def test_a_snapshot_scope_sets_the_flag(cupy: ModuleType) -> None:
    """snapshot() and bind() apply every flag (contract section 4): the plan cache size too."""
    snap = backends.snapshot()
    own_cache().set_size(0)
    with snap:
        assert fft_size(cupy) == 16
    assert fft_size(cupy) == 0


@pytest.mark.parametrize("value", [-1, 0, 1, 16, 2**31])
def test_the_flag_takes_every_size_cupy_takes(value: int) -> None:
    with backends.flags({MAX_SIZE: value}):
        assert backends.cuda.cufft_plan_cache.max_size == value
    try:
        backends.cuda.cufft_plan_cache.max_size = value
        assert backends.cuda.cufft_plan_cache.max_size == value
    finally:
        backends.reset_defaults()


@pytest.mark.parametrize("value", [-2, -(2**40)])
def test_the_flag_refuses_what_cupy_refuses(value: int) -> None:
    with pytest.raises(ValueError, match=r"cuda\.cufft_plan_cache\.max_size must be an int >= -1, got -"):
        backends.flags({MAX_SIZE: value})
    with pytest.raises(ValueError, match=r">= -1"):
        backends.cuda.cufft_plan_cache.max_size = value
    assert backends.cuda.cufft_plan_cache.max_size == 16


def test_the_environment_variable_sets_the_flag_and_so_is_pushed() -> None:
    code = """
        import json, backends, cupy
        import cupy.fft.config
        from cupy.fft import _cache
        cupy.fft.config.get_plan_cache().set_size(0)
        cupy.fft.fft(cupy.ndarray((8,), "complex64"))
        row = [r for r in backends.describe() if r.name == "cuda.cufft_plan_cache.max_size"][0]
        print(json.dumps([_cache.RECORDER.lookups[-1].max_size, row.value, row.source]))
    """
    done = run_json(["-c", textwrap.dedent(code)], BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE="-1")
    assert done == [-1, -1, "environment"]


def test_python_m_backends_says_when_cupys_own_size_is_in_force() -> None:
    def row(**env: str) -> str:
        done = subprocess.run([sys.executable, "-m", "backends"], env=fresh_env(**env), capture_output=True, text=True,
                              timeout=120, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
        return next(line.strip() for line in done.stdout.splitlines() if line.strip().startswith(MAX_SIZE))

    assert row().split(None, 2)[1:] == ["16", "default: CuPy's own plan cache size in force (not pushed)"]
    assert row(BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE="0").split(None, 2)[1:] == [
        "0", "environment (BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE)"]
