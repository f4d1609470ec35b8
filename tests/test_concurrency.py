"""Concurrency (issue 7): the flags across asyncio/trio/anyio tasks, thread pools, threads,
process pools and Dask, and the task-step sync that keeps a shared cuBLAS handle in step.

What each layer fixes is shown side by side:

* the launch hooks (the sync layer) make every GEMM that CuPy launches use its own task's
  flags, with or without the task-step sync;
* the task-step sync (``backends.asyncio.install()``, ``backends.trio.Instrument()``) also
  puts the task's math mode on the thread's shared handle before each step, so code that
  calls cuBLAS itself with CuPy's handle right after an ``await`` sees its own flags;
  without it, another task's mode is still on the handle.

CuPy is the stand-in (``tests/standin``); nothing here needs a GPU. Processes are spawned
(``tests/_helpers.py`` holds the functions they run, importable by name).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import inspect
import io
import multiprocessing
import sys
import threading
import types
from collections.abc import Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any, NamedTuple

import anyio
import pytest
import trio

import backends

from ._helpers import deterministic_now, flag_values, tag_with_flags

cudnn = backends.cudnn
DEFAULT_MATH = 0  # CUBLAS_DEFAULT_MATH
TF32_MATH = 3  # CUBLAS_TF32_TENSOR_OP_MATH
TASKS = 1_000
LAUNCHES = 3  # per task, each followed by an await and a read of the handle


def math_mode_for(tf32: bool) -> int:
    """The math mode a float32 GEMM (and ``backends.sync()``) wants under the default
    reduced-precision flags."""
    return TF32_MATH if tf32 else DEFAULT_MATH


# -- many tasks on one thread: launch hooks vs task-step sync ---------------------------------------


class Seen(NamedTuple):
    tf32: bool  # the task's flag
    launched: int  # the math mode the task's GEMM ran with (recorded by the stand-in cuBLAS)
    after_await: int  # the math mode on the thread's handle right after the task's next await


def make_task(cupy: ModuleType, checkpoint: Callable[[], Awaitable[object]], seen: list[Seen]) -> Callable[..., Any]:
    """A task body: inside ``tf32(flag)``, ``LAUNCHES`` times: launch a GEMM through CuPy,
    await ``checkpoint()`` (other tasks launch meanwhile), then read the handle's math mode
    as code calling cuBLAS through its own bindings with CuPy's handle would."""
    from cupy_backends.cuda.libs import cublas

    a = cupy.ndarray((8, 8), "float32")
    recorder = cublas.RECORDER

    async def task(tf32: bool) -> None:
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(LAUNCHES):
                start = len(recorder.launches)  # one thread: no other launch can interleave here
                a @ a
                (launch,) = recorder.launches[start:]
                await checkpoint()
                mode = cublas.getMathMode(cupy.cuda.device.get_cublas_handle())
                seen.append(Seen(tf32, launch.math_mode, mode))

    return task


def run_asyncio(cupy: ModuleType, synced: bool) -> list[Seen]:
    seen: list[Seen] = []
    task = make_task(cupy, lambda: asyncio.sleep(0), seen)

    async def main() -> None:
        if synced:
            backends.asyncio.install()
        await asyncio.gather(*(task(i % 2 == 0) for i in range(TASKS)))

    asyncio.run(main())
    return seen


def run_trio(cupy: ModuleType, synced: bool) -> list[Seen]:
    seen: list[Seen] = []
    task = make_task(cupy, lambda: trio.sleep(0), seen)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(TASKS):
                nursery.start_soon(task, i % 2 == 0)

    trio.run(main, instruments=[backends.trio.Instrument()] if synced else [])
    return seen


def run_anyio(backend: str) -> Callable[[ModuleType, bool], list[Seen]]:
    def run(cupy: ModuleType, synced: bool) -> list[Seen]:
        seen: list[Seen] = []
        task = make_task(cupy, lambda: anyio.sleep(0), seen)

        async def main() -> None:
            if synced and backend == "asyncio":
                backends.asyncio.install()  # on anyio's running asyncio loop
            async with anyio.create_task_group() as group:
                for i in range(TASKS):
                    group.start_soon(task, i % 2 == 0)

        if backend == "trio":
            options = {"instruments": [backends.trio.Instrument()] if synced else []}
            anyio.run(main, backend="trio", backend_options=options)
        else:
            anyio.run(main, backend="asyncio")
        return seen

    return run


