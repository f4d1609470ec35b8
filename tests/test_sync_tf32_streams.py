"""``cuda.matmul.allow_tf32`` on cuTENSOR contractions, and cuBLAS's one-stream-per-handle rule
under ``algorithms.deterministic`` (issue 22, items 5 and 6), with the stand-in CuPy.

cuTENSOR: ``cupy.einsum`` with the ``cutensor`` routine accelerator calls
``cupyx.cutensor.contraction`` without ``compute_desc``; CuPy then creates the operator with
``COMPUTE_DESC_32F`` for float32 and complex64. The stand-in records the descriptor CuPy would
have used (``cupyx._cutensor.RECORDER``).

Streams: cuBLAS's results are reproducible while one stream uses a handle; CuPy keeps one
handle per thread for all its streams. The stand-in records the stream of every cuBLAS launch
(``Launch.stream``).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

import backends
from tests._helpers import run_threads
from tests.standin_fixture import use_standin
from tests.test_sync import run_python
from tests.test_sync_cublas import call

TF32_ON = backends.cuda.matmul.flags(allow_tf32=True)
TF32_OFF = backends.cuda.matmul.flags(allow_tf32=False)
DETERMINISTIC = backends.algorithms.flags(deterministic=True)
WARN_ONLY = backends.algorithms.flags(deterministic=True, warn_only=True)

DESC_32F, DESC_TF32, DESC_3XTF32, DESC_64F = 4, 4096, 8192, 16
REFUSED = "on a cuBLAS handle used from more than one CUDA stream"


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stand-in CuPy with cuTENSOR as its routine accelerator (``CUPY_ACCELERATORS=cutensor``)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("CUPY_ACCELERATORS", "cutensor")
    with use_standin() as module:
        yield module


def contractions() -> list[Any]:
    import cupyx._cutensor

    with cupyx._cutensor.RECORDER.lock:
        return list(cupyx._cutensor.RECORDER.calls)


def descriptor_of(call: Callable[[], object]) -> int:
    before = len(contractions())
    call()
    made = contractions()[before:]
    assert len(made) == 1, made
    return int(made[0].compute_desc)


def einsum(cupy: ModuleType, dtype: str) -> Callable[[], object]:
    a, b = cupy.ones((4, 5), dtype), cupy.ones((5, 3), dtype)
    return lambda: cupy.einsum("ij,jk->ik", a, b)


# -- cuTENSOR ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_einsum_through_cutensor_gets_tf32_only_where_allowed(cupy: ModuleType, dtype: str) -> None:
    run = einsum(cupy, dtype)
    assert descriptor_of(run) == DESC_32F  # CuPy's default: allow_tf32 is False by default
    with TF32_ON:
        assert descriptor_of(run) == DESC_TF32
        with TF32_OFF:
            assert descriptor_of(run) == DESC_32F
        assert descriptor_of(run) == DESC_TF32
    assert descriptor_of(run) == DESC_32F
    import sys

    assert "cutensor" in sys.modules["backends.sync"].installed
    assert not any("gemm" in launch.function for launch in cupy.cuda.cublas.RECORDER.launches)  # not matmul


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_double_contractions_keep_cupys_descriptor(cupy: ModuleType, dtype: str) -> None:
    with TF32_ON:
        assert descriptor_of(einsum(cupy, dtype)) == DESC_64F


def test_no_tf32_descriptor_below_compute_capability_8(cupy: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CUPY_CC", "75")
    with TF32_ON:
        assert descriptor_of(einsum(cupy, "float32")) == DESC_32F


def test_an_explicit_descriptor_is_exchanged_only_between_32f_and_tf32(cupy: ModuleType) -> None:
    from cupyx import cutensor

    a, b, out = cupy.ones((4, 5), "float32"), cupy.ones((5, 3), "float32"), cupy.empty((4, 3), "float32")

    def positional(desc: int) -> Callable[[], object]:
        return lambda: cutensor.contraction(1.0, a, "ij", b, "jk", 0.0, out, "ik", 1, 1, 1, -1, 0, desc)

    def keyword(desc: int) -> Callable[[], object]:
        return lambda: cutensor.contraction(1.0, a, "ij", b, "jk", 0.0, out, "ik", compute_desc=desc)

    for form in (positional, keyword):
        assert descriptor_of(form(DESC_TF32)) == DESC_32F  # a context that said no gets no TF32
        assert descriptor_of(form(DESC_3XTF32)) == DESC_3XTF32
        with TF32_ON:
            assert descriptor_of(form(DESC_32F)) == DESC_TF32
            assert descriptor_of(form(DESC_3XTF32)) == DESC_3XTF32
    # mixed types, and keyword operands, pass through the wrapper unchanged
    with TF32_ON:
        assert descriptor_of(lambda: cutensor.contraction(1.0, a, "ij", b, "jk", 0.0, out, "ik")) == DESC_TF32
        by_keyword = {"A": a, "mode_A": "ij", "B": b, "mode_B": "jk", "beta": 0.0, "C": out, "mode_C": "ik"}
        assert descriptor_of(lambda: cutensor.contraction(1.0, **by_keyword)) == DESC_TF32


def test_the_wrapper_keeps_cupys_function(cupy: ModuleType) -> None:
    import cupyx._cutensor
    from cupyx import cutensor

    assert cutensor.contraction.__backends_wrapped__ is cupyx._cutensor.contraction  # type: ignore[attr-defined]
    assert cutensor.contraction.__doc__ == cupyx._cutensor.contraction.__doc__
    assert cutensor.contraction.__name__ == "contraction"


def test_threads_in_different_scopes_get_their_own_descriptor(cupy: ModuleType) -> None:
    barrier = threading.Barrier(2)
    seen: dict[str, set[int]] = {}

    def worker(label: str, scope: backends.Scope) -> None:
        run = einsum(cupy, "float32")
        with scope:
            barrier.wait()
            for _ in range(50):
                run()
        seen[label] = {c.compute_desc for c in contractions() if c.thread == threading.get_ident()}

    run_threads(lambda: worker("on", TF32_ON), lambda: worker("off", TF32_OFF), unblock=[barrier])
    assert seen == {"on": {DESC_TF32}, "off": {DESC_32F}}


def test_without_cutensor_einsum_takes_batched_matmul_and_the_math_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STANDIN_CUPY_MISSING_LIBS", "cutensor")
    monkeypatch.setenv("CUPY_ACCELERATORS", "cutensor")
    with use_standin() as cupy:
        with TF32_ON:
            einsum(cupy, "float32")()
        launches = cupy.cuda.cublas.RECORDER.launches
        assert [(launch.function, launch.math_mode) for launch in launches] == [("gemmStridedBatchedEx", 3)]
        import sys

        assert "cupyx.cutensor" not in sys.modules  # its import failed: nothing to wrap


def test_without_the_accelerator_einsum_never_imports_cutensor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUPY_ACCELERATORS", raising=False)  # CuPy's default: cub
    with use_standin() as cupy, TF32_ON:
        einsum(cupy, "float32")()
        assert [launch.math_mode for launch in cupy.cuda.cublas.RECORDER.launches] == [3]


def test_the_cutensor_target_installs_whichever_is_imported_first() -> None:
    code = """
        import json, sys
        {first}
        from cupy._core import _accelerator
        _accelerator.set_routine_accelerators(["cutensor"])
        import backends, cupy
        a = cupy.ones((2, 2), "float32")
        with backends.cuda.matmul.flags(allow_tf32=True):
            cupy.einsum("ij,jk->ik", a, a)
        import cupyx._cutensor
        print(json.dumps([sorted(sys.modules["backends.sync"].installed),
                          [c.compute_desc for c in cupyx._cutensor.RECORDER.calls]]))
    """
    for first in ("import backends", "import cupy", "import cupy, cupyx.cutensor"):
        installed, descriptors = run_python(code.format(first=first))
        assert "cutensor" in installed, (first, installed)
        assert descriptors == [DESC_TF32], first


# -- cuBLAS: one stream per handle -------------------------------------------------------------


def gemm(cupy: ModuleType) -> Callable[[], object]:
    a = cupy.ones((8, 8), "float32")
    return lambda: a @ a


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except RuntimeError as error:
        assert REFUSED in str(error) and "CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8" in str(error), error
        return "raised"
    return "ran"


def in_a_new_thread(body: Callable[[], object]) -> Any:
    """``body()`` in a thread of its own: a new cuBLAS handle (CuPy makes one per thread)."""
    result: list[Any] = []
    run_threads(lambda: result.append(body()))
    return result[0]


def test_the_stand_in_records_the_stream_of_each_launch(cupy: ModuleType) -> None:
    run = gemm(cupy)
    stream = cupy.cuda.Stream()
    run()
    with stream:
        run()
    with cupy.cuda.Stream.ptds:
        run()
    assert [launch.stream for launch in cupy.cuda.cublas.RECORDER.launches] == [0, stream.ptr, 2]


def test_one_stream_per_handle_passes_whichever_stream_it_is(cupy: ModuleType) -> None:
    run = gemm(cupy)

    def on(stream_kind: str) -> list[str]:
        stream = {"null": cupy.cuda.Stream.null, "ptds": cupy.cuda.Stream.ptds, "new": cupy.cuda.Stream()}[stream_kind]
        with stream, DETERMINISTIC:
            return [outcome(run) for _ in range(3)]

    for kind in ("null", "ptds", "new"):
        assert in_a_new_thread(lambda kind=kind: on(kind)) == ["ran"] * 3, kind


def test_a_second_stream_on_a_handle_is_refused_in_the_scope(cupy: ModuleType) -> None:
    run = gemm(cupy)

    def body() -> list[str]:
        first, second = cupy.cuda.Stream(), cupy.cuda.Stream()
        with first:
            run()  # outside the scope: the handle's first stream
        results = []
        with first, DETERMINISTIC:
            results.append(outcome(run))  # still one stream
        with second, DETERMINISTIC:
            results.append(outcome(run))  # refused: it would be the second
        with first, DETERMINISTIC:
            results.append(outcome(run))  # the refused GEMM did not launch: one stream still
        with second:
            run()  # outside the scope: runs, and now the handle has served two streams
        with first, DETERMINISTIC:
            results.append(outcome(run))
        with cupy.cuda.Stream.null, DETERMINISTIC:
            results.append(outcome(run))
        return results

    assert in_a_new_thread(body) == ["ran", "raised", "ran", "raised", "raised"]


def test_the_default_stream_then_another_is_two_streams(cupy: ModuleType) -> None:
    run = gemm(cupy)

    def body() -> list[str]:
        with DETERMINISTIC:
            first = outcome(run)
            with cupy.cuda.Stream():
                second = outcome(run)
        return [first, second]

    assert in_a_new_thread(body) == ["ran", "raised"]


def test_warn_only_warns_and_runs_and_outside_the_scope_nothing_is_checked(cupy: ModuleType) -> None:
    run = gemm(cupy)

    def body() -> tuple[list[str], int, int]:
        run()
        with cupy.cuda.Stream():
            run()  # two streams, outside the scope: runs
            with WARN_ONLY, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run()
        launches = [launch for launch in cupy.cuda.cublas.RECORDER.launches if launch.thread == threading.get_ident()]
        return [str(w.message) for w in caught], len(caught), len(launches)

    messages, count, launches = in_a_new_thread(body)
    assert count == 1 and REFUSED in messages[0] and launches == 3


@pytest.mark.parametrize("value", [":4096:8", ":16:8"])
def test_a_deterministic_workspace_lets_any_number_of_streams_through(
    cupy: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    run = gemm(cupy)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", value)  # read when the thread's handle is made

    def body() -> list[str]:
        run()
        with cupy.cuda.Stream(), DETERMINISTIC:
            return [outcome(run), outcome(run)]

    assert in_a_new_thread(body) == ["ran", "ran"]
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:2")  # not one of cuBLAS's two settings
    assert in_a_new_thread(body) == ["raised", "raised"]


def test_the_variable_set_after_the_handle_was_made_is_too_late(
    cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = gemm(cupy)

    def body() -> str:
        run()  # the handle is made here, without the variable
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        with cupy.cuda.Stream(), DETERMINISTIC:
            return outcome(run)

    assert in_a_new_thread(body) == "raised"


def test_every_routine_counts_as_a_use_of_its_stream(cupy: ModuleType) -> None:
    """A triangular solve (``?trsm``) on another stream shares the handle as much as a GEMM."""
    from cupyx.scipy.linalg import solve_triangular

    run = gemm(cupy)
    matrix, rhs = cupy.ones((8, 8), "float32"), cupy.ones((8, 2), "float32")

    def body() -> list[str]:
        with cupy.cuda.Stream():
            solve_triangular(matrix, rhs, lower=True)
        with DETERMINISTIC:
            return [outcome(run)]

    assert in_a_new_thread(body) == ["raised"]


def test_integer_gemms_are_exact_but_count_as_uses(cupy: ModuleType) -> None:
    from cupy_backends.cuda.libs import cublas

    run = gemm(cupy)

    def body() -> list[str]:
        handle = cupy.cuda.device.get_cublas_handle()
        with cupy.cuda.Stream(), DETERMINISTIC:
            # an int8 gemmEx (Atype CUDA_R_8I = 3, computeType CUBLAS_COMPUTE_32I = 72): never refused
            first = outcome(lambda: call(cublas, "gemmEx", handle, Atype=3, Btype=3, Ctype=10, computeType=72))
        with DETERMINISTIC:
            return [first, outcome(run)]

    assert in_a_new_thread(body) == ["ran", "raised"]


def test_a_handle_met_after_its_creation_is_taken_as_used_on_the_default_stream(cupy: ModuleType) -> None:
    """A handle CuPy made before backends wrapped cuBLAS: its earlier launches were not seen."""
    import sys

    sync_cublas = sys.modules["backends.sync.cublas"]
    run = gemm(cupy)

    def body() -> list[str]:
        run()
        sync_cublas._forget(cupy.cuda.device.get_cublas_handle())  # as if never seen
        results = []
        with DETERMINISTIC:
            results.append(outcome(run))  # a default stream: the one assumed
            with cupy.cuda.Stream():
                results.append(outcome(run))
        return results

    assert in_a_new_thread(body) == ["ran", "raised"]


def test_tasks_on_one_thread_share_its_handle_and_so_its_streams(cupy: ModuleType) -> None:
    run = gemm(cupy)

    async def task(stream: Any) -> str:
        with stream, DETERMINISTIC:
            return outcome(run)

    async def main() -> list[str]:
        return [await asyncio.create_task(task(cupy.cuda.Stream())) for _ in range(2)]

    assert in_a_new_thread(lambda: asyncio.run(main())) == ["ran", "raised"]


def test_threads_have_their_own_handles_and_so_their_own_streams(cupy: ModuleType) -> None:
    run = gemm(cupy)
    barrier = threading.Barrier(3)
    outcomes: list[str] = []

    def worker() -> None:
        with cupy.cuda.Stream(), DETERMINISTIC:
            barrier.wait()
            outcomes.extend(outcome(run) for _ in range(5))

    run_threads(worker, worker, worker, unblock=[barrier])
    assert outcomes == ["ran"] * 15


# -- CUPY_TF32's warning ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["compiled", "pure"])
def test_an_unparsable_cupy_tf32_warns_at_the_users_import_line(engine: str) -> None:
    code = """
        import json, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import backends
        print(json.dumps([[w.filename, w.lineno, str(w.message)] for w in caught]))
    """
    env = {"CUPY_TF32": "true", **({"BACKENDS_PURE_PYTHON": "1"} if engine == "pure" else {})}
    [(filename, lineno, message)] = run_python(code, standin=False, **env)
    assert (filename, lineno) == ("<string>", 5) and "CUPY_TF32='true' is ignored" in message
