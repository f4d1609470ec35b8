"""The compiled sync layer (``backends/sync/_speedups.c``) is as safe as the pure reference, and
the two task steppers behave alike (research: c_engine_findings.md sections 4-8,
asyncio_conformance.md R1 and R2).

Each case runs in a fresh interpreter (``subprocess``): several of them crashed the process
before the compiled layer was fixed, and re-importing ``backends`` or starting a
sub-interpreter is no business of the test process. ``engine`` picks the engine of that
interpreter: ``pure`` always runs; ``compiled`` skips where this run has no accelerator. The
parity tests run the same probe on both engines and compare what they print.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backends._engine import accelerator

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "tests" / "standin"

needs_accelerator = pytest.mark.skipif(not accelerator.ACCELERATED, reason=f"pure Python here: {accelerator.reason}")
ENGINES = pytest.mark.parametrize("engine", ["pure", pytest.param("compiled", marks=needs_accelerator)])


def run_python(code: str, engine: str, *, standin: bool = False) -> str:
    """Run ``code`` in a fresh interpreter on ``engine``; assert it exited with 0; return its stdout."""
    env = {key: value for key, value in os.environ.items() if key != "BACKENDS_PURE_PYTHON"}
    if engine == "pure":
        env["BACKENDS_PURE_PYTHON"] = "1"
    if standin:
        pytest.importorskip("numpy", reason="the stand-in CuPy needs NumPy (a debug CPython may have none)")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STANDIN), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def on_both(code: str, **options: bool) -> str:
    """What ``code`` prints, the same on both engines."""
    pure, compiled = run_python(code, "pure", **options), run_python(code, "compiled", **options)
    assert compiled == pure
    return pure


ENGINE_CHECK = [
    "from backends._engine import accelerator",
    'layer = sys.modules["backends.sync"]',
    'pure = os.environ.get("BACKENDS_PURE_PYTHON") == "1"',
    "assert (layer.compiled() is not None) == accelerator.ACCELERATED == (not pure)",
]


def probe(code: str) -> str:
    """``code`` with its ``# engine check`` line replaced by lines that load the sync layer as
    ``layer`` and check that it runs on the engine asked for."""
    head, rest = code.split("# engine check", 1)
    head, margin = head.rsplit("\n", 1)
    return head + "\n" + margin + ("\n" + margin).join(ENGINE_CHECK) + rest


# -- section 4: cuBLAS's per-launch check, through a handle whose __hash__ re-enters it -----------

REPLACED_RECORD = probe("""
    import os, sys
    import backends
    import cupy  # the stand-in
    from cupy_backends.cuda.libs import cublas
    # engine check
    target = sys.modules["backends.sync.cublas"]
    from backends._engine import state

    class Marker:
        eqs = 0
        def __eq__(self, other):
            Marker.eqs += 1
            return True
        __hash__ = object.__hash__

    armed = {"count": 0}

    class Handle(int):
        def __hash__(self):
            armed["count"] -= 1
            if armed["count"] == 0:  # the outer prepare's second look-up: replace its record
                matmul = backends.cuda.matmul
                fp16 = not matmul.allow_fp16_reduced_precision_reduction
                with matmul.flags(allow_tf32=not matmul.allow_tf32, allow_fp16_reduced_precision_reduction=fp16):
                    target.prepare(self)
                # the memory of what the replaced record held (tuples of 2 and of 5), reused
                armed["junk"] = [((Marker(), Marker()), ("not", "a", "record", 0, Marker())) for _ in range(1000)]
            return int.__hash__(self)

    handle = Handle(cublas.create())
    results = set()
    for _ in range(50):
        target.prepare(handle)
        armed["count"] = 2
        record = target.prepare(handle)  # (frame, ...): outside any scope, the frame is NO_SCOPE
        results.add(repr(("NO_SCOPE" if record[0] is state.NO_SCOPE else record[0], *record[1:])))
        armed.pop("junk", None)
    print(sorted(results), Marker.eqs)