def run_anyio_trio_adding_the_instrument(cupy: ModuleType, synced: bool) -> list[Seen]:
    """anyio on trio with the instrument added by ``main`` itself: the way for anyio before 4.14,
    which drops ``backend_options`` on trio."""
    seen: list[Seen] = []
    task = make_task(cupy, lambda: anyio.sleep(0), seen)

    async def main() -> None:
        if synced:
            trio.lowlevel.add_instrument(backends.trio.Instrument())
        async with anyio.create_task_group() as group:
            for i in range(TASKS):
                group.start_soon(task, i % 2 == 0)

    anyio.run(main, backend="trio")
    return seen


RUNNERS = {
    "asyncio": run_asyncio,
    "trio": run_trio,
    "anyio-asyncio": run_anyio("asyncio"),
    "anyio-trio": run_anyio("trio"),
    "anyio-trio-add_instrument": run_anyio_trio_adding_the_instrument,
}


@pytest.mark.parametrize("synced", [False, True], ids=["launch-hooks-only", "task-step-sync"])
# anyio's two back ends run the same loops as asyncio and trio do: slow, so in CI only.
@pytest.mark.parametrize(
    "runner", [pytest.param(name, marks=[pytest.mark.slow] if name.startswith("anyio") else []) for name in RUNNERS]
)
def test_a_thousand_tasks_on_one_thread(standin_cupy: ModuleType, runner: str, synced: bool) -> None:
    seen = RUNNERS[runner](standin_cupy, synced)

    assert len(seen) == TASKS * LAUNCHES
    assert sum(s.tf32 for s in seen) == len(seen) // 2
    # The launch hooks: every GEMM ran with its own task's math mode, with or without the sync.
    wrong_launches = [s for s in seen if s.launched != math_mode_for(s.tf32)]
    assert wrong_launches == []
    # The handle right after an await: another task's mode unless the task-step sync put it right.
    mismatches = [s for s in seen if s.after_await != math_mode_for(s.tf32)]
    if synced:
        assert mismatches == []
    else:
        assert mismatches, "without the task-step sync, some task should find another task's mode on the handle"


# -- backends.asyncio.install() / uninstall() --------------------------------------------------------


@pytest.fixture
def sync_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Count the task-step sync's calls: each records the ``cudnn.benchmark`` it ran under."""
    calls: list[bool] = []
    monkeypatch.setattr(backends.asyncio, "sync", lambda: calls.append(cudnn.benchmark))
    yield calls


def test_install_outside_a_running_loop_raises_runtime_error() -> None:
    with pytest.raises(RuntimeError):
        backends.asyncio.install()
    with pytest.raises(RuntimeError):
        backends.asyncio.uninstall()


