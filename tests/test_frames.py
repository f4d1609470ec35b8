"""What the frame layout must keep, seen from outside (contract sections 2 to 5).

A frame holds one slot per flag and scopes reuse the values they built before (their own over
no scope, their last merge over other values). These tests enter the same scope objects over
different scopes, in different orders, threads and tasks, and check every flag's value and
``describe()`` source against a plain model: the innermost override, else the process default.
They run on whichever engine the suite runs on (``BACKENDS_PURE_PYTHON=1`` for the pure one).
"""

from __future__ import annotations

import asyncio
import pickle
import random
import threading
from collections.abc import Mapping

import pytest

import backends

cudnn, matmul = backends.cudnn, backends.cuda.matmul
NAMES = [row.name for row in backends.describe()]


def rows() -> dict[str, tuple[object, str]]:
    return {row.name: (row.value, row.source) for row in backends.describe()}


def expected(
    *layers: Mapping[str, object], defaults: Mapping[str, tuple[object, str]] | None = None
) -> dict[str, tuple[object, str]]:
    """The rows under ``layers`` (outermost first) entered over ``defaults`` (today's rows
    outside any scope when not given)."""
    found = dict(defaults if defaults is not None else rows())
    for layer in layers:
        found.update({name: (value, "scope") for name, value in layer.items()})
    return found


def attributes() -> dict[str, object]:
    """Every flag read as an attribute (the compiled engine's read path), by dotted name."""
    found = {}
    for name in NAMES:
        owner: object = backends
        *path, attribute = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        found[name] = (
            owner.preferred_linalg_library()  # type: ignore[attr-defined]
            if name == "cuda.preferred_linalg_library"
            else getattr(owner, attribute)
        )
    return found


def check(want: dict[str, tuple[object, str]]) -> None:
    assert rows() == want
    assert attributes() == {name: value for name, (value, _) in want.items()}
    assert backends.snapshot().to_dict() == {name: value for name, (value, _) in want.items()}


A = {"cudnn.deterministic": True, "cudnn.benchmark_limit": 3}
B = {"cudnn.benchmark": True, "cuda.matmul.allow_tf32": True}
C = {"cudnn.deterministic": False, "cuda.preferred_linalg_library": "cusolver"}


def test_one_scope_entered_over_different_scopes_in_turn_reads_each_time_what_it_is_over() -> None:
    """The same scope object entered alternately over no scope, over B and over C: its last merge
    must never stand in for a merge over other values."""
    base = rows()
    a, b, c = backends.flags(A), backends.flags(B), backends.flags(C)
    for _ in range(3):
        with a:
            check(expected(A, defaults=base))
        with b, a:
            check(expected(B, A, defaults=base))
        with c, a:
            check(expected(C, A, defaults=base))
        with c, b, a:
            check(expected(C, B, A, defaults=base))
        with a, c:
            check(expected(A, C, defaults=base))
    check(base)


def test_an_assignment_inside_a_scope_does_not_reach_the_next_entry_over_the_same_scope() -> None:
    base = rows()
    b, a = backends.flags(B), backends.flags(A)
    with b:
        with a:
            cudnn.benchmark_limit = 7
            matmul.allow_tf32 = False
            check(expected(B, A, {"cudnn.benchmark_limit": 7, "cuda.matmul.allow_tf32": False}, defaults=base))
        check(expected(B, defaults=base))
        with a:  # over the same values as before the assignment: as entered the first time
            check(expected(B, A, defaults=base))
    check(base)


def test_process_defaults_show_through_every_slot_a_scope_leaves_unset() -> None:
    a = backends.flags(A)
    with a:
        backends.set_defaults({"cudnn.benchmark": True, "cudnn.deterministic": False})
        want = rows()
        assert want["cudnn.benchmark"] == (True, "process default")
        assert want["cudnn.deterministic"] == (True, "scope")  # the override stands
        assert want["cudnn.enabled"] == (True, "default")
    backends.reset_defaults()
    with a:
        assert rows()["cudnn.benchmark"] == (False, "default")


def test_a_scope_setting_every_flag_is_the_same_over_any_scope() -> None:
    snap = backends.snapshot()
    with backends.flags(A), backends.flags(B):
        inner = backends.snapshot()
    for outer in (backends.flags(A), backends.flags(C), snap):
        with outer, inner:
            check({name: (value, "scope") for name, value in inner.items()})


def test_a_snapshot_taken_in_nested_scopes_pickles_and_applies_its_values_anywhere() -> None:
    with backends.flags(A), backends.flags(B), backends.flags(C):
        taken = backends.snapshot()
        sources = rows()
    loaded = pickle.loads(pickle.dumps(taken))
    assert loaded == taken and hash(loaded) == hash(taken)
    assert dict(loaded) == {name: value for name, (value, _) in sources.items()}
    with backends.flags(B), loaded:
        assert rows() == {name: (value, "scope") for name, (value, _) in sources.items()}
    again = pickle.loads(pickle.dumps(backends.flags(A)))
    with again:
        check(expected(A))


