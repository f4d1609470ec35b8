"""Isolation across threads, executors, tasks and processes; bind() and snapshot()."""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import pickle
import threading
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

import backends

from . import _helpers
from ._helpers import deterministic_now, effective_flags, run_threads, state

cudnn = backends.cudnn


# -- executors and bind() -----------------------------------------------------------------------


def test_run_in_executor_loses_an_override_and_bind_keeps_it() -> None:
    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as pool:
            # its worker thread starts here, outside the scope (with 3.14's thread_inherit_context
            # a thread started inside it would keep a copy of it)
            await loop.run_in_executor(pool, deterministic_now)
            with cudnn.flags(deterministic=True):
                plain = await loop.run_in_executor(pool, deterministic_now)
                bound = await loop.run_in_executor(pool, backends.bind(deterministic_now))
            # the worker thread is reused: a bound call left nothing behind in it
            after = await loop.run_in_executor(pool, deterministic_now)
        return plain, bound, after

    assert asyncio.run(main()) == (False, True, False)


def test_bind_captures_flags_at_bind_time_not_at_call_time() -> None:
    with cudnn.flags(deterministic=True, benchmark_limit=3):
        bound = backends.bind(effective_flags)
    with cudnn.flags(deterministic=False, benchmark=True):
        flags = bound()
    assert flags["cudnn.deterministic"] is True
    assert flags["cudnn.benchmark_limit"] == 3
    assert flags["cudnn.benchmark"] is False
    assert cudnn.deterministic is False


def test_bind_pins_every_flag_even_against_later_process_defaults() -> None:
    bound = backends.bind(deterministic_now)
    backends.set_defaults({"cudnn.deterministic": True})
    assert bound() is False
    assert cudnn.deterministic is True


def test_bind_passes_arguments_and_keeps_name() -> None:
    def add(a: int, b: int = 0) -> tuple[int, bool]:
        return a + b, cudnn.benchmark

    with cudnn.flags(benchmark=True):
        bound = backends.bind(add)
    assert bound(1, b=2) == (3, True)
    assert bound.__name__ == "add"


def test_bind_of_a_coroutine_function_runs_it_under_the_bound_flags() -> None:
    async def body() -> bool:
        await asyncio.sleep(0)
        return cudnn.deterministic

    with cudnn.flags(deterministic=True):
        bound = backends.bind(body)
    assert asyncio.run(bound()) is True
    assert cudnn.deterministic is False


def test_thread_pool_submit_loses_an_override_and_bind_keeps_it() -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(deterministic_now).result()  # its worker thread starts outside the scope
        with cudnn.flags(deterministic=True):
            assert pool.submit(deterministic_now).result() is False
            assert pool.submit(backends.bind(deterministic_now)).result() is True


def test_asyncio_to_thread_carries_the_override() -> None:
    async def main() -> tuple[bool, bool]:
        with cudnn.flags(deterministic=True):
            inside = await asyncio.to_thread(deterministic_now)
        outside = await asyncio.to_thread(deterministic_now)
        return inside, outside

    assert asyncio.run(main()) == (True, False)


def _spawn_pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def test_pickled_bind_keeps_its_flags_in_a_spawned_process() -> None:
    with cudnn.flags(deterministic=True, benchmark_limit=0), backends.cuda.matmul.tf32(True):
        bound = backends.bind(effective_flags)
        expected = effective_flags()
    restored = pickle.loads(pickle.dumps(bound))
    assert restored() == expected
    with _spawn_pool() as pool:
        in_worker = pool.submit(bound).result(timeout=60)
        plain_in_worker = pool.submit(effective_flags).result(timeout=60)
    assert in_worker == expected
    assert in_worker["cudnn.deterministic"] is True
    assert in_worker["cuda.matmul.allow_tf32"] is True
    assert plain_in_worker["cudnn.deterministic"] is False  # the worker's own defaults


def test_bind_of_an_unpicklable_function_does_not_pickle() -> None:
    bound = backends.bind(lambda: cudnn.deterministic)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(bound)


# -- snapshot() ---------------------------------------------------------------------------------


def test_snapshot_is_a_mapping_of_every_effective_value() -> None:
    backends.set_defaults({"cudnn.benchmark": True})
    with cudnn.flags(deterministic=True):
        snap = backends.snapshot()
    assert isinstance(snap, Mapping)
    assert isinstance(snap, backends.Snapshot)
    assert list(snap) == [row.name for row in backends.describe()]
    assert len(snap) == len(backends.describe())
    assert snap["cudnn.deterministic"] is True
    assert snap["cudnn.benchmark"] is True
    assert snap["cudnn.enabled"] is True
    assert "cudnn.deterministic" in snap
    assert snap.get("nope") is None
    with pytest.raises(KeyError):
        snap["cudnn.determinstic"]