def test_install_is_idempotent_and_uninstall_restores_no_factory(sync_calls: list[bool]) -> None:
    async def step_twice() -> None:
        await asyncio.sleep(0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert loop.get_task_factory() is None
        backends.asyncio.install()
        factory = loop.get_task_factory()
        assert factory is not None
        backends.asyncio.install()
        assert loop.get_task_factory() is factory  # not wrapped twice
        await asyncio.create_task(step_twice())
        assert len(sync_calls) == 2  # one sync per step: not two
        backends.asyncio.uninstall()
        assert loop.get_task_factory() is None
        await asyncio.create_task(step_twice())
        assert len(sync_calls) == 2  # new tasks no longer sync
        backends.asyncio.uninstall()  # nothing installed: a no-op
        assert loop.get_task_factory() is None

    asyncio.run(main())


def test_install_wraps_an_existing_task_factory_and_uninstall_restores_it(sync_calls: list[bool]) -> None:
    made: list[asyncio.Task[Any]] = []

    def custom(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        made.append(task)
        return task

    async def body() -> str:
        await asyncio.sleep(0)
        return "done"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(custom)
        backends.asyncio.install()
        backends.asyncio.install()
        assert loop.get_task_factory() is not custom
        wrapped = asyncio.create_task(body(), name="wrapped")
        assert await wrapped == "done"
        assert made == [wrapped]  # the existing factory still makes the task
        assert wrapped.get_name() == "wrapped"
        assert len(sync_calls) == 2  # and the task syncs before each of its steps
        backends.asyncio.uninstall()
        assert loop.get_task_factory() is custom
        plain = asyncio.create_task(body(), name="plain")
        assert await plain == "done"
        assert made == [wrapped, plain]
        assert len(sync_calls) == 2

    asyncio.run(main())


def test_install_on_a_loop_that_is_not_running_yet(sync_calls: list[bool]) -> None:
    async def main() -> bool:
        with cudnn.flags(benchmark=True):
            await asyncio.sleep(0)
        return True

    loop = asyncio.new_event_loop()
    try:
        backends.asyncio.install(loop)
        assert loop.run_until_complete(main()) is True  # the main task itself is synced
        # Each step syncs in the task's own context, before the step runs: the first step
        # starts outside the scope, the second resumes inside it.
        assert sync_calls == [False, True]
        backends.asyncio.uninstall(loop)
        assert loop.get_task_factory() is None
    finally:
        loop.close()


def test_synced_tasks_keep_results_exceptions_and_cancellation(sync_calls: list[bool]) -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("boom")

    async def main() -> None:
        backends.asyncio.install()
        with pytest.raises(KeyError, match="boom"):
            await asyncio.create_task(fails())
        sleeper = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0)
        sleeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeper
        slow = asyncio.create_task(asyncio.sleep(60))
        with pytest.raises(asyncio.TimeoutError):  # (the builtin TimeoutError from 3.11)
            await asyncio.wait_for(slow, 0.01)  # a cancellation thrown into a suspended synced step
        assert slow.cancelled()

    asyncio.run(main())
    assert sync_calls  # the tasks above did sync


def test_synced_tasks_stay_introspectable(sync_calls: list[bool]) -> None:
    """``task.get_coro()`` of a task made by the factory must still answer what libraries
    ask of a coroutine: anyio's asyncio backend calls ``inspect.getcoroutinestate()`` on it
    (``_task_started``, when delivering a cancellation to a task it does not host)."""

    async def body() -> None:
        await asyncio.sleep(0)

    async def main() -> list[str]:
        backends.asyncio.install()
        task = asyncio.create_task(body())
        states = [inspect.getcoroutinestate(task.get_coro())]
        await asyncio.sleep(0)
        states.append(inspect.getcoroutinestate(task.get_coro()))
        await task
        return states

    assert asyncio.run(main()) == [inspect.CORO_CREATED, inspect.CORO_SUSPENDED]


@types.coroutine
def generator_based(steps: int) -> Any:
    """A ``types.coroutine`` generator: asyncio accepts it as a coroutine (3.11) or
    as an awaitable (``ensure_future``, every version)."""
    for _ in range(steps):
        yield  # a bare yield: the task steps again at the next loop iteration
    return "generator done"


TASK_MAKERS: dict[str, Callable[[Any], asyncio.Future[Any]]] = {
    "ensure_future": asyncio.ensure_future,
    "loop.create_task": lambda coro: asyncio.get_running_loop().create_task(coro),
    "asyncio.create_task": lambda coro: asyncio.create_task(coro),
}


def outcome(make: Callable[[Any], asyncio.Future[Any]], install: bool) -> tuple[str, object]:
    """What a task made by ``make`` from ``generator_based(2)`` gives: its result, or the
    type of the error raised where the task is made."""

    async def main() -> tuple[str, object]:
        if install:
            backends.asyncio.install()
        try:
            task = make(generator_based(2))
        except TypeError:  # 3.12+: a generator is no coroutine for Task() itself
            return ("raises", TypeError)
        return ("result", await task)

    return asyncio.run(main())


@pytest.mark.parametrize("make", list(TASK_MAKERS))
def test_install_runs_tasks_made_from_generator_based_coroutines(sync_calls: list[bool], make: str) -> None:
    plain = outcome(TASK_MAKERS[make], install=False)
    assert outcome(TASK_MAKERS[make], install=True) == plain  # install() changes no outcome
    if make == "ensure_future" or asyncio.iscoroutine(generator_based(0)):
        assert plain == ("result", "generator done")
        assert len(sync_calls) >= 3  # and the generator's three steps were synced


def test_install_steps_a_generator_based_coroutine_with_its_own_flags(sync_calls: list[bool]) -> None:
    @types.coroutine
    def tuned() -> Any:
        with cudnn.flags(benchmark=True):
            yield
            yield
        return cudnn.benchmark

    async def main() -> bool:
        backends.asyncio.install()
        result: bool = await asyncio.ensure_future(tuned())
        return result

    assert asyncio.run(main()) is False
    # the steps sync in the task's context: outside, inside, inside (the scope spans the yields)
    assert sync_calls[:3] == [False, True, True]  # (later calls: asyncio.run's own shutdown tasks)


def _factories() -> dict[str, Callable[..., asyncio.Task[Any]] | None]:
    factories: dict[str, Callable[..., asyncio.Task[Any]] | None] = {
        "no factory": None,
        "custom factory": lambda loop, coro, **kwargs: asyncio.Task(coro, loop=loop, **kwargs),
    }
    if hasattr(asyncio, "eager_task_factory"):  # 3.12+
        factories["eager_task_factory"] = asyncio.eager_task_factory
    return factories


FACTORIES = _factories()


@pytest.mark.parametrize("factory", list(FACTORIES))
def test_synced_tasks_show_the_users_coroutine(sync_calls: list[bool], factory: str) -> None:
    """``get_coro()``, ``get_stack()``, ``print_stack()`` and ``repr()`` of a task made by the
    factory show the coroutine the task was made from, as without ``install()``."""
    views: dict[str, object] = {}

    async def user_body() -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return "done"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(FACTORIES[factory])
        backends.asyncio.install()
        coro = user_body()
        task = asyncio.create_task(coro, name="mine")
        await asyncio.sleep(0)  # the task is suspended in its first await (also when eager)
        views["is the user's coroutine"] = task.get_coro() is coro
        views["stack"] = [frame.f_code.co_name for frame in task.get_stack()]
        printed = io.StringIO()
        task.print_stack(file=printed)
        views["printed"] = printed.getvalue()
        views["repr"] = repr(task)
        views["state"] = inspect.getcoroutinestate(task.get_coro())
        assert await task == "done"
        views["done repr"] = repr(task)

    asyncio.run(main())
    assert views["is the user's coroutine"] is True
    assert views["stack"] == ["user_body"]
    ours = backends.integrations.asyncio.__file__  # no frame or name of the task-step sync's
    assert "user_body" in str(views["printed"]) and ours not in str(views["printed"])
    for shown in (views["repr"], views["done repr"]):
        assert "user_body()" in str(shown), shown
        assert ours not in str(shown) and "synced" not in str(shown).replace("test_synced_tasks", ""), shown
        assert str(shown).startswith("<Task "), shown
    assert views["state"] == inspect.CORO_SUSPENDED
    assert len(sync_calls) >= 3  # the task was synced all along


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"), reason="eager tasks are Python 3.12+")
def test_install_keeps_eager_tasks_eager(sync_calls: list[bool]) -> None:
    steps: list[str] = []

    async def body() -> str:
        steps.append("first step")
        await asyncio.sleep(0)
        return "done"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)
        backends.asyncio.install()
        before = len(sync_calls)
        task = asyncio.create_task(body())
        assert steps == ["first step"]  # ran inside create_task: still eager
        assert len(sync_calls) == before + 1  # and synced before it
        assert await task == "done"
        backends.asyncio.uninstall()
        assert loop.get_task_factory() is asyncio.eager_task_factory

    asyncio.run(main())


