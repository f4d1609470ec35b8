"""Scopes: context managers and decorators that override only what they are given."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import threading
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import backends

from ._helpers import run_threads, state

cudnn = backends.cudnn
matmul = backends.cuda.matmul


def cudnn_values() -> dict[str, object]:
    return {
        "enabled": cudnn.enabled,
        "benchmark": cudnn.benchmark,
        "benchmark_limit": cudnn.benchmark_limit,
        "deterministic": cudnn.deterministic,
        "allow_tf32": cudnn.allow_tf32,
    }


# -- flags() overrides only what it is given -----------------------------------------------


def test_cudnn_flags_deterministic_leaves_enabled_benchmark_and_allow_tf32_as_they_were() -> None:
    backends.set_defaults({"cudnn.benchmark": True, "cudnn.allow_tf32": False})
    before = cudnn_values()
    with cudnn.flags(deterministic=True):
        inside = cudnn_values()
    assert inside == {**before, "deterministic": True}
    assert inside["enabled"] is True  # torch would have turned cuDNN off here
    assert cudnn_values() == before


def test_flags_keyword_none_means_not_given() -> None:
    backends.cudnn.benchmark = True
    with cudnn.flags(benchmark=None, deterministic=True, enabled=None):
        assert cudnn.benchmark is True
        assert cudnn.enabled is True
        assert cudnn.deterministic is True
        assert {row.name for row in backends.describe() if row.source == "scope"} == {"cudnn.deterministic"}


def test_flags_with_a_mapping_overrides_only_its_dotted_names() -> None:
    before = state()
    with backends.flags({"cudnn.deterministic": True, "cuda.preferred_linalg_library": "cusolver"}):
        scoped = {row.name: row.value for row in backends.describe() if row.source == "scope"}
        assert scoped == {"cudnn.deterministic": True, "cuda.preferred_linalg_library": "cusolver"}
    assert state() == before


def test_inner_scope_keeps_an_outer_override_it_was_not_given() -> None:
    with cudnn.flags(allow_tf32=False):
        with cudnn.flags(enabled=False):
            assert cudnn.allow_tf32 is False
            assert cudnn.enabled is False
        assert cudnn.allow_tf32 is False
        assert cudnn.enabled is True
    assert cudnn.allow_tf32 is True


def test_nested_scopes_of_the_same_flag_restore_each_level() -> None:
    with cudnn.flags(benchmark_limit=1):
        with cudnn.flags(benchmark_limit=2):
            with cudnn.flags(benchmark_limit=3):
                assert cudnn.benchmark_limit == 3
            assert cudnn.benchmark_limit == 2
        assert cudnn.benchmark_limit == 1
    assert cudnn.benchmark_limit == 10


def test_tf32_shorthands_are_flags_allow_tf32() -> None:
    with matmul.tf32(True):
        assert matmul.allow_tf32 is True
        assert cudnn.allow_tf32 is True
    with cudnn.tf32(False):
        assert cudnn.allow_tf32 is False
        assert matmul.allow_tf32 is False
    assert (matmul.allow_tf32, cudnn.allow_tf32) == (False, True)


def test_deterministic_preset_sets_exactly_its_six_flags() -> None:
    backends.set_defaults(
        {
            "cudnn.benchmark": True,
            "cudnn.benchmark_limit": 3,
            "cuda.matmul.allow_tf32": True,
            "cuda.preferred_linalg_library": "magma",
        }
    )
    before = {row.name: row.value for row in backends.describe()}
    with backends.deterministic():
        inside = {row.name: row for row in backends.describe()}
    expected = {
        "cudnn.deterministic": True,
        "cudnn.benchmark": False,
        "cudnn.allow_tf32": False,
        "cuda.matmul.allow_tf32": False,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
        "algorithms.deterministic": True,
    }
    assert {name: row.value for name, row in inside.items()} == {**before, **expected}
    assert {name for name, row in inside.items() if row.source == "scope"} == set(expected)
    assert {row.name: row.value for row in backends.describe()} == before


# -- decorators ----------------------------------------------------------------------------


def test_stacked_decorators_innermost_wins_and_everything_is_restored() -> None:
    @cudnn.flags(deterministic=False, benchmark=True)
    @cudnn.flags(deterministic=True)
    def body() -> tuple[bool, bool]:
        return cudnn.deterministic, cudnn.benchmark

    assert body() == (True, True)
    assert (cudnn.deterministic, cudnn.benchmark) == (False, False)


def test_stacked_decorators_restore_everything_when_the_call_raises() -> None:
    seen: list[bool] = []

    @cudnn.flags(deterministic=False, benchmark_limit=1)
    @cudnn.flags(deterministic=True, benchmark_limit=2)
    def body() -> None:
        seen.append(cudnn.deterministic)
        raise KeyError("boom")

    before = state()
    with pytest.raises(KeyError, match="boom"):
        body()
    assert seen == [True]
    assert state() == before
    assert body.__name__ == "body"


def test_decorated_generator_override_is_invisible_to_its_consumer_between_yields() -> None:
    @matmul.tf32(True)
    def gen() -> Iterator[bool]:
        yield matmul.allow_tf32
        yield matmul.allow_tf32
        inside.append(matmul.allow_tf32)

    inside: list[bool] = []
    consumer: list[bool] = []
    produced: list[bool] = []
    for item in gen():
        produced.append(item)
        consumer.append(matmul.allow_tf32)
    assert produced == [True, True]
    assert consumer == [False, False]
    assert inside == [True]
    assert matmul.allow_tf32 is False


def test_decorated_generator_runs_in_its_own_context_copied_when_it_starts() -> None:
    # Scopes and assignments inside the generator span its yields; the consumer's
    # changes made after the generator started are not seen inside it (as for a task).
    @matmul.tf32(True)
    def gen() -> Iterator[tuple[bool, bool, bool]]:
        with cudnn.flags(benchmark=True):
            yield matmul.allow_tf32, cudnn.deterministic, cudnn.benchmark
            cudnn.enabled = False
            yield matmul.allow_tf32, cudnn.deterministic, cudnn.enabled

    it = gen()
    assert next(it) == (True, False, True)
    with cudnn.flags(deterministic=True):
        assert next(it) == (True, False, False)
        assert matmul.allow_tf32 is False
        assert cudnn.benchmark is False and cudnn.enabled is True


def test_decorated_generator_send_throw_and_close_keep_the_override_and_restore() -> None:
    log: list[tuple[str, object, bool]] = []

    @matmul.tf32(True)
    def gen() -> Iterator[int]:
        try:
            received = yield 1
            log.append(("sent", received, matmul.allow_tf32))
            try:
                yield 2
            except ValueError as error:
                log.append(("thrown", str(error), matmul.allow_tf32))
            yield 3
        finally:
            log.append(("closed", None, matmul.allow_tf32))

    it = gen()
    assert next(it) == 1
    assert it.send("hello") == 2
    assert it.throw(ValueError("x")) == 3
    assert matmul.allow_tf32 is False
    it.close()
    assert log == [("sent", "hello", True), ("thrown", "x", True), ("closed", None, True)]
    assert matmul.allow_tf32 is False


def test_decorated_generator_returns_its_value() -> None:
    @cudnn.flags(deterministic=True)
    def gen() -> Iterator[int]:
        yield 1
        return cudnn.deterministic  # type: ignore[return-value]

    it = gen()
    next(it)
    with pytest.raises(StopIteration) as info:
        next(it)
    assert info.value.value is True


def test_decorated_async_generator_override_is_invisible_to_its_consumer_between_yields() -> None:
    inside: list[bool] = []

    @matmul.tf32(True)
    async def agen() -> AsyncIterator[bool]:
        yield matmul.allow_tf32
        await asyncio.sleep(0)
        yield matmul.allow_tf32
        inside.append(matmul.allow_tf32)

    async def main() -> tuple[list[bool], list[bool]]:
        produced, consumer = [], []
        async for item in agen():
            produced.append(item)
            await asyncio.sleep(0)
            consumer.append(matmul.allow_tf32)
        return produced, consumer

    produced, consumer = asyncio.run(main())
    assert produced == [True, True]
    assert consumer == [False, False]
    assert inside == [True]
    assert matmul.allow_tf32 is False


def test_decorated_async_generator_asend_and_aclose_keep_the_override() -> None:
    log: list[tuple[object, bool]] = []

    @matmul.tf32(True)
    async def agen() -> AsyncIterator[int]:
        try:
            received = yield 1
            log.append((received, matmul.allow_tf32))
            yield 2
        finally:
            log.append(("closed", matmul.allow_tf32))

    async def main() -> bool:
        it = agen()
        assert await it.__anext__() == 1
        assert await it.asend("hi") == 2
        between = matmul.allow_tf32
        await it.aclose()
        return between

    assert asyncio.run(main()) is False
    assert log == [("hi", True), ("closed", True)]


def test_decorated_coroutine_sees_the_override_in_its_body_when_awaited() -> None:
    @cudnn.flags(benchmark=True)
    async def body() -> list[bool]:
        first = cudnn.benchmark
        await asyncio.sleep(0)
        return [first, cudnn.benchmark]

    async def main() -> tuple[list[bool], bool]:
        coroutine = body()
        outside_before_await = cudnn.benchmark
        result = await coroutine
        assert outside_before_await is False
        return result, cudnn.benchmark

    result, after = asyncio.run(main())
    assert result == [True, True]
    assert after is False


def plain(a: int, b: str = "x", *args: int, c: float = 1.0, **kwargs: object) -> str:
    """Plain docstring."""
    return f"{a}{b}"


async def coroutine_fn(a: int, *, b: int = 2) -> int:
    """Coroutine docstring."""
    return a + b


def generator_fn(n: int) -> Iterator[int]:
    """Generator docstring."""
    yield n


async def async_generator_fn(n: int) -> AsyncIterator[int]:
    """Async generator docstring."""
    yield n


KINDS = {
    "plain": (plain, "isfunction"),
    "coroutine": (coroutine_fn, "iscoroutinefunction"),
    "generator": (generator_fn, "isgeneratorfunction"),
    "async generator": (async_generator_fn, "isasyncgenfunction"),
}
PREDICATES = ("iscoroutinefunction", "isgeneratorfunction", "isasyncgenfunction")


@pytest.mark.parametrize("kind", list(KINDS))
def test_decorator_keeps_kind_name_docstring_and_signature(kind: str) -> None:
    fn, _predicate = KINDS[kind]
    wrapped = cudnn.flags(deterministic=True)(fn)
    for predicate in PREDICATES:
        assert getattr(inspect, predicate)(wrapped) == getattr(inspect, predicate)(fn), predicate
    assert wrapped.__name__ == fn.__name__
    assert wrapped.__qualname__ == fn.__qualname__
    assert wrapped.__doc__ == fn.__doc__
    assert inspect.signature(wrapped) == inspect.signature(fn)
    assert callable(wrapped)


def test_decorated_plain_function_passes_arguments_and_return_value() -> None:
    wrapped = cudnn.flags(deterministic=True)(plain)
    assert wrapped(1, "y", 5, c=2.0, extra=3) == "1y"


def test_decorated_methods_static_and_class_methods_see_the_override() -> None:
    class Model:
        def __init__(self) -> None:
            self.calls = 0

        @cudnn.flags(deterministic=True)
        def method(self, x: int) -> tuple[int, bool]:
            self.calls += 1
            return x, cudnn.deterministic

        @staticmethod
        @cudnn.flags(benchmark=True)
        def static() -> bool:
            return cudnn.benchmark

        @classmethod
        @cudnn.flags(benchmark_limit=0)
        def klass(cls) -> tuple[type, int]:
            return cls, cudnn.benchmark_limit

        @cudnn.flags(enabled=False)
        async def amethod(self) -> bool:
            await asyncio.sleep(0)
            return cudnn.enabled

    model = Model()
    assert model.method(3) == (3, True)
    assert model.calls == 1
    assert Model.static() is True
    assert Model.klass() == (Model, 0)
    assert asyncio.run(model.amethod()) is False
    assert Model.method.__name__ == "method"
    assert cudnn_values() == {
        "enabled": True,
        "benchmark": False,
        "benchmark_limit": 10,
        "deterministic": False,
        "allow_tf32": True,
    }


def test_one_decorator_object_can_decorate_many_functions() -> None:
    scope = cudnn.flags(deterministic=True)

    @scope
    def one() -> bool:
        return cudnn.deterministic

    @scope
    def two() -> bool:
        return one() and cudnn.deterministic

    assert one() is True
    assert two() is True
    assert cudnn.deterministic is False


def test_decorated_recursive_function_nests_the_scope_in_itself() -> None:
    @cudnn.flags(deterministic=True)
    def depth(n: int) -> list[bool]:
        return [cudnn.deterministic] if n == 0 else [cudnn.deterministic, *depth(n - 1)]

    assert depth(5) == [True] * 6
    assert cudnn.deterministic is False


# -- exceptions and async with ---------------------------------------------------------------


def test_exception_passes_through_a_scope_unchanged_and_flags_are_restored() -> None:
    class Boom(Exception):
        pass

    error = Boom("original")
    before = state()
    with pytest.raises(Boom) as info, cudnn.flags(deterministic=True, benchmark=True):
        raise error
    assert info.value is error
    assert info.value.args == ("original",)
    assert info.value.__context__ is None
    assert state() == before


def test_exception_passes_through_a_decorated_function_unchanged() -> None:
    error = LookupError("from the body")

    @backends.deterministic()
    def body() -> None:
        raise error

    with pytest.raises(LookupError) as info:
        body()
    assert info.value is error
    assert info.value.__context__ is None
    assert cudnn.deterministic is False


def test_a_scope_does_not_swallow_exceptions() -> None:
    scope = cudnn.flags(deterministic=True)
    with pytest.raises(ZeroDivisionError), scope:
        1 / 0  # noqa: B018
    assert cudnn.deterministic is False
    with pytest.raises(RuntimeError):  # it was exited on the way out: not active any more
        scope.__exit__(None, None, None)


def test_async_with_overrides_inside_and_restores_after() -> None:
    async def main() -> list[bool]:
        seen = []
        async with cudnn.flags(deterministic=True) as entered:
            seen.append(cudnn.deterministic)
            await asyncio.sleep(0)
            seen.append(cudnn.deterministic)
            assert entered is not None
        seen.append(cudnn.deterministic)
        return seen

    assert asyncio.run(main()) == [True, True, False]


def test_async_with_restores_when_the_body_is_cancelled() -> None:
    async def main() -> tuple[bool, bool]:
        entered = asyncio.Event()
        observed: list[bool] = []

        async def body() -> None:
            try:
                async with cudnn.flags(deterministic=True):
                    entered.set()
                    await asyncio.Event().wait()
            finally:
                observed.append(cudnn.deterministic)

        task = asyncio.create_task(body())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return observed[0], cudnn.deterministic

    assert asyncio.run(main()) == (False, False)


# -- asyncio tasks ----------------------------------------------------------------------------


def combination(i: int) -> dict[str, object]:
    """A different combination of flag values for each i in range(100)."""
    return {
        "cudnn.deterministic": bool(i & 1),
        "cudnn.benchmark": bool(i & 2),
        "cudnn.allow_tf32": bool(i & 4),
        "cuda.matmul.allow_tf32": bool(i & 8),
        "cudnn.benchmark_limit": i,
        "cuda.preferred_linalg_library": ("default", "cusolver", "magma")[i % 3],
        "cuda.cufft_plan_cache.max_size": 1000 + i,
    }


def own_view() -> dict[str, object]:
    return {
        "cudnn.deterministic": cudnn.deterministic,
        "cudnn.benchmark": cudnn.benchmark,
        "cudnn.allow_tf32": cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": matmul.allow_tf32,
        "cudnn.benchmark_limit": cudnn.benchmark_limit,
        "cuda.preferred_linalg_library": backends.cuda.preferred_linalg_library(),
        "cuda.cufft_plan_cache.max_size": backends.cuda.cufft_plan_cache.max_size,
    }


def test_gather_of_100_tasks_each_reads_only_its_own_values() -> None:
    async def task(i: int, all_entered: asyncio.Event, count: list[int]) -> list[dict[str, object]]:
        wanted = combination(i)
        reads = []
        async with contextlib.AsyncExitStack() as stack:
            if i % 2:
                await stack.enter_async_context(backends.flags(wanted))
            else:  # half of them partly through the namespace keyword form
                await stack.enter_async_context(
                    backends.flags({k: v for k, v in wanted.items() if not k.startswith("cudnn.")})
                )
                stack.enter_context(
                    cudnn.flags(
                        deterministic=wanted["cudnn.deterministic"],
                        benchmark=wanted["cudnn.benchmark"],
                        allow_tf32=wanted["cudnn.allow_tf32"],
                        benchmark_limit=wanted["cudnn.benchmark_limit"],
                    )
                )
            reads.append(own_view())
            count[0] += 1
            if count[0] == 100:
                all_entered.set()
            await all_entered.wait()  # every task is inside its scope at once
            for _ in range(5):
                await asyncio.sleep(0)
                reads.append(own_view())
        reads.append(own_view())
        return reads

    async def main() -> list[list[dict[str, object]]]:
        all_entered = asyncio.Event()
        count = [0]
        return await asyncio.gather(*(task(i, all_entered, count) for i in range(100)))

    results = asyncio.run(main())
    defaults = own_view()
    for i, reads in enumerate(results):
        assert reads[:-1] == [combination(i)] * 6, i
        assert reads[-1] == defaults


def test_child_task_inherits_a_scope_and_its_exit_restores_only_itself() -> None:
    async def main() -> list[object]:
        log: list[object] = []
        async with cudnn.flags(deterministic=True):

            async def child() -> None:
                log.append(cudnn.deterministic)
                async with cudnn.flags(deterministic=False):
                    log.append(cudnn.deterministic)
                log.append(cudnn.deterministic)

            await asyncio.create_task(child())
            log.append(cudnn.deterministic)
        log.append(cudnn.deterministic)
        return log

    assert asyncio.run(main()) == [True, False, True, True, False]


def test_scope_entered_in_one_task_and_exited_in_a_child_task_raises_runtime_error() -> None:
    async def main() -> None:
        scope = cudnn.flags(deterministic=True)
        scope.__enter__()
        try:

            async def child() -> tuple[BaseException | None, bool, bool]:
                before = cudnn.deterministic
                try:
                    scope.__exit__(None, None, None)
                except BaseException as error:  # the type is asserted below
                    return error, before, cudnn.deterministic
                return None, before, cudnn.deterministic

            error, before, after = await asyncio.create_task(child())
            assert type(error) is RuntimeError, repr(error)
            assert not isinstance(error, ValueError)
            assert "deterministic" in str(error)
            assert "context" in str(error)
            assert (before, after) == (True, True)  # the child's own view did not change
            assert cudnn.deterministic is True  # nor did the parent's
        finally:
            scope.__exit__(None, None, None)  # the right context can still exit it
        assert cudnn.deterministic is False

    asyncio.run(main())
    assert cudnn.deterministic is False


def test_scope_entered_in_one_task_and_exited_in_a_sibling_task_raises_runtime_error() -> None:
    async def main() -> None:
        scope = cudnn.flags(benchmark=True)
        entered, tried = asyncio.Event(), asyncio.Event()
        results: dict[str, object] = {}

        async def enterer() -> None:
            scope.__enter__()
            entered.set()
            await tried.wait()
            results["enterer while other tried"] = cudnn.benchmark
            scope.__exit__(None, None, None)
            results["enterer after exit"] = cudnn.benchmark

        async def exiter() -> None:
            await entered.wait()
            try:
                scope.__exit__(None, None, None)
            except BaseException as error:  # the type is asserted below
                results["error"] = error
            results["exiter"] = cudnn.benchmark
            tried.set()

        await asyncio.gather(enterer(), exiter())
        error = results.pop("error")
        assert type(error) is RuntimeError, repr(error)
        assert "benchmark" in str(error)
        assert results == {"enterer while other tried": True, "enterer after exit": False, "exiter": False}
        assert cudnn.benchmark is False

    asyncio.run(main())


# -- threads -------------------------------------------------------------------------------------


def test_thread_that_entered_nothing_reads_the_default_while_another_thread_is_inside() -> None:
    entered, read_done = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def thread_a() -> None:
        with cudnn.flags(deterministic=True):
            seen["A before"] = cudnn.deterministic
            entered.set()
            assert read_done.wait(10)
            seen["A after"] = cudnn.deterministic
        seen["A exited"] = cudnn.deterministic

    def thread_b() -> None:
        assert entered.wait(10)
        seen["B"] = cudnn.deterministic
        read_done.set()

    run_threads(thread_a, thread_b, unblock=[entered, read_done])
    assert seen == {"A before": True, "B": False, "A after": True, "A exited": False}


def test_interleaved_enter_and_exit_in_two_threads_leaves_both_at_the_process_default() -> None:
    backends.set_defaults({"cudnn.benchmark_limit": 7})
    barrier = threading.Barrier(2)
    seen: dict[str, tuple[object, ...]] = {}

    def step() -> None:
        barrier.wait(10)

    def thread_a() -> None:
        scope = cudnn.flags(deterministic=True, benchmark_limit=1)
        scope.__enter__()  # 1. A enters
        step()
        step()  # 2. B enters
        seen["A inside"] = (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark)
        step()
        scope.__exit__(None, None, None)  # 3. A exits while B is still inside
        step()
        step()  # 4. B exits
        seen["A end"] = (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark)

    def thread_b() -> None:
        step()  # 1. A enters
        scope = cudnn.flags(benchmark=True, benchmark_limit=2)
        scope.__enter__()  # 2. B enters
        step()
        seen["B inside"] = (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark)
        step()
        step()  # 3. A exits
        seen["B after A exited"] = (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark)
        scope.__exit__(None, None, None)  # 4. B exits
        step()
        seen["B end"] = (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark)

    run_threads(thread_a, thread_b, unblock=[barrier])
    assert seen == {
        "A inside": (True, 1, False),
        "B inside": (False, 2, True),
        "B after A exited": (False, 2, True),
        "A end": (False, 7, False),
        "B end": (False, 7, False),
    }
    assert (cudnn.deterministic, cudnn.benchmark_limit, cudnn.benchmark) == (False, 7, False)


def test_one_scope_object_used_from_four_threads_at_once_and_nested_in_itself() -> None:
    scope = cudnn.flags(deterministic=True, benchmark_limit=0)
    barrier = threading.Barrier(5)  # four users and one bystander
    rounds = 50
    seen: dict[int, list[tuple[object, ...]]] = {i: [] for i in range(5)}

    def read() -> tuple[object, ...]:
        return cudnn.deterministic, cudnn.benchmark_limit

    def user(i: int) -> None:
        for _ in range(rounds):
            with scope:
                with scope:
                    barrier.wait(10)  # all four are inside twice
                    seen[i].append(read())
                seen[i].append(read())
                barrier.wait(10)  # exits interleave across threads
            seen[i].append(read())
            barrier.wait(10)

    def bystander() -> None:
        for _ in range(rounds):
            barrier.wait(10)
            seen[4].append(read())
            barrier.wait(10)
            seen[4].append(read())
            barrier.wait(10)

    run_threads(*(functools.partial(user, i) for i in range(4)), bystander, unblock=[barrier])
    for i in range(4):
        assert seen[i] == [(True, 0), (True, 0), (False, 10)] * rounds
    assert seen[4] == [(False, 10)] * (2 * rounds)
    assert read() == (False, 10)


# -- out-of-order exits ----------------------------------------------------------------------------


def test_out_of_order_exit_raises_runtime_error_changes_nothing_and_order_still_works() -> None:
    outer = cudnn.flags(deterministic=True)
    inner = matmul.flags(allow_tf32=True)
    outer.__enter__()
    inner.__enter__()
    try:
        before = state()
        with pytest.raises(RuntimeError) as info:
            outer.__exit__(None, None, None)
        message = str(info.value)
        assert "deterministic" in message  # which scope
        assert "allow_tf32" in message  # and which one is in the way
        assert "order" in message or "innermost" in message  # why
        assert state() == before
        assert (cudnn.deterministic, matmul.allow_tf32) == (True, True)
    finally:
        inner.__exit__(None, None, None)
        assert (cudnn.deterministic, matmul.allow_tf32) == (True, False)
        outer.__exit__(None, None, None)
    assert (cudnn.deterministic, matmul.allow_tf32) == (False, False)


def test_exiting_a_scope_that_was_never_entered_raises_runtime_error() -> None:
    scope = cudnn.flags(benchmark=True)
    before = state()
    with pytest.raises(RuntimeError, match="benchmark"):
        scope.__exit__(None, None, None)
    assert state() == before


def test_exiting_in_another_thread_raises_runtime_error_and_changes_nothing() -> None:
    scope = cudnn.flags(deterministic=True)
    scope.__enter__()
    try:
        errors: list[BaseException] = []

        def other() -> None:
            try:
                scope.__exit__(None, None, None)
            except BaseException as error:  # the type is asserted below
                errors.append(error)
            errors.append(cudnn.deterministic)  # type: ignore[arg-type]

        run_threads(other)
        assert type(errors[0]) is RuntimeError
        assert errors[1] is False
        assert cudnn.deterministic is True
    finally:
        scope.__exit__(None, None, None)
    assert cudnn.deterministic is False


def test_scopes_built_with_bad_arguments_raise_before_anything_is_entered() -> None:
    before = state()
    with pytest.raises(TypeError), cudnn.flags(deterministic=True, benchmark=1):
        pass  # pragma: no cover
    assert state() == before


def test_async_generator_with_a_scope_spanning_its_yields_keeps_both_overrides() -> None:
    @matmul.tf32(True)
    async def stream() -> AsyncIterator[tuple[bool, bool]]:
        async with cudnn.flags(benchmark=True):
            for _ in range(2):
                await asyncio.sleep(0)
                yield matmul.allow_tf32, cudnn.benchmark

    async def consume() -> list[object]:
        seen: list[object] = []
        async for item in stream():
            seen.append((item, matmul.allow_tf32, cudnn.benchmark))
        return seen

    assert asyncio.run(consume()) == [((True, True), False, False)] * 2
    assert matmul.allow_tf32 is False and cudnn.benchmark is False


def test_bind_applies_its_flags_to_a_generators_body() -> None:
    def read() -> Iterator[bool]:
        yield cudnn.deterministic
        yield cudnn.deterministic

    with cudnn.flags(deterministic=True):
        bound = backends.bind(read)
    assert list(bound()) == [True, True]
    assert cudnn.deterministic is False


def test_bind_applies_its_flags_to_an_async_generators_body() -> None:
    async def read() -> AsyncIterator[bool]:
        await asyncio.sleep(0)
        yield cudnn.deterministic

    with cudnn.flags(deterministic=True):
        bound = backends.bind(read)

    async def consume() -> list[bool]:
        return [item async for item in bound()]

    assert asyncio.run(consume()) == [True]


def test_bind_of_a_partial_keeps_the_partials_arguments_also_through_pickle() -> None:
    """``bind(functools.partial(f, 40))(2)`` calls ``f(40, 2)``, as the partial alone does
    (a Bound is a partial itself, and must not drop the one it was given)."""
    import operator
    import pickle

    def scaled(factor: int, value: int, *, offset: int = 0) -> tuple[int, bool]:
        return factor * value + offset, backends.cudnn.deterministic

    with backends.cudnn.flags(deterministic=True):
        bound = backends.bind(functools.partial(scaled, 10, offset=1))
        adder = backends.bind(functools.partial(operator.add, 40))
    assert bound(4) == (41, True)
    assert bound(4, offset=2) == (42, True)
    assert adder(2) == 42
    assert pickle.loads(pickle.dumps(adder))(2) == 42
    assert bound.fn.args == (10,) and bound.fn.keywords == {"offset": 1}
    assert repr(adder).startswith("backends.bind(functools.partial(<built-in function add>, 40)) with ")


def test_a_built_scope_or_snapshot_refuses_a_second_init_and_stays_as_it_was() -> None:
    """Scopes are shared (``flags(...)`` returns the same object for the same call): a second
    ``__init__`` would change every user's scope, so it is refused and nothing changes."""
    scope = backends.cudnn.flags(deterministic=True)
    with pytest.raises(TypeError, match=r"backends\.cudnn\.flags\(deterministic=True\) is immutable"):
        scope.__init__({"cudnn.benchmark": True}, label="backends.cudnn.flags(deterministic=True)")
    with backends.cudnn.flags(deterministic=True):
        assert (backends.cudnn.deterministic, backends.cudnn.benchmark) == (True, False)
    snap = backends.snapshot()
    before = hash(snap)
    with pytest.raises(TypeError, match="is immutable"):
        snap.__init__({**snap.to_dict(), "cudnn.deterministic": not snap["cudnn.deterministic"]})
    assert hash(snap) == before and snap == backends.snapshot()