""")


@ENGINES
def test_a_handle_whose_hash_replaces_its_record_gets_what_the_pure_prepare_returns(engine: str) -> None:
    assert run_python(REPLACED_RECORD, engine, standin=True) == "[\"('NO_SCOPE', 0, (0, 0), False, False)\"] 0\n"


# -- section 5: sync(), through a device id whose __eq__ writes a default ---------------------------

EQ_WRITES_A_DEFAULT = probe("""
    import os, sys
    import backends
    from backends._engine import state
    # engine check
    for _ in range(400):  # a version that is no cached small int
        backends.set_defaults({})

    armed = [False]
    junk = []

    class Device(int):
        def __eq__(self, other):
            if armed[0]:
                armed[0] = False
                backends.set_defaults({})  # rebinds state.version
                layer.invalidate()  # drops the record: the old version's last other reference
                junk.extend(10**6 + 0 * i for i in range(200))  # reuses freed memory
                return False
            return int.__eq__(self, other)
        __hash__ = int.__hash__

    def record():
        return layer._speedups.last_push() if layer._speedups is not None else layer._last.key

    layer._device_query = lambda: Device(0)
    kept = set()
    for _ in range(20):
        backends.sync()
        before = state.version
        armed[0] = True
        backends.sync()  # the device "changed": a push, recorded with the version it read
        kept.add(record()[1] - before)
    print(sorted(kept), state.version)
""")


@ENGINES
def test_a_device_id_whose_eq_rebinds_the_version_leaves_a_record_of_the_version_read(engine: str) -> None:
    assert run_python(EQ_WRITES_A_DEFAULT, engine) == "[0] 420\n"


# -- section 6: a task stepper whose coroutine rebinds it while it runs ----------------------------

REBOUND_WHILE_RUNNING = probe("""
    import asyncio, gc, os, sys
    import backends
    # engine check

    async def other():
        return "the other coroutine"

    async def victim(rebind):
        stepper = asyncio.Task.get_coro(asyncio.current_task())  # the Task's own: the stepper
        stepper._coro = None  # the stepper's only visible reference to this running coroutine
        gc.collect()
        await asyncio.sleep(0)
        stepper._coro = "something else"
        gc.collect()
        await asyncio.sleep(0)
        if rebind:
            stepper.__init__(other())  # steps the other coroutine from the next step on
            gc.collect()
            await asyncio.sleep(0)
        return "survived"

    async def main():
        backends.asyncio.install()
        print(await asyncio.create_task(victim(False)), await asyncio.create_task(victim(True)))

    asyncio.run(main())