def test_anyio_task_group_cancelled_right_after_start_soon_with_the_factory() -> None:
    """anyio (asyncio backend) cancelling a task group whose child has not run a step yet
    asks ``inspect.getcoroutinestate(task.get_coro())``: it must work with the factory."""

    async def child() -> None:
        await anyio.sleep(1)  # a bound, not a wait: cancelled at once when delivery works

    async def main(install: bool) -> str:
        if install:
            backends.asyncio.install()
        async with anyio.create_task_group() as group:
            group.start_soon(child)
            group.cancel_scope.cancel()
        return "cancelled"

    assert anyio.run(main, False, backend="asyncio") == "cancelled"
    assert anyio.run(main, True, backend="asyncio") == "cancelled"


# -- thread pools, threads and run_in_executor ------------------------------------------------------


def read_benchmark() -> bool:
    return cudnn.benchmark


def leak_a_scope() -> int:
    """Enter a scope and never exit it: in a reused worker thread, a context that is not
    copied per call keeps it for every later call."""
    cudnn.flags(benchmark=True).__enter__()
    return threading.get_ident()


def test_thread_pool_executor_submit_then_outside_any_scope_reads_the_default() -> None:
    with backends.ThreadPoolExecutor(max_workers=2) as pool:
        with cudnn.flags(benchmark=True):
            inside = pool.submit(read_benchmark).result()
        outside = pool.submit(read_benchmark).result()
    assert (inside, outside) == (True, False)


