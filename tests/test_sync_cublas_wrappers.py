"""The wrapped cuBLAS routines: the compiled wrapper (``backends/sync/_speedups.c``,
``CublasRoutine``) does what the pure reference (``backends.sync.cublas._wrap``) does, call for
call, with the stand-in CuPy; and the stream a launch is counted on is the one CuPy's routine
gives its handle.

The parity probes run in fresh interpreters, once per engine, and print everything a user can
observe (each launch's function, math mode, compute type and stream; each exception; the
handles' stream records); the two outputs must be equal, and the expected values are checked
too. They cover each call shape the compiled wrapper takes or hands to the reference: positional
calls (its own path), keyword calls, handles and types that are not ints, too few arguments, a
routine that raises, flags that change between calls (scopes, defaults, a math mode set by
hand), re-entrant calls from CuPy's routine and from the stream query, threads; with and without
CuPy's exported stream function (``STANDIN_CUPY_STREAM_CAPI=1``), and with the per-thread default
stream (``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``).

Also: the wrapper as an object (name, docstring, pickling, weak references; the C type cannot be
made from Python, nor from a namespace it cannot use); no reference or memory kept per call (and,
on a debug CPython, no reference count growth: CI's debug job); each sub-interpreter its own
wrappers; and with the real CuPy wheels (CI's real-wheel jobs, 14.2 and 13.6), the exported stream
function and what both engines raise without a driver.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import textwrap
import tracemalloc
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import backends
from tests.standin_fixture import use_standin
from tests.test_compiled_sync_safety import ENGINES, needs_accelerator, probe, run_python
from tests.test_engine_safety import LEAKS_PER_CALL
from tests.test_sync import COMPUTE_32F, COMPUTE_32F_FAST_TF32, DEFAULT_MATH, TF32_MATH

PARITY = probe("""
    import json, os, re, sys, threading, warnings
    import backends
    import cupy  # the stand-in
    from cupy_backends.cuda.libs import cublas
    from cupy_backends.cuda import stream as backends_stream
    # engine check
    target = sys.modules["backends.sync.cublas"]
    TF32 = "cuda.matmul.allow_tf32"
    out = {}

    def outcome(call):
        recorder = cublas.RECORDER
        start = len(recorder.launches)
        try:
            call()
            result = "ok"
        except BaseException as error:
            result = re.sub(r"[0-9]{12,}", "<handle>", f"{type(error).__name__}: {error}")  # (ns-based)
        launches = [[l.function, l.math_mode, l.compute_type, l.stream] for l in recorder.launches[start:]
                    if l.thread == threading.get_ident()]  # (not another thread's)
        return [result, launches]

    a = cupy.ndarray((8, 8), "float32")
    a @ a  # this thread's handle
    handle = cupy.cuda.device.get_cublas_handle()

    def gemm(h, atype, compute, function="gemmEx"):
        if function == "gemmEx":
            return cublas.gemmEx(h, 0, 0, 8, 8, 8, 0, 0, atype, 8, 0, atype, 8, 0, 0, atype, 8, compute, -1)
        return cublas.gemmStridedBatchedEx(h, 0, 0, 8, 8, 8, 0, 0, atype, 8, 64, 0, atype, 8, 64, 0, 0, atype, 8, 64,
                                           2, compute, -1)

    # 1. positional calls: every input type and compute type, in and out of tf32 scopes
    rows = []
    for tf32 in (True, False, None):
        scope = backends.flags({TF32: tf32}) if tf32 is not None else backends.flags({})
        with scope:
            for function in ("gemmEx", "gemmStridedBatchedEx"):
                for atype in (0, 2, 3, 4, 14, 63, 64, -1, 2**70):
                    for compute in (68, 77, 69, 0, 2**70):
                        rows.append([tf32, function, atype, compute,
                                     outcome(lambda: gemm(handle, atype, compute, function))])
            rows.append(["sdot", outcome(lambda: cublas.sdot(handle, 4, 0, 1, 0, 1, 0))])
            rows.append(["sgemm", outcome(lambda: cublas.sgemm(handle, 0, 0, 8, 8, 8, 0, 0, 8, 0, 8, 0, 0, 8))])
    out["positional"] = rows

    # 2. keyword calls, types that are not ints, too few arguments, wrong handles
    class Int(int):
        pass

    names = ["transa", "transb", "m", "n", "k", "alpha", "A", "Atype", "lda", "B", "Btype", "ldb", "beta", "C",
             "Ctype", "ldc", "computeType", "algo"]
    values = [0, 0, 8, 8, 8, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 8, 68, -1]
    shapes = {
        "all by keyword": lambda: cublas.gemmEx(handle=handle, **dict(zip(names, values))),
        "half by keyword": lambda: cublas.gemmEx(handle, *values[:9], **dict(zip(names[9:], values[9:]))),
        "computeType by keyword": lambda: cublas.gemmEx(handle, *values[:16], computeType=68, algo=-1),
        "sdot by keyword": lambda: cublas.sdot(handle=handle, n=4, x=0, incx=1, y=0, incy=1, result=0),
        "no handle": lambda: cublas.sdot(n=4, x=0, incx=1, y=0, incy=1, result=0),
        "no arguments": lambda: cublas.gemmEx(),
        "too few": lambda: cublas.gemmEx(handle, 0, 0),
        "Atype True": lambda: cublas.gemmEx(handle, *values[:7], True, *values[8:]),
        "Atype 0.0": lambda: cublas.gemmEx(handle, *values[:7], 0.0, *values[8:]),
        "Atype Int(14)": lambda: cublas.gemmEx(handle, *values[:7], Int(14), *values[8:]),
        "computeType 68.0": lambda: cublas.gemmEx(handle, *values[:16], 68.0, -1),
        "computeType Int(68)": lambda: cublas.gemmEx(handle, *values[:16], Int(68), -1),
        "handle Int": lambda: cublas.sdot(Int(handle), 4, 0, 1, 0, 1, 0),
        "handle str": lambda: cublas.sdot("handle", 4, 0, 1, 0, 1, 0),
        "handle float": lambda: cublas.gemmEx(1.5, *values),
        "handle None": lambda: cublas.gemmEx(None, *values),
        "handle True": lambda: cublas.sdot(True, 4, 0, 1, 0, 1, 0),
        "handle 2**70": lambda: cublas.sdot(2**70, 4, 0, 1, 0, 1, 0),
    }
    with backends.cuda.matmul.tf32(True):
        out["shapes"] = {label: outcome(call) for label, call in shapes.items()}

    # 3. a routine that raises: a destroyed handle; CuPy's function raising after the checks
    dead = cublas.create()
    cublas.destroy(dead)
    out["destroyed"] = outcome(lambda: cublas.sdot(dead, 4, 0, 1, 0, 1, 0))

    def raising(*args):
        raise cublas.CUBLASError(13)

    failing = target.wrapper(raising, "gemmEx")
    fresh = cublas.create()
    with backends.cuda.matmul.tf32(True):
        out["raising"] = [outcome(lambda: failing(fresh, *values)), cublas.getMathMode(fresh),
                          target._stream_of.get(fresh)]

    # 4. the flags changing between calls
    changes = []
    for step in range(6):
        if step == 1:
            backends.set_defaults({TF32: True})
        if step == 2:
            cublas.setMathMode(handle, 0)  # behind the sync layer's back (it watches setMathMode)
        if step == 3:
            backends.set_defaults({"cuda.matmul.allow_fp16_reduced_precision_reduction": False})
        if step == 4:
            backends.set_defaults({TF32: False})
        with backends.flags({TF32: True} if step == 5 else {}):
            changes.append([outcome(lambda: gemm(handle, 0, 68)), outcome(lambda: gemm(handle, 2, 64)),
                            outcome(lambda: cublas.sdot(handle, 4, 0, 1, 0, 1, 0))])
    backends.set_defaults({"cuda.matmul.allow_fp16_reduced_precision_reduction": True})
    out["changes"] = changes

    # 5. re-entrant calls: from CuPy's routine, and from the stream query
    original = cublas.gemmEx.__backends_wrapped__

    def reentering(*args):
        with backends.cuda.matmul.tf32(False):  # another scope, another math mode, same handle
            cublas.sdot(args[0], 4, 0, 1, 0, 1, 0)
        backends.set_defaults({})  # a new version of the defaults
        target._forget(args[0])  # as if destroyed and made again
        return original(*args)

    inner = target.wrapper(reentering, "gemmEx")
    with backends.cuda.matmul.tf32(True):
        out["reentrant routine"] = [outcome(lambda: inner(handle, *values)), outcome(lambda: gemm(handle, 0, 68))]

    streams = sys.modules["cupy.cuda.stream"]
    real_query = streams.get_current_stream
    armed = [True]

    def querying(device_id=-1):
        if armed[0]:
            armed[0] = False
            with backends.cuda.matmul.tf32(False):
                cublas.sdot(handle, 4, 0, 1, 0, 1, 0)
        return real_query(device_id)

    streams.get_current_stream = querying
    with backends.cuda.matmul.tf32(True):
        out["reentrant query"] = [outcome(lambda: gemm(handle, 0, 68)), outcome(lambda: gemm(handle, 0, 68))]
    streams.get_current_stream = real_query

    # 6. streams: a new stream, the null stream, in and out of a deterministic scope
    side = cupy.cuda.Stream()

    def on_streams():
        results = []
        h = cupy.cuda.device.get_cublas_handle()  # this thread's
        for stream, deterministic in ((None, True), (cupy.cuda.Stream.null, True), (cupy.cuda.Stream.ptds, True),
                                      (side, True), (side, False), (None, True)):
            with (stream if stream is not None else backends.flags({})), \\
                    backends.algorithms.flags(deterministic=deterministic):
                results.append([outcome(lambda: gemm(h, 0, 68)), target._stream_of.get(h)])
        with warnings.catch_warnings(record=True) as caught, backends.algorithms.flags(deterministic=True,
                                                                                       warn_only=True):
            warnings.simplefilter("always")
            results.append([outcome(lambda: gemm(h, 0, 68)), [str(w.message)[:60] for w in caught]])
        return results

    out["streams"] = []
    thread = threading.Thread(target=lambda: out["streams"].extend(on_streams()))
    thread.start()
    thread.join()

    # 7. threads: each its own scope, its own handle
    barrier = threading.Barrier(4)
    per_thread = [None] * 4

    def worker(index):
        tf32 = index % 2 == 0
        b = cupy.ndarray((8, 8), "float32")
        with backends.cuda.matmul.tf32(tf32):
            barrier.wait()
            seen = set()
            for _ in range(200):
                h = cupy.cuda.device.get_cublas_handle()
                for result, launches in (outcome(lambda: b @ b), outcome(lambda: gemm(h, 0, 68)),
                                         outcome(lambda: cublas.sdot(h, 4, 0, 1, 0, 1, 0))):
                    seen.update((result, *launch[:3]) for launch in launches)
        per_thread[index] = sorted(seen, key=repr)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["threads"] = per_thread
    print(json.dumps(out))
    print(json.dumps({"exported stream function calls": backends_stream._capi_calls if hasattr(backends_stream,
                      "_capi_calls") else None, "type": type(cublas.gemmEx).__name__}))
