"""Hostile input and untrusted data (issue 5, items 4 and 5).

Hypothesis throws junk at every public entry point: values of every type (numpy
scalars and 0-d arrays, huge ints, nan, unicode and near-miss strings, subclasses of
int and str) and objects whose ``__eq__``, ``__hash__``, ``__bool__``, ``__index__``,
``__repr__``, ``__str__``, ... raise. For every call:

* only the exception types the contract documents for that entry point come out
  (never the hostile object's own ``ZeroDivisionError``, never an ``OverflowError``);
* a refused input changes nothing: ``backends.describe()`` (values, types, sources)
  and what a plain thread sees (the process defaults) are as before;
* a valid input that the strategies happen to produce is accepted, with the plain
  value the contract gives it (``numpy.bool_(True)`` is ``True``, an ``int``
  subclass is a plain ``int``), and changes exactly that flag, where it should.

The expected outcome of every call comes from an oracle written from the contract page (docs/contract.md)
(sections 1 to 4, 7 and 8), not from the library's own checks.

Hostile objects are *armed* only while backends is being called (``attempt``), so
Hypothesis and the oracle can still print, hash and compare them.
"""

from __future__ import annotations

import functools
import json
import operator
import pickle
import queue
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import Context
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, NamedTuple

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import backends
from backends._engine import environment
from backends.integrations.pytest_plugin import BackendsFlags

from ._helpers import deterministic_now

SETTINGS = settings(
    deadline=None,
    max_examples=120,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# --------------------------------------------------------------------------- #
# The contract's table, as the oracle sees it
# --------------------------------------------------------------------------- #

FLAGS = {flag.name: flag for flag in backends.FLAGS}
NAMES = tuple(FLAGS)
#: Derived views (contract section 1): view name -> the bool flag it spells as "tf32"/"ieee".
VIEWS = {"cuda.matmul.fp32_precision": "cuda.matmul.allow_tf32", "cudnn.conv.fp32_precision": "cudnn.allow_tf32"}
CHOICES = ("default", "cusolver", "magma")
ENV_VARS = {"BACKENDS_" + name.upper().replace(".", "_"): name for name in NAMES}
BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

#: Some state that is not all built-in defaults, so "nothing changed" means something.
DEFAULTS_BEFORE = {"cudnn.benchmark": True, "cuda.cufft_plan_cache.max_size": 5}
SCOPE_BEFORE = {"cudnn.deterministic": True, "cudnn.benchmark_limit": 3}

NEAR_MISS_NAMES = [
    "cudnn.Deterministic", "cudnn.deterministic ", " cudnn.deterministic", "cudnn..deterministic",
    "cudnn.deterministic.", ".cudnn.deterministic", "CUDNN.DETERMINISTIC", "cudnn_deterministic",
    "deterministic", "cudnn", "cuda", "cuda.matmul", "cudnn.determinstic", "cudnn.deterministic\x00",
    "cudnn.determinist\u0131c", "cudnn.\uff44eterministic", "cuda.allow_tf32", "cuda.matmul.allow_tf32\n",
    "cuda.preferred_linalg_library()", "cuda.cufft_plan_cache", "cuda.cufft_plan_cache.size",
    "cudnn.conv", "cudnn.conv.fp32_precision", "cuda.matmul.fp32_precision", "", ".", "__class__",
    "cudnn.__dict__", "cudnn.flags", "backends.cudnn.deterministic", "torch.backends.cudnn.deterministic",
]
NEAR_MISS_ATTRIBUTES = [
    "Deterministic", "deterministic ", "determinstic", "benchmak", "allow_tf32 ", "allowTf32", "fp32precision",
    "", " ", "\x00", "mro", "\uff44eterministic", "determinist\u0131c", "déterministic", "preferred_linalg_library_",
    "max_size ", "maxsize", "is_available_", "enabled\n", "flag", "Flags", "tf32_", "conv_", "matmul ",
    "cufft_plan_cache ", "deterministic.benchmark", "cudnn.deterministic", "__getattr__x", "__dunder__",
    "__class", "__", "é" * 3, "\U0001f600", "a" * 5000, "x.y", "0", "None", "True", "size_", "clear_",
]
NEAR_MISS_VALUES = [
    "MAGMA", "Magma", "magma ", " magma", "magma\x00", "cuSOLVER", "Cusolver", "cusolver\n", "DEFAULT",
    "defaults", "\uff4d\uff41\uff47\uff4d\uff41", "ma\u0261ma", "tf32 ", "TF32", "Tf32", "tf-32", "IEEE", "ieee ",
    "fp32", "highest", "true", "True", "yes", "on", "1", "0", "", " ", "None", "nan", "inf", "-1", "10**100", "1e3",
]
NEAR_MISS_ENV = [
    "BACKENDS_CUDNN_DETERMINISTC", "BACKENDS_CUDNN_DETERMINISTIC ", "backends_cudnn_deterministic",
    "BACKENDS_CUDNN_DETERMINISTIC_", "BACKENDS_CUDNN__DETERMINISTIC", "BACKENDS_CUDA_ALLOW_TF32",
    "BACKENDS_CUDNN_CONV_FP32_PRECISION", "BACKENDS_", "BACKENDS", "BACKENDS_X", "CUPY_TF32 ", "cupy_tf32",
    "BACKENDS_CUDA_MATMUL_FP32_PRECISION", "BACKENDS_CUDA_CUFFT_PLAN_CACHE_SIZE",
]
BIG_INTS = [10**100, -(10**100), sys.maxsize, sys.maxsize + 1, -sys.maxsize - 2, 2**63, 2**64, -1, 0, 1, 2]


# --------------------------------------------------------------------------- #
# Hostile objects
# --------------------------------------------------------------------------- #


class Sabotage(Exception):
    """What hostile objects raise, with the builtins below: it must never come out of backends."""


#: What a hostile dunder raises. None is a type that backends documents anywhere
#: (no TypeError, ValueError, KeyError, AttributeError, RuntimeError or subclass).
SABOTAGE: tuple[type[Exception], ...] = (
    Sabotage, ZeroDivisionError, OverflowError, ArithmeticError, LookupError, EOFError, BufferError, ImportError,
)
DUNDERS = (
    "__eq__", "__ne__", "__hash__", "__bool__", "__index__", "__int__", "__float__", "__repr__", "__str__",
    "__format__", "__len__", "__iter__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__getitem__",
    "__getattr__",
)

_armed = threading.local()


@contextmanager
def armed() -> Iterator[None]:
    """Hostile objects raise only inside this block (this thread), around calls into backends."""
    previous = getattr(_armed, "on", False)
    _armed.on = True
    try:
        yield
    finally:
        _armed.on = previous


def _sabotaged(base: type, name: str, error: type[Exception]) -> Callable[..., Any]:
    fallback = getattr(base, name, None)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_armed, "on", False):
            raise error(f"hostile {name} of a {base.__name__} subclass")
        # Disarmed: behave like the base, so Hypothesis and the oracle can use the object.
        if name == "__repr__":
            return f"<hostile {base.__name__} {base.__repr__(self)} raising {error.__name__}>"
        if fallback is not None:
            return fallback(self, *args, **kwargs)
        if name == "__getattr__":
            raise AttributeError(args[0] if args else name)
        if name == "__bool__":
            return True
        raise TypeError(f"{name} is not supported by a {base.__name__}")

    method.__name__ = name
    return method