def test_thread_pool_executor_never_keeps_a_context_from_an_earlier_call() -> None:
    with backends.ThreadPoolExecutor(max_workers=2) as pool:
        idents = {pool.submit(leak_a_scope).result() for _ in range(4)}
        reads = [pool.submit(lambda: (threading.get_ident(), cudnn.benchmark)).result() for _ in range(4)]
    assert {ident for ident, _ in reads} & idents  # the same worker threads ran both
    assert [value for _, value in reads] == [False] * 4
    # A plain pool's worker keeps what an earlier call left in its context.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as plain:
        plain.submit(leak_a_scope).result()
        assert plain.submit(read_benchmark).result() is True


def test_thread_pool_executor_map_carries_the_context() -> None:
    with backends.ThreadPoolExecutor(max_workers=2) as pool:
        with cudnn.flags(benchmark=True, deterministic=True):
            inside = list(pool.map(tag_with_flags, range(6)))
        outside = list(pool.map(tag_with_flags, range(6)))
    assert inside == [(i, True, True) for i in range(6)]
    assert outside == [(i, False, False) for i in range(6)]


def test_plain_thread_pool_executor_loses_the_context() -> None:
    # Under 3.14's -X thread_inherit_context each worker thread keeps a copy of the context of
    # the submit() that started it (here: inside the scope), not of each later submit().
    inherited = bool(getattr(sys.flags, "thread_inherit_context", False))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as plain, cudnn.flags(benchmark=True):
        assert plain.submit(read_benchmark).result() is inherited
        assert list(plain.map(tag_with_flags, range(2))) == [(0, inherited, False), (1, inherited, False)]
        assert plain.submit(backends.bind(read_benchmark)).result() is True


def test_thread_pool_executor_is_a_drop_in_subclass() -> None:
    assert issubclass(backends.ThreadPoolExecutor, concurrent.futures.ThreadPoolExecutor)
    with backends.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bk") as pool:
        assert pool.submit(lambda x, *, y: x + y, 1, y=2).result() == 3
        assert pool.submit(threading.current_thread).result().name.startswith("bk")
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result()


def test_changes_made_in_a_pool_call_stay_in_that_call() -> None:
    def change() -> bool:
        with cudnn.flags(deterministic=False):
            cudnn.benchmark = False  # inside a scope: for the rest of that scope only
            return cudnn.benchmark

    with backends.ThreadPoolExecutor(max_workers=1) as pool, cudnn.flags(benchmark=True):
        assert pool.submit(change).result() is False
        assert cudnn.benchmark is True
        assert pool.submit(read_benchmark).result() is True


def test_thread_carries_its_creators_context() -> None:
    results: dict[str, bool] = {}

    def record(name: str) -> None:
        results[name] = cudnn.benchmark
        cudnn.flags(benchmark=False).__enter__()  # a change in the thread never flows back

    with cudnn.flags(benchmark=True):
        inside = backends.Thread(target=record, args=("created and started inside",))
        inside.start()
        inside.join()
        created_inside = backends.Thread(target=record, args=("created inside, started outside",))
        plain = threading.Thread(target=record, args=("plain threading.Thread",))
        plain.start()
        plain.join()
        assert cudnn.benchmark is True
    created_inside.start()
    created_inside.join()
    assert results == {
        "created and started inside": True,
        "created inside, started outside": True,  # the copy is taken when the object is made
        # 3.14's -X thread_inherit_context (the default on free-threaded builds): a plain
        # Thread runs in a copy of the context of the code that calls start()
        "plain threading.Thread": bool(getattr(sys.flags, "thread_inherit_context", False)),
    }
    assert isinstance(inside, threading.Thread)


@pytest.mark.skipif(sys.version_info < (3, 14), reason="threading.Thread(context=...) is new in Python 3.14")
def test_a_context_given_to_the_thread_is_used_as_given() -> None:
    seen: list[bool] = []
    given = contextvars.Context()  # an empty context: the process defaults
    with cudnn.flags(benchmark=True):
        thread = backends.Thread(target=lambda: seen.append(cudnn.benchmark), context=given)
        none_given = backends.Thread(target=lambda: seen.append(cudnn.benchmark), context=None)
    for t in (thread, none_given):
        t.start()
        t.join()
    assert seen == [False, True]  # context=None: not given, the creator's copy