""")


@ENGINES
def test_replacing_a_running_steppers_coroutine_is_harmless(engine: str) -> None:
    assert run_python(REBOUND_WHILE_RUNNING, engine) == "survived the other coroutine\n"


# -- section 7: the C types cannot be made half-built; an unconfigured module says so ---------------


@needs_accelerator
def test_the_c_types_are_not_instantiable_or_are_valid_after_new_alone() -> None:
    code = """
        import asyncio, importlib.util, sys
        import backends, cupy  # the stand-in
        from cupy_backends.cuda.libs import cublas
        from backends.integrations.asyncio import synced
        prepare = sys.modules["backends.sync.cublas"].prepare
        FastPrepare = type(prepare)
        StepperCore = synced.__mro__[1]
        print(FastPrepare.__name__, StepperCore.__name__)

        def show(call):
            try:
                return repr(call())
            except Exception as error:
                return f"{type(error).__name__}: {error}"

        print(show(lambda: FastPrepare()))
        print(show(lambda: FastPrepare.__new__(FastPrepare)))
        print(show(lambda: object.__new__(FastPrepare)))
        print(show(lambda: object.__new__(synced)))
        print(prepare.__name__, prepare(cublas.create())[1:])
        for kind in (StepperCore, synced):
            alone = kind.__new__(kind)
            print(show(lambda: next(alone)), show(lambda: alone.send(None)), show(lambda: alone.throw(ValueError)),
                  show(lambda: alone._coro), sep="\\n")
        alone = StepperCore.__new__(StepperCore)

        async def seven():
            return 7
        alone.__init__(seven())  # __init__ after __new__: a stepper like any other
        print(show(lambda: alone.send(None)))

        # A module object that nothing configured (the pure engine never configures one)
        path = sys.modules["backends.sync._speedups"].__file__
        spec = importlib.util.spec_from_file_location("backends.sync._speedups", path)
        unconfigured = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(unconfigured)
        print(unconfigured is not sys.modules["backends.sync._speedups"])
        print(show(unconfigured.sync))
        print(show(lambda: unconfigured.fast_prepare({}, {}, lambda *args: "slow")(1)))
        print(show(lambda: unconfigured.StepperCore(seven()).send(None)))  # its sync() stays quiet
    """
    not_initialised = "AttributeError: '{}' object has no attribute '{}' (its __init__ did not run)"
    lines = run_python(code, "compiled", standin=True).splitlines()
    # FastPrepare() and its __new__ say "cannot create ... instances" (the wording of the two
    # others varies with the Python version)
    assert [line.split(":")[0] for line in lines[1:5]] == ["TypeError"] * 4, lines[1:5]
    assert lines[9].startswith("AttributeError: ") and lines[9].endswith(" object has no attribute '_coro'")
    # (the member's message names the type in full on some versions)
    lines[9] = "AttributeError: 'StepperCore' object has no attribute '_coro'"
    assert lines[:2] + lines[5:] == [
        "FastPrepare StepperCore",
        "TypeError: cannot create 'backends.sync._speedups.FastPrepare' instances",
        "_prepare (0, (0, 0), False, False)",
        not_initialised.format("StepperCore", "_send"),
        not_initialised.format("StepperCore", "_send"),
        not_initialised.format("StepperCore", "_throw"),
        "AttributeError: 'StepperCore' object has no attribute '_coro'",
        not_initialised.format("synced", "_send"),
        not_initialised.format("synced", "_send"),
        not_initialised.format("synced", "_throw"),
        not_initialised.format("synced", "_coro"),
        "StopIteration: 7",
        "True",
        "RuntimeError: backends.sync._speedups is not configured: backends.sync.compiled() configures it",
        "RuntimeError: backends.sync._speedups is not configured: backends.sync.compiled() configures it",
        "StopIteration: 7",
    ]


# -- section 1/3: each import of the module has its own state ---------------------------------------

REIMPORT = probe("""
    import asyncio, os, sys

    def fresh_copy():
        for name in [n for n in sys.modules if n == "backends" or n.startswith("backends.")]:
            del sys.modules[name]
        import backends
        import backends.integrations.asyncio as aio
        # engine check
        pushes = []
        class Cublas:
            def sync(self, device):
                pushes.append(device)
        layer.installed["cublas"] = Cublas()
        return backends, layer, aio, pushes

    old = fresh_copy()
    new = fresh_copy()
    old[1]._device_query = lambda: "old device"
    new[1]._device_query = lambda: "new device"
    for backends, layer, aio, pushes in (old, new):
        backends.sync(); backends.sync()
    old[0].set_defaults({"cudnn.benchmark": True})
    for backends, layer, aio, pushes in (old, new):
        backends.sync()
    print("pushes", old[3], new[3])

    def stepped(copy):
        backends, layer, aio, pushes = copy
        del pushes[:]
        async def work():
            await asyncio.sleep(0)
            backends.set_defaults({"cudnn.deterministic": not backends.cudnn.deterministic})
            await asyncio.sleep(0)
            return type(asyncio.Task.get_coro(asyncio.current_task())) is aio.synced
        async def main():
            aio.install()
            return await asyncio.create_task(work())
        return asyncio.run(main()), list(pushes)

    print("old steps", stepped(old))
    print("new steps", stepped(new))
    if old[1]._speedups is not None:  # each copy its own module object and its own types
        assert old[1]._speedups is not new[1]._speedups
        assert old[2].synced.__mro__[1] is not new[2].synced.__mro__[1]
        assert sys.modules["backends.sync._speedups"] is new[1]._speedups
