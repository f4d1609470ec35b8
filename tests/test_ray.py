"""backends.integrations.ray on a real local Ray cluster: tasks, actors, async and threaded
actors, generators and nested calls run under the flags of the code that calls ``.remote()``,
captured at that call; a worker process that Ray reuses keeps nothing between calls."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import uuid
from typing import Any

import pytest

import backends
from tests._dev_tools import import_ray

ray = import_ray()
backends_ray = pytest.importorskip("backends.integrations.ray")

pytestmark = pytest.mark.usefixtures("ray_cluster")


def observed() -> tuple[bool, bool, bool]:
    """What a task sees: three flags, by their effective values there."""
    return backends.cudnn.deterministic, backends.cudnn.benchmark, backends.cuda.matmul.allow_tf32


DEFAULTS = (False, False, False)


@backends_ray.remote
def flags_in_a_task(tag: str) -> tuple[str, tuple[bool, bool, bool], int]:
    return tag, observed(), os.getpid()


@ray.remote
def flags_in_a_plain_ray_task() -> tuple[tuple[bool, bool, bool], int, list[str]]:
    return observed(), os.getpid(), sorted({row.source for row in backends.describe()})


@backends_ray.remote
def nested(tag: str) -> tuple[tuple[bool, bool, bool], Any]:
    with backends.cuda.matmul.tf32(True):  # the task's own scope goes along with its flags
        inner = ray.get(flags_in_a_task.remote(tag))
    return observed(), inner


@backends_ray.remote
def engine() -> bool:
    import backends._engine

    return bool(backends._engine.ACCELERATED)


def test_a_task_runs_under_the_flags_at_remote_not_at_decoration() -> None:
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        ref = flags_in_a_task.remote("scoped")
    plain = flags_in_a_task.remote("plain")
    tag, seen, pid = ray.get(ref, timeout=60)
    assert (tag, seen) == ("scoped", (True, True, False))
    assert pid != os.getpid()  # another process
    assert ray.get(plain, timeout=60)[:2] == ("plain", DEFAULTS)


def test_process_defaults_of_the_caller_travel_too_and_options_keep_the_flags() -> None:
    backends.set_defaults({"cuda.matmul.allow_tf32": True})  # the caller's default: in its snapshot
    assert ray.get(flags_in_a_task.remote("default"), timeout=60)[1] == (False, False, True)
    with backends.cudnn.flags(deterministic=True):
        tag, seen, _ = ray.get(flags_in_a_task.options(num_cpus=0, name="renamed").remote("opt"), timeout=60)
    assert (tag, seen) == ("opt", (True, False, True))


def test_the_workers_run_the_callers_engine() -> None:
    import backends._engine

    assert ray.get(engine.remote(), timeout=60) is bool(backends._engine.ACCELERATED)


def test_nested_remote_calls_carry_the_flags_further() -> None:
    with backends.cudnn.flags(deterministic=True):
        outer, (tag, inner, _) = ray.get(nested.remote("inner"), timeout=60)
    assert outer == (True, False, False)
    assert (tag, inner) == ("inner", (True, False, True))  # the outer task's flags, with its own scope


def test_a_reused_worker_process_keeps_nothing_between_calls() -> None:
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        scoped = ray.get([flags_in_a_task.remote(str(i)) for i in range(20)], timeout=120)
    plain = ray.get([flags_in_a_plain_ray_task.remote() for _ in range(20)], timeout=120)
    assert all(seen == (True, True, False) for _, seen, _ in scoped)
    assert all(seen == DEFAULTS and sources == ["default"] for seen, _, sources in plain)
    # The same worker processes ran both kinds: what they saw is what reuse leaves behind.
    assert {pid for *_, pid in scoped} & {pid for _, pid, _ in plain}


@backends_ray.remote
class Counter:
    """An actor: one worker process for all its calls."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.at_init = observed()

    def init_flags(self) -> tuple[int, tuple[bool, bool, bool]]:
        return self.start, self.at_init

    def now(self) -> tuple[tuple[bool, bool, bool], list[str]]:
        return observed(), sorted({row.source for row in backends.describe()})

    def _unscoped(self) -> tuple[tuple[bool, bool, bool], list[str]]:
        """A private method: not wrapped, so it sees what earlier calls left in this process."""
        return observed(), sorted({row.source for row in backends.describe()})

    def gather(self, other: Any) -> tuple[bool, bool, bool]:
        """Calls another actor through a handle passed in the call: with this call's flags."""
        return ray.get(other.now.remote(), timeout=60)[0]

    @staticmethod
    def static_now() -> tuple[bool, bool, bool]:
        return observed()


def test_an_actor_runs_init_and_each_call_under_the_flags_of_its_remote() -> None:
    with backends.cudnn.flags(benchmark=True):
        actor = Counter.remote(7)
    assert ray.get(actor.init_flags.remote(), timeout=60) == (7, (False, True, False))
    with backends.cudnn.flags(deterministic=True):
        scoped = actor.now.remote()
        static = actor.static_now.remote()
    assert ray.get(scoped, timeout=60) == ((True, False, False), ["scope"])
    assert ray.get(static, timeout=60) == (True, False, False)
    # The same process, the next call: nothing left over, and no process default was set there.
    assert ray.get(actor.now.remote(), timeout=60) == (DEFAULTS, ["scope"])  # the caller's snapshot: every flag
    assert ray.get(actor.ray_actor_handle._unscoped.remote(), timeout=60) == (DEFAULTS, ["default"])
    with backends.cuda.matmul.tf32(True):
        options = ray.get(actor.now.options(name="now-again").remote(), timeout=60)
    assert options[0] == (False, False, True)


