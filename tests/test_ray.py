"""backends.integrations.ray on a real local Ray cluster: tasks, actors, async and threaded
actors, generators and nested calls run under the flags of the code that calls ``.remote()``,
captured at that call; a worker process that Ray reuses keeps nothing between calls."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
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
        chained = flags_in_a_task.options(num_cpus=0).options(name="renamed again")  # later options win
        assert ray.get(chained.remote("chained"), timeout=60)[:2] == ("chained", (True, False, True))
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


def test_each_set_of_flags_runs_its_own_ray_function_up_to_a_bound_and_later_sets_go_as_an_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backends_ray, "_PINNED_SETS", 2)
    work = backends_ray.remote(observed)  # a new remote function: no set of flags exported for it yet
    renamed = work.options(name="renamed")
    sets = [{"deterministic": True}, {"benchmark": True}, {"deterministic": True, "benchmark": True}]
    seen = []
    for _ in range(2):
        for flags in sets:
            with backends.cudnn.flags(**flags):
                seen.append(ray.get([work.remote(), renamed.remote()], timeout=60))
    each = [(True, False, False), (False, True, False), (True, True, False)]
    assert seen == [[expected, expected] for expected in each * 2]
    # The first two sets got a Ray function each, shared with .options(); the third went as an argument.
    assert len(work._exports.pinned) == 2 and renamed._exports is work._exports


def test_threads_calling_under_new_flags_at_once_export_no_more_than_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends_ray, "_PINNED_SETS", 2)
    work = backends_ray.remote(observed)
    start = threading.Barrier(8)
    seen: dict[int, Any] = {}

    def call(i: int) -> None:
        with backends.flags({"cudnn.benchmark_limit": i + 1}), backends.cudnn.flags(deterministic=bool(i % 2)):
            start.wait()
            seen[i] = work.remote()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: their checks and exports interleave
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert [ray.get(seen[i], timeout=60) for i in range(8)] == [(bool(i % 2), False, False) for i in range(8)]
    assert len(work._exports.pinned) == 2


def test_every_call_sees_what_the_function_held_at_its_first_call_whatever_its_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backends_ray, "_PINNED_SETS", 2)
    scale = 1

    def scaled() -> tuple[int, tuple[bool, bool, bool]]:  # a closure: cloudpickle copies it, with its cell
        return scale, observed()

    work = backends_ray.remote(scaled)
    assert repr(work) == "<backends.integrations.ray.RemoteFunction of " + scaled.__qualname__ + ">"
    first = ray.get(work.remote(), timeout=60)
    scale = 2  # after the first call: Ray's one export of a plain function would not see it
    with backends.cudnn.flags(deterministic=True):  # a second set: a Ray function of its own
        pinned = ray.get(work.remote(), timeout=60)
    with backends.cudnn.flags(benchmark=True):  # past the bound: the flags go as an argument
        argument = ray.get(work.options(num_cpus=0).remote(), timeout=60)
    assert (first, pinned, argument) == ((1, DEFAULTS), (1, (True, False, False)), (1, (False, True, False)))
    assert scaled() == (2, DEFAULTS)  # here, the closure holds the new value


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
    # A function that cannot be pickled: named, with the reason, at the call (as Ray does at its first).
    lock = threading.Lock()

    def holds_a_lock() -> bool:
        return lock.locked()

    with pytest.raises(TypeError, match=r"Could not serialize the function .*holds_a_lock for Ray: .*lock"):
        backends_ray.remote(holds_a_lock).remote()
    # Ray's own argument check, in the caller, as for a plain remote function.
    with pytest.raises(TypeError, match="tag"):
        flags_in_a_task.remote()
    # Ray's object underneath, called without a snapshot: the worker says what is missing.
    with pytest.raises(ray.exceptions.RayTaskError, match=r"without the caller's flags.*got dict"):
        ray.get(flags_in_a_task.ray_remote_function.remote({"cudnn.deterministic": True}, "x"), timeout=60)
    # ...and with one, it runs under it.
    snap = backends.Snapshot.from_dict({**backends.snapshot(), "cudnn.benchmark": True})
    assert ray.get(flags_in_a_task.ray_remote_function.remote(snap, "x"), timeout=60)[1] == (False, True, False)


# -- what a worker accepts as the caller's flags -------------------------------------------------------
class WritesAMarker:
    """A pickle whose loading writes a file: it must never be loaded where it is sent as data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@backends_ray.remote
