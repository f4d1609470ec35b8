"""Correct use of backends, beside bad.py's mistakes: mypy --strict and pyright (strict) must report
nothing here, and every ``assert_type`` must hold (tests/test_typing.py runs both). The file also
runs, without a GPU, and leaves the process defaults as it found them (the test runs it too)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Literal, assert_type

import backends
from backends import FlagValues, Scope, Snapshot
from backends.integrations.pytest_plugin import BackendsFlags

Precision = Literal["tf32", "ieee"]
Linalg = Literal["default", "cusolver", "magma"]
Value = bool | int | str

# -- attributes: reading gives each flag's type ------------------------------------------------
assert_type(backends.cudnn.enabled, bool)
assert_type(backends.cudnn.benchmark, bool)
assert_type(backends.cudnn.benchmark_limit, int)
assert_type(backends.cudnn.deterministic, bool)
assert_type(backends.cudnn.allow_tf32, bool)
assert_type(backends.cuda.matmul.allow_tf32, bool)
assert_type(backends.cuda.matmul.allow_fp16_reduced_precision_reduction, bool)
assert_type(backends.cuda.matmul.allow_bf16_reduced_precision_reduction, bool)
assert_type(backends.cuda.cufft_plan_cache.max_size, int)
assert_type(backends.cuda.matmul.fp32_precision, Precision)
assert_type(backends.cudnn.conv.fp32_precision, Precision)
assert_type(backends.cuda.preferred_linalg_library(), Linalg)
assert_type(backends.cudnn.is_available(), bool)
assert_type(backends.cudnn.version(), int | None)
assert_type(backends.cuda.is_available(), bool)
assert_type(backends.mps.is_built(), bool)
assert_type(backends.mkl.is_available(), bool)
assert_type(backends.openmp.is_available(), bool)

# -- attributes: assigning a value of the flag's type (outside a scope: the process default) ------
backends.cudnn.deterministic = True
backends.cudnn.benchmark_limit = 0
backends.cuda.cufft_plan_cache.max_size = 32
backends.cuda.matmul.fp32_precision = "ieee"
backends.cudnn.conv.fp32_precision = "tf32"
backends.cuda.preferred_linalg_library = "cusolver"
assert_type(backends.cuda.preferred_linalg_library("magma"), Linalg)


class Eight:
    """An exact integer that is not an int (as a NumPy integer is): an int flag takes it."""

    def __index__(self) -> int:
        return 8


backends.cudnn.benchmark_limit = Eight()
backends.cuda.cufft_plan_cache.max_size = Eight()
assert_type(backends.cudnn.benchmark_limit, int)  # read back as a plain int
assert_type(backends.cudnn.flags(benchmark_limit=Eight()), Scope)
backends.set_defaults({"cuda.cufft_plan_cache.max_size": Eight()})
if backends.cuda.is_available():
    assert_type(backends.cuda.cufft_plan_cache.size, int)
    assert_type(backends.cuda.cufft_plan_cache[0].max_size, int)
version = backends.cudnn.version()
newer: bool = version is not None and version > 90000

# -- scopes: keywords and arguments -------------------------------------------------------------
assert_type(backends.cudnn.flags(deterministic=True, benchmark=None), Scope)
assert_type(backends.cudnn.flags(benchmark=False), Scope)
assert_type(backends.cudnn.flags(benchmark_limit=4), Scope)
assert_type(backends.cuda.matmul.flags(allow_tf32=False), Scope)
assert_type(backends.cuda.matmul.flags(allow_fp16_reduced_precision_reduction=False), Scope)
assert_type(backends.cuda.cufft_plan_cache.flags(max_size=8), Scope)
assert_type(backends.cuda.flags(preferred_linalg_library="magma"), Scope)
assert_type(backends.cudnn.flags(), Scope)
assert_type(backends.cudnn.tf32(True), Scope)
assert_type(backends.cuda.matmul.tf32(False), Scope)
assert_type(backends.deterministic(), Scope)

# -- mappings of dotted names ---------------------------------------------------------------------
assert_type(backends.flags({"cudnn.deterministic": True, "cuda.preferred_linalg_library": "magma"}), Scope)
assert_type(backends.flags({"cuda.matmul.allow_tf32": False}), Scope)
assert_type(backends.flags({}), Scope)
backends.set_defaults({"cudnn.benchmark_limit": 4, "cuda.matmul.allow_tf32": False})
backends.set_defaults({"cuda.cufft_plan_cache.max_size": 64})
config: FlagValues = {"cudnn.deterministic": True}  # a dict built apart from the call: annotate it
config["cudnn.benchmark"] = False
assert_type(backends.flags(config), Scope)


# -- decorators, bind, snapshots ------------------------------------------------------------------
@backends.cudnn.flags(deterministic=True)
def train(steps: int) -> float:
    return steps / 2


@backends.cuda.matmul.tf32(False)
async def serve(batch: int) -> str:
    return str(batch)


@backends.cudnn.flags(benchmark=False)
def batches(n: int) -> Iterator[int]:
    yield from range(n)


@backends.deterministic()
async def stream(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


@backends.deterministic()
def replay(seed: int) -> None: ...


assert_type(train(10), float)
assert_type(asyncio.run(serve(3)), str)
assert_type(next(batches(3)), int)
replay(0)


async def consume() -> list[str]:
    return [str(item) async for item in stream(3)]


assert_type(asyncio.run(consume()), list[str])
assert_type(backends.bind(train)(steps=3), float)
assert_type(backends.bind(train)(3), float)
bound: Callable[[int], float] = backends.bind(train)
snap = backends.snapshot()
assert_type(snap, Snapshot)
assert_type(snap["cudnn.deterministic"], Value)
assert_type(snap.to_dict(), dict[str, Value])
with backends.cudnn.flags(deterministic=True) as scope:
    assert_type(scope, Scope)
with snap:
    assert_type(backends.cudnn.allow_tf32, bool)  # (a flag assigned above would read as the literal assigned)


# -- the import forms -----------------------------------------------------------------------------
def from_package() -> None:
    from backends import cudnn

    assert_type(cudnn.benchmark, bool)
    cudnn.benchmark = False
    assert_type(cudnn.flags(benchmark=True), Scope)


def from_subpackage() -> None:
    from backends.cuda import cufft_plan_cache, matmul

    matmul.allow_tf32 = True
    assert_type(matmul.fp32_precision, Precision)
    cufft_plan_cache.max_size = 4


def import_submodule() -> None:
    import backends.cudnn

    assert_type(backends.cudnn.deterministic, bool)
    backends.cudnn.deterministic = False
    assert_type(backends.cudnn.flags(deterministic=True), Scope)


def import_nested() -> None:
    import backends.cuda.matmul

    backends.cuda.matmul.allow_tf32 = False
    backends.cuda.preferred_linalg_library = "default"


def from_namespace() -> None:
    from backends.cudnn import conv

    conv.fp32_precision = "ieee"


def import_nested_as() -> None:
    import backends.cudnn.conv as conv

    assert_type(conv.fp32_precision, Precision)
    conv.fp32_precision = "ieee"


def import_as() -> int:
    import backends.cudnn as cudnn

    cudnn.deterministic = True
    assert_type(cudnn.benchmark, bool)
    assert_type(cudnn.flags(deterministic=True), Scope)
    limit: int = cudnn.benchmark_limit
    return limit


for form in (from_package, from_subpackage, import_submodule, import_nested, from_namespace, import_nested_as,
             import_as):
    form()


# -- the pytest plugin's backends_flags fixture, annotated with its type --------------------------------
def fixture_use(backends_flags: BackendsFlags) -> None:
    assert_type(backends_flags.cuda.preferred_linalg_library, Linalg)  # the value: no function here
    assert_type(backends_flags.cudnn.conv.fp32_precision, Precision)
    assert_type(backends_flags["cudnn.benchmark_limit"], Value)
    backends_flags.cudnn.benchmark = True
    backends_flags.cudnn.conv.fp32_precision = "ieee"
    backends_flags.cuda.matmul.allow_tf32 = False
    backends_flags.cuda.preferred_linalg_library = "magma"
    backends_flags.cuda.cufft_plan_cache.max_size = 4
    backends_flags.algorithms.warn_only = True
    backends_flags.set("cudnn.benchmark_limit", 4)
    backends_flags.set({"cudnn.deterministic": True})
    assert_type(backends_flags.cudnn.deterministic, bool)
    assert_type(backends_flags.algorithms.deterministic, bool)


with backends.flags({}):  # what the fixture holds for a test: every change ends with it
    fixture_use(BackendsFlags())
backends.reset_defaults()  # the built-in defaults again (this file runs in a process of its own)
