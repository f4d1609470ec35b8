"""Callables decorated with a scope where cloudpickle copies them by value (a script's ``__main__``,
a notebook), as Ray and Dask send them: each kind round-trips with its pin, its kind, name, docstring
and signature, carrying its scope's overrides and its function but none of the engine's state, on
either engine and from one engine to the other. And decorated generators leave no reference cycle.
(Dask and Ray workers running them: tests/test_dask.py, tests/test_ray.py; a real notebook:
tests/test_notebook.py.)"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import pickle
import pickletools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import backends
from backends._engine import accelerator
from tests._dev_tools import import_extra
from tests._main_cell import CELL, DECORATED, as_main

cloudpickle = import_extra("cloudpickle", "test")

REPO = Path(__file__).resolve().parent.parent
needs_accelerator = pytest.mark.skipif(not accelerator.ACCELERATED, reason=f"pure Python here: {accelerator.reason}")
ENGINES = ["pure", pytest.param("compiled", marks=needs_accelerator)]


async def _collected(numbers: Any) -> list[Any]:
    return [item async for item in numbers]


def outcome(fn: Callable[..., Any], *args: Any) -> Any:
    """What calling ``fn`` gives, run to the end whatever its kind."""
    if inspect.isasyncgenfunction(fn):
        return asyncio.run(_collected(fn(*args)))
    if inspect.iscoroutinefunction(fn):
        return asyncio.run(fn(*args))
    if inspect.isgeneratorfunction(fn):
        return list(fn(*args))
    return fn(*args)


#: Each decorated callable of the cell, its argument, and what it gives under benchmark=True
#: (the caller's) with its pin, deterministic=True.
EXPECTED = {
    "pinned": ("x", ("x", (True, True))),
    "pinned_async": ("y", ("y", (True, True))),
    "pinned_numbers": (2, [(0, (True, True)), (1, (True, True))]),
    "pinned_async_numbers": (2, [(0, (True, True)), (1, (True, True))]),
}
KINDS = (inspect.isfunction, inspect.iscoroutinefunction, inspect.isgeneratorfunction, inspect.isasyncgenfunction)


def globals_named(data: bytes) -> set[str]:
    """``module qualname`` of every global a pickle loads (GLOBAL; STACK_GLOBAL's two strings, pushed
    or fetched from the memo just before it)."""
    named: set[str] = set()
    memo: dict[int, str | None] = {}
    pushed: list[str | None] = []  # what each op pushed: a string, or None for anything else
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            named.add(str(argument))
        elif opcode.name == "STACK_GLOBAL":
            named.add(f"{pushed[-2]} {pushed[-1]}")
        elif opcode.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif opcode.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(argument)] = pushed[-1] if pushed else None  # type: ignore[arg-type]
        elif opcode.name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(int(argument)))  # type: ignore[arg-type]
        else:
            pushed.append(argument if isinstance(argument, str) and "UNICODE" in opcode.name else None)
    return named


@pytest.mark.parametrize("name", DECORATED)
def test_each_decorated_kind_from_main_round_trips_through_cloudpickle_with_its_pin(name: str) -> None:
    original = as_main()[name]
    copy = cloudpickle.loads(cloudpickle.dumps(original))
    assert copy is not original
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        assert getattr(copy, attribute) == getattr(original, attribute)
    assert inspect.signature(copy) == inspect.signature(original)
    assert [kind(copy) for kind in KINDS] == [kind(original) for kind in KINDS]
    argument, expected = EXPECTED[name]
    with backends.cudnn.flags(benchmark=True):
        assert outcome(copy, argument) == expected
        assert outcome(original, argument) == expected
    assert (backends.cudnn.deterministic, backends.cudnn.benchmark) == (False, False)  # nothing left behind


def test_a_class_from_main_with_decorated_methods_round_trips_and_so_do_its_instances() -> None:
    Model = as_main()["Model"]
    copied_class = cloudpickle.loads(cloudpickle.dumps(Model))
    copied_instance = cloudpickle.loads(cloudpickle.dumps(Model(3)))
    with backends.cudnn.flags(benchmark=True):
        assert copied_class(2).predict(5) == (10, (True, True))
        assert asyncio.run(copied_class(2).predict_async(5)) == (10, (True, True))
        assert copied_class(2).unpinned(5) == (10, (False, True))
        assert copied_instance.predict(1) == (3, (True, True))
    assert copied_class.predict.__doc__ == "A method pinned to deterministic=True."


def test_bind_of_a_function_from_main_round_trips_with_the_flags_it_was_bound_under() -> None:
    namespace = as_main()
    with backends.cudnn.flags(benchmark=True):
        bound = backends.bind(namespace["unpinned"])
        bound_pinned = backends.bind(namespace["pinned"])
    copy, copy_pinned = cloudpickle.loads(cloudpickle.dumps((bound, bound_pinned)))
    assert copy("b") == ("b", (False, True))
    assert copy_pinned("c") == ("c", (True, True))  # the decoration's pin over the bound flags


@pytest.mark.parametrize("name", [*DECORATED, "Model"])
def test_the_pickle_carries_the_scope_and_the_function_never_the_engines_state(name: str) -> None:
    data = cloudpickle.dumps(as_main()[name])
    named = globals_named(data)
    ours = {entry for entry in named if entry.startswith("backends")}
    # The scope (Scope, rebuilt through its constructor) and the call object (Decorated, rebuilt by the
    # engine that loads it; on the pure engine its bound call() goes as the function Decorated.call).
    assert ours <= {
        "backends Scope",  # its public module
        "backends._engine.scope Decorated",
        "backends._engine.scope Decorated.call",
    }, named
    assert "backends._engine.scope Decorated" in ours
    assert b"ContextVar" not in data and b"backends.overrides" not in data


def test_a_decorated_function_of_a_module_still_pickles_by_reference_with_pickle_and_cloudpickle() -> None:
    from tests import _helpers

    decorated = backends.cudnn.flags(deterministic=True)(_helpers.deterministic_now)
    _helpers.pinned_for_this_test = decorated  # type: ignore[attr-defined]  # found by its module and name
    try:
        decorated.__qualname__ = decorated.__name__ = "pinned_for_this_test"
        for dumps in (pickle.dumps, cloudpickle.dumps):
            data = dumps(decorated)
            assert b"tests._helpers" in data and b"pinned_for_this_test" in data
            assert pickle.loads(data) is decorated
    finally:
        del _helpers.pinned_for_this_test  # type: ignore[attr-defined]


# -- across processes and engines -------------------------------------------------------------------
DUMP = CELL + """
import sys

