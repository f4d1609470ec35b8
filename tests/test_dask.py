"""backends.integrations.dask on a real ``distributed.LocalCluster`` (one worker process, one
thread, reused for every task): ``submit``, ``map`` and ``compute`` of ``dask.delayed`` objects run
under the flags effective when the work is handed to Dask, and the worker keeps nothing between
tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

import backends
from tests._dev_tools import import_extra

dask = import_extra("dask", "dask")
distributed = import_extra("distributed", "dask")
backends_dask = pytest.importorskip("backends.integrations.dask")

DEFAULTS = (False, False, False)


def observed(tag: object = None) -> tuple[object, tuple[bool, bool, bool]]:
    return tag, (backends.cudnn.deterministic, backends.cudnn.benchmark, backends.cuda.matmul.allow_tf32)


def where(_: object = None) -> tuple[int, int, list[str]]:
    """The worker's process and thread, and the sources of its flags outside any task's scope."""
    import threading

    return os.getpid(), threading.get_ident(), sorted({row.source for row in backends.describe()})


def add_flag(pair: tuple[object, tuple[bool, bool, bool]]) -> tuple[object, tuple[bool, bool, bool], bool]:
    return (*pair, backends.cudnn.deterministic)


def submits_again(tag: str) -> Any:
    """A task that hands work to Dask itself: its flags go along."""
    with distributed.worker_client() as client, backends.cuda.matmul.tf32(True):
        return backends_dask.submit(client, observed, tag).result(timeout=30)


def test_submit_runs_under_the_flags_at_submit(dask_client: Any) -> None:
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        scoped = backends_dask.submit(dask_client, observed, "scoped")
        plain = dask_client.submit(observed, "plain")  # Dask alone: the worker's own defaults
    after = backends_dask.submit(dask_client, observed, "after")
    assert scoped.result(timeout=30) == ("scoped", (True, True, False))
    assert plain.result(timeout=30) == ("plain", DEFAULTS)
    assert after.result(timeout=30) == ("after", DEFAULTS)
    assert dask_client.submit(os.getpid).result(timeout=30) != os.getpid()
    backends.set_defaults({"cuda.matmul.allow_tf32": True})  # the caller's default goes along too
    assert backends_dask.submit(dask_client, observed, "d").result(timeout=30) == ("d", (False, False, True))


def test_the_same_call_under_other_flags_is_another_task(dask_client: Any) -> None:
    # Dask's default pure=True names a task by its function and arguments: the snapshot is one.
    with backends.cudnn.flags(deterministic=True):
        first = backends_dask.submit(dask_client, observed, "same")
    second = backends_dask.submit(dask_client, observed, "same")  # while `first` is still held
    assert first.key != second.key
    assert (first.result(timeout=30), second.result(timeout=30)) == (("same", (True, False, False)), ("same", DEFAULTS))
    with backends.cudnn.flags(deterministic=True):
        assert backends_dask.submit(dask_client, observed, "same").key == first.key  # same flags: same work
    assert first.key.startswith("observed-")  # the function's own name, in keys and the dashboard


def test_a_bound_callable_under_other_flags_is_another_pure_task(dask_client: Any) -> None:
    # backends.bind with Dask's default pure=True: the flags bound are part of the task's name.
    with backends.cudnn.flags(deterministic=True):
        first = dask_client.submit(backends.bind(observed), "bound")
    second = dask_client.submit(backends.bind(observed), "bound")  # while `first` is still held
    assert first.key != second.key
    results = (first.result(timeout=30), second.result(timeout=30))
    assert results == (("bound", (True, False, False)), ("bound", DEFAULTS))
    with backends.cudnn.flags(deterministic=True):
        assert dask_client.submit(backends.bind(observed), "bound").key == first.key  # same flags: same work


PROBE = """
import sys
{first}
from dask.base import tokenize

def work(x):
    return x

with backends.cudnn.flags(deterministic=True):
    scoped = tokenize(backends.bind(work), 1)
    again = tokenize(backends.bind(work), 1)