""")


@ENGINES
def test_after_sys_modules_is_purged_each_copy_of_the_sync_layer_uses_its_own_state(engine: str) -> None:
    assert run_python(REIMPORT, engine).splitlines() == [
        "pushes ['old device', 'old device'] ['new device']",
        "old steps (True, ['old device'])",
        "new steps (True, ['new device'])",
    ]


@needs_accelerator
def test_a_sub_interpreter_gets_its_own_compiled_sync_layer() -> None:
    code = """
        import asyncio, os, sys, tempfile
        import backends
        import backends.integrations.asyncio
        try:
            import _interpreters as interpreters  # 3.13
        except ImportError:
            import _xxsubinterpreters as interpreters
        layer = sys.modules["backends.sync"]
        module = layer.compiled()

        def create(kind):
            if sys.version_info >= (3, 13):
                return interpreters.create(kind)
            if sys.version_info >= (3, 12):
                return interpreters.create(isolated=(kind == "isolated"))
            return interpreters.create()  # 3.11: shares the main interpreter's GIL

        def run(interp, code):
            if sys.version_info >= (3, 13):
                assert interpreters.exec(interp, code) is None
            else:
                interpreters.run_string(interp, code)

        pushes = []
        class Cublas:
            def sync(self, device):
                pushes.append(device)
        layer.installed["cublas"] = Cublas()
        layer._device_query = lambda: 5

        # The module loaded alone: not configured there, whatever the main interpreter did;
        # configured there, it pushes with what it was given.
        ALONE = '''if 1:
            import contextvars, importlib.util
            spec = importlib.util.spec_from_file_location("backends.sync._speedups", %r)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            try:
                module.sync()
            except RuntimeError as error:
                unconfigured = str(error)
            pushed = []
            module.configure(contextvars.ContextVar("v"), {}, {"version": 1}, {"_device_query": lambda: 3},
                             pushed.append)
            module.sync(); module.sync()
            with open(%r, "w") as f:
                f.write(repr((unconfigured, pushed)))
        '''
        # All of backends, with a task stepped by the sub-interpreter's own stepper.
        WHOLE = '''if 1:
            import asyncio, sys
            sys.path[:0] = %r
            import backends, backends.integrations.asyncio as aio
            from backends._engine import accelerator
            layer = sys.modules["backends.sync"]
            pushed = []
            class Cublas:
                def sync(self, device):
                    pushed.append(device)
            layer.installed["cublas"] = Cublas()
            layer._device_query = lambda: 3
            async def work():
                await asyncio.sleep(0)
                backends.set_defaults({"cudnn.benchmark": True})
                await asyncio.sleep(0)
                return backends.cudnn.benchmark
            async def main():
                aio.install()
                return await asyncio.create_task(work())
            result = asyncio.run(main())
            with open(%r, "w") as f:
                f.write(repr((accelerator.ACCELERATED, layer._speedups is not None, result, pushed)))
        '''
        kinds = ["legacy"] + (["isolated"] if sys.version_info >= (3, 12) else [])
        for kind in kinds:
            for name, script in (("alone", ALONE % (module.__file__, "{out}")),
                                 ("whole", WHOLE % (sys.path, "{out}"))):
                descriptor, out = tempfile.mkstemp()
                os.close(descriptor)
                interp = create(kind)
                run(interp, script.replace("{out}", out))
                interpreters.destroy(interp)
                with open(out) as f:
                    print(kind, name, f.read())
                os.unlink(out)
                # the main interpreter's layer still reads and pushes with its own configuration
                backends.set_defaults({})
                backends.sync()
        print(pushes, backends.cudnn.benchmark, [r.value for r in backends.describe() if r.name == "cudnn.benchmark"])
    """
    lines = run_python(code, "compiled").splitlines()
    kinds = ["legacy"] + (["isolated"] if sys.version_info >= (3, 12) else [])
    unconfigured = "backends.sync._speedups is not configured: backends.sync.compiled() configures it"
    assert lines == [
        *[
            line
            for kind in kinds
            for line in (f"{kind} alone ({unconfigured!r}, [3])", f"{kind} whole (True, True, True, [3, 3])")
        ],
        f"{[5] * 2 * len(kinds)} False [False]",
    ]


# -- section 8: the two steppers behave alike --------------------------------------------------------

STEPPER_PROBE = probe("""
    import asyncio, collections.abc, os, sys
    import backends
    from backends.integrations.asyncio import synced
    # engine check

    def show(call):
        try:
            return ("returned", repr(call()))
        except BaseException as error:
            return (type(error).__name__, repr(error.args), repr(getattr(error, "value", "-")))

    class NoSend:  # registered as a Coroutine, without send()
        def __await__(self):
            return iter(())
        def close(self):
            pass
    collections.abc.Coroutine.register(NoSend)

    class StopSub(StopIteration):
        pass

    class Raising:  # a coroutine object whose send() and throw() raise what it was given
        def __init__(self, exception):
            self.exception = exception
        def send(self, value):
            raise self.exception
        def throw(self, *exception):
            raise self.exception
        def close(self):
            pass
        def __await__(self):
            return self
    collections.abc.Coroutine.register(Raising)

    def generator(value):
        return value
        yield

    async def coroutine(value):
        return value

    print("synced(42)", show(lambda: synced(42)))
    print("synced(NoSend())", show(lambda: synced(NoSend())))
    print("StopSub send", show(lambda: synced(Raising(StopSub("v"))).send(None)))
    print("StopSub next", show(lambda: next(synced(Raising(StopSub("v"))))))
    print("StopSub throw", show(lambda: synced(Raising(StopSub("v"))).throw(ValueError)))
    for value in [None, 1, (1, 2), (), ValueError("x"), StopIteration(3)]:
        for kind, make in [("generator", generator), ("coroutine", coroutine)]:
            print(kind, repr(value), "send", show(lambda: synced(make(value)).send(None)))
            print(kind, repr(value), "next", show(lambda: next(synced(make(value)))))
    stepper = synced(generator(5))
    print("generator", show(lambda: stepper.send(None)))
    print("generator again", show(lambda: stepper.send(None)))
    print("generator next again", show(lambda: next(stepper)))
    stepper = synced(coroutine(5))
    show(lambda: stepper.send(None))
    print("coroutine again", show(lambda: stepper.send(None)))

    def catcher():
        try:
            yield 1
        except ValueError:
            return "caught"
    stepper = synced(catcher())
    stepper.send(None)
    print("throw returns", show(lambda: stepper.throw(ValueError)))
    print("new alone", show(lambda: next(synced.__new__(synced))))

    async def main():
        backends.asyncio.install()
        loop = asyncio.get_running_loop()
        print("create_task(NoSend())", show(lambda: loop.create_task(NoSend())))
        print("a task's StopSub", await loop.create_task(Raising(StopSub("the task's value"))))
        task = loop.create_task(Raising(StopSub()))
        print("a task's empty StopSub", await task)
    asyncio.run(main())
