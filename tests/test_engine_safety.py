"""The engine is as safe on the compiled accelerator as on the pure-Python reference: what a
program does to one interpreter, one copy of the package or one object never reaches another,
and no Python code (hostile hashes, objects made by ``__new__`` alone, signals at any moment)
can crash the interpreter or leave a scope entered. Each case runs in a child process with
this process's engine (``BACKENDS_PURE_PYTHON`` is inherited), so a crash is a failed test,
not a dead test run; CI runs the file on both engines and on 3.11 to 3.15."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from backends._engine import accelerator
from tests._helpers import PACKAGE

ROOT = Path(__file__).resolve().parent.parent


def run(code: str, *args: str, timeout: float = 120) -> list[object]:
    """Run ``code`` in a child process of this engine; return the JSON lines it printed.
    Fails (with its output) if it exits with anything but 0: a crash, an abort, an error."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    engine = json.loads(done.stdout.splitlines()[0])
    assert engine == accelerator.ACCELERATED, "the child did not use this process's engine"
    return [json.loads(line) for line in done.stdout.splitlines()[1:]]


PRELUDE = """
import json, sys
import backends, backends._engine as engine
print(json.dumps(engine.ACCELERATED))
def show(*values):
    print(json.dumps(values, default=repr))
"""

# What the main interpreter reads after the other copy (a sub-interpreter, a second import)
# has set defaults and scopes of its own: its own values, and nothing of the other's.
MAIN_CHECKS = """
backends.set_defaults({"cudnn.benchmark": True})
show(backends.cudnn.benchmark, [r.value for r in backends.describe() if r.name == "cudnn.benchmark"])
with backends.cudnn.flags(allow_tf32=False):
    show(backends.cudnn.allow_tf32, backends.cudnn.conv.fp32_precision, backends.snapshot()["cudnn.allow_tf32"])
    backends.cudnn.deterministic = True
    show(backends.cudnn.deterministic)
show(backends.cudnn.deterministic, [tuple(r) for r in backends.describe() if r.name == "cudnn.deterministic"])
backends.reset_defaults()
"""
MAIN_EXPECTED = [
    [True, [True]],
    [False, "ieee", False],
    [True],
    [False, [["cudnn.deterministic", False, "default"]]],
]


# -- 1. sub-interpreters -----------------------------------------------------------------------

SUBINTERPRETER = (
    PRELUDE
    + """
try:
    import _interpreters as interpreters          # 3.13
except ImportError:
    import _xxsubinterpreters as interpreters     # 3.11, 3.12
kind = sys.argv[1]
if sys.version_info >= (3, 13):
    interp = interpreters.create(kind)
elif sys.version_info >= (3, 12):
    interp = interpreters.create(isolated=kind == "isolated")
else:
    interp = interpreters.create()                # legacy: the only kind before 3.12
sub = '''
import sys
sys.path[:0] = %r
import backends, backends._engine.accelerator as accelerator
if %r:
    import backends.integrations.asyncio          # the compiled sync layer's module too
backends.cudnn.benchmark = True
backends.cudnn.deterministic = True
with backends.cudnn.flags(allow_tf32=False):
    assert backends.cudnn.allow_tf32 is False
scope = backends.cudnn.flags(deterministic=False)
scope.__enter__()                                 # left entered in the sub-interpreter
assert (backends.cudnn.benchmark, backends.cudnn.deterministic) == (True, False)
with open(%r, "w") as out:
    out.write(accelerator.describe())
''' % (sys.path, sys.argv[3] == 'asyncio', sys.argv[2])
run = interpreters.exec if sys.version_info >= (3, 13) else interpreters.run_string
failure = run(interp, sub)
show(failure is None, open(sys.argv[2]).read())
"""
    + MAIN_CHECKS
    + """
interpreters.destroy(interp)
"""
    + MAIN_CHECKS
    + """
with backends.cudnn.flags(deterministic=True):
    show(backends.cudnn.deterministic)
"""
)


def subinterpreter_kinds() -> list[str]:
    if sys.version_info >= (3, 12):
        return ["legacy", "isolated"]
    return ["legacy"]