""")

CONFIGURATIONS = {
    "default": {},
    "CuPy's stream function": {"STANDIN_CUPY_STREAM_CAPI": "1"},
    "per-thread default stream": {"CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1"},
    "both": {"STANDIN_CUPY_STREAM_CAPI": "1", "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1"},
}


def parity_run(engine: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    lines = run_python(PARITY, engine, standin=True).splitlines()
    return json.loads(lines[-2]), json.loads(lines[-1])


@needs_accelerator
@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_the_compiled_wrappers_do_what_the_reference_does(configuration: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = CONFIGURATIONS[configuration]
    pure, pure_meta = parity_run("pure", env, monkeypatch)
    compiled, compiled_meta = parity_run("compiled", env, monkeypatch)
    for part in pure:  # part by part, for a readable failure
        assert compiled[part] == pure[part], part
    assert pure_meta["type"] == "function" and compiled_meta["type"] == "CublasRoutine"
    exported = "STANDIN_CUPY_STREAM_CAPI" in env
    # both engines ask CuPy's exported C function where there is one, as many times
    assert pure_meta["exported stream function calls"] == compiled_meta["exported stream function calls"]
    assert (pure_meta["exported stream function calls"] > 0) == exported
    check_expected(pure, per_thread_default="CUPY_CUDA_PER_THREAD_DEFAULT_STREAM" in env)


def check_expected(out: dict[str, Any], per_thread_default: bool) -> None:
    """What the reference must do, whichever engine printed ``out``."""
    null = 2 if per_thread_default else 0  # what CuPy launches on for the null stream
    for row in out["positional"]:
        if row[0] == "sdot" or row[0] == "sgemm":
            continue
        tf32, _, atype, compute, (result, launches) = row
        assert result == "ok" and len(launches) == 1, row
        swapped = {COMPUTE_32F: COMPUTE_32F_FAST_TF32, COMPUTE_32F_FAST_TF32: COMPUTE_32F}
        expected = compute
        if atype in (0, 4) and compute in swapped:  # float32: the compute type follows allow_tf32
            expected = COMPUTE_32F_FAST_TF32 if tf32 else COMPUTE_32F
        assert launches[0][2] == expected, row
        assert launches[0][3] == null, row
    shapes = out["shapes"]
    assert shapes["all by keyword"][1][0][1:3] == [TF32_MATH, COMPUTE_32F_FAST_TF32]
    assert shapes["half by keyword"][1][0][1:3] == [TF32_MATH, COMPUTE_32F_FAST_TF32]
    assert shapes["computeType by keyword"][1][0][1:3] == [TF32_MATH, COMPUTE_32F_FAST_TF32]
    assert shapes["Atype 0.0"][1][0][2] == COMPUTE_32F_FAST_TF32  # 0.0 == CUDA_R_32F, as a set lookup finds it
    assert shapes["computeType 68.0"][1][0][2] == COMPUTE_32F_FAST_TF32
    assert shapes["Atype True"][1][0][2] == 68  # True == 1 (CUDA_R_64F): not float32
    assert shapes["no handle"][0].startswith("TypeError") and shapes["no handle"][1] == []
    assert shapes["handle str"][0].startswith("ValueError: invalid cuBLAS handle 'handle'")
    assert shapes["handle 2**70"][0].startswith("ValueError: invalid cuBLAS handle")
    assert out["destroyed"][0].startswith("ValueError: invalid cuBLAS handle") and out["destroyed"][1] == []
    assert out["raising"] == [["CUBLASError: CUBLAS_STATUS_EXECUTION_FAILED", []], TF32_MATH, null]
    modes = [[launches[0][1] for _, launches in step] for step in out["changes"]]
    # (the fp16 flag decides the bit for float32 and for routines without an input type)
    assert modes == [[0, 0, 0], [3, 3, 3], [3, 3, 3], [19, 19, 19], [16, 16, 16], [19, 19, 19]]
    # a routine launched from inside another's call sets the handle's mode of its own context: the
    # outer launch then runs in it (on both engines; CuPy's routines make no such calls)
    routine, after = out["reentrant routine"]
    assert [launch[:3] for launch in routine[1]] == [["sdot", DEFAULT_MATH, None], ["gemmEx", DEFAULT_MATH, 77]]
    assert after[1][0][1:3] == [TF32_MATH, 77]
    first, second = out["reentrant query"]
    assert [launch[:3] for launch in first[1]] == [["sdot", DEFAULT_MATH, None], ["gemmEx", DEFAULT_MATH, 77]]
    assert second[1][0][1:3] == [TF32_MATH, 77]
    streams = out["streams"]
    refused = "RuntimeError: cuBLAS gemmEx (a float GEMM"
    assert [result[:len(refused)] if result != "ok" else result for (result, _), _ in streams] == (
        ["ok", "ok", "ok" if per_thread_default else refused, refused, "ok", refused, "ok"]
    )
    assert streams[0][1] == null and streams[-2][1] == -1  # one stream, then SEVERAL
    [warned] = streams[-1][1]  # warn_only: warns, and runs
    assert warned.startswith(refused[len("RuntimeError: ") :]), warned
    for index, seen in enumerate(out["threads"]):
        modes_seen = {(entry[2], entry[3]) for entry in seen if entry[1] == "gemmEx"}
        assert modes_seen == ({(TF32_MATH, 77)} if index % 2 == 0 else {(DEFAULT_MATH, 68)}), (index, seen)


# -- the wrapper as an object -----------------------------------------------------------------------


@pytest.fixture
def standin_cupy() -> Iterator[ModuleType]:
    """The stand-in CuPy, fresh for the test; a skip where NumPy is missing (a debug CPython, where CI
    runs this file for its reference counts)."""
    pytest.importorskip("numpy", reason="the stand-in CuPy needs NumPy (a debug CPython may have none)")
    with use_standin() as cupy:
        yield cupy



def test_a_wrapped_routine_keeps_cupys_name_doc_and_pickles_by_name(standin_cupy: ModuleType) -> None:
    from cupy_backends.cuda.libs import cublas

    for name in ("gemmEx", "sdot", "sgemm"):
        function = getattr(cublas, name)
        original = function.__backends_wrapped__
        assert (function.__name__, function.__qualname__, function.__doc__, function.__module__) == (
            original.__name__, original.__qualname__, original.__doc__, original.__module__)  # fmt: skip
        assert function.__wrapped__ is original
        assert pickle.loads(pickle.dumps(function)) is function
        assert vars(function)["__wrapped__"] is original
        assert weakref.ref(function)() is function
    layer = sys.modules["backends.sync"]
    kind = type(cublas.gemmEx)
    if layer.compiled() is None:
        assert kind.__name__ == "function"
    else:
        assert kind is layer.compiled().CublasRoutine
        for make in (kind, lambda: kind.__new__(kind), lambda: object.__new__(kind)):
            with pytest.raises(TypeError):
                make()


@needs_accelerator
def test_a_compiled_wrapper_refuses_a_namespace_it_cannot_use(standin_cupy: ModuleType) -> None:
    from cupy_backends.cuda.libs import cublas

    target = sys.modules["backends.sync.cublas"]
    make = sys.modules["backends.sync"].compiled().fast_routine
    original = cublas.sdot.__backends_wrapped__
    for change, error in [
        ({"prepare": target._prepare}, "no FastPrepare of this module"),
        ({"_stream_of": []}, "no FastPrepare of this module, or cublas._stream_of no dict"),
        ({"_FP32_TYPES": {0, 64}}, "_FP32_TYPES: a CUDA data type is an int from 0 to 63"),
        ({"_BF16_TYPES": {"14"}}, "_BF16_TYPES: a CUDA data type is an int from 0 to 63"),
    ]:
        with pytest.raises((TypeError, ValueError), match=error):
            make({**vars(target), **change}, original, original, "sdot", None, None)
    namespace = dict(vars(target))
    del namespace["note_stream"]
    with pytest.raises(KeyError, match="the cuBLAS target's namespace has no note_stream"):
        make(namespace, original, original, "sdot", None, None)
    with pytest.raises(ValueError, match="an argument index after the handle's"):
        make(vars(target), original, original, "gemmEx", 0, 17)


# -- the stream a launch is counted on ----------------------------------------------------------------


@pytest.mark.parametrize("per_thread_default", [False, True])
def test_the_null_stream_counts_as_what_cupy_launches_on(monkeypatch: pytest.MonkeyPatch,
                                                         per_thread_default: bool) -> None:  # fmt: skip
    """Under ``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1`` CuPy's routines launch the null stream's work
    on the per-thread default stream: ``Stream.null`` and ``Stream.ptds`` are one stream there."""
    pytest.importorskip("numpy", reason="the stand-in CuPy needs NumPy (a debug CPython may have none)")
    if per_thread_default:
        monkeypatch.setenv("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    with use_standin() as cupy:
        from cupy_backends.cuda.libs import cublas

        target = sys.modules["backends.sync.cublas"]
        a = cupy.ndarray((8, 8), "float32")
        recorded = []
        for stream in (cupy.cuda.Stream.null, cupy.cuda.Stream.ptds):
            with stream:
                recorded.append(target.current_stream())
                a @ a
                recorded.append(cublas.RECORDER.launches[-1].stream)
        assert recorded == ([2, 2, 2, 2] if per_thread_default else [0, 0, 2, 2])


# -- no reference or memory grows per call ------------------------------------------------------------


def test_no_wrapper_path_keeps_a_reference_or_memory(standin_cupy: ModuleType) -> None:
    from cupy_backends.cuda.libs import cublas

    target = sys.modules["backends.sync.cublas"]
    handle = standin_cupy.cuda.device.get_cublas_handle()
    stream = standin_cupy.cuda.Stream()
    big = 2**40 + 12345  # arguments that are no cached small ints: their counts show a leak
    gemm_args = (handle, 0, 0, big, big, big, big, big, 0, big, big, 0, big, big, big, 0, big, 68, -1)

    def raising(*args: Any) -> None:
        raise ValueError("CuPy's routine failed")

    failing = target.wrapper(raising, "gemmEx")

    def fail() -> None:
        try:
            failing(*gemm_args)
        except ValueError:
            return
        raise AssertionError("CuPy's error was lost")

    calls = {
        "routine": lambda: cublas.sdot(handle, big, big, 1, big, 1, big),
        "gemm, compute type swapped": lambda: cublas.gemmEx(*gemm_args),
        "gemm, by keyword": lambda: cublas.sgemm(handle, 0, 0, big, big, big, big, big, big, big, big, big, big,
                                                 ldc=big),
        "gemm, CuPy raises": fail,
    }
    cublas.RECORDER.reset()
    with stream, backends.cuda.matmul.tf32(True):
        for label, call in calls.items():
            for _ in range(100):
                call()
            cublas.RECORDER.reset()  # (the stand-in keeps each launch)
            gc.collect()
            before = sys.getrefcount(big), sys.getrefcount(handle)
            tracemalloc.start()
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(3000):
                call()
            cublas.RECORDER.reset()
            gc.collect()  # (an exception's traceback is a cycle)
            grown = tracemalloc.get_traced_memory()[0] - start
            tracemalloc.stop()
            assert (sys.getrefcount(big), sys.getrefcount(handle)) == before, label
            assert grown < 3000 * 8, (label, grown)  # less than a byte or so per call


@pytest.mark.skipif(not hasattr(sys, "gettotalrefcount"), reason="needs a debug CPython (python3.X-dbg)")
@ENGINES
def test_no_reference_leaks_per_wrapped_call_on_a_debug_cpython(engine: str) -> None:
    code = """
        import ctypes, importlib, json, sys
        import backends
        target = importlib.import_module("backends.sync.cublas")  # (no CuPy: wrappers of no-ops, a known handle)
        handle = 0x5EED
        target._has_tf32[handle] = True
        target._mode_on[handle] = target.TF32_TENSOR_OP_MATH

        def noop(*args, **kwargs):
            return None

        def raising(*args):
            raise ValueError

        args = (handle, 0, 0, 64, 64, 64, 7, 8, 0, 64, 9, 0, 64, 10, 11, 0, 64, 68, -1)
        gemm, sdot, failing = (target.wrapper(noop, "gemmEx"), target.wrapper(noop, "sdot"),
                               target.wrapper(raising, "gemmEx"))

        # CuPy's exported stream query, a C function: this thread's id (a stream of its own). The
        # compiled wrappers made above ask the pure current_stream(), which calls it through ctypes.
        capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
            ("PyCapsule_New", ctypes.pythonapi))
        ident = ctypes.cast(ctypes.pythonapi.PyThread_get_thread_ident, ctypes.c_void_p)

        class Streams:
            __pyx_capi__ = {"get_current_stream_ptr": capsule(ident, b"intptr_t (void)", None)}
        target._stream_ptr_capi, target._stream_ptr = target._exported_stream_ptr(Streams)
        sys.modules["cupy.cuda.stream"] = Streams  # (imported: the query is asked)
        exported = target.wrapper(noop, "gemmEx")

        def fail():
            try:
                failing(*args)
            except ValueError:
                pass

        operations = {
            "gemm": lambda: gemm(*args),
            "gemm, CuPy's stream query": lambda: exported(*args),
            "gemm by keyword": lambda: gemm(*args[:-1], algo=-1),
            "sdot": lambda: sdot(handle, 4, 0, 1, 0, 1, 0),
            "raising": fail,
            "deterministic": lambda: deterministic(lambda: gemm(*args))(),
        }
        deterministic = backends.algorithms.flags(deterministic=True)
        with backends.cuda.matmul.tf32(True):
            print(json.dumps(leaks_per_call(operations)))
    """
    leaks = json.loads(run_python(LEAKS_PER_CALL + textwrap.dedent(code), engine).splitlines()[-1])
    assert all(abs(per_call) < 0.05 for per_call in leaks.values()), leaks


# -- the real CuPy: its exported stream function ------------------------------------------------------

REAL = """
    import json, os, sys
    import backends
    {first}
    from cupy_backends.cuda.libs import cublas
    target = sys.modules["backends.sync.cublas"]
    handle = 0x5EED0000  # a handle the target knows: the call goes as far as the stream query
    target._has_tf32[handle] = True
    target._mode_on[handle] = 0
    results = {{"capsule": repr(target._stream_ptr_capi).split(" at ")[0], "null stream": target._null_stream}}
    gemm = (handle, 0, 0, 8, 8, 8, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 8, 68, -1)
    calls = {{"sdot": lambda: cublas.sdot(handle, 4, 0, 1, 0, 1, 0), "gemmEx": lambda: cublas.gemmEx(*gemm)}}
    for name, call in calls.items():
        try:
            call()
            results[name] = "ran"
        except Exception as error:
            results[name] = f"{{type(error).__name__}}: {{error}}"
    results["stream noted"] = target._stream_of.get(handle)
    version = sys.modules["cupy._version"].__version__ if "cupy._version" in sys.modules else None
    print(json.dumps(results))
    print(json.dumps(version))