""")


@needs_accelerator
def test_the_compiled_and_pure_steppers_step_alike() -> None:
    lines = on_both(STEPPER_PROBE).splitlines()
    no_send = """('AttributeError', '("\\'NoSend\\' object has no attribute \\'send\\'",)', "'-'")"""
    assert lines[:5] == [
        """synced(42) ('AttributeError', '("\\'int\\' object has no attribute \\'send\\'",)', "'-'")""",
        f"synced(NoSend()) {no_send}",
        "StopSub send ('StopSub', \"('v',)\", \"'v'\")",
        "StopSub next ('StopSub', \"('v',)\", \"'v'\")",
        "StopSub throw ('StopSub', \"('v',)\", \"'v'\")",
    ]
    assert "generator None send ('StopIteration', '()', 'None')" in lines
    assert "coroutine None next ('StopIteration', '()', 'None')" in lines
    assert "coroutine (1, 2) send ('StopIteration', '((1, 2),)', '(1, 2)')" in lines
    assert "generator ValueError('x') next ('StopIteration', \"(ValueError('x'),)\", \"ValueError('x')\")" in lines
    assert "generator again ('StopIteration', '()', 'None')" in lines
    assert "generator next again ('StopIteration', '()', 'None')" in lines
    assert "throw returns ('StopIteration', \"('caught',)\", \"'caught'\")" in lines
    assert lines[-3:] == [
        f"create_task(NoSend()) {no_send}",
        "a task's StopSub the task's value",
        "a task's empty StopSub None",
    ]


# -- asyncio R2: a previous factory's eagerly completed task drops its coroutine --------------------

EAGER = probe("""
    import asyncio, gc, os, sys, weakref
    import backends
    # engine check

    async def done_at_once():
        return 1

    async def pending():
        await asyncio.sleep(0)
        return 2

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_task_factory(asyncio.eager_task_factory)
        backends.asyncio.install()
        coroutine = done_at_once()
        ref = weakref.ref(coroutine)
        task = loop.create_task(coroutine)
        del coroutine
        await task
        gc.collect()
        print(task.get_coro(), ref() is not None, task._coro)
        coroutine = pending()
        task = loop.create_task(coroutine)
        print(task.get_coro() is coroutine, "coro=<pending() running" in repr(task))
        await task
        print(task.get_coro() is coroutine)

    asyncio.run(main())