@pytest.mark.parametrize("kind", subinterpreter_kinds())
def test_a_sub_interpreter_has_its_own_engine_and_never_touches_the_main_ones_flags(kind: str, tmp_path: Path) -> None:
    """A sub-interpreter that imports backends (and its asyncio integration), sets defaults,
    leaves a scope entered and is destroyed: the main interpreter's reads, scopes, defaults,
    snapshot(), views and describe() are its own before and after, and it exits cleanly."""
    if sys.version_info < (3, 12):
        pytest.importorskip("_xxsubinterpreters", reason="this interpreter has no sub-interpreter module")
    report = tmp_path / "engine.txt"
    # CPython 3.12's own bug: `import asyncio` in an isolated sub-interpreter aborts the process
    # at exit (free(): invalid pointer), with or without backends; 3.13 fixed it.
    asyncio_there = kind == "legacy" or sys.version_info >= (3, 13)
    lines = run(SUBINTERPRETER, kind, str(report), "asyncio" if asyncio_there else "no asyncio")
    ran, engine_there = lines[0]
    assert ran, "the sub-interpreter's code raised"
    # each interpreter gets its own module: the compiled engine where it is built
    assert engine_there == accelerator.describe()
    assert lines[1:5] == MAIN_EXPECTED
    assert lines[5:9] == MAIN_EXPECTED  # after destroy()
    assert lines[9] == [True]


# -- 2. re-import ------------------------------------------------------------------------------

REIMPORT = (
    PRELUDE
    + """
old = backends
for name in [n for n in sys.modules if n == "backends" or n.startswith("backends.")]:
    del sys.modules[name]
import backends as new
show(old is new, new._engine.ACCELERATED)
old.cudnn.benchmark = True
show(old.cudnn.benchmark, new.cudnn.benchmark)
with old.cudnn.flags(deterministic=True):
    show(old.cudnn.deterministic, old.snapshot()["cudnn.deterministic"], new.cudnn.deterministic)
    old.cudnn.allow_tf32 = False
    show(old.cudnn.allow_tf32, new.cudnn.allow_tf32)
show(old.cudnn.allow_tf32, [r.source for r in old.describe() if r.name == "cudnn.allow_tf32"])
with new.cudnn.flags(deterministic=True):
    show(new.cudnn.deterministic, old.cudnn.deterministic)
    async def both():
        async with old.cudnn.flags(benchmark_limit=3):
            return old.cudnn.benchmark_limit, new.cudnn.benchmark_limit
    import asyncio
    show(*asyncio.run(both()))
@old.cudnn.flags(enabled=False)
def decorated():
    return old.cudnn.enabled, new.cudnn.enabled
show(*decorated())
"""
)


def test_after_sys_modules_is_purged_each_copy_of_backends_keeps_its_own_state() -> None:
    """Test runners and hot reloaders import backends again after removing it from
    sys.modules: the first copy's namespaces (still held by code imported before) read,
    assign and scope on their own state, and the second copy sees none of it."""
    assert run(REIMPORT) == [
        [False, accelerator.ACCELERATED],
        [True, False],
        [True, True, False],
        [False, True],
        [True, ["default"]],
        [True, False],
        [3, 10],
        [False, True],
    ]


# -- 3. hostile objects --------------------------------------------------------------------------


def test_a_key_whose_eq_replaces_the_scopes_overrides_during_entry_cannot_crash() -> None:
    """An ``_overrides`` key whose ``__eq__`` (run by the frame's dict during entry) replaces
    ``_overrides`` and collects garbage: the entry uses what it started with, and exits."""
    lines = run(
        PRELUDE
        + """
import gc
class Key(str):
    def __hash__(self):
        return hash("cudnn.deterministic")
    def __eq__(self, other):
        scope._overrides = {}
        gc.collect()
        return str.__eq__(self, other)
scope = backends.flags({"cudnn.benchmark": True})
with backends.flags({"cudnn.deterministic": True}):
    scope._overrides = {Key("cudnn.deterministic"): 5}
    for _ in range(3):
        with scope:
            pass
        scope._overrides = {Key("cudnn.deterministic"): 5}
show(backends.cudnn.deterministic, backends.cudnn.benchmark)
"""
    )
    assert lines == [[False, False]]