def test_snapshot_is_immutable() -> None:
    snap = backends.snapshot()
    with pytest.raises(TypeError):
        snap["cudnn.deterministic"] = True  # type: ignore[index]
    with pytest.raises(TypeError):
        del snap["cudnn.deterministic"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        snap.update({"cudnn.deterministic": True})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        snap.deterministic = True  # type: ignore[attr-defined]
    data = snap.to_dict()
    data["cudnn.deterministic"] = True
    assert snap["cudnn.deterministic"] is False
    backends.cudnn.deterministic = True
    assert snap["cudnn.deterministic"] is False


def test_snapshot_is_hashable_and_equal_snapshots_hash_equal() -> None:
    first = backends.snapshot()
    second = backends.snapshot()
    with cudnn.flags(deterministic=True):
        third = backends.snapshot()
    assert first == second
    assert hash(first) == hash(second)
    assert first != third
    assert len({first, second, third}) == 2
    assert {first: "a"}[second] == "a"
    assert first == first.to_dict()


def test_snapshot_pickles_to_an_equal_snapshot() -> None:
    with cudnn.flags(benchmark=True), backends.flags({"cuda.preferred_linalg_library": "magma"}):
        snap = backends.snapshot()
    restored = pickle.loads(pickle.dumps(snap))
    assert isinstance(restored, backends.Snapshot)
    assert restored == snap
    assert hash(restored) == hash(snap)
    assert restored["cuda.preferred_linalg_library"] == "magma"


def test_snapshot_to_dict_from_dict_round_trip() -> None:
    with backends.deterministic(), cudnn.flags(benchmark_limit=0):
        snap = backends.snapshot()
    data = snap.to_dict()
    assert type(data) is dict
    assert data == dict(snap)
    again = backends.Snapshot.from_dict(data)
    assert again == snap
    assert again.to_dict() == data
    assert backends.Snapshot.from_dict(dict(reversed(list(data.items())))) == snap


def test_snapshot_is_a_scope_that_applies_every_flag() -> None:
    with cudnn.flags(deterministic=True):
        snap = backends.snapshot()
    backends.set_defaults({"cudnn.benchmark": True, "cudnn.deterministic": False})
    before = state()
    with snap:
        assert cudnn.deterministic is True
        assert cudnn.benchmark is False  # the snapshot's value, not today's default
        assert {row.source for row in backends.describe()} == {"scope"}
    assert state() == before


def test_snapshot_is_a_decorator() -> None:
    with cudnn.flags(benchmark=True):
        snap = backends.snapshot()

    @snap
    def body() -> bool:
        return cudnn.benchmark

    @snap
    async def abody() -> bool:
        return cudnn.benchmark

    assert body() is True
    assert asyncio.run(abody()) is True
    assert body.__name__ == "body"
    assert cudnn.benchmark is False


def test_snapshot_from_another_thread_is_that_threads_view() -> None:
    snaps: dict[str, backends.Snapshot] = {}
    started, done = threading.Event(), threading.Event()

    def worker() -> None:
        with cudnn.flags(deterministic=True):
            started.set()
            snaps["worker"] = backends.snapshot()
            assert done.wait(10)

    def sibling() -> None:
        assert started.wait(10)
        snaps["sibling"] = backends.snapshot()
        done.set()

    run_threads(worker, sibling, unblock=[started, done])
    assert snaps["worker"]["cudnn.deterministic"] is True
    assert snaps["sibling"]["cudnn.deterministic"] is False
    assert backends.snapshot()["cudnn.deterministic"] is False


# -- asyncio tasks --------------------------------------------------------------------------------


def test_child_task_sees_the_parents_override_and_its_changes_never_flow_back() -> None:
    async def main() -> dict[str, object]:
        log: dict[str, object] = {}
        async with cudnn.flags(deterministic=True):

            async def child() -> None:
                log["child sees parent"] = cudnn.deterministic
                cudnn.deterministic = False  # inside the inherited scope: the child's own
                cudnn.benchmark = True
                async with cudnn.flags(benchmark_limit=0):
                    log["child scope"] = cudnn.benchmark_limit
                    await asyncio.sleep(0)
                log["child end"] = (cudnn.deterministic, cudnn.benchmark, cudnn.benchmark_limit)

            await asyncio.create_task(child())
            log["parent after child"] = (cudnn.deterministic, cudnn.benchmark, cudnn.benchmark_limit)
        log["parent end"] = (cudnn.deterministic, cudnn.benchmark)
        return log

    assert asyncio.run(main()) == {
        "child sees parent": True,
        "child scope": 0,
        "child end": (False, True, 10),
        "parent after child": (True, False, 10),
        "parent end": (False, False),
    }
    assert cudnn.benchmark is False  # the child's assignment never became a process default


def test_task_created_before_a_scope_does_not_see_it() -> None:
    async def main() -> tuple[bool, bool]:
        go = asyncio.Event()

        async def sibling() -> bool:
            await go.wait()
            return cudnn.deterministic

        task = asyncio.create_task(sibling())
        async with cudnn.flags(deterministic=True):
            go.set()
            inside = cudnn.deterministic
            seen = await task
        return inside, seen

    assert asyncio.run(main()) == (True, False)


def test_copied_context_keeps_its_override_after_the_original_exits() -> None:
    with cudnn.flags(deterministic=True):
        ctx = contextvars.copy_context()
    assert cudnn.deterministic is False
    assert ctx.run(deterministic_now) is True
    assert _helpers.deterministic_now() is False


def test_namespaces_pickle_by_reference_so_cloudpickled_functions_can_use_them() -> None:
    import pickle

    assert pickle.loads(pickle.dumps(backends.cudnn)) is backends.cudnn
    assert pickle.loads(pickle.dumps(backends.cuda.matmul)) is backends.cuda.matmul
    cloudpickle = pytest.importorskip("cloudpickle")

    def reads() -> bool:
        return backends.cudnn.deterministic

    assert cloudpickle.loads(cloudpickle.dumps(reads))() is False