plain = tokenize(backends.bind(work), 1)
assert scoped == again != plain, (scoped, again, plain)
print("ok")
"""


@pytest.mark.parametrize("first", ["import backends\nimport dask", "import dask\nimport backends"])
def test_dask_names_a_bound_callable_by_its_flags_whichever_is_imported_first(first: str) -> None:
    probe = PROBE.format(first=first)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def test_map_runs_every_task_under_the_flags_at_map(dask_client: Any) -> None:
    with backends.cudnn.flags(benchmark=True):
        futures = backends_dask.map(dask_client, observed, (i for i in range(5)))
    assert dask_client.gather(futures) == [(i, (False, True, False)) for i in range(5)]
    unscoped = backends_dask.map(dask_client, observed, range(2), pure=False)
    assert dask_client.gather(unscoped) == [(0, DEFAULTS), (1, DEFAULTS)]
    assert backends_dask.map(dask_client, observed) == []


# Older Dask (2024.12 among them) warns that a single-machine scheduler asked for by name
# runs beside the active distributed client: what this test means to do.
@pytest.mark.filterwarnings("ignore:Running on a single-machine scheduler:UserWarning")
def test_compute_runs_every_delayed_task_under_the_flags_at_compute(dask_client: Any) -> None:
    graph = dask.delayed(add_flag)(dask.delayed(observed)("leaf"))  # built outside any scope
    with backends.cudnn.flags(deterministic=True):
        ((scoped,),), sync = backends_dask.compute([graph]), backends_dask.compute(graph, 5, scheduler="sync")
    assert scoped == ("leaf", (True, False, False), True)  # both tasks, on the distributed worker
    assert sync == (("leaf", (True, False, False), True), 5)
    assert backends_dask.compute(graph) == (("leaf", DEFAULTS, False),)
    assert dask.compute(graph) == (("leaf", DEFAULTS, False),)  # Dask alone
    with backends.cudnn.flags(benchmark=True):
        assert backends_dask.compute(graph, scheduler="threads") == (("leaf", (False, True, False), False),)
    assert backends_dask.compute({"k": graph}, 1, traverse=False)[1] == 1


def deterministic_ones(block: Any) -> Any:
    return block * 0 + backends.cudnn.deterministic


def test_compute_runs_what_depends_on_futures_and_persisted_results_and_leaves_those_as_they_are(
    dask_client: Any,
) -> None:
    # Work Dask has (a Future, a persisted collection) was computed when it was handed over, under
    # the flags of that call; what compute() adds on top of it runs under the flags now.
    future = dask_client.submit(observed, "future")
    persisted = dask_client.persist(dask.delayed(observed)("persisted"))
    with backends.cudnn.flags(deterministic=True):
        on_future, on_persisted, alone = backends_dask.compute(
            dask.delayed(add_flag)(future), dask.delayed(add_flag)(persisted), persisted
        )
    assert on_future == ("future", DEFAULTS, True)
    assert on_persisted == ("persisted", DEFAULTS, True)
    assert alone == ("persisted", DEFAULTS)


def test_compute_of_an_array_runs_its_tasks_under_the_flags(dask_client: Any) -> None:
    array = pytest.importorskip("dask.array", reason="dask.array needs numpy")
    ones = array.zeros(6, chunks=2).map_blocks(deterministic_ones)
    with backends.cudnn.flags(deterministic=True):
        (scoped,) = backends_dask.compute(ones)
    assert scoped.tolist() == [1.0] * 6
    assert backends_dask.compute(ones)[0].tolist() == [0.0] * 6


def test_a_reused_worker_keeps_nothing_between_tasks(dask_client: Any) -> None:
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        scoped = [backends_dask.submit(dask_client, where, i) for i in range(5)]
        backends_dask.compute(dask.delayed(where)())
    plain = dask_client.submit(where, "after", pure=False).result(timeout=30)
    places = {tuple(f.result(timeout=30)[:2]) for f in scoped}
    assert places == {tuple(plain[:2])}  # one process and thread ran them all
    assert {f.result()[2] == ["scope"] for f in scoped} == {True}
    assert plain[2] == ["default"]  # and no flag is left there, as a scope or a process default


def test_a_task_that_submits_carries_its_flags_further(dask_client: Any) -> None:
    with backends.cudnn.flags(deterministic=True):
        future = backends_dask.submit(dask_client, submits_again, "inner")
    assert future.result(timeout=60) == ("inner", (True, False, True))


def test_misuse_gets_a_clear_error(dask_client: Any) -> None:
    with pytest.raises(TypeError, match="takes a callable, got int"):
        backends_dask.submit(dask_client, 42)
    with pytest.raises(TypeError, match=r"without the caller's flags: the first argument must be a backends\.Snapshot"):
        backends_dask.UnderFlags(observed)({"cudnn.deterministic": True})


# -- async def tasks, run by Dask on the worker's event loop ------------------------------------------
async def observed_async(tag: object = None) -> tuple[object, tuple[bool, bool, bool], bool]:
    import asyncio

    in_loop = asyncio.get_running_loop() is not None  # Dask awaits it: it is not handed back as a coroutine
    await asyncio.sleep(0)
    return tag, observed()[1], in_loop


def test_async_def_through_submit_map_and_compute_runs_as_dask_runs_it_under_the_flags(dask_client: Any) -> None:
    import inspect

    assert inspect.iscoroutinefunction(backends_dask.UnderFlags(observed_async))  # what Dask reads
    assert not inspect.iscoroutinefunction(backends_dask.UnderFlags(observed))
    assert dask_client.submit(observed_async, "alone").result(timeout=30) == ("alone", DEFAULTS, True)  # Dask alone
    with backends.cudnn.flags(deterministic=True):
        submitted = backends_dask.submit(dask_client, observed_async, "d")
        mapped = backends_dask.map(dask_client, observed_async, ["e", "f"])
        (computed,) = backends_dask.compute(dask.delayed(observed_async)("g"))
    scoped = (True, False, False)
    assert submitted.result(timeout=30) == ("d", scoped, True)
    assert dask_client.gather(mapped) == [("e", scoped, True), ("f", scoped, True)]
    assert computed == ("g", scoped, True)
    assert backends_dask.submit(dask_client, observed_async, "after").result(timeout=30) == ("after", DEFAULTS, True)


# -- functions decorated in a notebook or a script's __main__ -------------------------------------------
def test_decorated_functions_from_main_run_on_the_worker_with_their_own_pin(dask_client: Any) -> None:
    from tests._main_cell import as_main

    cell = as_main()  # cloudpickle copies these by value, as a notebook's
    pinned, pinned_async, model = cell["pinned"], cell["pinned_async"], cell["Model"](2)
    with backends.cudnn.flags(benchmark=True):
        ours = [
            backends_dask.submit(dask_client, pinned, "a"),
            backends_dask.submit(dask_client, pinned_async, "b"),
            *backends_dask.map(dask_client, pinned, ["c"]),
            backends_dask.submit(dask_client, model.predict, 3),
        ]
        (computed,) = backends_dask.compute(dask.delayed(pinned)("d"))
        alone = dask_client.submit(pinned, "e")  # Dask alone: the pin goes along, the caller's flags do not
        bound = dask_client.submit(backends.bind(cell["unpinned"]), "f")
    pin = (True, True)
    assert dask_client.gather(ours) == [("a", pin), ("b", pin), ("c", pin), (6, pin)]
    assert computed == ("d", (True, True))
    assert alone.result(timeout=30) == ("e", (True, False))
    assert bound.result(timeout=30) == ("f", (False, True))


def test_a_function_dask_cannot_pickle_is_named_with_the_reason(dask_client: Any) -> None:
    from tests._main_cell import as_main

    cell = as_main(
        "import threading\nimport backends\nlock = threading.Lock()\n"
        "@backends.cudnn.flags(deterministic=True)\ndef guarded(x):\n    with lock:\n        return x\n"
    )
    reason = r"Dask cannot send guarded to its workers: TypeError: cannot pickle '_thread.lock'"
    with pytest.raises(TypeError, match=reason):
        backends_dask.submit(dask_client, cell["guarded"], 1)
    # client.map names each task by hashing its function first (pure=True): Dask's own error names it.
    with pytest.raises((TypeError, RuntimeError), match=r"guarded"):
        backends_dask.map(dask_client, cell["guarded"], [1])
    with pytest.raises(TypeError, match=r"Dask cannot send guarded to its workers"):
        backends_dask.map(dask_client, cell["guarded"], [1], pure=False)