def test_a_frame_that_is_not_a_dict_is_read_as_the_reference_reads_it() -> None:
    """The overrides ContextVar holding something the engine never puts there (private API):
    reads, entries and exits behave as the pure path's, and raise at worst."""
    lines = run(
        PRELUDE
        + """
from backends._engine import state
token = state.overrides.set(["cudnn.deterministic"])
outcomes = []
for attempt in (lambda: backends.cudnn.deterministic, lambda: backends.cudnn.flags(benchmark=True).__enter__()):
    try:
        outcomes.append(repr(attempt()))
    except Exception as error:
        outcomes.append(type(error).__name__)
state.overrides.reset(token)
show(outcomes, backends.cudnn.deterministic)
"""
    )
    assert lines[0][1] is False


def test_an_exit_walking_a_chain_of_frames_set_by_hand_that_loops_refuses_instead_of_hanging() -> None:
    """A frame set by hand as a list whose token's ``old_value`` is that list (private API): an
    exit with an exception in flight walks the chain of entries and must end, with the refusal."""
    lines = run(
        PRELUDE
        + """
from backends._engine import state
scope, other = backends.flags({"cudnn.deterministic": True}), backends.flags({"cudnn.benchmark": True})
loop = [state.EMPTY, other, None]
state.overrides.set(loop)
loop[2] = state.overrides.set(loop)  # its old_value: the list itself
try:
    try:
        raise KeyError("out")
    except KeyError as error:
        scope.__exit__(KeyError, error, None)
except RuntimeError as error:
    show("refused", str(error).startswith("cannot exit"))
state.overrides.set(state.NO_SCOPE)
show(backends.cudnn.deterministic)
""",
        timeout=60,
    )
    assert lines == [["refused", True], [False]]


def test_a_finaliser_run_by_an_exit_that_sets_the_overrides_cannot_crash() -> None:
    """Frames freed by an exit run finalisers: a weakref callback on a scope left entered (public
    API), dropped when an enclosing scope exits with an exception in flight, and a frame whose
    values hold an object with ``__del__`` (private API), dropped by its own scope's exit. Each
    sets the overrides ContextVar (an assignment, a ``set``). CPython's ``ContextVar.reset``
    caches the value it restores only after releasing the old mapping, so anything freed inside
    it that sets the variable leaves a cached value that the token alone holds: a use after free
    (a segfault, or a read of another object). The exit must free nothing inside the reset."""
    lines = run(
        PRELUDE
        + """
import gc, weakref
from backends._engine import state
base = backends.flags({"cudnn.benchmark_limit": 5})
outer = backends.flags({"cudnn.benchmark": True})
def assign(_):
    backends.cudnn.deterministic = True  # inside `base`: publishes a new frame
for _ in range(3):
    with base:
        try:
            with outer:
                left = backends.flags({"cudnn.enabled": False})
                ref = weakref.ref(left, assign)
                left.__enter__()
                backends.flags({"cudnn.allow_tf32": False}).__enter__()
                del left
                raise KeyError("out")
        except KeyError:
            pass
        junk = [object() for _ in range(10000)]
        show(backends.cudnn.deterministic, backends.cudnn.benchmark_limit, backends.cudnn.benchmark,
             [tuple(row) for row in backends.describe()][1:4])
    show(backends.cudnn.deterministic, backends.cudnn.benchmark_limit)

class Resets:
    def __del__(self):
        state.overrides.set(state.NO_SCOPE)
below, scope = backends.flags({"cudnn.benchmark": True}), backends.flags({"cudnn.deterministic": True})
for _ in range(3):
    context = __import__("contextvars").copy_context()
    def exit_over_a_frame_with_a_finaliser():
        below.__enter__()
        scope.__enter__()
        frame = state.current()
        state.overrides.set(((Resets(),) + tuple(frame[0][1:]), scope, frame[2]))
        del frame
        scope.__exit__(None, None, None)
        junk = [object() for _ in range(10000)]
        return state.current() is state.NO_SCOPE, backends.cudnn.benchmark, backends.cudnn.deterministic
    show(*context.run(exit_over_a_frame_with_a_finaliser))
gc.collect()
"""
    )
    inside = [True, 5, False, [["cudnn.benchmark", False, "default"], ["cudnn.benchmark_limit", 5, "scope"],
                               ["cudnn.deterministic", True, "scope"]]]  # fmt: skip
    assert lines == [inside, [False, 10]] * 3 + [[True, False, False]] * 3


