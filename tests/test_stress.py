"""Stress (issue 5, item 2): 32 threads and 5,000 asyncio tasks enter, assign, read and exit
scopes all at once, and every read is checked against what that thread or task must see.

Each thread and task runs a random program from its own ``random.Random(seed)`` and keeps
its own stack of expected frames (the model). Scopes come from a small pool shared by
everyone (entered nested, in themselves, from many threads and tasks at once) or are built
fresh during the run; bodies assign inside scopes, call decorated functions, coroutines,
generators and async generators, and tasks await ``asyncio.sleep(0)`` inside scopes and
start child tasks. Process defaults never change during the run, so every read is exact.
Mismatches are counted, not raised at the first, and reported with examples.

Memory: tracemalloc runs through a warm-up and the run; after ``gc.collect()`` the traced
memory must be back within ``MEMORY_TOLERANCE`` of where it was after the warm-up (no leaked
frames, tokens, scopes or contexts), and weak references to every scope, generator and child
task made during the run must be dead.

Scale with ``BACKENDS_SOAK=<factor>`` (default 1) for a longer local soak, e.g.
``BACKENDS_SOAK=20 pytest tests/test_stress.py -s``; ``-s`` prints the figures.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import operator
import os
import random
import sys
import threading
import time
import tracemalloc
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

import backends
from backends._engine import state as engine

SOAK = float(os.environ.get("BACKENDS_SOAK", "") or "1")
THREADS = 32
THREAD_CYCLES = max(1, round(20_000 * SOAK))
TASKS = max(1, round(5_000 * SOAK))
TASK_CYCLES = 25  # each task is a short program; a child task runs a quarter of one
MAX_DEPTH = 8  # scopes entered by hand at once in one context (decorated calls nest further)
#: Threads switch every 1 ms instead of every 5 ms: more interleavings, at some cost.
SWITCH_INTERVAL = 1e-3
SEED = 20_250_501
#: Traced memory may end this far from where it started (interpreter noise). A leak of one
#: frame dict or token per thousand cycles would be ~0.2 MB; measured noise is ~3 KB on
#: Python 3.11 to 3.13, whatever the scale.
MEMORY_TOLERANCE = 64 * 1024

FLAGS = backends.FLAGS
NAMES = tuple(flag.name for flag in FLAGS)
_VIEWS = {  # flag -> (namespace, view attribute) for torch 2.9's fp32_precision spelling
    "cuda.matmul.allow_tf32": (backends.cuda.matmul, "fp32_precision"),
    "cudnn.allow_tf32": (backends.cudnn.conv, "fp32_precision"),
}


def _reader(name: str) -> Callable[[], object]:
    if name == "cuda.preferred_linalg_library":
        return backends.cuda.preferred_linalg_library  # torch's function spelling
    namespace, _, attribute = name.rpartition(".")
    return functools.partial(getattr, operator.attrgetter(namespace)(backends), attribute)


def _writer(name: str) -> Callable[[object], object]:
    if name == "cuda.preferred_linalg_library":
        return backends.cuda.preferred_linalg_library
    namespace, _, attribute = name.rpartition(".")
    return functools.partial(setattr, operator.attrgetter(namespace)(backends), attribute)


READ: tuple[tuple[str, Callable[[], object]], ...] = tuple((name, _reader(name)) for name in NAMES)
READ_ONE = dict(READ)
WRITE = {name: _writer(name) for name in NAMES}


def random_value(flag: backends.Flag, rng: random.Random) -> object:
    if flag.type is bool:
        return rng.random() < 0.5
    if flag.type is int:
        # mostly above 256, so each value is a fresh int object a leak would keep alive
        return rng.randrange(flag.minimum or 0, 1 << 20)
    return rng.choice(flag.choices)


def random_mapping(rng: random.Random) -> dict[str, object]:
    return {flag.name: random_value(flag, rng) for flag in rng.sample(FLAGS, rng.randint(1, 4))}


def same(got: object, want: object) -> bool:
    return got is want or (type(got) is type(want) and got == want)


# -- what each context must see ---------------------------------------------------------------


class Tally:
    """Counts for one thread, or for all the tasks of the loop thread (one thread: no lock)."""

    def __init__(self) -> None:
        self.cycles = 0
        self.checks = 0
        self.mismatches = 0
        self.examples: list[str] = []
        self.errors: list[str] = []
        self.weak: list[weakref.ref[Any]] = []

    def mismatch(self, text: str) -> None:
        self.mismatches += 1
        if len(self.examples) < 5:
            self.examples.append(text)


class Model:
    """One thread's or task's program and its expected state: a stack of frames (the
    overrides it must see, innermost last) and the scopes it entered by hand."""

    def __init__(self, who: str, seed: int, tally: Tally, base: dict[str, object], scoped: bool) -> None:
        self.who = who
        self.rng = random.Random(seed)
        self.tally = tally
        self.frames = [base]
        self.entered: list[backends.Scope] = []
        self.scoped_base = scoped  # created inside a scope (a task): assignment is scoped
        self.cycle = 0

    def in_scope(self) -> bool:
        return self.scoped_base or len(self.frames) > 1

    def expect(self, name: str, frame: dict[str, object] | None = None) -> object:
        frame = self.frames[-1] if frame is None else frame
        return frame[name] if name in frame else DEFAULTS[name]

    def check(self, where: str, frame: dict[str, object] | None = None) -> None:
        """Every flag, through its public spelling."""
        frame = self.frames[-1] if frame is None else frame
        self.tally.checks += 1
        for name, read in READ:
            got = read()
            want = frame[name] if name in frame else DEFAULTS[name]
            if not same(got, want):
                self.tally.mismatch(f"{self.who} cycle {self.cycle} {where}: {name} = {got!r}, expected {want!r}")

    def check_one(self, name: str, where: str) -> None:
        self.tally.checks += 1
        got, want = READ_ONE[name](), self.expect(name)
        if not same(got, want):
            self.tally.mismatch(f"{self.who} cycle {self.cycle} {where}: {name} = {got!r}, expected {want!r}")

    def check_describe(self, where: str) -> None:
        """Every flag's value and source through ``describe()``."""
        self.tally.checks += 1
        frame = self.frames[-1]
        for row in backends.describe():
            scoped = row.name in frame
            want = (frame[row.name], "scope") if scoped else (DEFAULTS[row.name], SOURCES[row.name])
            if not same(row.value, want[0]) or row.source != want[1]:
                self.tally.mismatch(
                    f"{self.who} cycle {self.cycle} {where}: describe() has {row.name} = "
                    f"{row.value!r} ({row.source}), expected {want[0]!r} ({want[1]})"
                )

    def check_views(self, where: str) -> None:
        self.tally.checks += 1
        for name, (namespace, attribute) in _VIEWS.items():
            got, want = getattr(namespace, attribute), ("tf32" if self.expect(name) else "ieee")
            if got != want:
                self.tally.mismatch(f"{self.who} cycle {self.cycle} {where}: view of {name} = {got!r}, want {want!r}")

    # -- operations -----------------------------------------------------------------------

    def pick_scope(self) -> tuple[backends.Scope, dict[str, object]]:
        """Mostly a shared pool scope; sometimes a fresh one (weakly tracked)."""
        rng = self.rng
        r = rng.random()
        if r < 0.8:
            return rng.choice(POOL)
        mapping = random_mapping(rng)
        scope: backends.Scope
        if r < 0.87:
            scope = backends.flags(mapping)
        elif r < 0.92:
            scope = backends.Scope(mapping)
        elif r < 0.96:
            limit = rng.randrange(300, 1 << 20)
            scope = backends.cudnn.flags(benchmark_limit=limit, deterministic=rng.random() < 0.5)
            mapping = scope.overrides
            assert mapping["cudnn.benchmark_limit"] == limit
        else:  # a snapshot of this context's flags: a scope setting every flag
            scope = backends.snapshot()
            mapping = {name: self.expect(name) for name in NAMES}
            if dict(scope) != mapping:
                self.tally.mismatch(f"{self.who} cycle {self.cycle}: snapshot() {dict(scope)}, expected {mapping}")
        self.tally.weak.append(weakref.ref(scope))
        return scope, mapping

    def enter(self) -> None:
        scope, mapping = self.pick_scope()
        entered = scope.__enter__()
        self.entered.append(scope)
        self.frames.append({**self.frames[-1], **mapping})
        if entered is not scope:
            self.tally.mismatch(f"{self.who} cycle {self.cycle}: __enter__ returned {entered!r}")
        self.check("after enter")

    def exit(self) -> None:
        scope = self.entered.pop()
        self.frames.pop()
        if scope.__exit__(None, None, None):
            self.tally.mismatch(f"{self.who} cycle {self.cycle}: __exit__ of {scope!r} returned true")
        self.check("after exit")

    def assign(self) -> None:
        if not self.in_scope():  # outside any scope it would set a process default
            self.read()
            return
        rng = self.rng
        flag = rng.choice(FLAGS)
        value = random_value(flag, rng)
        if flag.name in _VIEWS and rng.random() < 0.25:
            namespace, attribute = _VIEWS[flag.name]
            setattr(namespace, attribute, "tf32" if value else "ieee")
        else:
            WRITE[flag.name](value)
        self.frames[-1] = {**self.frames[-1], flag.name: value}
        self.check_one(flag.name, "after assign")

    def read(self) -> None:
        self.check_one(self.rng.choice(NAMES), "read")

    def call(self) -> None:
        """A decorated plain function from the pool (it may nest others and `with`)."""
        self.rng.choice(FUNCTIONS)(self, 0)
        self.check("after a decorated call")

    def generator(self) -> None:
        """A decorated generator: runs in a context copied when it starts, so its own
        assignment is not seen by the consumer, nor the consumer's later changes by it."""
        rng = self.rng
        index = rng.randrange(len(POOL))
        start = {**self.frames[-1], **POOL[index][1]}
        flag = rng.choice(FLAGS)
        inside = {**start, flag.name: random_value(flag, rng)}
        steps = GENERATORS[index](self, start, (flag.name, inside[flag.name]))
        self.tally.weak.append(weakref.ref(steps))
        next(steps)  # starts it: its context is copied here
        self.check("consumer after the generator started")
        next(steps)  # it assigned inside
        self.check("consumer after the generator assigned")
        pushed = False
        if self.in_scope():
            self.assign()
        elif len(self.frames) <= MAX_DEPTH:
            self.enter()
            pushed = True
        if rng.random() < 0.5:
            next(steps)  # checks its own frame, then waits at the last yield
            steps.close()
        else:
            for _ in steps:
                pass
        self.check("consumer after the generator ended")
        if pushed:
            self.exit()

    def unwind(self) -> None:
        while self.entered:
            self.exit()

    def step(self) -> None:
        """One cycle of a thread's program."""
        r = self.rng.random()
        depth = len(self.entered)
        if r < 0.24:
            self.enter() if depth < MAX_DEPTH else self.exit()
        elif r < 0.46:
            self.exit() if depth else self.enter()
        elif r < 0.62:
            self.assign()
        elif r < 0.84:
            self.read()
        elif r < 0.93:
            self.call()
        elif r < 0.96:
            self.check_describe("describe")
            self.check_views("views")
        else:
            self.generator()

    # -- asyncio ----------------------------------------------------------------------------

    async def astep(self) -> None:
        """One cycle of a task's program: the thread operations plus awaits inside scopes."""
        r = self.rng.random()
        depth = len(self.entered)
        if r < 0.15:
            if depth < MAX_DEPTH:
                scope, mapping = self.pick_scope()
                await scope.__aenter__()
                self.entered.append(scope)
                self.frames.append({**self.frames[-1], **mapping})
                self.check("after __aenter__")
            else:
                await self.aexit()
        elif r < 0.30:
            await self.aexit() if depth else self.enter()
        elif r < 0.42:
            await asyncio.sleep(0)
            self.check("after sleep(0)")
        elif r < 0.52:
            scope, mapping = self.pick_scope()
            async with scope:
                self.frames.append({**self.frames[-1], **mapping})
                self.check("in async with")
                await asyncio.sleep(0)
                if self.rng.random() < 0.5:
                    self.assign()
                await asyncio.sleep(0)
                self.check("in async with after sleep(0)")
                self.frames.pop()
            self.check("after async with")
        elif r < 0.60:
            await self.rng.choice(COROUTINES)(self, 0)
            self.check("after a decorated coroutine")
        elif r < 0.64:
            await self.agenerator()
        elif r < 0.66:
            await self.child()
        else:
            self.step()

    async def aexit(self) -> None:
        scope = self.entered.pop()
        self.frames.pop()
        if await scope.__aexit__(None, None, None):
            self.tally.mismatch(f"{self.who} cycle {self.cycle}: __aexit__ of {scope!r} returned true")
        self.check("after __aexit__")

    async def agenerator(self) -> None:
        rng = self.rng
        index = rng.randrange(len(POOL))
        start = {**self.frames[-1], **POOL[index][1]}
        flag = rng.choice(FLAGS)
        inside = {**start, flag.name: random_value(flag, rng)}
        steps = AGENERATORS[index](self, start, (flag.name, inside[flag.name]))
        self.tally.weak.append(weakref.ref(steps))
        await steps.__anext__()
        self.check("consumer after the async generator started")
        await steps.__anext__()
        self.check("consumer after the async generator assigned")
        if self.in_scope():
            self.assign()
        if rng.random() < 0.5:
            await steps.__anext__()
            await steps.aclose()
        else:
            async for _ in steps:
                pass
        self.check("consumer after the async generator ended")

    async def child(self) -> None:
        """A child task copies this context at creation; its changes never flow back,
        and this task's changes after creating it are not seen by it."""
        model = Model(f"{self.who}/child", self.rng.randrange(1 << 32), self.tally, self.frames[-1], self.in_scope())
        task = asyncio.create_task(run_task(model, TASK_CYCLES // 4))
        self.tally.weak.append(weakref.ref(task))
        if self.in_scope():
            self.assign()
        await asyncio.sleep(0)
        self.check("parent while its child runs")
        await task
        self.check("parent after its child ended")

    async def aunwind(self) -> None:
        while self.entered:
            await self.aexit()


# -- the shared pool and its decorated functions -------------------------------------------------


def make_function(scope: backends.Scope, mapping: dict[str, object]) -> Callable[[Model, int], None]:
    @scope
    def body(model: Model, depth: int) -> None:
        rng = model.rng
        model.frames.append({**model.frames[-1], **mapping})
        try:
            model.check("in a decorated function")
            if rng.random() < 0.5:
                model.assign()
            if depth < 2 and rng.random() < 0.3:
                rng.choice(FUNCTIONS)(model, depth + 1)
                model.check("after a nested decorated call")
            if rng.random() < 0.3:
                inner, inner_mapping = rng.choice(POOL)
                with inner:
                    model.frames.append({**model.frames[-1], **inner_mapping})
                    model.check("in with inside a decorated function")
                    model.assign()
                    model.frames.pop()
                model.check("after with inside a decorated function")
        finally:
            model.frames.pop()

    return body


def make_coroutine(scope: backends.Scope, mapping: dict[str, object]) -> Callable[[Model, int], Awaitable[None]]:
    @scope
    async def body(model: Model, depth: int) -> None:
        rng = model.rng
        model.frames.append({**model.frames[-1], **mapping})
        try:
            model.check("in a decorated coroutine")
            await asyncio.sleep(0)
            if rng.random() < 0.5:
                model.assign()
            await asyncio.sleep(0)
            model.check("in a decorated coroutine after sleep(0)")
            if depth < 1 and rng.random() < 0.3:
                await rng.choice(COROUTINES)(model, depth + 1)
                model.check("after a nested decorated coroutine")
        finally:
            model.frames.pop()

    return body


def make_generator(scope: backends.Scope) -> Callable[..., Iterator[None]]:
    @scope
    def steps(model: Model, start: dict[str, object], change: tuple[str, object]) -> Iterator[None]:
        model.check("generator started", start)
        yield
        WRITE[change[0]](change[1])
        frame = {**start, change[0]: change[1]}
        model.check("generator after its own assignment", frame)
        yield
        model.check("generator after the consumer changed its own", frame)
        yield

    return steps


def make_async_generator(scope: backends.Scope) -> Callable[..., AsyncIterator[None]]:
    @scope
    async def steps(model: Model, start: dict[str, object], change: tuple[str, object]) -> AsyncIterator[None]:
        model.check("async generator started", start)
        await asyncio.sleep(0)
        yield
        WRITE[change[0]](change[1])
        frame = {**start, change[0]: change[1]}
        await asyncio.sleep(0)
        model.check("async generator after its own assignment", frame)
        yield
        await asyncio.sleep(0)
        model.check("async generator after the consumer changed its own", frame)
        yield

    return steps


# Filled by build_pool(), inside the test, before anything is measured.
POOL: list[tuple[backends.Scope, dict[str, object]]] = []
FUNCTIONS: list[Callable[[Model, int], None]] = []
COROUTINES: list[Callable[[Model, int], Awaitable[None]]] = []
GENERATORS: list[Callable[..., Iterator[None]]] = []
AGENERATORS: list[Callable[..., AsyncIterator[None]]] = []
DEFAULTS: dict[str, object] = {}
SOURCES: dict[str, str] = {}


def build_pool() -> None:
    every = {
        "cudnn.enabled": False, "cudnn.benchmark": True, "cudnn.benchmark_limit": 1234,
        "cudnn.deterministic": True, "cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": True,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
        "cuda.preferred_linalg_library": "magma", "cuda.cufft_plan_cache.max_size": 4321,
        "algorithms.deterministic": True, "algorithms.warn_only": True,
    }
    assert set(every) == set(NAMES)
    POOL[:] = [
        (backends.deterministic(), {
            "cudnn.deterministic": True, "cudnn.benchmark": False, "cudnn.allow_tf32": False,
            "cuda.matmul.allow_tf32": False, "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
            "cuda.matmul.allow_bf16_reduced_precision_reduction": False, "algorithms.deterministic": True,
        }),
        (backends.cudnn.flags(deterministic=True), {"cudnn.deterministic": True}),
        (backends.cudnn.flags(deterministic=False), {"cudnn.deterministic": False}),
        (backends.cudnn.flags(benchmark=True, allow_tf32=False), {"cudnn.benchmark": True, "cudnn.allow_tf32": False}),
        (backends.cuda.matmul.tf32(True), {"cuda.matmul.allow_tf32": True}),
        (backends.cudnn.tf32(False), {"cudnn.allow_tf32": False}),
        (backends.cuda.matmul.flags(allow_bf16_reduced_precision_reduction=False),
         {"cuda.matmul.allow_bf16_reduced_precision_reduction": False}),
        (backends.flags({"cuda.preferred_linalg_library": "cusolver", "cudnn.benchmark_limit": 777}),
         {"cuda.preferred_linalg_library": "cusolver", "cudnn.benchmark_limit": 777}),
        (backends.flags({"cuda.cufft_plan_cache.max_size": 99_999, "cudnn.enabled": False}),
         {"cuda.cufft_plan_cache.max_size": 99_999, "cudnn.enabled": False}),
        (backends.Snapshot.from_dict(every), every),
        (backends.Scope({}), {}),
    ]
    for scope, mapping in POOL:
        assert scope.overrides == mapping, scope
    FUNCTIONS[:] = [make_function(*entry) for entry in POOL]
    COROUTINES[:] = [make_coroutine(*entry) for entry in POOL]
    GENERATORS[:] = [make_generator(scope) for scope, _ in POOL]
    AGENERATORS[:] = [make_async_generator(scope) for scope, _ in POOL]
    rows = backends.describe()
    assert all(row.source != "scope" for row in rows)
    DEFAULTS.clear()
    DEFAULTS.update((row.name, row.value) for row in rows)
    SOURCES.clear()
    SOURCES.update((row.name, row.source) for row in rows)


# -- the run ------------------------------------------------------------------------------------


async def run_task(model: Model, cycles: int) -> None:
    tally = model.tally
    try:
        model.check("task start")
        for cycle in range(cycles):
            model.cycle = cycle
            await model.astep()
            tally.cycles += 1
        await model.aunwind()
        model.check("task end")
    except BaseException as error:  # counted and reported, never stops the other tasks
        tally.errors.append(f"{model.who} cycle {model.cycle}: {error!r}")


def thread_worker(index: int, cycles: int, barrier: threading.Barrier, tally: Tally) -> None:
    model = Model(f"thread {index}", SEED + index, tally, {}, scoped=False)
    try:
        barrier.wait()
        model.check("thread start")
        for cycle in range(cycles):
            model.cycle = cycle
            model.step()
            tally.cycles += 1
        model.unwind()
        model.check("thread end")
    except BaseException as error:
        barrier.abort()
        tally.errors.append(f"{model.who} cycle {model.cycle}: {error!r}")


def loop_worker(tasks: int, cycles: int, barrier: threading.Barrier, tally: Tally) -> None:
    """The asyncio side: one loop in this thread running ``tasks`` tasks; a third are
    created inside a scope, so they start with its overrides (and may assign at depth 0)."""
    parent, parent_mapping = backends.cudnn.flags(benchmark=True, allow_tf32=False), {
        "cudnn.benchmark": True, "cudnn.allow_tf32": False,
    }

    async def main() -> None:
        barrier.wait()
        running = []
        for i in range(tasks):
            seed = SEED + 1_000_000 + i
            if i % 3 == 0:
                with parent:
                    model = Model(f"task {i}", seed, tally, dict(parent_mapping), scoped=True)
                    running.append(asyncio.create_task(run_task(model, cycles)))
            else:
                model = Model(f"task {i}", seed, tally, {}, scoped=False)
                running.append(asyncio.create_task(run_task(model, cycles)))
        await asyncio.gather(*running)
        Model("loop", 0, tally, {}, scoped=False).check("loop after every task")

    try:
        asyncio.run(main())
    except BaseException as error:
        barrier.abort()
        tally.errors.append(f"loop: {error!r}")


class Figures:
    def __init__(self, tallies: list[Tally], seconds: float) -> None:
        self.seconds = seconds
        self.cycles = sum(t.cycles for t in tallies)
        self.checks = sum(t.checks for t in tallies)
        self.mismatches = sum(t.mismatches for t in tallies)
        self.examples = [text for t in tallies for text in t.examples][:20]
        self.errors = [text for t in tallies for text in t.errors][:20]
        self.tracked = sum(len(t.weak) for t in tallies)
        # snapshot() keeps the last snapshot it took, to give it again while the flags are unchanged:
        # that one object is held by design, not leaked.
        kept = backends._engine.scope._last_snapshot[2]
        self.alive = [repr(obj) for t in tallies for ref in t.weak if (obj := ref()) is not None and obj is not kept]


def run(threads: int, thread_cycles: int, tasks: int, task_cycles: int) -> Figures:
    """Start every thread and the loop thread together; return what they counted."""
    barrier = threading.Barrier(threads + 1)
    tallies = [Tally() for _ in range(threads + 1)]
    workers = [
        threading.Thread(target=thread_worker, args=(i, thread_cycles, barrier, tallies[i]), name=f"stress-{i}")
        for i in range(threads)
    ]
    workers.append(threading.Thread(target=loop_worker, args=(tasks, task_cycles, barrier, tallies[-1])))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - start
    finally:
        sys.setswitchinterval(switch)
    del workers, barrier
    gc.collect()
    return Figures(tallies, seconds)


def fill_asyncio_high_water_marks(tasks: int) -> None:
    """Grow what asyncio keeps at its high-water mark for the rest of the process, so
    the run does not count it as growth: the table of its weak set of every task (a set
    never shrinks, and a resize may make it four times the tasks alive then: so create
    four times as many as the run has at once) and CPython's free list of 255 future
    iterators (``await task``)."""

    async def main() -> None:
        gate = asyncio.Event()
        leaves = [asyncio.create_task(gate.wait()) for _ in range(tasks)]

        async def wait(task: asyncio.Task[Any]) -> None:
            await task

        waiters = [asyncio.create_task(wait(leaf)) for leaf in leaves[:300]]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*waiters, *leaves)

    asyncio.run(main())


@pytest.mark.slow
def test_threads_and_tasks_see_exactly_their_own_flags_and_nothing_leaks() -> None:
    build_pool()
    tracemalloc.start()
    try:
        # a small run of the same program fills caches and free lists before the baseline
        warm = run(THREADS, 100, 100, TASK_CYCLES)
        assert (warm.mismatches, warm.errors, warm.alive) == (0, [], []), warm.examples
        del warm
        fill_asyncio_high_water_marks(4 * TASKS)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        writes = engine.version  # bumped by every process-default write
        figures = run(THREADS, THREAD_CYCLES, TASKS, TASK_CYCLES)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    delta = after - before
    print(
        f"\nstress (BACKENDS_SOAK={SOAK:g}): {THREADS} threads x {THREAD_CYCLES} cycles + {TASKS} tasks "
        f"x {TASK_CYCLES} cycles = {figures.cycles} cycles, {figures.checks} checks, "
        f"{figures.mismatches} mismatches, {len(figures.errors)} errors in {figures.seconds:.1f} s; "
        f"traced memory {before} -> {after} bytes (delta {delta:+d}, peak {peak}); "
        f"{figures.tracked} weakly tracked objects, {len(figures.alive)} alive"
    )
    assert engine.version == writes, "a process default was written during the run"
    assert figures.errors == []
    assert figures.mismatches == 0, figures.examples
    assert figures.cycles >= THREADS * THREAD_CYCLES + TASKS * TASK_CYCLES
    assert figures.alive == []
    assert abs(delta) <= MEMORY_TOLERANCE, f"traced memory grew by {delta} bytes"
    # nothing is left entered here, and the process defaults are what they were
    rows = backends.describe()
    assert {row.name: (row.value, row.source) for row in rows} == {n: (DEFAULTS[n], SOURCES[n]) for n in NAMES}