def test_an_actor_handle_pickles_and_its_calls_carry_the_flags_of_the_caller() -> None:
    first, second = Counter.remote(1), Counter.remote(2)
    copy = pickle.loads(pickle.dumps(second))
    assert isinstance(copy, backends_ray.ActorHandle)
    with backends.cudnn.flags(deterministic=True):
        assert ray.get(first.gather.remote(second), timeout=60) == (True, False, False)
    assert ray.get(first.gather.remote(copy), timeout=60) == DEFAULTS
    # A handle Ray gives back (a named actor) is wrapped by ActorHandle().
    name = f"counter-{uuid.uuid4()}"  # a name of this test's own, on the session's cluster
    named = Counter.options(name=name).remote(3)
    ray.get(named.now.remote(), timeout=60)
    again = backends_ray.ActorHandle(ray.get_actor(name))
    with backends.cudnn.flags(benchmark=True):
        assert ray.get(again.now.remote(), timeout=60)[0] == (False, True, False)


@backends_ray.remote
class AsyncActor:
    """An async actor: calls run as tasks of one event loop, interleaved at each await."""

    def __init__(self) -> None:
        self.second_started = asyncio.Event()

    async def first(self) -> tuple[bool, bool, bool]:
        await self.second_started.wait()  # the second call runs meanwhile, with its own flags
        return observed()

    async def second(self) -> tuple[bool, bool, bool]:
        self.second_started.set()
        await asyncio.sleep(0)
        return observed()

    async def ticks(self, n: int) -> Any:
        for _ in range(n):
            await asyncio.sleep(0)
            yield observed()


def test_an_async_actor_runs_each_interleaved_call_under_its_own_flags() -> None:
    actor = AsyncActor.remote()
    with backends.cudnn.flags(deterministic=True):
        first = actor.first.remote()
    with backends.cudnn.flags(benchmark=True):
        second = actor.second.remote()
    assert ray.get([first, second], timeout=60) == [(True, False, False), (False, True, False)]
    with backends.cuda.matmul.tf32(True):
        refs = actor.ticks.remote(3)
    assert [ray.get(ref, timeout=60) for ref in refs] == [(False, False, True)] * 3
    assert ray.get(actor.second.remote(), timeout=60) == DEFAULTS


@backends_ray.remote(max_concurrency=2)
class ThreadedActor:
    """A threaded actor: two calls at once, in two threads."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2)

    def meet(self) -> tuple[bool, bool, bool]:
        self.barrier.wait(timeout=30)  # both calls are running now
        return observed()


def test_a_threaded_actor_runs_each_concurrent_call_under_its_own_flags() -> None:
    actor = ThreadedActor.remote()
    with backends.cudnn.flags(deterministic=True):
        one = actor.meet.remote()
    with backends.cudnn.flags(benchmark=True):
        two = actor.meet.remote()
    assert ray.get([one, two], timeout=60) == [(True, False, False), (False, True, False)]


@backends_ray.remote
def generate(n: int) -> Any:
    for _ in range(n):
        yield observed()


def test_a_generator_task_runs_under_the_flags_at_remote() -> None:
    with backends.cudnn.flags(deterministic=True):
        refs = generate.remote(3)
    assert [ray.get(ref, timeout=60) for ref in refs] == [(True, False, False)] * 3
    with backends.cudnn.flags(benchmark=True):
        returns = generate.options(num_returns=2).remote(2)
    assert ray.get(returns, timeout=60) == [(False, True, False)] * 2


def test_misuse_gets_a_clear_error() -> None:
    with pytest.raises(TypeError, match="takes a function or a class, got int"):
        backends_ray.remote(42)
    with pytest.raises(TypeError, match=r"already remote: use @backends\.integrations\.ray\.remote in place"):
        backends_ray.remote(flags_in_a_plain_ray_task)
    with pytest.raises(TypeError, match="already remote"):
        backends_ray.remote(flags_in_a_task)
    with pytest.raises(TypeError, match="takes a Ray actor handle"):
        backends_ray.ActorHandle(object())
    with pytest.raises(TypeError, match="takes one function or class, or only Ray's options"):
        backends_ray.remote(observed, num_cpus=1)
    # Ray's own argument check, in the caller, as for a plain remote function.
    with pytest.raises(TypeError, match="tag"):
        flags_in_a_task.remote()
    # Ray's object underneath, called without a snapshot: the worker says what is missing.
    with pytest.raises(ray.exceptions.RayTaskError, match=r"without the caller's flags.*got dict"):
        ray.get(flags_in_a_task.ray_remote_function.remote({"cudnn.deterministic": True}, "x"), timeout=60)
    # ...and with one, it runs under it.
    snap = backends.Snapshot.from_dict({**backends.snapshot(), "cudnn.benchmark": True})
    assert ray.get(flags_in_a_task.ray_remote_function.remote(snap, "x"), timeout=60)[1] == (False, True, False)