class Echo:
    def echo(self, data: bytes) -> tuple[int, tuple[bool, bool, bool]]:
        return len(data), observed()


@backends_ray.remote
def echo(data: bytes) -> tuple[int, tuple[bool, bool, bool]]:
    return len(data), observed()


def test_bytes_sent_first_to_rays_own_objects_are_never_unpickled(tmp_path: Any) -> None:
    marker = tmp_path / "loaded"
    payloads = {
        "a pickle that writes a file when loaded": pickle.dumps(WritesAMarker(str(marker))),
        "random bytes": os.urandom(64),
        "a pickled snapshot": pickle.dumps(backends.snapshot()),
    }
    actor = Echo.remote()
    for what, payload in payloads.items():
        for call in (echo.ray_remote_function.remote, actor.ray_actor_handle.echo.remote):
            with pytest.raises(ray.exceptions.RayTaskError) as raised:
                ray.get(call(payload, b"data"), timeout=60)
            assert isinstance(raised.value.as_instanceof_cause(), TypeError), what
            assert "without the caller's flags" in str(raised.value), what
            assert "got bytes that are not the flags .remote() sends" in str(raised.value), what
    assert not marker.exists()  # no payload ran in any worker
    # Any other argument is passed as it is, bytes included; the wrappers' own calls work as before.
    with backends.cudnn.flags(deterministic=True):
        assert ray.get(echo.remote(payloads["random bytes"]), timeout=60) == (64, (True, False, False))
        assert ray.get(actor.echo.remote(payloads["a pickled snapshot"]), timeout=60)[1] == (True, False, False)
    assert not marker.exists()


def test_the_encoded_flags_that_remote_sends_decode_in_the_worker_and_a_tampered_copy_is_refused() -> None:
    from backends._engine.carry import MAGIC, encode

    with backends.cudnn.flags(benchmark=True):
        sent = encode(backends.snapshot())  # what .remote() sends
    assert ray.get(echo.ray_remote_function.remote(sent, b"xy"), timeout=60) == (2, (False, True, False))
    tampered = sent.replace(b'"cudnn.benchmark":true', b'"cudnn.benchmark":"yes"')
    assert tampered != sent and tampered.startswith(MAGIC)
    with pytest.raises(ray.exceptions.RayTaskError, match=r"flags encoded by backends that this worker cannot read"):
        ray.get(echo.ray_remote_function.remote(tampered, b"xy"), timeout=60)


# -- functions decorated in a notebook or a script's __main__ -------------------------------------------
def test_decorated_functions_from_main_run_on_workers_with_their_own_pin() -> None:
    from tests._main_cell import as_main

    cell = as_main()  # cloudpickle copies these by value, as a notebook's
    pinned = backends_ray.remote(cell["pinned"])
    numbers = backends_ray.remote(cell["pinned_numbers"])
    plain = ray.remote(cell["pinned"])  # Ray alone: the pin goes along, the caller's flags do not
    with backends.cudnn.flags(benchmark=True):
        bound = backends.bind(cell["unpinned"])
    calls_bound = ray.remote(lambda tag: bound(tag))  # (ray.remote takes functions: one that calls it)
    with backends.cudnn.flags(benchmark=True):
        refs = [pinned.remote("a"), plain.remote("b"), calls_bound.remote("c")]
        streamed = numbers.options(num_returns="streaming").remote(2)
    assert ray.get(refs, timeout=60) == [("a", (True, True)), ("b", (True, False)), ("c", (False, True))]
    assert [ray.get(ref, timeout=60) for ref in streamed] == [(0, (True, True)), (1, (True, True))]


def test_an_actor_class_from_main_with_decorated_methods_runs_them_with_their_pin() -> None:
    from tests._main_cell import as_main

    Model = as_main()["Model"]
    with backends.cudnn.flags(benchmark=True):
        ours = backends_ray.remote(Model).remote(2)
        theirs = ray.remote(Model).remote(3)
        calls = [ours.predict.remote(5), ours.predict_async.remote(5), ours.unpinned.remote(5)]
        calls.append(theirs.predict.remote(1))  # Ray alone: the pin goes along, the caller's flags do not
    pin = (True, True)
    assert ray.get(calls, timeout=60) == [(10, pin), (10, pin), (10, (False, True)), (3, (True, False))]