def test_an_out_of_order_exit_is_refused_and_changes_nothing_in_any_nesting() -> None:
    base = rows()
    a, b, c = backends.flags(A), backends.flags(B), backends.flags(C)
    a.__enter__()
    b.__enter__()
    c.__enter__()
    inside = rows()
    for wrong in (a, b):
        with pytest.raises(RuntimeError, match="innermost"):
            wrong.__exit__(None, None, None)
        assert rows() == inside
    c.__exit__(None, None, None)
    check(expected(A, B, defaults=base))
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    check(base)


def test_an_exception_in_flight_unwinds_to_the_enclosing_scope_that_exits() -> None:
    base = rows()
    a, b = backends.flags(A), backends.flags(B)
    with pytest.raises(KeyError), a:
        b.__enter__()  # left entered by the body
        backends.flags(C).__enter__()
        raise KeyError("out")
    check(base)


def test_the_same_scopes_in_many_threads_at_once_each_read_their_own_nesting() -> None:
    scopes = [backends.flags(A), backends.flags(B), backends.flags(C), cudnn.flags(deterministic=True)]
    layers = [A, B, C, {"cudnn.deterministic": True}]
    base = rows()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(300):
                order = rng.sample(range(len(scopes)), rng.randint(1, len(scopes)))
                entered = []
                for index in order:
                    scopes[index].__enter__()
                    entered.append(index)
                    want = expected(*(layers[i] for i in entered), defaults=base)
                    assert rows() == want
                for index in reversed(entered):
                    scopes[index].__exit__(None, None, None)
                assert rows() == base
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_tasks_entering_one_scope_inside_different_scopes_see_their_own() -> None:
    inner = cudnn.flags(benchmark=True)
    outers = [backends.flags(A), backends.flags(C), backends.flags({})]
    base = rows()

    async def task(outer: backends.Scope, layer: Mapping[str, object], event: asyncio.Event) -> None:
        with outer:
            with inner:
                await event.wait()  # every task is inside both scopes at once
                assert rows() == expected(layer, {"cudnn.benchmark": True}, defaults=base)
            assert rows() == expected(layer, defaults=base)

    async def main() -> None:
        event = asyncio.Event()
        layers: list[Mapping[str, object]] = [A, C, {}]
        tasks = [asyncio.ensure_future(task(outers[i % 3], layers[i % 3], event)) for i in range(30)]
        await asyncio.sleep(0)
        event.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    check(base)


def test_a_task_created_inside_a_scope_cannot_exit_it() -> None:
    scope = backends.flags(A)

    async def child() -> str:
        try:
            scope.__exit__(None, None, None)
        except RuntimeError as error:
            return str(error)
        return "exited"

    async def main() -> str:
        with scope:
            return await asyncio.ensure_future(child())

    assert "different context" in asyncio.run(main())


@pytest.mark.parametrize("attribute", ["_alone", "_memo"])
@pytest.mark.parametrize("junk", [None, (), ("x",), (None, None), ((), ()), 5, "cudnn"])
def test_private_values_replaced_by_hand_raise_at_worst(attribute: str, junk: object) -> None:
    """A scope's ``_alone`` or ``_memo`` set to anything: entering and exiting it, inside another
    scope or not, works or raises an ordinary exception; what is left afterwards is as before."""
    base = rows()
    scope = backends.flags(A)
    setattr(scope, attribute, junk)
    for outer in (None, backends.flags(B)):
        try:
            if outer is not None:
                outer.__enter__()
            try:
                with scope:
                    rows()
                    attributes()
            except (TypeError, ValueError, IndexError, AttributeError, RuntimeError):
                pass
        finally:
            if outer is not None:
                outer.__exit__(None, None, None)
        assert rows() == base


class _Shadow(tuple):  # type: ignore[type-arg]
    """A values tuple whose items read as something else."""

    def __getitem__(self, index: object) -> object:
        return "shadow" if type(index) is int else tuple.__getitem__(self, index)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "junk",
    [None, 5, (), ("x",), "memo", lambda scope, below: (below, _Shadow(scope._memo[1])),
     lambda scope, below: (below, list(scope._memo[1])), lambda scope, below: (below, (*scope._memo[1], None))],
    ids=["none", "int", "empty-tuple", "one-item", "memo", "shadowed-values", "values-as-list", "values-too-long"],
)  # fmt: skip
def test_a_last_merge_replaced_by_hand_is_used_as_the_reference_engine_uses_it(junk: object) -> None:
    """A scope's ``_memo`` set by hand to anything (private API): entering the scope over the values
    that merge was made over gives what the pure-Python engine gives, on either engine: the same
    values read, or the same exception."""
    outer, scope = backends.flags(B), backends.flags(A)
    with outer, scope:
        pass
    below = scope._memo[0]
    scope._memo = junk(scope, below) if callable(junk) else junk  # type: ignore[assignment]
    reference = backends.Scope._enter_slow  # the pure path's entry, which the compiled one must match

    def attempt(enter: object) -> object:
        with outer:
            try:
                enter(scope)  # type: ignore[operator]
            except Exception as error:
                return type(error)
            try:
                found = attributes()
                return [found[name] for name in ("cudnn.deterministic", "cudnn.benchmark", "cudnn.benchmark_limit")]
            finally:
                scope.__exit__(None, None, None)

    saved = scope._memo
    want = attempt(reference)
    scope._memo = saved
    assert attempt(type(scope).__enter__) == want