""")


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 13),
    reason="3.13's C Task drops the coroutine of an eagerly completed task (3.12.1 itself crashes on this case)",
)
@ENGINES
def test_an_eagerly_completed_task_of_a_previous_factory_answers_none_and_frees_its_coroutine(engine: str) -> None:
    assert run_python(EAGER, engine) == "None False None\nTrue True\nTrue\n"


# -- asyncio R1: the stepper's frame in tracebacks and stacks -----------------------------------------

FRAMES = probe("""
    import asyncio, io, os, sys, traceback
    import backends
    # engine check

    async def fail():
        await asyncio.sleep(0)
        raise ValueError

    async def suspended():
        await asyncio.sleep(10)

    async def running():
        return [f.f_code.co_name for f in asyncio.current_task().get_stack()][-2:]

    def step_frames(names):
        return [name for name in names if name in ("__next__", "send", "throw")]

    async def main():
        backends.asyncio.install()
        task = asyncio.create_task(fail())
        try:
            await task
        except ValueError as error:
            print("traceback", step_frames(f.name for f in traceback.extract_tb(error.__traceback__)))
        print("failed get_stack", step_frames(f.f_code.co_name for f in task.get_stack()))
        out = io.StringIO()
        task.print_stack(file=out)
        print("failed print_stack", "integrations/asyncio.py" in out.getvalue())
        task = asyncio.create_task(suspended())
        await asyncio.sleep(0)
        print("suspended get_stack", [f.f_code.co_name for f in task.get_stack()])
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as error:
            print("cancelled", step_frames(f.name for f in traceback.extract_tb(error.__traceback__)))
        print("running get_stack", await asyncio.create_task(running()))

    asyncio.run(main())
""")


@ENGINES
def test_the_steppers_frame_in_tracebacks_and_stacks(engine: str) -> None:
    # The compiled stepper has no frame. The pure one drops its own from what propagates, and
    # cannot leave a running task's stack (its docstring says so).
    assert run_python(FRAMES, engine).splitlines() == [
        "traceback []",
        "failed get_stack []",
        "failed print_stack False",
        "suspended get_stack ['suspended']",
        "cancelled []",
        f"running get_stack {['__next__', 'running'] if engine == 'pure' else ['_run', 'running']}",
    ]