# -- 4. internal types ---------------------------------------------------------------------------

INTERNAL_TYPES = (
    PRELUDE
    + """
import asyncio
descriptor = vars(type(backends.cudnn))["deterministic"]
scope = backends.cudnn.flags(deterministic=True)
kinds = {
    "flag descriptor": type(descriptor),
    "namespace flags()": type(backends.cudnn.flags),
    "scope base": type(scope).__mro__[1],
    "aenter awaitable": type(scope.__aenter__()),
}
def attempt(call):
    try:
        return repr(call())[:40]
    except Exception as error:
        return type(error).__name__ + ": " + str(error)[:120]
for name, kind in kinds.items():
    made = attempt(lambda: kind.__new__(kind))
    show(name, "new", made)
    if not made.startswith("TypeError"):
        obj = kind.__new__(kind)
        for what, call in [
            ("enter", lambda: obj.__enter__()),
            ("exit", lambda: obj.__exit__(None, None, None)),
            ("aenter", lambda: obj.__aenter__().send(None)),
            ("call", lambda: obj()),
            ("repr", lambda: repr(obj)),
            ("doc", lambda: obj.__doc__),
            ("get", lambda: obj.__get__(1, int)),
        ]:
            show(name, what, attempt(call))
# a second __init__ is harmless: no stale cached value (on the pure engine the attribute is a
# property, which __init__ re-initialises, as any property)
if engine.ACCELERATED:
    descriptor.__init__("cudnn.benchmark_limit", type(backends.cudnn).deterministic)
backends.set_defaults({})
show(backends.cudnn.deterministic, backends.cudnn.benchmark_limit)
backends.cudnn.flags.__init__({}, print)
show(repr(backends.cudnn.flags(deterministic=True)))
"""
)


def test_internal_types_refuse_construction_or_are_valid_after_new_alone() -> None:
    """The compiled engine's types, reached through public objects: each either refuses
    ``__new__`` with a TypeError or, made by ``__new__`` alone, raises a clear error on use;
    a second ``__init__`` changes nothing. (On the pure engine the same objects are plain
    Python ones; the test then checks that nothing there crashes either.)"""
    lines = run(INTERNAL_TYPES)
    assert lines[-2:] == [[False, 10], ["backends.cudnn.flags(deterministic=True)"]]
    for name, what, outcome in lines[:-2]:
        assert "SystemError" not in outcome, (name, what, outcome)
    if accelerator.ACCELERATED:
        made = {name: outcome for name, what, outcome in lines[:-2] if what == "new"}
        assert made["flag descriptor"].startswith("TypeError")
        assert made["namespace flags()"].startswith("TypeError")
        assert made["aenter awaitable"].startswith("TypeError")
        used = {what: outcome for name, what, outcome in lines[:-2] if name == "scope base" and what != "new"}
        assert used["enter"] == used["exit"] == used["aenter"] == (
            "TypeError: ScopeCore is the compiled base of backends.Scope: build scopes with backends.flags(...)"
        )


def test_an_unconfigured_compiled_module_raises_runtime_error() -> None:
    """The compiled module imported by hand under the pure engine has no configuration: its
    objects raise a RuntimeError that says so, never SystemError or a crash."""
    if not accelerator.ACCELERATED:
        pytest.skip(f"pure Python here ({accelerator.reason}): no compiled module to import")
    code = """
import backends._engine._speedups as compiled
descriptor = compiled.flag_descriptor("cudnn.deterministic", 3, property(lambda self: 1, lambda self, value: None))
class Holder:
    flag = descriptor
class Scope(compiled.ScopeCore):
    pass
for attempt in (lambda: Holder().flag, lambda: Scope().__enter__(), lambda: Scope().__aenter__().send(None)):
    try:
        attempt()
    except RuntimeError as error:
        print(error)
"""
    env = {**os.environ, "BACKENDS_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "backends._engine._speedups is not configured: it is used through `import backends`"
    ] * 3


