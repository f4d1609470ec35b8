"""Hardening of the engine (issue 12): process defaults change atomically (2), fork at any
moment (3), decorators follow what a call returns (5), unpickling validates (7), and the
refusal to exit a copy of an active scope names the two objects apart (9, last item).

Behaviour 4 (a signal never masks itself) lives in ``tests/test_faults.py``, beside the
other interrupt tests and their helpers.

The two concurrency tests print their figures with ``-s`` and scale with
``BACKENDS_SOAK=<factor>`` (default 1, a few seconds), e.g.
``BACKENDS_SOAK=20 pytest tests/test_hardening_engine.py -s -k "atomic or fork"``.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import copyreg
import functools
import inspect
import json
import os
import pickle
import select
import signal
import sys
import threading
import time
import types
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import backends
from backends._engine import state as engine
from backends.sync import hooks

from ._helpers import deterministic_now

cudnn, matmul = backends.cudnn, backends.cuda.matmul
SOAK = float(os.environ.get("BACKENDS_SOAK", "") or "1")
HAS_FORK = hasattr(os, "fork")


def other_value(flag: backends.Flag) -> object:
    """A valid value of ``flag`` that differs from its built-in default."""
    if flag.type is bool:
        return not flag.default
    if flag.type is int:
        return int(flag.default) + 1
    return next(choice for choice in flag.choices if choice != flag.default)


class States:
    """The whole sets of process defaults a writer moves between, as ``describe()`` shows
    them (name -> (value, source)): ``flipped`` (every flag changed by ``set_defaults``),
    ``restated`` (the built-in values, but set by ``set_defaults``) and ``built_in``
    (after ``reset_defaults()``)."""

    def __init__(self) -> None:
        backends.reset_defaults()
        self.built_in = {row.name: (row.value, row.source) for row in backends.describe()}
        self.flip = {flag.name: other_value(flag) for flag in backends.FLAGS}
        self.restate = {name: value for name, (value, _) in self.built_in.items()}
        self.flipped = {name: (value, "process default") for name, value in self.flip.items()}
        self.restated = {name: (value, "process default") for name, value in self.restate.items()}
        self.rows = (self.flipped, self.restated, self.built_in)
        self.values = (self.flip, self.restate)  # what snapshot() may show

    def write_cycle(self) -> None:
        """Three writes, each changing every flag or every source at once."""
        backends.set_defaults(self.flip)
        backends.set_defaults(self.restate)
        backends.reset_defaults()


def described() -> dict[str, tuple[object, str]]:
    return {row.name: (row.value, row.source) for row in backends.describe()}


def bound_view() -> dict[str, object]:
    """What a ``bind()`` made now runs under."""
    return backends.bind(lambda: backends.snapshot().to_dict())()


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every 10 µs instead of every 5 ms: far more interleavings."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


# -- 2. process defaults change atomically ---------------------------------------------------------


@pytest.mark.usefixtures("fast_switching")
def test_atomic_defaults_readers_see_a_whole_set_defaults_or_reset_defaults_never_a_mix() -> None:
    states = States()
    cycles = max(1, round(3_000 * SOAK))
    readers = 3
    start = threading.Barrier(readers + 1, timeout=60)
    done = threading.Event()
    reads = [0] * readers
    mixes: list[str] = []

    def check(kind: str, seen: object, allowed: tuple[object, ...]) -> None:
        if seen not in allowed and len(mixes) < 1_000:
            mixes.append(f"{kind}: {seen}")

    def read(index: int) -> None:
        start.wait()
        while not done.is_set():
            check("snapshot", backends.snapshot().to_dict(), states.values)
            check("describe", described(), states.rows)
            check("bind", bound_view(), states.values)
            reads[index] += 3

    def write() -> None:
        start.wait()
        try:
            for _ in range(cycles):
                states.write_cycle()
        finally:
            done.set()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
    threads.append(threading.Thread(target=write))
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    seconds = time.perf_counter() - began
    assert not any(thread.is_alive() for thread in threads)
    print(
        f"\natomic defaults (BACKENDS_SOAK={SOAK:g}): 1 writer thread, {readers} reader threads, "
        f"{3 * cycles} writes, {sum(reads)} reads, {len(mixes)} mixes in {seconds:.1f} s"
    )
    assert sum(reads) > 0
    assert mixes == [], mixes[:5]


def test_atomic_defaults_a_refused_set_defaults_changes_nothing_anywhere() -> None:
    states = States()
    backends.set_defaults(states.flip)
    before = described()
    with pytest.raises(ValueError):
        backends.set_defaults({**states.restate, "cuda.preferred_linalg_library": "CUSOLVER"})
    assert described() == before == states.flipped


# -- 3. fork at any moment -------------------------------------------------------------------------

#: The forking thread's own overrides, which every child must inherit.
FORK_SCOPE = {"cudnn.benchmark_limit": 12_345, "cuda.preferred_linalg_library": "magma"}
#: How long a child may take to report before it counts as hung (and is killed).
CHILD_DEADLINE = 10.0


def child_program(states: States) -> list[str]:
    """Run in a forked child: what is wrong there (nothing, when the fork was clean)."""
    problems: list[str] = []
    snap = backends.snapshot().to_dict()
    if {name: snap[name] for name in FORK_SCOPE} != FORK_SCOPE:
        problems.append(f"the forking thread's overrides are gone: {snap}")
    rest = {name: value for name, value in snap.items() if name not in FORK_SCOPE}
    if not any(rest == {n: v for n, v in allowed.items() if n not in FORK_SCOPE} for allowed in states.values):
        problems.append(f"inherited a mix of two process-default writes: {rest}")
    rows = {name: row for name, row in described().items() if name not in FORK_SCOPE}
    if not any(rows == {n: r for n, r in allowed.items() if n not in FORK_SCOPE} for allowed in states.rows):
        problems.append(f"describe() shows a mix: {rows}")
    # scope, assign in a scope, read
    with cudnn.flags(deterministic=True):
        cudnn.benchmark = True
        if (cudnn.deterministic, cudnn.benchmark) != (True, True):
            problems.append("a scope in the child does not hold")

    def process_defaults() -> None:
        """In an empty context: bare assignment and set_defaults write process defaults."""
        backends.set_defaults({"cudnn.enabled": False})
        cudnn.benchmark_limit = 3
        if (cudnn.enabled, cudnn.benchmark_limit) != (False, 3):
            problems.append("process defaults cannot be written in the child")
        backends.reset_defaults()

    contextvars.Context().run(process_defaults)
    hooks.when_imported("backends_fork_probe_never_imported", lambda module: None)  # the hooks lock
    return problems


def fork_and_check(program: Callable[[], list[str]]) -> str:
    """Fork; the child runs ``program`` and reports. Returns ``"ok"``, ``"hung"`` (no
    report within ``CHILD_DEADLINE``: the child is killed) or what went wrong."""
    report_r, report_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and never return into pytest
        status = 1
        try:
            os.close(report_r)
            problems = program()
            payload = json.dumps(problems).encode()
            status = 0 if not problems else 1
        except BaseException as error:
            payload = json.dumps([f"raised {error!r}"]).encode()
        finally:
            try:
                while payload:
                    payload = payload[os.write(report_w, payload) :]
            finally:
                os._exit(status)
    os.close(report_w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + CHILD_DEADLINE
    hung = False
    while True:
        readable, _, _ = select.select([report_r], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            hung = True
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(report_r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(report_r)
    _, status = os.waitpid(pid, 0)
    if hung:
        return "hung"
    if os.waitstatus_to_exitcode(status) == 0:
        return "ok"
    return b"".join(chunks).decode(errors="replace") or f"exit status {status}"


fork_only = pytest.mark.skipif(not HAS_FORK, reason="no os.fork() on this platform")
fork_warning = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")


@fork_only
@fork_warning
@pytest.mark.usefixtures("fast_switching")
def test_fork_while_a_thread_writes_defaults_gives_children_that_work_at_once() -> None:
    states = States()
    forks = max(1, round(40 * SOAK))
    stop = threading.Event()
    writes = [0]

    def write() -> None:
        while not stop.is_set():
            states.write_cycle()
            writes[0] += 3

    writer = threading.Thread(target=write)
    outcomes: dict[str, int] = {}
    began = time.perf_counter()
    writer.start()
    try:
        with backends.flags(FORK_SCOPE):
            for _ in range(forks):
                outcome = fork_and_check(lambda: child_program(states))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        stop.set()
        writer.join(timeout=60)
    seconds = time.perf_counter() - began
    print(
        f"\nfork (BACKENDS_SOAK={SOAK:g}): 1 writer thread, {writes[0]} writes, {forks} forks, "
        f"{sum(n for o, n in outcomes.items() if o not in ('ok', 'hung'))} children with a mismatch, "
        f"{outcomes.get('hung', 0)} hung, in {seconds:.1f} s"
    )
    assert outcomes == {"ok": forks}, outcomes


@fork_only
@fork_warning
@pytest.mark.parametrize("which", ["process defaults", "import hooks"])
def test_fork_while_another_thread_holds_a_lock_gives_a_child_that_does_not_hang(which: str) -> None:
    """The worst moment: another thread is inside the lock (writing a default, or
    registering an import hook) exactly when this thread forks."""
    states = States()
    lock = engine._lock if which == "process defaults" else hooks._lock
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            # Bounded: fork() may wait for the holder to leave the lock (it does, by design).
            release.wait(0.3)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with backends.flags(FORK_SCOPE):
            outcome = fork_and_check(lambda: child_program(states))
    finally:
        release.set()
        holder.join(timeout=10)
    assert outcome == "ok"


# -- 5. decorators follow what a call returns ----------------------------------------------------

DETERMINISTIC = cudnn.flags(deterministic=True)


class AsyncCallable:
    """A callable object whose ``__call__`` is ``async def``."""

    async def __call__(self, x: int) -> tuple[int, bool]:
        await asyncio.sleep(0)
        return x, cudnn.deterministic


class GeneratorCallable:
    def __call__(self, n: int) -> Iterator[bool]:
        for _ in range(n):
            yield cudnn.deterministic


class AsyncGeneratorCallable:
    async def __call__(self, n: int) -> AsyncIterator[bool]:
        for _ in range(n):
            await asyncio.sleep(0)
            yield cudnn.deterministic


async def _work(x: int) -> tuple[int, bool]:
    """Work docstring."""
    await asyncio.sleep(0)
    return x, cudnn.deterministic


@functools.wraps(_work)
def sync_wrapper(x: int) -> Any:
    """A sync wrapper around an ``async def`` (as some decorators write them)."""
    return _work(x)


@types.coroutine
def _legacy_step() -> Iterator[None]:
    yield


@types.coroutine
def legacy_coroutine() -> Any:
    """A ``types.coroutine`` generator: awaitable, though a generator."""
    yield from _legacy_step()
    return cudnn.deterministic


def returns_legacy_coroutine() -> Any:
    return legacy_coroutine()


def consume(iterator: Iterator[bool]) -> list[tuple[bool, bool]]:
    """(what the body saw, what the consumer sees between steps) for each item."""
    return [(item, cudnn.deterministic) for item in iterator]


def test_decorated_callable_object_with_async_call_sees_the_override_when_awaited() -> None:
    decorated = DETERMINISTIC(AsyncCallable())

    async def main() -> tuple[tuple[int, bool], bool]:
        return await decorated(7), cudnn.deterministic

    assert asyncio.run(main()) == ((7, True), False)


def test_decorated_callable_object_with_generator_call_sees_the_override_when_iterated() -> None:
    iterator = DETERMINISTIC(GeneratorCallable())(3)
    assert consume(iterator) == [(True, False)] * 3


def test_decorated_callable_object_with_async_generator_call_sees_the_override() -> None:
    async def main() -> list[tuple[bool, bool]]:
        return [(item, cudnn.deterministic) async for item in DETERMINISTIC(AsyncGeneratorCallable())(3)]

    assert asyncio.run(main()) == [(True, False)] * 3


def test_decorated_sync_wrapper_around_an_async_def_sees_the_override_when_awaited() -> None:
    decorated = DETERMINISTIC(sync_wrapper)
    assert (decorated.__name__, decorated.__doc__, decorated.__wrapped__) == ("_work", "Work docstring.", sync_wrapper)
    assert inspect.iscoroutinefunction(decorated) is inspect.iscoroutinefunction(sync_wrapper)
    assert inspect.signature(decorated) == inspect.signature(sync_wrapper)

    async def main() -> tuple[tuple[int, bool], bool]:
        coroutine = decorated(1)
        between = cudnn.deterministic  # the call returned; the body has not run
        return await coroutine, between

    assert asyncio.run(main()) == ((1, True), False)


def test_decorated_and_bound_callables_returning_a_types_coroutine_generator_stay_awaitable() -> None:
    async def main() -> tuple[bool, bool]:
        decorated = await DETERMINISTIC(returns_legacy_coroutine)()
        with cudnn.flags(deterministic=True):
            bound = backends.bind(returns_legacy_coroutine)
        return decorated, await bound()

    assert asyncio.run(main()) == (True, True)


def test_a_followed_coroutine_that_raises_restores_the_flags_and_passes_the_error() -> None:
    error = KeyError("from the body")

    async def fails() -> None:
        assert cudnn.deterministic
        raise error

    decorated = DETERMINISTIC(lambda: fails())

    async def main() -> bool:
        with pytest.raises(KeyError) as raised:
            await decorated()
        assert raised.value is error
        return cudnn.deterministic

    assert asyncio.run(main()) is False


async def _async_fn(x: int) -> bool:
    """Async docstring."""
    return cudnn.deterministic


def _gen_fn() -> Iterator[bool]:
    yield cudnn.deterministic


async def _agen_fn() -> AsyncIterator[bool]:
    yield cudnn.deterministic


@pytest.mark.parametrize(
    ("fn", "predicate"),
    [
        (_async_fn, "iscoroutinefunction"),
        (_gen_fn, "isgeneratorfunction"),
        (_agen_fn, "isasyncgenfunction"),
        (deterministic_now, None),
    ],
)
def test_bind_keeps_the_kind_inspect_sees(fn: Callable[..., Any], predicate: str | None) -> None:
    with cudnn.flags(deterministic=True):
        bound = backends.bind(fn)
    for name in ("iscoroutinefunction", "isgeneratorfunction", "isasyncgenfunction"):
        assert getattr(inspect, name)(bound) is (name == predicate), name
    if predicate == "iscoroutinefunction":
        with warnings.catch_warnings():  # asyncio.iscoroutinefunction is deprecated in 3.14
            warnings.simplefilter("ignore", DeprecationWarning)
            assert asyncio.iscoroutinefunction(bound)
        assert asyncio.run(bound(1)) is True
    # still a Bound, with its name, docstring, signature, repr and pickle
    assert isinstance(bound, backends.Bound)
    assert (bound.__name__, bound.__doc__, bound.__wrapped__, bound.fn) == (fn.__name__, fn.__doc__, fn, fn)
    assert inspect.signature(bound) == inspect.signature(fn)
    assert repr(bound) == f"backends.bind({fn!r}) with {bound.snapshot!r}"
    again = pickle.loads(pickle.dumps(bound))
    assert (type(again), again.fn, again.snapshot) == (backends.Bound, fn, bound.snapshot)


def test_a_bound_callable_as_a_class_attribute_does_not_become_a_method() -> None:
    class Holder:
        probe = backends.bind(deterministic_now)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 3.13's partial.__get__ warns here
        assert Holder().probe is Holder.probe
        assert Holder().probe() is False


# -- 7. unpickling validates ------------------------------------------------------------------------

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def construction_error(mapping: object) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError, KeyError)) as raised:
        backends.Scope(mapping)  # type: ignore[arg-type]
    return type(raised.value), str(raised.value)


def load_error(data: bytes) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError, KeyError)) as raised:
        pickle.loads(data)
    return type(raised.value), str(raised.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "scope",
    [cudnn.flags(deterministic=True, benchmark_limit=3), backends.flags({"cuda.preferred_linalg_library": "magma"})],
    ids=["labelled", "mapping"],
)
def test_a_scope_pickles_to_an_equal_working_scope(scope: backends.Scope, protocol: int) -> None:
    again = pickle.loads(pickle.dumps(scope, protocol))
    assert (type(again), repr(again), again.overrides) == (backends.Scope, repr(scope), scope.overrides)
    with again:
        assert backends.snapshot().to_dict().items() >= scope.overrides.items()


TAMPERINGS = [
    # (what, old bytes, new bytes, the mapping they make)
    ("value out of range", b"magma", b"MAGMA", {"cuda.preferred_linalg_library": "MAGMA"}),
    ("unknown name", b"cuda.preferred_linalg_library", b"cuda.preferred_linalg_librarx",
     {"cuda.preferred_linalg_librarx": "magma"}),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("what", "old", "new", "mapping"), TAMPERINGS, ids=[t[0] for t in TAMPERINGS])
def test_tampered_bytes_of_a_scope_pickle_raise_on_load_as_construction_does(
    what: str, old: bytes, new: bytes, mapping: dict[str, object], protocol: int
) -> None:
    data = pickle.dumps(backends.flags({"cuda.preferred_linalg_library": "magma"}), protocol)
    assert old in data
    before = described()
    assert load_error(data.replace(old, new)) == construction_error(mapping)
    assert described() == before


class _ForgedSlots:
    """Pickles as a Scope whose slots are set directly (how a pickle without the Scope's own
    reconstructor, such as one made before it had one, carries its state)."""

    def __init__(self, cls: type, slots: dict[str, object]) -> None:
        self.cls, self.slots = cls, slots

    def __reduce__(self) -> tuple[Any, ...]:
        return (copyreg._reconstructor, (self.cls, object, None), (None, self.slots))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "overrides",
    [{"cudnn.deterministic": "yes"}, {"cudnn.determinstic": True}, {"cudnn.benchmark_limit": -1}, ["not a mapping"]],
    ids=["wrong type", "unknown name", "out of range", "not a mapping"],
)
def test_a_forged_scope_pickle_with_direct_slot_state_is_validated_on_load(overrides: object, protocol: int) -> None:
    data = pickle.dumps(_ForgedSlots(backends.Scope, {"_overrides": overrides, "_label": None}), protocol)
    assert load_error(data) == construction_error(overrides)


def test_a_forged_scope_pickle_with_a_label_that_is_not_a_str_raises_on_load() -> None:
    data = pickle.dumps(_ForgedSlots(backends.Scope, {"_overrides": {}, "_label": 42}))
    with pytest.raises(TypeError, match="label"):
        pickle.loads(data)


def test_a_forged_snapshot_pickle_with_direct_slot_state_is_validated_on_load() -> None:
    partial = {"cudnn.deterministic": True}
    data = pickle.dumps(_ForgedSlots(backends.Snapshot, {"_overrides": partial}))
    with pytest.raises(KeyError, match="a Snapshot needs every flag"):
        pickle.loads(data)


def test_a_live_scope_cannot_be_changed_through_setstate() -> None:
    scope = backends.deterministic()
    before = scope.overrides
    with pytest.raises(TypeError, match="immutable"):
        scope.__setstate__((None, {"_overrides": {"cudnn.deterministic": False}, "_label": None}))
    assert backends.deterministic().overrides == before


# -- 9 (last). exiting a copy of an active scope ----------------------------------------------------


@pytest.mark.parametrize("make", ["copy.copy", "copy.deepcopy", "built again"])
def test_exiting_a_copy_of_the_active_scope_names_the_two_objects_apart(make: str) -> None:
    original = backends.flags({"cudnn.deterministic": True})
    twin = {
        "copy.copy": copy.copy,
        "copy.deepcopy": copy.deepcopy,
        "built again": lambda s: backends.flags({"cudnn.deterministic": True}),
    }[make](original)
    assert twin is not original and repr(twin) == repr(original)
    with original:
        with pytest.raises(RuntimeError) as refused:
            twin.__exit__(None, None, None)
        message = str(refused.value)
        assert cudnn.deterministic is True  # the refused exit changed nothing
    assert f"{id(twin):#x}" in message and f"{id(original):#x}" in message
    assert "a different Scope object with the same overrides" in message
    assert cudnn.deterministic is False


def test_the_refusal_for_a_different_scope_still_names_it_by_its_repr_alone() -> None:
    outer, inner = cudnn.flags(benchmark=True), cudnn.flags(deterministic=True)
    with outer, inner, pytest.raises(RuntimeError) as refused:
        outer.__exit__(None, None, None)
    assert str(refused.value) == (
        f"cannot exit {outer!r}: the innermost scope active in this context is {inner!r}; "
        f"scopes must be exited innermost first, in the context that entered them"
    )