"""


@pytest.fixture
def real_cupy() -> None:
    """The real CuPy wheel, or a skip (a failure in CI's real-wheel jobs, which set ``REAL_WHEELS_CUPY``)."""
    import importlib.util

    spec = importlib.util.find_spec("cupy_backends")
    if spec is not None and "standin" not in str(spec.origin).split(os.sep):
        return
    why = "CuPy is not installed" if spec is None else f"the cupy_backends found is the stand-in's ({spec.origin})"
    if os.environ.get("REAL_WHEELS_CUPY"):
        pytest.fail(f"REAL_WHEELS_CUPY is set (CI's real-wheel job) but {why}", pytrace=False)
    pytest.skip(f"needs the real CuPy wheel with its cuBLAS wheel (CI's real-wheel jobs): {why}")


@pytest.mark.usefixtures("real_cupy")
@pytest.mark.parametrize("first", ["import cupy", "pass"], ids=["cupy imported", "cupy_backends alone"])
def test_the_real_cupy_exports_the_stream_function_and_both_engines_raise_alike_without_a_driver(
    first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CuPy exports ``get_current_stream_ptr`` with the signature the wrappers take; without a
    driver, a wrapped routine raises CuPy's error on both engines: where ``cupy.cuda.stream`` is
    imported, from that function (CuPy 14.1 and newer: before anything is noted; older ones
    report it as unraisable and answer the null stream, as inside their own routine, whose own
    call then raises), else from CuPy's own routine."""
    monkeypatch.delenv("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", raising=False)
    code = REAL.format(first=first)
    engines = ("pure", "compiled") if backends._engine.accelerator.ACCELERATED else ("pure",)
    runs = {engine: [json.loads(line) for line in run_python(code, engine).splitlines()[-2:]] for engine in engines}
    for run in runs.values():
        assert run == runs["pure"]
    result, version = runs["pure"]
    assert result["capsule"] == '<capsule object "intptr_t (void)"'
    assert result["null stream"] == 0
    for name in ("sdot", "gemmEx"):
        assert result[name].startswith("CUDARuntimeError: cudaErrorInsufficientDriver"), result
    reports_its_errors = version is not None and tuple(int(part) for part in version.split(".")[:2]) >= (14, 1)
    assert result["stream noted"] == (None if first == "import cupy" and reports_its_errors else 0)



# -- each interpreter its own wrappers ------------------------------------------------------------------

SUB_INTERPRETERS = """
    import importlib, json, os, sys, tempfile
    import backends
    try:
        import _interpreters as interpreters  # 3.13
    except ImportError:
        import _xxsubinterpreters as interpreters

    def create(kind):
        if sys.version_info >= (3, 13):
            return interpreters.create(kind)
        if sys.version_info >= (3, 12):
            return interpreters.create(isolated=(kind == "isolated"))
        return interpreters.create()

    def run(interp, code):
        if sys.version_info >= (3, 13):
            assert interpreters.exec(interp, code) is None
        else:
            interpreters.run_string(interp, code)

    # In each interpreter: its cuBLAS target's wrappers of a routine that records what it was
    # given, for a handle the target knows, in and out of a tf32 scope.
    WRAPPED = '''if 1:
        import importlib, json, sys
        sys.path[:0] = %r
        import backends
        from backends._engine import accelerator
        target = importlib.import_module("backends.sync.cublas")
        target._has_tf32[7] = True
        target._mode_on[7] = target.DEFAULT_MATH
        given = []
        gemm = target.wrapper(lambda *args: given.append(args[17]), "gemmEx")
        args = (7, 0, 0, 8, 8, 8, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 8, 68, -1)
        gemm(*args)
        with backends.cuda.matmul.flags(allow_tf32=True):
            target._mode_on[7] = target.TF32_TENSOR_OP_MATH
            gemm(*args)
        with open(%r, "w") as f:
            f.write(json.dumps([accelerator.ACCELERATED, type(gemm).__name__, given]))
    '''
    main = importlib.import_module("backends.sync.cublas")
    main._has_tf32[7] = True
    main._mode_on[7] = main.DEFAULT_MATH
    given = []
    gemm = main.wrapper(lambda *args: given.append(args[17]), "gemmEx")
    args = (7, 0, 0, 8, 8, 8, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 8, 68, -1)
    kinds = ["legacy"] + (["isolated"] if sys.version_info >= (3, 12) else [])
    for kind in kinds:
        descriptor, out = tempfile.mkstemp()
        os.close(descriptor)
        interp = create(kind)
        run(interp, WRAPPED % (sys.path, out))
        interpreters.destroy(interp)
        with open(out) as f:
            print(kind, f.read())
        os.unlink(out)
        given.clear()
        gemm(*args)  # the main interpreter's wrapper, after the other one's came and went
        print("main", type(gemm).__name__, given)
"""


@needs_accelerator
def test_each_interpreter_gets_its_own_compiled_wrappers() -> None:
    lines = run_python(SUB_INTERPRETERS, "compiled").splitlines()
    kinds = ["legacy"] + (["isolated"] if sys.version_info >= (3, 12) else [])
    expected = []
    for kind in kinds:
        # (an isolated interpreter refuses a module without multi-phase init: the engine's is, so both are C)
        expected += [f'{kind} [true, "CublasRoutine", [68, 77]]', "main CublasRoutine [68]"]
    assert lines == expected