def test_thread_subclass_that_overrides_run_carries_the_context() -> None:
    """The usual way to use a ``threading.Thread`` is to override ``run()``: a
    ``backends.Thread`` subclass that does must still run in its creator's context."""

    class Worker(backends.Thread):
        seen: bool | None = None

        def run(self) -> None:
            self.seen = cudnn.benchmark

    with cudnn.flags(benchmark=True):
        worker = Worker()
        worker.start()
        worker.join()
    assert worker.seen is True


def test_run_in_executor_keeps_the_calling_tasks_flags() -> None:
    # The plain executor's one worker thread starts outside any scope: its own context has no
    # override, with or without 3.14's -X thread_inherit_context (which copies the context of the
    # code that starts a thread, the default on free-threaded builds).
    plain = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    plain.submit(flag_values, "cuda.matmul.allow_tf32").result()

    async def request(tf32: bool) -> tuple[bool, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        read = flag_values
        with backends.cuda.matmul.tf32(tf32):
            await asyncio.sleep(0)
            (ours,) = await backends.run_in_executor(None, read, "cuda.matmul.allow_tf32")
            (stdlib,) = await loop.run_in_executor(plain, read, "cuda.matmul.allow_tf32")
            with backends.ThreadPoolExecutor(max_workers=1) as pool:
                (via_pool,) = await loop.run_in_executor(pool, read, "cuda.matmul.allow_tf32")
            (to_thread,) = await asyncio.to_thread(read, "cuda.matmul.allow_tf32")
        return ours, stdlib, via_pool, to_thread

    async def main() -> list[tuple[bool, bool, bool, bool]]:
        return await asyncio.gather(*(request(i % 2 == 0) for i in range(8)))

    with plain:
        results = asyncio.run(main())
    for i, (ours, stdlib, via_pool, to_thread) in enumerate(results):
        assert ours is (i % 2 == 0)
        assert stdlib is False  # loop.run_in_executor: the worker thread's own context
        assert via_pool is (i % 2 == 0)  # loop.run_in_executor with a backends.ThreadPoolExecutor
        assert to_thread is (i % 2 == 0)  # asyncio.to_thread copies the context itself


def test_run_in_executor_outside_a_running_loop_raises_runtime_error() -> None:
    with pytest.raises(RuntimeError):
        backends.run_in_executor(None, read_benchmark)


# -- trio: a child sees what the spawning code had --------------------------------------------------


def test_trio_child_spawned_into_a_long_lived_nursery_sees_the_spawners_flags() -> None:
    results: dict[str, tuple[bool, bool]] = {}

    async def child(name: str, done: trio.Event) -> None:
        results[name] = (cudnn.benchmark, cudnn.deterministic)
        done.set()

    async def dispatcher(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with cudnn.flags(deterministic=True):  # the nursery owner's own flags
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                own = trio.Event()
                nursery.start_soon(child, "spawned by the dispatcher", own)
                await own.wait()
                await trio.sleep_forever()

    async def main() -> None:
        async with trio.open_nursery() as outer:
            long_lived = await outer.start(dispatcher)  # before A enters its scope

            async def task_a() -> None:
                with cudnn.flags(benchmark=True):
                    done = trio.Event()
                    long_lived.start_soon(child, "spawned by A", done)
                await done.wait()

            await task_a()
            outer.cancel_scope.cancel()

    trio.run(main)
    assert results == {
        "spawned by A": (True, False),  # A's flags when it spawned; not the owner's
        "spawned by the dispatcher": (False, True),
    }


# -- processes ----------------------------------------------------------------------------------------

FLAGS_READ = ("cudnn.benchmark", "cudnn.deterministic")


def test_bind_with_a_spawn_process_pool_executor() -> None:
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        with cudnn.flags(benchmark=True):
            cudnn.deterministic = True  # inside the scope: this context only
            bound = pool.submit(backends.bind(flag_values), *FLAGS_READ).result(timeout=60)
            unbound = pool.submit(flag_values, *FLAGS_READ).result(timeout=60)
        backends.set_defaults({"cudnn.benchmark": True})  # a process default of this process only
        default_here = pool.submit(flag_values, *FLAGS_READ).result(timeout=60)
        bound_default = pool.submit(backends.bind(flag_values), *FLAGS_READ).result(timeout=60)
    assert bound == (True, True)
    assert unbound == (False, False)  # the worker's own defaults
    assert default_here == (False, False)
    assert bound_default == (True, False)


def test_bind_with_a_spawn_multiprocessing_pool() -> None:
    with multiprocessing.get_context("spawn").Pool(processes=1) as pool:
        with cudnn.flags(benchmark=True, deterministic=True):
            bound = backends.bind(tag_with_flags)
        assert pool.map(bound, range(3)) == [(i, True, True) for i in range(3)]
        assert pool.apply(bound, ("x",)) == ("x", True, True)
        with cudnn.flags(benchmark=True):
            assert pool.map(tag_with_flags, range(3)) == [(i, False, False) for i in range(3)]
            assert pool.apply(deterministic_now) is False


# -- Dask --------------------------------------------------------------------------------------------


def test_dask_submit_of_a_bound_function_runs_under_the_submitters_flags(dask_client: Any) -> None:
    with cudnn.flags(benchmark=True, deterministic=True):
        bound = dask_client.submit(backends.bind(tag_with_flags), "bound", pure=False)
        unbound = dask_client.submit(tag_with_flags, "unbound", pure=False)
        assert bound.result(timeout=30) == ("bound", True, True)
        assert unbound.result(timeout=30) == ("unbound", False, False)  # the worker's defaults
    backends.set_defaults({"cudnn.deterministic": True})  # this process's default only
    assert dask_client.submit(tag_with_flags, "default", pure=False).result(timeout=30) == ("default", False, False)
    bound_default = dask_client.submit(backends.bind(tag_with_flags), "bound default", pure=False)
    assert bound_default.result(timeout=30) == ("bound default", False, True)
    # The worker is another process: its pid is not ours.
    import os

    assert dask_client.submit(os.getpid, pure=False).result(timeout=30) != os.getpid()


# -- async generators finalised in another task -----------------------------------------------------


@pytest.mark.parametrize("synced", [False, True], ids=["plain-loop", "task-step-sync"])
def test_abandoned_async_generator_with_a_scope_is_finalised_cleanly(synced: bool) -> None:
    errors: list[dict[str, Any]] = []
    finally_saw: list[tuple[bool, bool]] = []  # (the generator's flag, finalised in another task)
    GENERATORS = 200

    @cudnn.flags(benchmark=True)
    async def numbers(consumer: asyncio.Task[Any] | None) -> Any:
        try:
            for i in range(10):
                await asyncio.sleep(0)
                yield i
        finally:
            await asyncio.sleep(0)  # an await in the finaliser too
            finally_saw.append((cudnn.benchmark, asyncio.current_task() is not consumer))

    async def consume() -> None:
        me = asyncio.current_task()
        with cudnn.flags(deterministic=True):
            async for n in numbers(me):
                assert (cudnn.benchmark, cudnn.deterministic) == (False, True)  # the consumer's own
                if n == 2:
                    break  # abandoned: asyncio's finaliser hook closes it in a new task
            assert (cudnn.benchmark, cudnn.deterministic) == (False, True)

    async def main() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        if synced:
            backends.asyncio.install()
        for _ in range(GENERATORS):
            await consume()
        for _ in range(10):  # let the finaliser tasks run
            await asyncio.sleep(0)
        return backends.snapshot().to_dict()

    defaults = backends.snapshot().to_dict()
    after = asyncio.run(main())

    assert errors == []
    assert not any("different Context" in repr(e) for e in errors)
    assert len(finally_saw) == GENERATORS
    assert all(flag for flag, _ in finally_saw)  # the finally block ran under the generator's flags
    assert all(elsewhere for _, elsewhere in finally_saw)  # and really in another task
    assert after == defaults
    assert backends.snapshot().to_dict() == defaults
    gc.collect()
    codes = {numbers.__code__, numbers.__wrapped__.__code__}  # the scope's wrapper and the body
    # type(), not isinstance(): isinstance reads __class__, which some objects of other libraries in
    # the process answer with a deprecation warning (torch's, once imported)
    alive = [o for o in gc.get_objects() if type(o) is types.AsyncGeneratorType and o.ag_code in codes]
    assert alive == []


def test_a_task_cancelled_before_its_first_step_leaves_no_unawaited_coroutine() -> None:
    import gc
    import warnings

    async def main() -> None:
        backends.asyncio.install()
        task = asyncio.create_task(asyncio.sleep(0))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
        gc.collect()