# -- 5. signals ----------------------------------------------------------------------------------

SIGNALS = (
    PRELUDE
    + """
import random, signal, traceback
kind, tries = sys.argv[1], int(sys.argv[2])
scope = backends.cudnn.flags(deterministic=True)

@scope
def function():
    pass

class Holder:
    @scope
    def method(self):
        pass

@scope
async def coroutine():
    pass

@scope
def generator():
    yield 1

@scope
async def async_generator():
    yield 1

class AsyncCallable:
    async def __call__(self):
        pass

followed = scope(AsyncCallable())
bound = backends.bind(lambda: None)

def drive(awaitable):
    try:
        awaitable.send(None)
    except StopIteration:
        return
    raise AssertionError("it suspended")

async def async_with():
    async with scope:
        pass

async def iterate():
    async for _ in async_generator():
        pass

operations = {
    "function": function,
    "method": Holder().method,
    "coroutine": lambda: drive(coroutine()),
    "followed coroutine": lambda: drive(followed()),
    "generator": lambda: list(generator()),
    "async generator": lambda: drive(iterate()),
    "async with": lambda: drive(async_with()),
    "bind": bound,
}
operation = operations[kind]
rng = random.Random(20261201)
signal.signal(signal.SIGALRM, signal.default_int_handler)   # a KeyboardInterrupt, as SIGINT gives
left_on = {}
for _ in range(tries):
    try:
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 3e-4))
        while True:
            operation()
    except KeyboardInterrupt as interrupt:
        if backends.cudnn.deterministic:
            last = traceback.extract_tb(interrupt.__traceback__)[-1]
            where = f"{last.name} {Path(last.filename).name}:{last.lineno}"
            left_on[where] = left_on.get(where, 0) + 1
            from backends._engine import state
            state.overrides.set(state.NO_SCOPE)              # start the next try clean
show(left_on)
""".replace("import random", "from pathlib import Path\nimport random")
)

KINDS = ["function", "method", "coroutine", "followed coroutine", "generator", "async generator", "async with", "bind"]


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="no setitimer on this platform")
@pytest.mark.parametrize("kind", KINDS)
def test_a_keyboard_interrupt_at_any_moment_never_leaves_a_scope_entered(kind: str) -> None:
    """A real signal (SIGALRM handled as SIGINT is: a KeyboardInterrupt) at random moments
    (fixed seed, 250 interrupts) while one kind of scoped call runs in a loop: after each
    interrupt, no override is left in the caller. The one moment pure Python cannot cover is
    the first instruction of the pure ``Scope.__aexit__`` (a Python function checks for
    signals as it starts, before any ``try`` of its own): on the pure engine an ``async with``
    may leave its scope entered there, and only there (docs/guarantees.md says so)."""
    (left_on,) = run(SIGNALS, kind, "250", timeout=300)[0]
    if kind == "async with" and not accelerator.ACCELERATED:
        from backends._engine.scope import Scope

        first_line = Scope.__aexit__.__code__.co_firstlineno
        assert set(left_on) <= {f"__aexit__ scope.py:{first_line}"}, left_on
    else:
        assert left_on == {}


# -- 8. compiler hygiene -------------------------------------------------------------------------