import cloudpickle

with backends.cudnn.flags(benchmark=True):
    bound = backends.bind(unpinned)
with open(sys.argv[1], "wb") as file:
    cloudpickle.dump((pinned, pinned_async, pinned_numbers, pinned_async_numbers, Model, bound), file)
"""

LOAD = """
import asyncio, json, sys

import cloudpickle

import backends
from backends._engine import accelerator

async def collected(numbers):
    return [item async for item in numbers]

with open(sys.argv[1], "rb") as file:
    pinned, pinned_async, pinned_numbers, pinned_async_numbers, Model, bound = cloudpickle.load(file)
with backends.cudnn.flags(benchmark=True):
    results = [
        pinned("a"), asyncio.run(pinned_async("b")), list(pinned_numbers(2)),
        asyncio.run(collected(pinned_async_numbers(1))), Model(2).predict(3),
    ]
results.append(bound("c"))
results.append((backends.cudnn.deterministic, backends.cudnn.benchmark))
print(json.dumps({"accelerated": accelerator.ACCELERATED, "results": results}))
"""


def run_script(code: str, engine: str, *args: str, tmp_path: Path, name: str) -> str:
    script = tmp_path / name
    script.write_text(code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    if engine == "pure":
        env["BACKENDS_PURE_PYTHON"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("dumped_on", ENGINES)
@pytest.mark.parametrize("loaded_on", ENGINES)
def test_a_scripts_decorated_functions_run_in_another_process_on_either_engine(
    dumped_on: str, loaded_on: str, tmp_path: Path
) -> None:
    payload = tmp_path / "payload.pickle"
    run_script(DUMP, dumped_on, str(payload), tmp_path=tmp_path, name="script.py")  # its __main__
    report = json.loads(run_script(LOAD, loaded_on, str(payload), tmp_path=tmp_path, name="load.py"))
    assert report["accelerated"] is (loaded_on == "compiled")
    pin = [True, True]
    assert report["results"] == [
        ["a", pin], ["b", pin], [[0, pin], [1, pin]], [[0, pin]], [6, pin], ["c", [False, True]], [False, False],
    ]


# -- no reference cycles ----------------------------------------------------------------------------
S = backends.cudnn.flags(deterministic=True)


@S
def numbers() -> Any:
    yield 1
    yield 2


@S
async def async_numbers() -> Any:
    yield 1
    yield 2


def plain_numbers() -> Any:
    yield 1
    yield 2


async def plain_async_numbers() -> Any:
    yield 1
    yield 2


def consumed(calls: int) -> None:
    for _ in range(calls):
        assert list(numbers()) == [1, 2]


def closed_after_one(calls: int) -> None:
    for _ in range(calls):
        started = numbers()
        next(started)
        started.close()


def abandoned_after_one(calls: int) -> None:
    for _ in range(calls):
        started = numbers()
        next(started)
        del started  # freed by its reference count, suspended


def bound_consumed(calls: int) -> None:
    bound = backends.bind(plain_numbers)
    for _ in range(calls):
        assert list(bound()) == [1, 2]


async def async_consumed(calls: int) -> None:
    for _ in range(calls):
        assert [n async for n in async_numbers()] == [1, 2]


async def async_closed_after_one(calls: int) -> None:
    for _ in range(calls):
        started = async_numbers()
        await started.__anext__()
        await started.aclose()


async def bound_async_consumed(calls: int) -> None:
    bound = backends.bind(plain_async_numbers)
    for _ in range(calls):
        assert [n async for n in bound()] == [1, 2]


SYNC = [consumed, closed_after_one, abandoned_after_one, bound_consumed]
ASYNC = [async_consumed, async_closed_after_one, bound_async_consumed]


def left_for_the_collector(run: Callable[[int], None], calls: int) -> tuple[int, int]:
    """With the cyclic collector off: how many more objects it tracks after ``calls`` calls than
    after a few, and how many unreachable ones it then finds."""
    gc.collect()
    gc.disable()
    try:
        run(5)
        before = len(gc.get_objects())
        run(calls)
        grown = len(gc.get_objects()) - before
        return grown, gc.collect()
    finally:
        gc.enable()


async def left_for_the_collector_async(run: Callable[[int], Any], calls: int) -> tuple[int, int]:
    """``left_for_the_collector`` inside a running event loop."""
    gc.collect()
    gc.disable()
    try:
        await run(5)
        before = len(gc.get_objects())
        await run(calls)
        grown = len(gc.get_objects()) - before
        return grown, gc.collect()
    finally:
        gc.enable()


@pytest.mark.parametrize("run", SYNC, ids=lambda f: f.__name__)
def test_decorated_generators_leave_no_reference_cycle(run: Callable[[int], None]) -> None:
    assert left_for_the_collector(run, 3000) == (0, 0)


@pytest.mark.parametrize("run", ASYNC, ids=lambda f: f.__name__)
def test_decorated_async_generators_leave_no_reference_cycle(run: Callable[[int], Any]) -> None:
    assert asyncio.run(left_for_the_collector_async(run, 2000)) == (0, 0)


# -- the compiled call refuses what it was not built for ------------------------------------------------
@needs_accelerator
def test_the_compiled_call_of_a_decorated_function_refuses_misuse_without_crashing() -> None:
    from backends._engine.accelerator import speedups
    from backends._engine.scope import FUNCTION, Decorated

    def call(decorated: Any, *args: Any) -> Any:  # the C method itself (3.12 calls the Python one)
        return speedups.DecoratedCore.call(decorated, *args)

    S = backends.cudnn.flags(deterministic=True)
    unbuilt = Decorated.__new__(Decorated)
    with pytest.raises(TypeError, match="build it with Decorated"):
        call(unbuilt, (), {})
    built = Decorated(S, lambda *args, **kwargs: (args, kwargs, backends.cudnn.deterministic), FUNCTION)
    assert call(built, (1,), {"k": 2}) == ((1,), {"k": 2}, True)
    assert call(built, (), None) == ((), {}, True)
    for args in [((),), ([], {}), ((), []), ((), {}, 1)]:
        with pytest.raises(TypeError, match=r"call\(args, kwargs\) takes a tuple and a dict"):
            call(built, *args)
    with pytest.raises(TypeError, match="is immutable"):
        Decorated.__init__(built, S, len, FUNCTION)
    built._enter = None  # members replaced by hand: errors, nothing entered or left behind
    with pytest.raises(TypeError, match="not callable"):
        call(built, (), {})
    built._enter, built.fn, built._exit = S.__enter__, len, 7
    with pytest.raises(TypeError):  # len() of nothing: raised after the entry, which is unwound
        call(built, (), {})
    with pytest.raises(TypeError, match="not callable"):  # an exit that cannot run: unwound by _unwind
        call(built, ([1],), {})
    assert backends.cudnn.deterministic is False
    built._exit, built.scope = S.__exit__, None  # an unwinding that cannot work raises, the error as its context
    with pytest.raises(AttributeError) as raised:
        call(built, (), {})
    assert isinstance(raised.value.__context__, TypeError)
    assert backends.cudnn.deterministic is True  # (left entered: its scope was replaced by hand)
    S.__exit__(None, None, None)