@functools.cache
def hostile_class(base: type, methods: frozenset[str], error: type[Exception]) -> type:
    namespace: dict[str, Any] = {name: _sabotaged(base, name, error) for name in methods}
    if "__hash__" not in methods:
        namespace["__hash__"] = base.__hash__  # stays hashable with a hostile __eq__
    namespace["hostile"] = True
    return type(f"Hostile{base.__name__.capitalize()}", (base,), namespace)


def hostile(base: type, methods: frozenset[str], error: type[Exception], arg: object = None) -> Any:
    cls = hostile_class(base, methods, error)
    return cls() if base is object else cls(arg)


def is_hostile(value: object) -> bool:
    return getattr(type(value), "hostile", False) is True


class IntSub(int):
    """A well-behaved int subclass: an int flag takes it, as a plain int."""


class StrSub(str):
    """A well-behaved str subclass: a string flag takes it, as a plain str."""


class FloatSub(float):
    pass


class Pairs(Mapping):  # type: ignore[type-arg]
    """A user-defined Mapping, given as (key, value) pairs and looked up by identity."""

    def __init__(self, pairs: list[tuple[object, object]]) -> None:
        self._pairs = list(pairs)

    def __getitem__(self, key: object) -> object:
        for k, v in self._pairs:
            if k is key:
                return v
        raise KeyError("no such key")

    def __iter__(self) -> Iterator[object]:
        return (k for k, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"Pairs({self._pairs!r})"


# --------------------------------------------------------------------------- #
# Strategies
# --------------------------------------------------------------------------- #


class Make:
    """A recipe: ``fn(*args)``, made in the test by ``real()``.

    Every value that is an instance of a *subclass* of str, int, float or bytes (numpy
    scalars included) is drawn as a recipe: Hypothesis 6.170 re-encodes a value recorded
    in one place as a choice for ``text()``/``floats()`` elsewhere when it shrinks, and
    crashes (``KeyError: <class 'StrSub'>``, then FlakyStrategyDefinition) on a subclass.
    A recipe also prints as the call that makes the value."""

    def __init__(self, fn: Callable[..., Any], *args: object) -> None:
        self.fn, self.args = fn, args

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        return f"{name}({', '.join(map(repr, self.args))})"


def real(value: Any) -> Any:
    """``value`` with every recipe in it made (inside lists, tuples and dicts too)."""
    kind = type(value)
    if kind is Make:
        return value.fn(*(real(arg) for arg in value.args))
    if kind is list:
        return [real(item) for item in value]
    if kind is tuple:
        return tuple(real(item) for item in value)
    if kind is dict:
        return {real(key): real(item) for key, item in value.items()}
    return value


def make(fn: Callable[..., Any], *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Make]:
    return st.builds(Make, st.just(fn), *args)


def named(name: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``strategy`` with a short repr: Hypothesis warns about reprs over 10 kB (in a
    rejection message, say), and this project turns warnings into errors."""

    def draw(draw_: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
        return draw_(strategy)

    draw.__name__ = draw.__qualname__ = name
    return st.composite(draw)()


DUNDER_SETS = st.one_of(
    st.frozensets(st.sampled_from(DUNDERS), min_size=1, max_size=4),
    st.just(frozenset(DUNDERS)),  # hostile through and through
)


def hostiles(base: type, args: st.SearchStrategy[Any], dunders: st.SearchStrategy[Any] = DUNDER_SETS) -> Any:
    return make(hostile, st.just(base), dunders, st.sampled_from(SABOTAGE), args)


VALUE_LIKE_TEXT = st.sampled_from([*CHOICES, "tf32", "ieee", *NEAR_MISS_VALUES, *NAMES])
hostile_values = named(
    "hostile_values",
    st.one_of(
        hostiles(object, st.none()),
        hostiles(int, st.one_of(st.integers(-2, 40), st.sampled_from(BIG_INTS))),
        hostiles(str, VALUE_LIKE_TEXT),
        hostiles(float, st.floats()),
    ),
)


def numpy_scalar(dtype: str, value: object, zero_d: bool) -> Any:
    """A numpy scalar (or 0-d array) of ``dtype`` holding ``value``."""
    array = numpy.array(value, dtype=dtype)
    return array if zero_d else array[()]


_NUMPY_RAW: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    **{code: st.integers(int(numpy.iinfo(code).min), int(numpy.iinfo(code).max))
       for code in ("int8", "int16", "int32", "int64", "uint8", "uint64")},
    "float16": st.floats(width=16),
    "float32": st.floats(width=32),
    "float64": st.floats(),
    "longdouble": st.floats(),
    "complex64": st.complex_numbers(width=64),
    "complex128": st.complex_numbers(),
    "U9": st.one_of(st.text(max_size=9), st.sampled_from([*CHOICES, "tf32", "ieee"])),
    "S9": st.binary(max_size=9),
    "datetime64[s]": st.integers(-(2**40), 2**40),
    "timedelta64[s]": st.integers(-(2**40), 2**40),
}
numpy_values = named(
    "numpy_values",
    st.one_of(
        make(numpy_scalar, st.just("bool"), st.booleans(), st.just(False)),
        make(numpy_scalar, st.just("int64"), st.integers(0, 40), st.just(False)),
        st.sampled_from(sorted(_NUMPY_RAW)).flatmap(
            lambda code: make(numpy_scalar, st.just(code), _NUMPY_RAW[code], st.booleans())
        ),
        st.sampled_from([numpy.array([True]), numpy.array([]), numpy.zeros((2, 2)), numpy.array(None)]),
    ),
)


def _function() -> None:
    pass


ODD_OBJECTS = [
    object(), int, bool, str, type, object, Ellipsis, NotImplemented, print, _function, Decimal("1"),
    Decimal("NaN"), Decimal("sNaN"), Fraction(1, 1), range(2), bytearray(b"1"), memoryview(b"1"), 1j, (True,),
    [True], {True}, frozenset(), {"cusolver": True}, float("nan"), float("inf"), -0.0, threading.Lock(), sys,
]

plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(BIG_INTS),
    st.floats(),
    st.complex_numbers(),
    st.binary(max_size=8),
    st.text(max_size=12),
    VALUE_LIKE_TEXT,
    st.sampled_from(ODD_OBJECTS),
)
subclassed = st.one_of(
    make(IntSub, st.integers(-2, 40)),
    make(StrSub, VALUE_LIKE_TEXT),
    make(FloatSub, st.floats()),
)
scalars = named("scalars", st.one_of(plain_scalars, plain_scalars, numpy_values, subclassed, hostile_values))
junk = named(
    "junk",
    st.one_of(
        scalars,
        scalars,
        st.lists(scalars, max_size=2),
        st.tuples(scalars),
        st.dictionaries(st.text(max_size=4), scalars, max_size=2),
    ),
)


def valid_values(name: str) -> st.SearchStrategy[Any]:
    """Values (recipes) the contract says ``name`` takes, of every accepted kind."""
    flag = FLAGS[name]
    if flag.type is bool:
        return st.one_of(st.booleans(), make(numpy_scalar, st.just("bool"), st.booleans(), st.just(False)))
    if flag.type is int:
        return st.one_of(
            st.integers(0, 64),
            st.integers(0, sys.maxsize),
            make(IntSub, st.integers(0, 64)),
            hostiles(int, st.integers(0, 64)),
        )
    choices = st.sampled_from(flag.choices)
    return st.one_of(
        choices,
        make(StrSub, choices),
        make(numpy_scalar, st.just("U9"), choices, st.just(False)),
        hostiles(str, choices),
    )


def plain_values(name: str) -> st.SearchStrategy[Any]:
    """Values of ``name`` as plain JSON-able data (what ``to_dict()`` gives)."""
    flag = FLAGS[name]
    if flag.type is bool:
        return st.booleans()
    if flag.type is int:
        return st.one_of(st.integers(0, 64), st.integers(0, sys.maxsize))
    return st.sampled_from(flag.choices)


hostile_str_keys = hostiles(str, st.sampled_from([*NAMES, "cudnn.x"]))
name_like_keys = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from([*VIEWS, *NEAR_MISS_NAMES]),
    st.text(max_size=30),
    make(StrSub, st.sampled_from([*NAMES, *NEAR_MISS_NAMES])),
    make(numpy_scalar, st.just("U9"), st.sampled_from(NAMES), st.just(False)),
)
other_keys = st.one_of(
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(),
    st.binary(max_size=20),
    st.sampled_from([b"cudnn.deterministic", ("cudnn", "deterministic"), frozenset({"cudnn.deterministic"})]),
    make(numpy_scalar, st.just("int64"), st.integers(0, 3), st.just(False)),
    hostiles(int, st.integers(-1, 3)),
)
keys_of_every_kind = named(
    "keys_of_every_kind", st.one_of(st.sampled_from(NAMES), name_like_keys, hostile_str_keys, other_keys)
)
items_of_every_kind = named(
    "items_of_every_kind",
    st.one_of(
        st.sampled_from(NAMES).flatmap(lambda name: st.tuples(st.just(name), valid_values(name))),
        st.tuples(keys_of_every_kind, st.one_of(junk, st.booleans())),
    ),
)


def as_mapping(pairs: list[tuple[object, object]], kind: str) -> Mapping[Any, Any]:
    if kind == "pairs":
        return Pairs(pairs)
    data = dict(pairs)
    return MappingProxyType(data) if kind == "proxy" else data


def full_with_changes(base: dict[str, Any], changes: list[tuple[str, object, object]]) -> dict[Any, Any]:
    """``base`` (every flag) with some entries replaced, added or dropped."""
    data: dict[Any, Any] = dict(base)
    for op, key, value in changes:
        if op == "drop":
            data.pop(key, None)
        else:
            data[key] = value
    return data


CHANGE = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(NAMES), junk),
    st.tuples(st.just("add"), keys_of_every_kind, junk),
    st.tuples(st.just("drop"), st.sampled_from(NAMES), st.none()),
)
full_valid = st.fixed_dictionaries({name: valid_values(name) for name in NAMES})
full_plain = st.fixed_dictionaries({name: plain_values(name) for name in NAMES})
mappings = named(
    "mappings",
    st.one_of(
        make(as_mapping, st.lists(items_of_every_kind, max_size=5), st.sampled_from(["dict", "proxy", "pairs"])),
        make(  # hostile keys, on their own or among flags
            as_mapping,
            st.lists(
                st.one_of(items_of_every_kind, st.tuples(hostile_str_keys, st.booleans())), min_size=1, max_size=3
            ),
            st.sampled_from(["dict", "pairs"]),
        ),
        make(full_with_changes, full_valid, st.lists(CHANGE, max_size=2)),
        make(full_with_changes, full_valid, st.just([])),
        make(backends.Snapshot.from_dict, full_plain),
    ),
)
non_mappings = named(
    "non_mappings",
    st.one_of(
        scalars,  # none of them is a mapping
        st.lists(st.tuples(st.sampled_from(NAMES), st.booleans()), max_size=3),  # pairs, not a mapping
        st.sampled_from(NAMES),
    ),
)

WHERE = st.sampled_from(["process", "scope", "frozen process", "frozen scope"])


# --------------------------------------------------------------------------- #
# The oracle, and what is observed
# --------------------------------------------------------------------------- #


def verdict(name: str, value: object) -> tuple[type[Exception] | None, object]:
    """contract section 1: ``(None, plain value)`` if flag ``name`` takes ``value``, else the error type."""
    flag, kind = FLAGS[name], type(value)
    if flag.type is bool:
        if kind is bool or kind is numpy.bool_:
            return None, bool(value)
        return TypeError, None
    if flag.type is int:
        if kind is bool or kind is numpy.bool_:
            return TypeError, None
        try:  # any exact integer: an int, a NumPy integer, anything with __index__ (one that raises: TypeError)
            number = operator.index(value)  # type: ignore[arg-type]
        except Exception:
            return TypeError, None
        # >= the flag's minimum by the contract (0, or -1 for the plan cache size: CuPy's
        # "unlimited"); <= sys.maxsize because the value goes into C.
        low = flag.minimum if flag.minimum is not None else -sys.maxsize - 1
        return (None, number) if low <= number <= sys.maxsize else (ValueError, None)
    if issubclass(kind, str):
        text = str.__str__(value)  # type: ignore[arg-type]
        return (None, text) if text in flag.choices else (ValueError, None)
    return TypeError, None


def view_verdict(view: str, value: object) -> tuple[type[Exception] | None, object]:
    if not issubclass(type(value), str):
        return TypeError, None
    text = str.__str__(value)  # type: ignore[arg-type]
    return (None, text == "tf32") if text in ("tf32", "ieee") else (ValueError, None)


class Verdict(NamedTuple):
    problems: frozenset[type[Exception]]  # any one of these may come out; empty: must be accepted
    changes: dict[str, object]  # the flags set when accepted, as plain values
    unsure: bool  # a hostile key: a documented error or acceptance, either will do


def mapping_verdict(mapping: object, *, complete: bool = False, what: str = "mapping") -> Verdict:
    """contract sections 1 to 4 for ``backends.flags(mapping)`` and friends."""
    if not isinstance(mapping, Mapping):
        return Verdict(frozenset({TypeError}), {}, False)
    problems: set[type[Exception]] = set()
    changes: dict[str, object] = {}
    unsure = False
    for key, value in list(mapping.items()):
        if is_hostile(key):
            unsure = True
            continue
        if not issubclass(type(key), str) or str.__str__(key) not in FLAGS:  # type: ignore[arg-type]
            problems.add(KeyError)  # views, near misses and non-strings included
            continue
        problem, plain = verdict(str.__str__(key), value)  # type: ignore[arg-type]
        if problem is None:
            changes[str.__str__(key)] = plain  # type: ignore[arg-type]
        else:
            problems.add(problem)
    if complete and not problems and not unsure and set(changes) != set(NAMES):
        problems.add(KeyError)
    return Verdict(frozenset(problems), changes, unsure)


def typed(values: Mapping[str, object]) -> dict[str, tuple[type, object]]:
    return {name: (type(value), value) for name, value in values.items()}


def rows() -> tuple[tuple[str, type, object, str], ...]:
    return tuple((row.name, type(row.value), row.value, row.source) for row in backends.describe())


class PlainThread:
    """One plain ``threading.Thread``, kept for the module (starting one per example costs
    milliseconds): it reports what a thread with no scopes sees, i.e. the process defaults."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def view(self) -> dict[str, tuple[type, object]]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="test_hostile plain thread", daemon=True)
            self._thread.start()
        self._requests.put(True)
        reply = self._replies.get(timeout=30)
        if isinstance(reply, BaseException):
            raise reply
        return reply  # type: ignore[no-any-return]

    def _serve(self) -> None:
        while self._requests.get():
            try:
                # An empty context, in case a future Python lets threads inherit the starter's.
                self._replies.put(Context().run(lambda: typed(backends.snapshot())))
            except BaseException as error:  # pragma: no cover - reported to the test
                self._replies.put(error)

    def stop(self) -> None:
        if self._thread is not None:
            self._requests.put(False)
            self._thread.join()
            self._thread = None


PLAIN_THREAD = PlainThread()


@pytest.fixture(autouse=True, scope="module")
def _stop_the_plain_thread() -> Iterator[None]:
    yield
    PLAIN_THREAD.stop()


def plain_thread_view() -> dict[str, tuple[type, object]]:
    """What a plain thread sees: the process defaults."""
    return PLAIN_THREAD.view()


class Observed(NamedTuple):
    rows: tuple[tuple[str, type, object, str], ...]
    thread: dict[str, tuple[type, object]]

    @property
    def effective(self) -> dict[str, tuple[type, object]]:
        return {name: (kind, value) for name, kind, value, _ in self.rows}


def observe() -> Observed:
    return Observed(rows(), plain_thread_view())


def attempt(action: Callable[[], object], documented: tuple[type[Exception], ...]) -> tuple[Any, Exception | None]:
    """Run ``action`` with hostile objects armed: ``(result, None)`` or ``(None, documented error)``.

    Any other exception fails the test, naming what leaked."""
    try:
        with armed():
            return action(), None
    except documented as error:
        return None, error
    except Exception as error:
        leaked = error
    # Raised here, outside the handler, so that Hypothesis sees one failure, not one per leaked type.
    where = "".join(traceback.format_exception(leaked)[-3:-1]).strip()
    allowed = ", ".join(kind.__name__ for kind in documented)
    raise AssertionError(
        f"{type(leaked).__name__} leaked out of backends (documented here: {allowed}): {leaked}\n{where}"
    )


def refused_nothing_changed(error: Exception, problems: frozenset[type[Exception]], before: Observed) -> None:
    assert problems, f"a valid input was refused: {type(error).__name__}: {error}"
    assert isinstance(error, tuple(problems)), f"expected one of {sorted(p.__name__ for p in problems)}, got {error!r}"
    assert observe() == before, "a refused input changed the flags"


def accepted(
    before: Observed,
    changes: Mapping[str, object],
    *,
    in_scope: bool,
    problems: frozenset[type[Exception]] = frozenset(),
) -> None:
    """After an accepted call: exactly ``changes``, in this context only when ``in_scope``,
    for every thread otherwise."""
    assert not problems, f"accepted although {sorted(p.__name__ for p in problems)} was due"
    now = observe()
    assert now.effective == {**before.effective, **typed(changes)}
    assert now.thread == (before.thread if in_scope else {**before.thread, **typed(changes)})


@contextmanager
def situation(where: str) -> Iterator[tuple[bool, bool]]:
    """``(in_scope, frozen)``: the state a call is made in; everything is undone after."""
    backends.set_defaults(DEFAULTS_BEFORE)
    frozen = where.startswith("frozen")
    if frozen:
        backends.disable_global_flags()
    try:
        if where.endswith("scope"):
            with backends.flags(SCOPE_BEFORE):
                yield True, frozen
        else:
            yield False, frozen
    finally:
        backends.enable_global_flags()
        backends.reset_defaults()


def resolve(dotted: str) -> Any:
    return functools.reduce(getattr, dotted.split("."), backends)


# --------------------------------------------------------------------------- #
# Item 4: hostile input at every public entry point
# --------------------------------------------------------------------------- #


class Target(NamedTuple):
    label: str
    namespace: Any
    attribute: str
    flag: str
    view: bool

    def __repr__(self) -> str:
        return self.label


TARGETS = [
    Target(f"backends.{name}", resolve(FLAGS[name].namespace), FLAGS[name].attribute, name, False) for name in NAMES
] + [Target(f"backends.{view}", resolve(view.rpartition(".")[0]), "fp32_precision", flag, True)
     for view, flag in VIEWS.items()]


@SETTINGS
@given(target=st.sampled_from(TARGETS), value=junk, where=WHERE)
def test_assigning_junk_to_any_flag_or_view(target: Target, value: object, where: str) -> None:
    value = real(value)
    with situation(where) as (in_scope, frozen):
        before = observe()
        problem, plain = view_verdict(target.label, value) if target.view else verdict(target.flag, value)
        if problem is None and frozen and not in_scope:
            problem = RuntimeError  # contract section 5
        assign = lambda: setattr(target.namespace, target.attribute, value)  # noqa: E731
        _, error = attempt(assign, (TypeError, ValueError, RuntimeError))
        problems = frozenset({problem} if problem else ())
        if error is not None:
            refused_nothing_changed(error, problems, before)
        else:
            accepted(before, {target.flag: plain}, in_scope=in_scope, problems=problems)


@SETTINGS
@given(value=st.one_of(junk, valid_values("cuda.preferred_linalg_library")), where=WHERE)
def test_preferred_linalg_library_called_with_junk(value: object, where: str) -> None:
    value = real(value)
    name = "cuda.preferred_linalg_library"
    with situation(where) as (in_scope, frozen):
        before = observe()
        problem, plain = verdict(name, value)
        if value is None:  # torch's shape: no argument reads
            problem, plain = None, backends.snapshot()[name]
        elif problem is None and frozen and not in_scope:
            problem = RuntimeError
        result, error = attempt(
            lambda: backends.cuda.preferred_linalg_library(value), (TypeError, ValueError, RuntimeError)
        )
        problems = frozenset({problem} if problem else ())
        if error is not None:
            refused_nothing_changed(error, problems, before)
        else:
            assert type(result) is str and result == plain
            accepted(before, {name: plain}, in_scope=in_scope or value is None, problems=problems)


def check_scope_built(before: Observed, verdict_: Verdict, result: object, error: Exception | None) -> None:
    """A scope builder's call: refused and nothing changed, or a scope that changes nothing
    until entered, then exactly ``changes`` in this context, undone on exit."""
    if error is not None:
        if not verdict_.unsure:
            refused_nothing_changed(error, verdict_.problems, before)
        else:
            assert observe() == before
        return
    assert verdict_.unsure or not verdict_.problems, f"accepted although {verdict_.problems} was due"
    assert isinstance(result, backends.Scope)
    assert observe() == before, "building a scope changed the flags"
    with result:
        if not verdict_.unsure:
            accepted(before, verdict_.changes, in_scope=True)
    assert observe() == before


NAMESPACE_FLAGS = {
    prefix: {FLAGS[name].attribute: name for name in NAMES if FLAGS[name].namespace == prefix}
    for prefix in ("cudnn", "cuda.matmul")
}
keyword_names = named("keyword_names", st.one_of(
    st.sampled_from(sorted({a for members in NAMESPACE_FLAGS.values() for a in members})),
    st.sampled_from(NEAR_MISS_ATTRIBUTES),
    st.text(max_size=12),
))


@SETTINGS
@given(
    prefix=st.sampled_from(sorted(NAMESPACE_FLAGS)),
    kwargs=st.dictionaries(keyword_names, st.one_of(st.none(), st.booleans(), st.integers(0, 20), junk), max_size=4),
    where=WHERE,
)
def test_namespace_flags_with_junk_keywords_and_values(prefix: str, kwargs: dict[str, object], where: str) -> None:
    kwargs = real(kwargs)
    members = NAMESPACE_FLAGS[prefix]
    problems: set[type[Exception]] = set()
    changes: dict[str, object] = {}
    for attribute, value in kwargs.items():
        if attribute not in members:
            problems.add(TypeError)  # an unknown keyword, as Python itself says
        elif value is not None:  # None: not given
            problem, plain = verdict(members[attribute], value)
            if problem is None:
                changes[members[attribute]] = plain
            else:
                problems.add(problem)
    with situation(where):
        before = observe()
        result, error = attempt(lambda: resolve(prefix).flags(**kwargs), (TypeError, ValueError))
        check_scope_built(before, Verdict(frozenset(problems), changes, False), result, error)


@SETTINGS
@given(prefix=st.sampled_from(sorted(NAMESPACE_FLAGS)), value=junk, where=WHERE)
def test_tf32_and_positional_flags_with_junk(prefix: str, value: object, where: str) -> None:
    value = real(value)
    name = NAMESPACE_FLAGS[prefix]["allow_tf32"]
    problem, plain = verdict(name, value)
    with situation(where):
        before = observe()
        result, error = attempt(lambda: resolve(prefix).tf32(value), (TypeError, ValueError))
        check_scope_built(before, Verdict(frozenset({problem} if problem else ()), {name: plain}, False), result, error)
        # flags() takes keywords only, deterministic() nothing: a positional argument is a TypeError.
        for call in (lambda: resolve(prefix).flags(value), lambda: backends.deterministic(value)):
            _, error = attempt(call, (TypeError,))
            refused_nothing_changed(error, frozenset({TypeError}), before)  # type: ignore[arg-type]


MAPPING_ENTRY_POINTS = {
    "backends.flags": backends.flags,
    "backends.Scope": backends.Scope,
    "backends.set_defaults": backends.set_defaults,
    "backends.Snapshot": backends.Snapshot,
    "backends.Snapshot.from_dict": backends.Snapshot.from_dict,
    "backends_flags.set": lambda mapping: BackendsFlags().set(mapping),
}


def check_mapping_entry_point(entry: str, mapping: object, where: str) -> None:
    complete = entry.startswith("backends.Snapshot")
    expected = mapping_verdict(mapping, complete=complete)
    with situation(where) as (in_scope, _):
        plugin_scope = backends.flags({}) if entry == "backends_flags.set" else None  # as the fixture does
        if plugin_scope is not None:
            plugin_scope.__enter__()
        try:
            before = observe()
            result, error = attempt(lambda: MAPPING_ENTRY_POINTS[entry](mapping), (TypeError, ValueError, KeyError))
            if entry in ("backends.flags", "backends.Scope"):
                check_scope_built(before, expected, result, error)
            elif error is not None:
                if not expected.unsure:
                    refused_nothing_changed(error, expected.problems, before)
                assert observe() == before
            elif expected.unsure:
                pass  # a hostile key was accepted: fine, whatever it meant
            elif complete:
                assert not expected.problems, f"accepted although {expected.problems} was due"
                assert isinstance(result, backends.Snapshot)
                assert typed(result) == typed(expected.changes) and list(result) == list(NAMES)
                assert observe() == before
            elif entry == "backends_flags.set":
                accepted(before, expected.changes, in_scope=True, problems=expected.problems)
            else:  # set_defaults: the process defaults, even inside a scope (which still wins here)
                assert not expected.problems, f"accepted although {expected.problems} was due"
                now = observe()
                assert now.thread == {**before.thread, **typed(expected.changes)}
                shadowed = SCOPE_BEFORE if in_scope else {}
                visible = {name: value for name, value in expected.changes.items() if name not in shadowed}
                assert now.effective == {**before.effective, **typed(visible)}
        finally:
            if plugin_scope is not None:
                plugin_scope.__exit__(None, None, None)


@SETTINGS
@given(entry=st.sampled_from(sorted(MAPPING_ENTRY_POINTS)), mapping=st.one_of(mappings, non_mappings), where=WHERE)
def test_mapping_entry_points_with_junk(entry: str, mapping: object, where: str) -> None:
    check_mapping_entry_point(entry, real(mapping), where)


@SETTINGS
@given(name=keys_of_every_kind, value=st.one_of(junk, st.booleans()))
def test_plugin_set_by_name_with_junk(name: object, value: object) -> None:
    """``backends_flags.set(name, value)`` (the pytest plugin), inside the fixture's scope."""
    name, value = real(name), real(value)
    expected = mapping_verdict({name: value}) if isinstance(name, str) else Verdict(frozenset({TypeError}), {}, False)
    with situation("process"), backends.flags({}):
        before = observe()
        _, error = attempt(lambda: BackendsFlags().set(name, value), (TypeError, ValueError, KeyError))  # type: ignore[arg-type]
        if error is not None:
            if not expected.unsure:
                refused_nothing_changed(error, expected.problems, before)
            assert observe() == before
        elif not expected.unsure:
            accepted(before, expected.changes, in_scope=True, problems=expected.problems)


async def _coroutine_function() -> None:
    pass


def _generator_function() -> Iterator[None]:
    yield None


CALLABLES = [
    len, print, int, dict, backends.Scope, _function, _coroutine_function, _generator_function,
    staticmethod(_function), classmethod(_function), functools.partial(_function), lambda: None, numpy.add,
    deterministic_now, str.upper, "".join, backends.snapshot, type("Callable", (), {"__call__": _function})(),
]


@SETTINGS
@given(fn=st.one_of(junk, st.sampled_from(CALLABLES)), scope=st.sampled_from(["cudnn", "flags", "snapshot", "det"]))
def test_bind_and_decorators_on_junk(fn: object, scope: str) -> None:
    fn = real(fn)
    decorator = {
        "cudnn": lambda: backends.cudnn.flags(deterministic=True),
        "flags": lambda: backends.flags({"cuda.preferred_linalg_library": "magma"}),
        "snapshot": backends.snapshot,
        "det": backends.deterministic,
    }[scope]()
    with situation("scope"):
        before = observe()
        result, error = attempt(lambda: backends.bind(fn), (TypeError,))  # type: ignore[arg-type]
        if callable(fn):
            assert error is None and isinstance(result, backends.Bound)
        else:
            refused_nothing_changed(error, frozenset({TypeError}), before)  # type: ignore[arg-type]
        result, error = attempt(lambda: decorator(fn), (TypeError,))
        if isinstance(fn, type) or not (callable(fn) or isinstance(fn, (staticmethod, classmethod))):
            refused_nothing_changed(error, frozenset({TypeError}), before)  # type: ignore[arg-type]
        else:
            assert error is None
            assert callable(result) or isinstance(result, (staticmethod, classmethod))
        assert observe() == before


@SETTINGS
@given(device=st.one_of(junk, st.integers(-3, 8)), value=st.one_of(junk, st.integers(0, 40)))
def test_cufft_plan_cache_with_junk(device: object, value: object) -> None:
    device, value = real(device), real(value)
    cache = backends.cuda.cufft_plan_cache
    cuda = backends.cuda.is_available()
    with situation("process"):
        before = observe()
        # contract section 8: without CUDA, [device] raises RuntimeError (TypeError for a
        # non-int device is fine too); with CUDA, TypeError or IndexError.
        documented = (TypeError, IndexError) if cuda else (RuntimeError, TypeError)
        _, error = attempt(lambda: cache[device], documented)  # type: ignore[index]
        if not cuda:
            refused_nothing_changed(error, frozenset(documented), before)  # type: ignore[arg-type]
        assert observe() == before
        # .size is read-only: assigning it raises AttributeError, whatever the value.
        _, error = attempt(lambda: setattr(cache, "size", value), (AttributeError,))
        refused_nothing_changed(error, frozenset({AttributeError}), before)  # type: ignore[arg-type]


NAMESPACES = [
    backends.cudnn, backends.cudnn.conv, backends.cuda, backends.cuda.matmul, backends.cuda.cufft_plan_cache,
    backends.mps, backends.mkl, backends.mkldnn, backends.openmp, backends,
]
LAZY = {"asyncio", "trio", "ThreadPoolExecutor", "Thread", "run_in_executor"}  # public, imported on first use
junk_names = named("junk_names", st.one_of(
    st.text(max_size=30),
    # A str subclass whose repr/str/format raise (not its hash or ==: CPython's own attribute
    # lookup calls those, before backends is reached).
    hostiles(
        str,
        st.sampled_from(NEAR_MISS_ATTRIBUTES),
        st.frozensets(st.sampled_from(["__repr__", "__str__", "__format__"]), min_size=1),
    ),
    st.sampled_from(NEAR_MISS_ATTRIBUTES),
    st.builds(lambda n, c: c * n, st.integers(200, 20_000), st.sampled_from(["x", "é", "中", "\U0001f600", "_"])),
    st.text(min_size=1, max_size=8).map(lambda s: f"__{s}__"),
).filter(lambda name: name not in LAZY))


@SETTINGS
@given(
    namespace=st.sampled_from(NAMESPACES),
    name=junk_names,
    value=st.one_of(scalars, st.booleans()),
)
def test_getattr_and_setattr_of_junk_names_on_namespaces(namespace: Any, name: str, value: object) -> None:
    """Reading an unknown attribute raises AttributeError; assigning one raises AttributeError
    and creates nothing (contract section 2). Names starting with "_" may be monkeypatched."""
    name, value = real(name), real(value)
    if isinstance(value, ModuleType):  # `backends` takes modules: the import system sets submodules so
        value = object()
    before = observe()
    before_vars = dict(vars(namespace))
    _, read_error = attempt(lambda: getattr(namespace, name), (AttributeError,))
    assert observe() == before
    if read_error is None or name.startswith("_"):
        return  # a real attribute (or a private name): assignment is not junk
    try:
        _, error = attempt(lambda: setattr(namespace, name, value), (AttributeError,))
        shown = f"{namespace!r}.{str(name)[:40]!r}"
        assert isinstance(error, AttributeError), f"{shown} = ... was accepted, but reading it raises AttributeError"
        assert dict(vars(namespace)) == before_vars
        assert observe() == before
    finally:
        for added in set(vars(namespace)) - set(before_vars):  # so a failure does not linger
            delattr(namespace, added)


def mixed_case(word: str, upper: list[bool]) -> str:
    return "".join(c.upper() if u else c for c, u in zip(word, upper[: len(word)], strict=True))


def env_words(name: str) -> st.SearchStrategy[tuple[str, object]]:
    """``(text, value)`` that the contract says ``BACKENDS_<NAME>`` parses to."""
    flag = FLAGS[name]
    if flag.type is bool:
        return st.builds(
            lambda word, upper: (mixed_case(word, upper), BOOL_WORDS[word]),
            st.sampled_from(sorted(BOOL_WORDS)),
            st.lists(st.booleans(), min_size=5, max_size=5),
        )
    if flag.type is int:
        return st.integers(0, sys.maxsize).map(lambda n: (str(n), n))
    return st.sampled_from(flag.choices).map(lambda c: (c, c))


@SETTINGS
@given(chosen=st.dictionaries(st.sampled_from(NAMES), st.none()).flatmap(
    lambda names: st.fixed_dictionaries({name: env_words(name) for name in names})
), cupy=st.one_of(st.none(), st.sampled_from(["0", "1", "2", " 1 "])))
def test_environment_parses_every_valid_word(chosen: dict[str, tuple[str, object]], cupy: str | None) -> None:
    environ = {env: chosen[name][0] for env, name in ENV_VARS.items() if name in chosen}
    expected = {name: value for name, (_, value) in chosen.items()}
    if cupy is not None:
        environ["CUPY_TF32"] = cupy
        expected.setdefault("cuda.matmul.allow_tf32", int(cupy) > 0)  # BACKENDS_ wins over CUPY_TF32
    result, error = attempt(lambda: environment.read(environ), (ValueError,))
    assert error is None, error
    assert typed(result) == typed(expected)


env_values = named("env_values", st.one_of(
    st.text(max_size=16),
    st.sampled_from([*BOOL_WORDS, *NEAR_MISS_VALUES, *CHOICES, "١٢", "1_0", "+5", "0x10", " 7 ", "TRUE\n"]),
    st.just("\uff34\uff32\uff35\uff25"),  # TRUE in fullwidth letters
    st.integers().map(str),
    st.sampled_from(BIG_INTS).map(str),
    st.sampled_from(NAMES).flatmap(env_words).map(lambda pair: pair[0]),
))
environments = named("environments", st.dictionaries(
    st.one_of(
        st.sampled_from([*ENV_VARS, "CUPY_TF32"]),
        st.sampled_from(NEAR_MISS_ENV),
        st.text(max_size=12).map(lambda s: "BACKENDS_" + s),
        st.text(max_size=12),
    ),
    env_values,
    max_size=6,
))


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)  # CuPy's own parse of CUPY_TF32
    except ValueError:
        return None


@SETTINGS
@given(environ=environments)
def test_environment_yields_only_table_names_and_values(environ: dict[str, str]) -> None:
    """Item 5 for the environment: whatever the variables hold, parsing gives a ValueError
    naming a variable, or only the table's flags with values each flag takes."""
    before = rows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, error = attempt(lambda: environment.read(environ), (ValueError,))
    assert rows() == before
    cupy_tf32 = environ.get("CUPY_TF32")
    cupy_parses = cupy_tf32 is not None and _int_or_none(cupy_tf32) is not None
    if error is None:  # CuPy's own parse decides: a value it rejects warns once and is ignored
        assert len(caught) == (cupy_tf32 is not None and not cupy_parses), [str(w.message) for w in caught]
    if error is not None:
        assert any(name in str(error) for name in environ), f"the error names no variable: {error}"
        return
    assert isinstance(result, dict)
    set_vars = {name for env, name in ENV_VARS.items() if environ.get(env, "").strip()}
    from_cupy = {"cuda.matmul.allow_tf32"} if cupy_parses else set()
    assert set_vars <= set(result) <= set_vars | from_cupy
    for name, value in result.items():
        assert verdict(name, value) == (None, value) and type(value) is FLAGS[name].type, (name, value)
    for env, name in ENV_VARS.items():  # where the text is unambiguous, it means what it says
        word = environ.get(env, "").strip()
        if FLAGS[name].type is bool and word.lower() in BOOL_WORDS:
            assert result[name] is BOOL_WORDS[word.lower()]
        elif FLAGS[name].type is int and word.isascii() and word.isdigit():
            assert result[name] == int(word)
        elif FLAGS[name].type is str and word in CHOICES:
            assert result[name] == word


# --------------------------------------------------------------------------- #
# Minimal reproductions of what the properties above found
# --------------------------------------------------------------------------- #


def _raise_sabotage(*args: object, **kwargs: object) -> Any:
    if getattr(_armed, "on", False):
        raise Sabotage("hostile")
    return NotImplemented


class EqRaisingStr(str):
    """A str whose ``==`` raises; hashes like the plain string, so a dict lookup compares it."""

    hostile = True  # for the oracle: a documented error or acceptance will do

    def __eq__(self, other: object) -> bool:
        return _raise_sabotage() if getattr(_armed, "on", False) else str.__eq__(self, other)  # type: ignore[no-any-return]

    __hash__ = str.__hash__


class ReprRaisingStr(str):
    hostile = True

    def __repr__(self) -> str:
        return _raise_sabotage() if getattr(_armed, "on", False) else f"ReprRaisingStr({str(self)!r})"  # type: ignore[no-any-return]


class ReprRaising:
    def __repr__(self) -> str:
        return _raise_sabotage() if getattr(_armed, "on", False) else "ReprRaising()"  # type: ignore[no-any-return]


@pytest.mark.parametrize("entry", sorted(MAPPING_ENTRY_POINTS))
@pytest.mark.parametrize(
    "key",
    [EqRaisingStr("cudnn.deterministic"), ReprRaisingStr("cudnn.nope"), EqRaisingStr("cudnn.nope")],
    ids=["eq-raising valid name", "repr-raising unknown name", "eq-raising unknown name"],
)
def test_hostile_str_keys_in_a_mapping_get_a_documented_error(entry: str, key: str) -> None:
    """Found: a ``str`` subclass key whose ``__eq__`` (or ``__repr__``) raises leaks that
    exception out of every mapping entry point (``BY_NAME.get(name)`` compares it;
    the unknown-name message ``repr``s it)."""
    full = backends.snapshot().to_dict()
    full.pop(str(key), None)
    mapping = {**full, key: True} if entry.startswith("backends.Snapshot") else {key: True}
    check_mapping_entry_point(entry, mapping, "process")


def test_plugin_set_with_a_hostile_name_and_no_value_raises_type_error() -> None:
    """Found: ``backends_flags.set(name)`` without a value formats ``repr(name)`` into its
    TypeError, so a name whose ``__repr__`` raises leaks that exception instead."""
    with backends.flags({}):
        before = observe()
        _, error = attempt(lambda: BackendsFlags().set(ReprRaisingStr("cudnn.deterministic")), (TypeError,))
        assert isinstance(error, TypeError)
        assert observe() == before


@pytest.mark.parametrize("namespace", [backends, backends.cudnn], ids=["backends", "backends.cudnn"])
@pytest.mark.parametrize("op", ["get", "set"])
def test_an_unknown_attribute_name_with_a_hostile_repr_raises_attribute_error(namespace: Any, op: str) -> None:
    """Found: the unknown-attribute message of ``backends`` and of every namespace is
    ``f"... {name!r}"``, so ``getattr(backends.cudnn, S("benchmak"))`` with a ``str``
    subclass whose ``__repr__`` raises leaks that exception instead of AttributeError."""
    name = ReprRaisingStr("benchmak")
    before_vars = dict(vars(namespace))
    action = (lambda: getattr(namespace, name)) if op == "get" else (lambda: setattr(namespace, name, True))
    _, error = attempt(action, (AttributeError,))
    assert isinstance(error, AttributeError)
    assert dict(vars(namespace)) == before_vars


@pytest.mark.parametrize("prefix", sorted(NAMESPACE_FLAGS))
@pytest.mark.parametrize(
    "keyword", [EqRaisingStr("allow_tf32"), ReprRaisingStr("nope")], ids=["eq-raising valid", "repr-raising unknown"]
)
def test_hostile_str_keywords_get_a_documented_error(prefix: str, keyword: str) -> None:
    """Found: ``backends.cudnn.flags(**{S("allow_tf32"): True})`` leaks ``S.__eq__``'s exception
    (``single.get``/``members.get`` compare it); an unknown one leaks ``S.__repr__``'s."""
    before = observe()
    result, error = attempt(lambda: resolve(prefix).flags(**{keyword: True}), (TypeError, ValueError))
    assert error is not None or isinstance(result, backends.Scope)
    assert observe() == before


def test_plan_cache_index_with_a_hostile_repr_raises_runtime_error_without_cuda() -> None:
    """Found: ``cufft_plan_cache[device]`` formats ``repr(device)`` before checking CUDA,
    so a device whose ``__repr__`` raises leaks that exception (contract section 8:
    RuntimeError without CUDA)."""
    if backends.cuda.is_available():
        pytest.skip("the no-CUDA path")
    before = observe()
    _, error = attempt(lambda: backends.cuda.cufft_plan_cache[ReprRaising()], (RuntimeError, TypeError))  # type: ignore[index]
    assert error is not None
    assert observe() == before


def test_a_class_calling_itself_numpy_bool_is_not_numpy_bool() -> None:
    """Found: bool flags recognise ``numpy.bool_`` by ``__module__``/``__name__``, so any class
    named ``numpy.bool_`` is let in and its ``__bool__`` called: a raising one leaks (and a
    truthy one sets the flag although contract section 1 takes only bool and numpy.bool_)."""
    spoof = type("bool_", (), {"__module__": "numpy", "__bool__": _raise_sabotage})()
    before = observe()
    _, error = attempt(lambda: setattr(backends.cudnn, "deterministic", spoof), (TypeError,))
    assert isinstance(error, TypeError)
    assert observe() == before


def test_assigning_a_name_that_cannot_be_read_raises_attribute_error() -> None:
    """Found: ``backends.cudnn.mro = 1`` succeeds (``hasattr(type(ns), "mro")`` sees the
    metaclass's method) although reading ``backends.cudnn.mro`` raises AttributeError:
    contract section 2 says assigning an unknown attribute raises AttributeError."""
    namespace = backends.cudnn
    with pytest.raises(AttributeError):
        namespace.mro  # noqa: B018
    before_vars = dict(vars(namespace))
    try:
        with pytest.raises(AttributeError):
            namespace.mro = 1  # type: ignore[method-assign]
    finally:
        vars(namespace).pop("mro", None)
    assert dict(vars(namespace)) == before_vars


class ClassRaising:
    """An object whose ``__class__`` raises: ``isinstance`` asks it, ``type()`` does not."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        if getattr(_armed, "on", False):
            raise Sabotage("hostile __class__")
        return ClassRaising


@pytest.mark.parametrize(
    "call",
    [
        lambda: setattr(backends.cudnn, "benchmark_limit", ClassRaising()),
        lambda: backends.cuda.preferred_linalg_library(ClassRaising()),
        lambda: setattr(backends.cudnn.conv, "fp32_precision", ClassRaising()),
        lambda: backends.flags(ClassRaising()),  # type: ignore[arg-type]
    ],
    ids=["int flag", "str flag", "view", "mapping"],
)
def test_a_value_whose_class_attribute_raises_gets_a_type_error(call: Callable[[], object]) -> None:
    before = observe()
    _, error = attempt(call, (TypeError,))
    assert isinstance(error, TypeError)
    assert observe() == before


# --------------------------------------------------------------------------- #
# Item 5: untrusted data
# --------------------------------------------------------------------------- #

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(BIG_INTS), st.floats(), st.text(max_size=10),
    st.sampled_from([*CHOICES, *NEAR_MISS_VALUES]),
)
json_values = named("json_values", st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
))
json_keys = st.one_of(st.sampled_from([*NAMES, *VIEWS, *NEAR_MISS_NAMES]), st.text(max_size=30))
json_changes = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(NAMES), json_values),
        st.tuples(st.just("add"), json_keys, json_values),
        st.tuples(st.just("drop"), st.sampled_from(NAMES), st.none()),
    ),
    max_size=3,
)


def from_json(data: object) -> Any:
    """As a request body or a message from another process would arrive."""
    return json.loads(json.dumps(data))


json_bodies = named("json_bodies", st.one_of(
    st.dictionaries(json_keys, json_values, max_size=12),
    st.builds(full_with_changes, full_plain, json_changes),
    json_values,  # not even an object
).map(from_json))


@SETTINGS
@given(body=json_bodies, where=WHERE)
def test_snapshot_from_json_accepts_only_the_table(body: object, where: str) -> None:
    """Whatever JSON comes in, ``Snapshot.from_dict`` gives a snapshot of exactly the table's
    flags with values they take, or a documented error; nothing else can be set."""
    expected = mapping_verdict(body, complete=True)
    with situation(where):
        before = observe()
        snap, error = attempt(lambda: backends.Snapshot.from_dict(body), (TypeError, ValueError, KeyError))
        if error is not None:
            refused_nothing_changed(error, expected.problems, before)
            return
        assert not expected.problems, f"{body!r} was accepted although {expected.problems} was due"
        assert list(snap) == list(NAMES) and typed(snap) == typed(expected.changes)
        assert observe() == before
        with snap:
            assert observe().effective == typed(expected.changes)
            assert [row[0] for row in rows()] == list(NAMES)  # nothing beyond the table appeared
        assert observe() == before


@SETTINGS
@given(data=full_plain)
def test_a_valid_dict_round_trips(data: dict[str, object]) -> None:
    snap = backends.Snapshot.from_dict(data)
    assert typed(snap.to_dict()) == typed(data)
    assert backends.Snapshot.from_dict(snap.to_dict()) == snap
    assert backends.Snapshot.from_dict(from_json(snap.to_dict())) == snap
    assert backends.Snapshot(snap) == snap
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(snap, protocol))
        assert type(copy) is backends.Snapshot and copy == snap and hash(copy) == hash(snap)
        assert typed(copy) == typed(data)
    with snap:
        assert typed(backends.snapshot()) == typed(data)


class Forged:
    """Unpickles as ``Snapshot.from_dict(data)``, as a real snapshot's pickle does, with
    whatever ``data`` a peer chooses to put there."""

    def __init__(self, data: object) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        return (backends.Snapshot.from_dict, (self.data,))


def bad_body(body: object) -> bool:
    return bool(mapping_verdict(body, complete=True).problems)


@SETTINGS
@given(body=json_bodies.filter(bad_body), protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), where=WHERE)
def test_a_forged_snapshot_pickle_raises_on_load_and_sets_nothing(body: object, protocol: int, where: str) -> None:
    real = pickle.dumps(backends.snapshot(), protocol)
    forged = pickle.dumps(Forged(body), protocol)
    assert b"from_dict" in real and b"from_dict" in forged  # the same reconstructor, other data
    with situation(where):
        before = observe()
        _, error = attempt(lambda: pickle.loads(forged), (TypeError, ValueError, KeyError))
        refused_nothing_changed(error, mapping_verdict(body, complete=True).problems, before)  # type: ignore[arg-type]


TAMPERINGS = [
    pytest.param(protocol, old, new, error, id=f"{what}-protocol {protocol}")
    for what, old, new, error, protocols in [
        ("value out of range", b"cusolver", b"CUSOLVER", ValueError, range(pickle.HIGHEST_PROTOCOL + 1)),
        ("unknown name", b"cudnn.deterministic", b"cudnn.Deterministic", KeyError, range(pickle.HIGHEST_PROTOCOL + 1)),
        # NEWTRUE -> BININT1 1: a same-place swap only in unframed binary pickles.
        ("bool as int", b"\x88", b"K\x01", TypeError, (2, 3)),
    ]
    for protocol in protocols
]


@pytest.mark.parametrize(("protocol", "old", "new", "error"), TAMPERINGS)
@pytest.mark.parametrize("kind", ["snapshot", "bind"])
def test_tampered_bytes_of_a_real_pickle_raise_on_load(
    kind: str, protocol: int, old: bytes, new: bytes, error: type[Exception]
) -> None:
    """Edit the bytes of a real pickle of a snapshot (or of a ``bind()`` object, which
    carries one): loading it raises, and sets nothing."""
    with backends.flags({"cuda.preferred_linalg_library": "cusolver"}):
        obj = backends.snapshot() if kind == "snapshot" else backends.bind(deterministic_now)
    data = pickle.dumps(obj, protocol)
    assert old in data
    tampered = data.replace(old, new)
    before = observe()
    with pytest.raises(error):
        pickle.loads(tampered)
    assert observe() == before


def test_docs_say_pickled_bind_and_snapshot_objects_must_come_from_trusted_peers() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs"
    sections = [
        section
        for page in sorted(docs.glob("*.md"))
        for section in re.split(r"\n(?=#)", page.read_text(encoding="utf-8"))
        if "trusted" in section
    ]
    assert any(
        "pickle" in section and "bind" in section and "Snapshot" in section and "from_dict" in section
        for section in sections
    ), "no docs section says pickled bind()/Snapshot objects must come from trusted peers"