SOURCES = [PACKAGE / "_engine" / "_speedups.c", PACKAGE / "sync" / "_speedups.c"]
CPYTHON_WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Werror"]


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.parent.name)
def test_the_c_sources_build_without_warnings_under_cpythons_flags(compiler: str, source: Path, tmp_path: Path) -> None:
    """Both C files compile with the warnings CPython builds its own modules with, as errors,
    against this interpreter's headers (CI runs this on 3.11 to 3.15)."""
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed here")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        pytest.skip(f"no Python.h in {include}")
    done = subprocess.run(
        [compiler, "-c", "-fPIC", "-O2", *CPYTHON_WARNINGS, "-I", include, str(source), "-o", str(tmp_path / "out.o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr


# -- reference counts on a debug CPython ---------------------------------------------------------

#: For a child on a debug CPython: ``leaks_per_call(operations)``, each operation's growth of the
#: interpreter's total reference count per call (after a warm-up; about 0 where nothing leaks).
LEAKS_PER_CALL = """
import gc, sys

def leaks_per_call(operations):
    leaks = {}
    for name, operation in operations.items():
        for _ in range(200):
            operation()
        gc.collect()
        before = sys.gettotalrefcount()
        for _ in range(2000):
            operation()
        gc.collect()
        leaks[name] = (sys.gettotalrefcount() - before) / 2000
    return leaks
"""


REFCOUNTS = (
    PRELUDE
    + LEAKS_PER_CALL
    + """
import asyncio, gc
scope = backends.cudnn.flags(deterministic=True)
@scope
def decorated():
    return backends.cudnn.deterministic
@scope
async def coroutine():
    return 1
async def async_with():
    async with scope:
        return backends.cudnn.benchmark
def refused():
    inner = backends.cudnn.flags(benchmark=True)
    scope.__enter__(); inner.__enter__()
    try:
        scope.__exit__(None, None, None)
    except RuntimeError:
        pass
    inner.__exit__(None, None, None); scope.__exit__(None, None, None)
def drive(awaitable):
    try:
        awaitable.send(None)
    except StopIteration:
        pass
def in_snapshot():
    with backends.snapshot():
        pass
operations = {
    "read": lambda: backends.cudnn.deterministic,
    "read in a scope": lambda: [scope.__enter__(), backends.cudnn.benchmark, scope.__exit__()],
    "flags()": lambda: backends.cudnn.flags(deterministic=True),
    "flags(two keywords)": lambda: backends.cudnn.flags(deterministic=True, benchmark=False),
    "decorated call": decorated,
    "decorated coroutine": lambda: drive(coroutine()),
    "async with": lambda: drive(async_with()),
    "refused exit": refused,
    "assign default": lambda: setattr(backends.cudnn, "benchmark", False),
    "snapshot as a scope": in_snapshot,
}
show(leaks_per_call(operations))
"""
)



@pytest.mark.skipif(not hasattr(sys, "gettotalrefcount"), reason="needs a debug CPython (python3.X-dbg)")
def test_no_reference_leaks_per_operation_on_a_debug_cpython() -> None:
    (leaks,) = run(REFCOUNTS)[0]
    assert all(abs(per_call) < 0.05 for per_call in leaks.values()), leaks


# -- 7. free-threaded CPython --------------------------------------------------------------------


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="needs a free-threaded CPython (3.14t)")
def test_a_free_threaded_cpython_uses_the_pure_engine_and_keeps_the_gil_off() -> None:
    """The accelerator relies on the GIL: the free-threaded build installs the pure engine, and
    importing backends (with its asyncio integration) loads no module that turns the GIL on.
    (Not under ``-X gil=0`` or ``PYTHON_GIL=0``, which keep it off whatever is imported.)"""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c",
         "import sys, backends, backends.integrations.asyncio, backends._engine as e; "
         "print(e.ACCELERATED, sys._is_gil_enabled())"],
        capture_output=True, text=True, cwd=ROOT, env=environ,
    )  # fmt: skip
    assert done.stdout.split() == ["False", "False"], done.stderr
    assert done.stderr == ""


def test_a_namespaces_flags_shows_the_module_of_the_function_it_fronts() -> None:
    """The compiled ``flags`` is a C object fronting namespace.py's function: everything but
    the call is that function's, ``__module__`` included (a heap type has one of its own)."""
    import backends

    assert backends.cudnn.flags.__module__ == "backends.cudnn"  # its public path (namespace.py sets it)
    assert backends.cuda.matmul.flags.__qualname__ == "flags"