def test_aenter_awaitable_refuses_a_non_none_send_as_a_just_started_coroutine_does() -> None:
    scope = backends.cudnn.flags(deterministic=True)
    step = scope.__aenter__()
    with pytest.raises(TypeError, match="can't send non-None value to a just-started coroutine"):
        step.send(5)
    assert backends.cudnn.deterministic is False
    step.close()


# -- Scope cannot be subclassed --------------------------------------------------------------------


class _Mixin:
    pass


@pytest.mark.parametrize(
    ("make", "base"),
    [
        (lambda: type("Traced", (backends.Scope,), {}), "Scope"),
        (lambda: type("Traced", (_Mixin, backends.Scope), {"__enter__": lambda self: self}), "Scope"),
        (lambda: type("Traced", (backends.Snapshot,), {"__slots__": ()}), "Snapshot"),
        (lambda: types.new_class("Traced", (backends.Scope,), {"extra": 1}), "Scope"),  # a keyword too
    ],
    ids=["class", "mixin-with-enter", "snapshot", "new_class-with-a-keyword"],
)
def test_subclassing_scope_raises_type_error_saying_what_to_do_instead(make: Any, base: str) -> None:
    """Both engines enter and exit a scope calling no override (the compiled one in C on every
    path, sync and async), and scopes are shared objects: a subclass is refused where it is made."""
    with pytest.raises(TypeError) as raised:
        make()
    message = str(raised.value)
    del raised  # its traceback holds the refused class (the frame of __init_subclass__)
    assert message.startswith(f"backends.{base} cannot be subclassed (class Traced): ")
    assert "write a context manager that enters one, e.g. @contextlib.contextmanager" in message
    gc.collect()  # the refused class object, if anything still held it
    assert backends.Scope.__subclasses__() == [backends.Snapshot]
    assert backends.Snapshot.__subclasses__() == []


def test_the_advised_wrapper_runs_around_every_protocol_path() -> None:
    """What the refusal advises: a context manager that enters a scope gets its own code around
    the scope on `with`, `async with` (through contextlib's async form) and as a decorator."""
    calls: list[str] = []

    @contextlib.contextmanager
    def traced() -> Iterator[None]:
        calls.append("enter")
        with backends.cudnn.flags(deterministic=True):
            yield
        calls.append("exit")

    @contextlib.asynccontextmanager
    async def traced_async() -> AsyncIterator[None]:
        with traced():
            yield

    @traced()
    def decorated() -> bool:
        return cudnn.deterministic

    with traced():
        assert cudnn.deterministic
    assert decorated()

    async def main() -> bool:
        async with traced_async():
            return cudnn.deterministic

    assert asyncio.run(main())
    assert calls == ["enter", "exit"] * 3 and not cudnn.deterministic
