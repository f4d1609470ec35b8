"""Typical mistakes with backends, one per numbered comment: mypy --strict and pyright (strict) must
report each, and nothing else (tests/test_typing.py runs both). The line under each comment carries
the errors expected there: ``# type: ignore[code]`` for mypy, then ``# pyright: ignore[rule]`` for
pyright. An expectation that is not met (no error, or another one) fails the test, as does an error
without one. Where pyright cannot report a mistake the comment says so and there is no pyright
expectation. Never executed: see good.py for the correct spellings, which are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import backends
from backends.integrations.pytest_plugin import BackendsFlags

# -- attributes: names ---------------------------------------------------------------------------
# 1. misspelt flag, assigned
backends.cudnn.benchmak = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
# 2. misspelt flag, read and assigned
backends.cudnn.benchmark_limt += 1  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
# 3. a flag on the wrong namespace (it is cuda.matmul.allow_tf32)
backends.cuda.allow_tf32 = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
# 4. a namespace without flags
backends.mps.allow_tf32 = False  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
# 5. an unknown name on the package, assigned
backends.cudnn_benchmark = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
# 6. an unknown name on the package, read
namespace = backends.cudnm  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]

# -- attributes: values --------------------------------------------------------------------------
# 7. an int for a bool flag
backends.cudnn.deterministic = 1  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 8. a str for a bool flag
backends.cudnn.benchmark = "yes"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 9. a str for an int flag
backends.cudnn.benchmark_limit = "10"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 10. None for an int flag
backends.cudnn.benchmark_limit = None  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 11. a float for an int flag
backends.cuda.cufft_plan_cache.max_size = 1.5  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 12. a choice the view does not have
backends.cuda.matmul.fp32_precision = "fp32"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 13. torch's matmul-precision word for a view
backends.cudnn.conv.fp32_precision = "highest"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 14. a choice the flag does not have, assigned
backends.cuda.preferred_linalg_library = "cublas"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
# 15. ... and through torch's function spelling
backends.cuda.preferred_linalg_library("cublas")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 16. a read-only attribute
backends.cuda.cufft_plan_cache.size = 0  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
# 17. a flag is an attribute, not a function
backends.cuda.matmul.allow_tf32(True)  # type: ignore[operator]  # pyright: ignore[reportCallIssue]
# 18. a device index that is not an int
cache = backends.cuda.cufft_plan_cache["0"]  # type: ignore[index]  # pyright: ignore[reportArgumentType]
# 19. version() is None without cuDNN
newer: bool = backends.cudnn.version() > 90000  # type: ignore[operator]  # pyright: ignore[reportOptionalOperand, reportUnknownVariableType]

# -- scopes: keywords and arguments --------------------------------------------------------------
# 20. misspelt keyword
backends.cudnn.flags(determinstic=True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
# 21. a str for a bool keyword
backends.cudnn.flags(benchmark="yes")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 22. a float for an int keyword
backends.cudnn.flags(benchmark_limit=2.5)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 23. an int for a bool keyword
backends.cuda.matmul.flags(allow_tf32=1)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 24. a view is not a keyword of flags()
backends.cuda.matmul.flags(fp32_precision="tf32")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
# 25. a str for an int keyword
backends.cuda.cufft_plan_cache.flags(max_size="big")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 26. a choice the flag does not have, as a keyword
backends.cuda.flags(preferred_linalg_library="cublas")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 27. a positional argument
backends.cudnn.flags(True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
# 28. tf32() takes a bool
backends.cudnn.tf32("no")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 29. ... and needs it
backends.cuda.matmul.tf32()  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
# 30. keywords on backends.flags (it takes a mapping)
backends.flags(deterministic=True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]

# -- mappings of dotted names --------------------------------------------------------------------
# 31. misspelt name
backends.flags({"cudnn.determinstic": True})  # type: ignore[typeddict-unknown-key]  # pyright: ignore[reportArgumentType]
# 32. a name without its namespace
backends.flags({"deterministic": True})  # type: ignore[typeddict-unknown-key]  # pyright: ignore[reportArgumentType]
# 33. a view is not a flag
backends.flags({"cuda.matmul.fp32_precision": "tf32"})  # type: ignore[typeddict-unknown-key]  # pyright: ignore[reportArgumentType]
# 34. a choice the flag does not have
backends.flags({"cuda.preferred_linalg_library": "cublas"})  # type: ignore[typeddict-item]  # pyright: ignore[reportArgumentType]
# 35. a str for an int flag
backends.set_defaults({"cudnn.benchmark_limit": "all"})  # type: ignore[typeddict-item]  # pyright: ignore[reportArgumentType]
# 36. None in a mapping is a wrong type
backends.set_defaults({"cudnn.deterministic": None})  # type: ignore[typeddict-item]  # pyright: ignore[reportArgumentType]


# -- decorators, bind, snapshots -----------------------------------------------------------------
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


# 37. the preset decorates with parentheses: @backends.deterministic()
@backends.deterministic  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue, reportUntypedFunctionDecorator]
def replay(seed: int) -> None: ...


# 38. a decorated function keeps its parameters
train("ten")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 39. ... a coroutine function too
asyncio.run(serve(None))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 40. ... and a generator function its yield type
label: str = next(batches(3))  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


async def consume() -> None:
    async for item in stream(3):
        # 41. ... and an async generator function its yield type
        item.upper()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


# 42. bind() keeps the parameters
backends.bind(train)(steps="x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# 43. ... and the return type
total: str = backends.bind(train)(3)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
# 44. a snapshot's values are bool | int | str
value: int = backends.snapshot()["cudnn.deterministic"]  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
# 45. a snapshot is immutable
backends.snapshot()["cudnn.deterministic"] = True  # type: ignore[index]  # pyright: ignore[reportIndexIssue]
with backends.cudnn.flags(deterministic=True) as scope:
    # 46. a Scope has no method enter (it is a context manager)
    scope.enter()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


# -- the import forms ----------------------------------------------------------------------------
def from_package() -> None:
    from backends import cudnn

    # 47. from backends import cudnn: a wrong type
    cudnn.benchmark = None  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 48. ... a misspelt flag
    cudnn.benchmak = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # 49. ... a misspelt keyword
    cudnn.flags(benchmak=True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def from_subpackage() -> None:
    from backends.cuda import cufft_plan_cache, matmul

    # 50. from backends.cuda import matmul: a wrong type
    matmul.allow_tf32 = "yes"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 51. ... a misspelt view
    matmul.fp32_precison = "tf32"  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # 52. ... a float for an int flag
    cufft_plan_cache.max_size = 1.5  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]


def import_submodule() -> None:
    import backends.cudnn

    # 53. import backends.cudnn: a wrong type
    backends.cudnn.deterministic = 1  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 54. ... a misspelt flag
    backends.cudnn.determinstic = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # 55. ... a wrong keyword type
    backends.cudnn.flags(deterministic="yes")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def import_nested() -> None:
    import backends.cuda.matmul

    # 56. import backends.cuda.matmul: a wrong type
    backends.cuda.matmul.allow_tf32 = 1  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 57. ... a wrong choice on the parent
    backends.cuda.preferred_linalg_library = "cublas"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]


def from_namespace() -> None:
    from backends.cudnn import conv

    # 58. from backends.cudnn import conv: a wrong choice
    conv.fp32_precision = "tf31"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]


def import_nested_as() -> None:
    import backends.cudnn.conv as conv

    # 59. import backends.cudnn.conv as conv: a wrong choice (not by pyright: see docs/typing.md)
    conv.fp32_precision = "tf31"  # type: ignore[assignment]
    # 60. ... a misspelt view
    conv.fp32_precison = "tf32"  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]


def import_as() -> None:
    import backends.cudnn as cudnn  # torch's idiom; prefer `from backends import cudnn` with pyright

    # 61. import backends.cudnn as cudnn: a wrong type (not by pyright: see docs/typing.md)
    cudnn.deterministic = 1  # type: ignore[assignment]
    # 62. ... a misspelt flag
    cudnn.benchmak = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # 63. ... a misspelt keyword
    cudnn.flags(determinstic=True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # 64. ... the read is typed
    limit: str = cudnn.benchmark_limit  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    print(limit)


# -- names that are not flags --------------------------------------------------------------------
def overwrite_namespace() -> None:
    # 65. a namespace is not a flag (not by pyright: see docs/typing.md)
    backends.cudnn = True  # type: ignore[assignment]


def overwrite_function() -> None:
    # 66. flags() is a function, not a flag
    backends.cudnn.flags = None  # type: ignore[method-assign, assignment]  # pyright: ignore[reportAttributeAccessIssue]


# -- the pytest plugin's backends_flags fixture, annotated with its type ---------------------------------
def fixture_use(backends_flags: BackendsFlags) -> None:
    # 67. backends_flags: a misspelt flag
    backends_flags.cudnn.benchmak = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
    # 68. ... a wrong type
    backends_flags.cudnn.deterministic = 1  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 69. ... a choice the flag does not have (an attribute here, as the value)
    backends_flags.cuda.preferred_linalg_library = "cublas"  # type: ignore[assignment]  # pyright: ignore[reportAttributeAccessIssue]
    # 70. ... a misspelt namespace
    backends_flags.cudnm.benchmark = True  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # 71. ... it changes flags only: no scope builder
    backends_flags.cudnn.flags(benchmark=True)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # 72. ... and set() takes dotted names as backends.flags() does
    backends_flags.set({"cudnn.benchmak": True})  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
