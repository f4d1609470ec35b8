"""Random programs over backends' public API, and the runner that executes them.

Used by tests/test_differential.py, which runs the same programs on the compiled and on the
pure-Python engine and compares what they observe.

``generate(seed, count)`` writes ``count`` programs as Python source. A program uses only the
public API (``import backends``) plus a few recording helpers that this file's runner puts in
its namespace:

- ``ob(label, thunk)`` calls ``thunk()`` and records its result, or the exception it raised
  (type and message);
- ``rec(label, value)`` records a value;
- ``with catch(label):`` records whether the block raised (type, message, ``__context__`` and
  ``__cause__``) and swallows an ``Exception`` or a cancellation;
- ``in_thread(fn)`` runs ``fn`` in a new ``threading.Thread``, joins it and returns its result
  or raises its exception;
- ``phased(*bodies, phases=n)`` runs each body in its own thread, all started at once; in
  phase ``p`` only body ``p % len(bodies)`` acts (``body(p)``) while the others wait at a
  ``threading.Barrier``, so the threads interleave in a fixed order;
- ``Boom`` is the exception programs raise on purpose;
- ``flags_now()`` reads four flags (a module-level function, so ``bind(flags_now)`` pickles);
- the modules ``asyncio``, ``contextvars``, ``copy``, ``functools``, ``pickle`` and ``weakref``.

Every label carries the number of the statement that made it (``#12``), which is also in a
comment of the source, so a difference can be traced back to its line.

``python tests/_programs.py SOURCES.json OUT.json`` runs every program of SOURCES.json (a JSON
list of strings), each in a fresh ``contextvars.Context()`` with the built-in defaults and
global flags enabled, and writes ``{"engine": {...}, "programs": [[observation, ...], ...]}``.
An observation is a list of strings, with object addresses (``0x7f...``) replaced by ``0x?``.
"""

from __future__ import annotations

import random

# -- the generator (imports nothing of backends) ---------------------------------------------

BOOL_FLAGS = [
    ("backends.cudnn", "enabled"),
    ("backends.cudnn", "benchmark"),
    ("backends.cudnn", "deterministic"),
    ("backends.cudnn", "allow_tf32"),
    ("backends.cuda.matmul", "allow_tf32"),
    ("backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("backends.algorithms", "deterministic"),
    ("backends.algorithms", "warn_only"),
]
INT_FLAGS = [("backends.cudnn", "benchmark_limit"), ("backends.cuda.cufft_plan_cache", "max_size")]
STR_FLAG = ("backends.cuda", "preferred_linalg_library")
VIEWS = [("backends.cuda.matmul", "fp32_precision"), ("backends.cudnn.conv", "fp32_precision")]
#: the flags most reads look at (the brief's four, two of them views)
HOT_READS = [
    "backends.cudnn.deterministic",
    "backends.cuda.matmul.allow_tf32",
    "backends.cudnn.benchmark_limit",
    "backends.cuda.matmul.fp32_precision",
]
OTHER_READS = [
    *(f"{ns}.{attr}" for ns, attr in BOOL_FLAGS + INT_FLAGS + VIEWS),
    "backends.cuda.preferred_linalg_library()",
    "backends.flags_frozen()",
    "backends.are_deterministic_algorithms_enabled()",
    "backends.is_deterministic_algorithms_warn_only_enabled()",
    "backends.cudnn.benchmrk",  # a typo: AttributeError with a did-you-mean
    "backends.cuda.matmul.allow_fp16_accumulation",  # a torch setting not scoped here
]
DOTTED_BOOL = [f"{ns[len('backends.') :]}.{attr}" for ns, attr in BOOL_FLAGS]
DOTTED_INT = [f"{ns[len('backends.') :]}.{attr}" for ns, attr in INT_FLAGS]
DOTTED_STR = "cuda.preferred_linalg_library"
BAD_DOTTED = ["cudnn.determinstic", "cuda.allow_tf32", "deterministic", "cuda.matmul.fp32_precision", "1"]
KEYWORDS = {
    "backends.cudnn.flags": (
        ["enabled", "benchmark", "deterministic", "allow_tf32"],
        ["benchmark_limit"],
        [],
    ),
    "backends.cuda.matmul.flags": (
        ["allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"],
        [],
        [],
    ),
    "backends.cuda.flags": ([], [], ["preferred_linalg_library"]),
    "backends.algorithms.flags": (["deterministic", "warn_only"], [], []),
}
#: the scope-making functions and scopes as objects: identity, equality, binding, pickling, copies
SURFACE = [
    "backends.cudnn.flags.__name__, backends.cudnn.flags.__qualname__, backends.cuda.matmul.tf32.__name__",
    "backends.cudnn.flags is backends.cudnn.flags, backends.cudnn.flags == backends.cudnn.flags",
    "hash(backends.cudnn.flags) == hash(backends.cudnn.flags), callable(backends.cudnn.flags)",
    "functools.partial(backends.cudnn.flags, deterministic=True)() is backends.cudnn.flags(deterministic=True)",
    "pickle.loads(pickle.dumps(backends.cudnn.flags))(benchmark=True)",
    "copy.copy(backends.cudnn.flags) == backends.cudnn.flags",
    "type(backends.cudnn).flags(backends.cudnn, deterministic=True)",
    "backends.cudnn.flags(deterministic=None) is backends.cudnn.flags()",
    "backends.cudnn.flags(benchmark=True, deterministic=True) is "
    "backends.cudnn.flags(deterministic=True, benchmark=True)",
    "backends.cudnn.flags(deterministic=True) == backends.cudnn.flags(deterministic=True)",
    "copy.copy(backends.cudnn.flags(deterministic=True)) == backends.cudnn.flags(deterministic=True)",
    "hash(copy.copy(backends.cudnn.flags(deterministic=True))) == hash(backends.cudnn.flags(deterministic=True))",
    "copy.deepcopy(backends.deterministic()) is backends.deterministic()",
    "pickle.loads(pickle.dumps(backends.cudnn.flags(deterministic=True))) is backends.cudnn.flags(deterministic=True)",
    "backends.cudnn.flags(**{'deterministic': True}), backends.cudnn.tf32(True), backends.cuda.flags()",
    "isinstance(backends.cudnn.flags(deterministic=True), backends.Scope), str(backends.deterministic())",
    "backends.cudnn.flags(deterministic=True)(lambda: backends.cudnn.deterministic)()",
    "backends.cudnn.flags(deterministic=True)(print).__name__, backends.flags({})(len)('abc')",
    "weakref.ref(backends.cudnn.flags(benchmark_limit=5))() is None",
    "backends.bind(backends.bind(flags_now))()",
    "backends.snapshot() == backends.snapshot(), hash(backends.snapshot()) == hash(backends.snapshot())",
    "getattr(backends.cudnn, 'deterministic'), hasattr(backends.cudnn, 'determinstic')",
    "backends.flags({'cudnn.benchmark': True}).overrides, backends.cudnn.flags(enabled=False).overrides",
]
LIBRARIES = ["'default'", "'cusolver'", "'magma'"]
BAD_BOOL = ["1", "0", "None", "'yes'", "1.0", "[]"]
BAD_INT = ["-1", "True", "2.5", "'3'", "None", "-7"]
BAD_STR = ["'cublas'", "3", "None", "'CUSOLVER'"]
BAD_VIEW = ["'x'", "'TF32'", "True", "None"]


class _Context:
    """What the generator knows of one execution context (a program, thread or task)."""

    def __init__(self, kind: str, entered: list[str] | None = None, module: bool = False) -> None:
        self.kind = kind  # "sync", "async" or "phase"
        self.entered = list(entered or [])  # scopes entered by hand here, innermost last (a guess)
        self.module = module  # the program's own top level: names bound here are global
        self.alone = False  # a main coroutine: no sibling task runs while it awaits a thread


class _Program:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.count = 0
        self.budget = rng.randint(25, 70)  # statements
        self.scopes: list[str] = []
        self.snaps: list[str] = []
        self.funcs: list[tuple[str, str]] = []  # (name, kind) of decorated callables

    # -- small pieces ------------------------------------------------------------------
    def label(self) -> str:
        self.count += 1
        return f"#{self.count}"

    def emit(self, indent: int, text: str) -> None:
        self.lines.extend("    " * indent + line for line in text.split("\n"))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def bool_value(self) -> str:
        return self.rng.choice(["True", "False"])

    def int_value(self) -> str:
        return str(self.rng.choice([0, 1, 2, 3, 10, 16, 64, 2**40]))

    def value_for(self, kind: str, bad: bool) -> str:
        rng = self.rng
        if kind == "bool":
            return rng.choice(BAD_BOOL) if bad else self.bool_value()
        if kind == "int":
            return rng.choice(BAD_INT) if bad else self.int_value()
        if kind == "str":
            return rng.choice(BAD_STR) if bad else rng.choice(LIBRARIES)
        return rng.choice(BAD_VIEW) if bad else rng.choice(["'tf32'", "'ieee'"])

    def read_expr(self) -> str:
        return self.rng.choice(HOT_READS) if self.chance(0.6) else self.rng.choice(OTHER_READS)

    def mapping(self, bad: bool) -> str:
        """A ``{dotted: value}`` literal; with ``bad``, one entry is wrong."""
        rng = self.rng
        names = [(n, "bool") for n in DOTTED_BOOL] + [(n, "int") for n in DOTTED_INT] + [(DOTTED_STR, "str")]
        entries = [f"{name!r}: {self.value_for(kind, False)}" for name, kind in rng.sample(names, rng.randint(0, 3))]
        if bad:
            if self.chance(0.4):
                entries.append(f"{rng.choice(BAD_DOTTED)!r}: True")
            else:
                name, kind = rng.choice(names)
                entries.append(f"{name!r}: {self.value_for(kind, True)}")
            rng.shuffle(entries)
        return "{" + ", ".join(entries) + "}"

    def scope_expr(self, bad: bool = False) -> str:
        """An expression building a scope; with ``bad``, one that raises when built."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.45:
            function = rng.choice(sorted(KEYWORDS))
            bools, ints, strs = KEYWORDS[function]
            options = [(k, "bool") for k in bools] + [(k, "int") for k in ints] + [(k, "str") for k in strs]
            chosen = rng.sample(options, rng.randint(0 if bad else 1, len(options)))
            args = [f"{k}={self.value_for(kind, False) if not self.chance(0.1) else 'None'}" for k, kind in chosen]
            if bad:
                how = rng.random()
                if how < 0.5:
                    k, kind = rng.choice(options)
                    value = self.value_for(kind, True)
                    if value == "None":  # None means "not given" here: not a bad value
                        value = "'no'"
                    args = [a for a in args if not a.startswith(k + "=")] + [f"{k}={value}"]
                elif how < 0.8:
                    args.append(rng.choice(["determinstic=True", "allow_tf=True", "tf32=False", "benchmark_lim=3"]))
                rng.shuffle(args)
                if how >= 0.8:
                    args.insert(0, self.bool_value())  # positional: refused
            return f"{function}({', '.join(args)})"
        if pick < 0.6:
            namespace = rng.choice(["backends.cuda.matmul", "backends.cudnn"])
            return f"{namespace}.tf32({rng.choice(BAD_BOOL) if bad else self.bool_value()})"
        if pick < 0.9:
            if bad and self.chance(0.15):
                return rng.choice(["backends.flags(None)", "backends.flags([('cudnn.deterministic', True)])"])
            return f"backends.flags({self.mapping(bad)})"
        if bad:
            return rng.choice(["backends.deterministic(True)", "backends.flags()", "backends.cudnn.flags()(3)"])
        return "backends.deterministic()"

    # -- the program -------------------------------------------------------------------
    def source(self) -> str:
        rng = self.rng
        for i in range(rng.randint(2, 5)):
            name = f"s{i}"
            if i and self.chance(0.2):  # a distinct object with the same overrides as an earlier scope
                self.emit(0, f"{name} = copy.copy({rng.choice(self.scopes)})")
            else:
                self.emit(0, f"{name} = {self.scope_expr()}")
            self.scopes.append(name)
        self.emit(
            0,
            f"ob('{self.label()} one object', lambda: [a is b for a in {self._list(self.scopes)} "
            f"for b in {self._list(self.scopes)}])",
        )
        self.emit(0, f"ob('{self.label()} reprs', lambda: [(repr(s), s.overrides) for s in {self._list(self.scopes)}])")
        self.emit(
            0,
            f"ob('{self.label()} pickled', "
            f"lambda: [repr(pickle.loads(pickle.dumps(s))) for s in {self._list(self.scopes)}])",
        )
        if self.chance(0.5):
            self.emit(0, f"snap0 = backends.snapshot()  # {self.label()}")
            self.snaps.append("snap0")
        for _ in range(rng.randint(1, 5)):
            self.decorated(0)
        main = _Context("sync", module=True)
        while self.budget > 0:
            self.statement(0, main, depth=0)
        return "\n".join(self.lines) + "\n"

    @staticmethod
    def _list(names: list[str]) -> str:
        return "[" + ", ".join(names) + "]"

    def scope_name(self) -> str:
        if self.snaps and self.chance(0.15):
            return self.rng.choice(self.snaps)
        return self.rng.choice(self.scopes)

    def decorated(self, indent: int) -> None:
        """Define a function, method, coroutine function, generator function or async generator
        function decorated with a scope (or with a snapshot, or a scope built in place)."""
        rng = self.rng
        kind = rng.choice(["function", "method", "coroutine", "generator", "asyncgen"])
        name = f"{kind[:2]}{len(self.funcs)}"
        decorator = self.scope_name() if self.chance(0.8) else self.scope_expr()
        label = self.label()
        body_ctx = _Context("async" if kind in ("coroutine", "asyncgen") else "sync")
        self.emit(indent, f"# {label} a decorated {kind}")
        if kind == "method":
            self.emit(indent, f"class C{name}:")
            indent += 1
            self.emit(indent, f"@{decorator}")
            wrap = rng.choice(["", "", "staticmethod", "classmethod"])  # the scope above @staticmethod
            if wrap:
                self.emit(indent, f"@{wrap}")
            signature = {"": "self, y=1", "staticmethod": "y=1", "classmethod": "cls, y=1"}[wrap]
            self.emit(indent, f"def m({signature}):")
        else:
            self.emit(indent, f"@{decorator}")
            prefix = "async def" if kind in ("coroutine", "asyncgen") else "def"
            self.emit(indent, f"{prefix} {name}(y=1):")
        self.emit(indent + 1, f"rec('{label} {name} in', ({self.read_expr()}, {self.read_expr()}))")
        steps = rng.randint(1, 3)
        for step in range(steps):
            self.simple(indent + 1, body_ctx, in_function=True)
            if kind in ("generator", "asyncgen"):
                self.emit(indent + 1, f"got = yield {step}")
                self.emit(indent + 1, f"rec('{label} {name} sent', got)")
            elif kind == "coroutine" and self.chance(0.7):
                self.emit(indent + 1, "await asyncio.sleep(0)")
        if self.chance(0.15):
            self.emit(indent + 1, f"raise Boom('{label} from {name}')")
        elif kind not in ("generator", "asyncgen"):
            self.emit(indent + 1, f"return ({self.read_expr()}, y)")
        self.funcs.append((name, kind))

    def budgeted(self) -> None:
        self.budget -= 1

    def simple(self, indent: int, ctx: _Context, in_function: bool = False) -> None:
        """One statement that opens no block: a read, an assignment, set/reset_defaults, a bad
        scope, a manual enter or exit, a snapshot, describe(), freezing the defaults."""
        rng = self.rng
        self.budgeted()
        label = self.label()
        pick = rng.random()
        if pick < 0.3:
            self.emit(indent, f"ob('{label} read', lambda: {self.read_expr()})")
        elif pick < 0.5:
            self.assignment(indent, label)
        elif pick < 0.57:
            bad = self.chance(0.3)
            self.emit(indent, f"ob('{label} set_defaults', lambda: backends.set_defaults({self.mapping(bad)}))")
        elif pick < 0.6:
            self.emit(indent, f"ob('{label} reset_defaults', lambda: backends.reset_defaults())")
        elif pick < 0.65:
            self.emit(indent, f"ob('{label} bad scope', lambda: {self.scope_expr(bad=True)})")
        elif pick < 0.75 and (not in_function or self.chance(0.1)):  # in a function: a scope left entered
            self.manual_enter(indent, ctx, label)
        elif pick < 0.85 and not in_function:
            self.manual_exit(indent, ctx, label)
        elif pick < 0.9:
            self.emit(indent, f"ob('{label} describe', lambda: backends.describe())")
        elif pick < 0.92:
            self.emit(indent, f"ob('{label} snapshot', lambda: backends.snapshot())")
        elif pick < 0.94:
            self.emit(indent, f"ob('{label} surface', lambda: ({rng.choice(SURFACE)}))")
        elif pick < 0.97:
            call = rng.choice(["disable_global_flags", "enable_global_flags"])
            self.emit(indent, f"ob('{label} {call}', lambda: (backends.{call}(), backends.flags_frozen()))")
        else:
            mode, warn = self.bool_value(), rng.choice(["True", "False", "1"])
            self.emit(
                indent,
                f"ob('{label} use_deterministic_algorithms', "
                f"lambda: backends.use_deterministic_algorithms({mode}, warn_only={warn}))",
            )

    def assignment(self, indent: int, label: str) -> None:
        rng = self.rng
        bad = self.chance(0.25)
        pick = rng.random()
        if pick < 0.55:
            (ns, attr), kind = rng.choice(BOOL_FLAGS), "bool"
        elif pick < 0.75:
            (ns, attr), kind = rng.choice(INT_FLAGS), "int"
        elif pick < 0.9:
            (ns, attr), kind = rng.choice(VIEWS), "view"
        else:
            (ns, attr), kind = STR_FLAG, "str"
        value = self.value_for(kind, bad)
        if kind == "str" and self.chance(0.5):  # torch's spelling: preferred_linalg_library("cusolver")
            self.emit(indent, f"ob('{label} call', lambda: {ns}.{attr}({value}))")
            return
        if self.chance(0.05):
            attr = rng.choice(["determinstic", "benchmrk", "allow_tf"])  # a typo
        text = f"{label} {ns[len('backends.') :]}.{attr} = {value}"
        self.emit(indent, f"with catch({text!r}):")
        self.emit(indent + 1, f"{ns}.{attr} = {value}")

    def manual_enter(self, indent: int, ctx: _Context, label: str) -> None:
        name = self.scope_name()
        self.emit(indent, f"ob('{label} enter {name}', lambda: {name}.__enter__() is {name})")
        ctx.entered.append(name)

    def manual_exit(self, indent: int, ctx: _Context, label: str) -> None:
        """Exit a scope by hand: in order, out of order, one not entered here, or with an
        exception in flight; then look at the state the exit left."""
        rng = self.rng
        pick = rng.random()
        if ctx.entered and pick < 0.55:
            index = len(ctx.entered) - 1
        elif ctx.entered and pick < 0.8:
            index = rng.randrange(len(ctx.entered))
        else:
            index = None
        name = ctx.entered[index] if index is not None else self.scope_name()
        if self.chance(0.2):  # an exception in flight: an enclosing scope restores what it saw
            self.emit(
                indent, f"ob('{label} exit {name} with Boom', lambda: {name}.__exit__(Boom, Boom('{label}'), None))"
            )
            if index is not None:
                del ctx.entered[index:]
        else:
            self.emit(indent, f"ob('{label} exit {name}', lambda: {name}.__exit__(None, None, None))")
            if index is not None and index == len(ctx.entered) - 1:
                ctx.entered.pop()
        if self.chance(0.6):
            self.emit(indent, f"ob('{label} after exit', lambda: backends.describe())")

    def statement(self, indent: int, ctx: _Context, depth: int) -> None:
        rng = self.rng
        pick = rng.random()
        if depth >= 3 or pick < 0.5:
            self.simple(indent, ctx)
            return
        self.budgeted()
        label = self.label()
        if pick < 0.62:
            self.with_block(indent, ctx, depth, label)
        elif pick < 0.66:
            self.snapshot_block(indent, ctx, depth, label)
        elif pick < 0.68:
            self.context_copy(indent, label)
        elif pick < 0.76:
            self.call(indent, ctx, label)
        elif ctx.kind == "async":
            self.async_statement(indent, ctx, depth, label)
        elif pick < 0.82:
            self.asyncio_program(indent, depth, label)
        elif pick < 0.88:
            self.thread(indent, depth, label)
        elif pick < 0.93:
            self.bind(indent, depth, label)
        elif pick < 0.97:
            self.phased_threads(indent, label)
        elif ctx.module and indent == 0:  # not in a block that an exit refused may cut short
            self.decorated(indent)
        else:
            self.simple(indent, ctx)

    def body(self, indent: int, ctx: _Context, depth: int, statements: int | None = None) -> None:
        for _ in range(statements if statements is not None else self.rng.randint(1, 4)):
            self.statement(indent, ctx, depth)

    def with_block(self, indent: int, ctx: _Context, depth: int, label: str) -> None:
        """``with`` (or ``async with``) a scope, maybe nested in itself, maybe left by an exception."""
        name = self.scope_name()
        keyword = "async with" if ctx.kind == "async" and self.chance(0.5) else "with"
        raises = self.chance(0.25)
        self.emit(indent, f"with catch('{label} {keyword} {name}'):")
        self.emit(indent + 1, f"{keyword} {name} as entered:")
        inner = indent + 2
        self.emit(inner, f"rec('{label} as', entered is {name})")
        ctx.entered.append(name)
        mark = len(ctx.entered)
        if self.chance(0.2):  # the same scope nested in itself
            self.emit(inner, f"with {name}:")
            self.emit(inner + 1, f"ob('{label} nested in itself', lambda: {self.read_expr()})")
            self.body(inner + 1, ctx, depth + 1, 1)
            self.emit(inner, f"ob('{label} out of the inner one', lambda: {self.read_expr()})")
        self.body(inner, ctx, depth + 1)
        if raises:
            self.emit(inner, f"raise Boom('{label}')")
            del ctx.entered[mark - 1 :]
        elif len(ctx.entered) == mark and ctx.entered[-1] == name:
            ctx.entered.pop()
        self.emit(indent, f"ob('{label} after with', lambda: ({self.read_expr()}, {self.read_expr()}))")

    def snapshot_block(self, indent: int, ctx: _Context, depth: int, label: str) -> None:
        """Take a snapshot, look at it as a mapping, and use it (or an older one) as a scope."""
        rng = self.rng
        name = f"snap{len(self.snaps) + 1}"
        self.emit(indent, f"{name} = backends.snapshot()  # {label}")
        other = rng.choice(self.snaps) if self.snaps else name
        looks = [
            f"dict({name})",
            f"{name}['cudnn.deterministic'], {name}['cuda.matmul.allow_tf32'], {name}['cudnn.benchmark_limit']",
            f"{name}['cuda.matmul.fp32_precision']",
            f"len({name}), list({name})",
            f"{name} == {other}, hash({name}) == hash({other}), {name} is {other}",
            f"{name}.to_dict()",
            f"backends.Snapshot.from_dict({name}.to_dict()) == {name}",
            f"pickle.loads(pickle.dumps({name})) == {name}",
            f"repr({name})",
            f"'cudnn.deterministic' in {name}, 'nope' in {name}, {name}.get('cudnn.benchmark')",
            f"list({name}.items())[:3], list({name}.values())[-2:]",
            "backends.Snapshot.from_dict({'cudnn.deterministic': 1})",
            f"backends.Snapshot.from_dict({{**{name}.to_dict(), 'cudnn.benchmark_limit': -1}})",
            f"{name}['nope']",
        ]
        for look in rng.sample(looks, rng.randint(1, 4)):
            self.emit(indent, f"ob('{label} {name}', lambda: ({look}))")
        if ctx.module and indent == 0:  # a global name bound for sure: later statements may use it
            self.snaps.append(name)
        if self.chance(0.7):
            use = rng.choice([name, other])
            keyword = "async with" if ctx.kind == "async" and self.chance(0.5) else "with"
            self.emit(indent, f"with catch('{label} {keyword} {use}'):")
            self.emit(indent + 1, f"{keyword} {use}:")
            self.emit(indent + 2, f"ob('{label} in {use}', lambda: backends.describe())")
            self.body(indent + 2, ctx, depth + 1, rng.randint(0, 2))

    def context_copy(self, indent: int, label: str) -> None:
        """Enter, exit and read in a ``contextvars.copy_context()`` of this context."""
        rng = self.rng
        name = f"context{label[1:]}"
        self.emit(indent, f"{name} = contextvars.copy_context()")
        for _ in range(rng.randint(1, 4)):
            scope = self.scope_name()
            what = rng.choice(
                [
                    f"{name}.run({scope}.__enter__) is {scope}",
                    f"{name}.run({scope}.__exit__, None, None, None)",
                    f"{name}.run({scope}.__exit__, Boom, Boom('{label}'), None)",
                    f"{name}.run(lambda: {self.read_expr()})",
                    f"{name}.run(backends.describe)",
                    f"{self.read_expr()}",
                ]
            )
            self.emit(indent, f"ob('{label} context copy', lambda: {what})")

    def call(self, indent: int, ctx: _Context, label: str) -> None:
        """Call a decorated callable, reading the flags between its steps."""
        rng = self.rng
        usable = [(n, k) for n, k in self.funcs if ctx.kind == "async" or k not in ("coroutine", "asyncgen")]
        if not usable:
            self.emit(indent, f"ob('{label} read', lambda: {self.read_expr()})")
            return
        awaitable = [(n, k) for n, k in usable if k in ("coroutine", "asyncgen")]
        name, kind = rng.choice(awaitable if awaitable and self.chance(0.7) else usable)
        if kind == "function":
            self.emit(indent, f"ob('{label} {name}()', lambda: {name}({rng.randint(0, 9)}))")
        elif kind == "method":
            self.emit(indent, f"ob('{label} C{name}().m()', lambda: C{name}().m())")
        elif kind == "coroutine":
            self.emit(indent, f"with catch('{label} await {name}()'):")
            if self.chance(0.3):
                self.emit(indent + 1, f"rec('{label} {name}() in a task', await asyncio.create_task({name}()))")
            else:
                self.emit(indent + 1, f"rec('{label} {name}()', await {name}())")
        elif kind == "generator":
            how = rng.random()
            self.emit(indent, f"with catch('{label} iterate {name}()'):")
            self.emit(indent + 1, f"it = {name}()")
            self.emit(indent + 1, f"ob('{label} between', lambda: {self.read_expr()})")
            if how < 0.5:
                self.emit(indent + 1, "for got in it:")
                self.emit(indent + 2, f"rec('{label} yielded', (got, {rng.choice(HOT_READS)}))")
            else:
                self.emit(indent + 1, f"rec('{label} first', (next(it), {self.read_expr()}))")
                self.emit(indent + 1, f"ob('{label} send', lambda: it.send('hi'))")
                self.emit(indent + 1, f"ob('{label} between', lambda: {self.read_expr()})")
                end = rng.choice(["it.close()", f"it.throw(Boom('{label} thrown'))", "next(it, 'done')"])
                self.emit(indent + 1, f"ob('{label} end', lambda: {end})")
        else:
            self.emit(indent, f"with catch('{label} async for {name}()'):")
            if self.chance(0.6):
                self.emit(indent + 1, f"async for got in {name}():")
                self.emit(indent + 2, f"rec('{label} yielded', (got, {rng.choice(HOT_READS)}))")
                self.emit(indent + 2, "await asyncio.sleep(0)")
            else:
                self.emit(indent + 1, f"it = {name}()")
                self.emit(indent + 1, f"rec('{label} first', (await it.__anext__(), {self.read_expr()}))")
                self.emit(indent + 1, f"rec('{label} send', await it.asend('hi'))")
                self.emit(indent + 1, f"ob('{label} between', lambda: {self.read_expr()})")
                end = rng.choice(["it.aclose()", f"it.athrow(Boom('{label} thrown'))"])
                self.emit(indent + 1, f"rec('{label} end', await {end})")

    def asyncio_program(self, indent: int, depth: int, label: str) -> None:
        """``asyncio.run`` of a main coroutine, sometimes with ``backends.asyncio.install()``."""
        name = f"amain{label[1:]}"
        self.emit(indent, f"async def {name}():")
        ctx = _Context("async")
        ctx.alone = True
        if self.chance(0.5):
            self.emit(indent + 1, f"ob('{label} install', lambda: backends.asyncio.install())")
        self.emit(indent + 1, f"ob('{label} main task', lambda: {self.read_expr()})")
        self.body(indent + 1, ctx, depth + 1, self.rng.randint(2, 5))
        self.emit(indent, f"with catch('{label} asyncio.run'):")
        self.emit(indent + 1, f"asyncio.run({name}())")

    def async_statement(self, indent: int, ctx: _Context, depth: int, label: str) -> None:
        """In a coroutine: tasks (created, interleaved with awaits, gathered, cancelled),
        ``asyncio.to_thread``, or a plain ``await asyncio.sleep(0)``."""
        rng = self.rng
        pick = rng.random()
        if pick < 0.6:
            count = rng.randint(1, 3)
            tasks = []
            for i in range(count):
                task = f"t{label[1:]}_{i}"
                self.emit(indent, f"async def {task}_body():")
                child = _Context("async", ctx.entered)
                self.emit(indent + 1, f"ob('{label} {task} starts', lambda: {self.read_expr()})")
                for _ in range(rng.randint(1, 3)):
                    self.statement(indent + 1, child, depth + 1)
                    if self.chance(0.6):
                        self.emit(indent + 1, "await asyncio.sleep(0)")
                self.emit(indent + 1, f"return {self.rng.choice(HOT_READS)}")
                self.emit(indent, f"{task} = asyncio.create_task({task}_body())")
                tasks.append(task)
            for _ in range(rng.randint(0, 2)):
                self.simple(indent, ctx)
                self.emit(indent, "await asyncio.sleep(0)")
            if self.chance(0.2):
                self.emit(indent, f"ob('{label} cancel', lambda: {tasks[-1]}.cancel())")
            if self.chance(0.5):
                self.emit(indent, f"with catch('{label} gather'):")
                self.emit(
                    indent + 1,
                    f"rec('{label} gathered', await asyncio.gather({', '.join(tasks)}, return_exceptions=True))",
                )
            else:
                for task in tasks:
                    self.emit(indent, f"with catch('{label} await {task}'):")
                    self.emit(indent + 1, f"rec('{label} {task}', await {task})")
        elif pick < 0.75 and ctx.alone:  # when the thread ends, relative to other tasks' steps, is timing
            self.emit(indent, f"def thread{label[1:]}():")
            self.emit(indent + 1, f"return ({self.read_expr()}, {self.read_expr()})")
            self.emit(indent, f"with catch('{label} to_thread'):")
            self.emit(indent + 1, f"rec('{label} to_thread', await asyncio.to_thread(thread{label[1:]}))")
        else:
            self.emit(indent, "await asyncio.sleep(0)")
            self.simple(indent, ctx)

    def thread(self, indent: int, depth: int, label: str) -> None:
        """A ``threading.Thread`` started and joined before the program goes on."""
        name = f"thread{label[1:]}"
        self.emit(indent, f"def {name}():")
        self.emit(indent + 1, f"ob('{label} thread starts', lambda: backends.describe())")
        self.body(indent + 1, _Context("sync"), depth + 1, self.rng.randint(1, 3))
        self.emit(indent + 1, f"return {self.read_expr()}")
        self.emit(indent, f"ob('{label} in_thread', lambda: in_thread({name}))")

    def bind(self, indent: int, depth: int, label: str) -> None:
        """``backends.bind(fn)``, called in another thread (and here) after the flags changed."""
        name = f"bound{label[1:]}"
        self.emit(indent, f"def {name}_fn(*args):")
        self.body(indent + 1, _Context("sync"), depth + 2, self.rng.randint(0, 2))
        self.emit(indent + 1, f"return (args, {self.read_expr()}, {self.read_expr()}, {self.read_expr()})")
        self.emit(indent, f"{name} = backends.bind({name}_fn)")
        for _ in range(self.rng.randint(0, 2)):
            self.simple(indent, _Context("sync"))
        self.emit(indent, f"ob('{label} bound in a thread', lambda: in_thread({name}))")
        if self.chance(0.5):
            self.emit(indent, f"ob('{label} bound here', lambda: {name}(1, 2))")
        if self.chance(0.3):  # a bound module-level function goes through pickle with its flags
            self.emit(
                indent,
                f"ob('{label} bound pickled', lambda: in_thread(pickle.loads(pickle.dumps(backends.bind(flags_now)))))",
            )

    def phased_threads(self, indent: int, label: str) -> None:
        """Two or three threads alive at once, each keeping its scopes across the phases in
        which the others act (barrier-stepped: one thread acts per phase)."""
        rng = self.rng
        count = rng.randint(2, 3)
        phases = count * rng.randint(2, 3)
        names = []
        for i in range(count):
            name = f"phase{label[1:]}_{i}"
            names.append(name)
            ctx = _Context("phase")
            self.emit(indent, f"def {name}(ph):")
            mine = [p for p in range(phases) if p % count == i]
            for n, p in enumerate(mine):
                self.emit(indent + 1, f"{'if' if n == 0 else 'elif'} ph == {p}:")
                self.emit(indent + 2, f"ob('{label} thread {i} phase {p}', lambda: {self.read_expr()})")
                for _ in range(rng.randint(1, 3)):
                    self.simple(indent + 2, ctx)
        self.emit(indent, f"with catch('{label} phased'):")
        self.emit(indent + 1, f"phased({', '.join(names)}, phases={phases})")


def generate(seed: int, count: int) -> list[str]:
    """``count`` programs from ``seed`` (the same ones on every run and Python)."""
    rng = random.Random(seed)
    return [_Program(random.Random(rng.getrandbits(64))).source() for _ in range(count)]


# -- the runner ------------------------------------------------------------------------------


def flags_now() -> tuple[object, ...]:
    """The four flags most programs read, here and now (module level: it pickles)."""
    import backends

    return (
        backends.cudnn.deterministic,
        backends.cuda.matmul.allow_tf32,
        backends.cudnn.benchmark_limit,
        backends.cuda.matmul.fp32_precision,
    )


def _run(sources: list[str]) -> dict[str, object]:
    import asyncio
    import contextvars
    import copy
    import functools
    import json  # noqa: F401  (kept beside the others: the programs' namespace lists what they may use)
    import pickle
    import re
    import sys
    import threading
    import warnings
    import weakref

    import backends

    address = re.compile(r"0x[0-9a-fA-F]+")
    log: list[list[str]] = []

    def show(value: object) -> str:
        if isinstance(value, (list, tuple)):
            inner = ", ".join(show(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        return address.sub("0x?", f"{type(value).__name__}:{value!r}")

    def failure(error: BaseException) -> list[str]:
        return [
            type(error).__name__,
            address.sub("0x?", str(error)),
            type(error.__context__).__name__,
            type(error.__cause__).__name__,
        ]

    def ob(label: str, thunk: object) -> None:
        try:
            value = thunk()  # type: ignore[operator]
        except Exception as error:
            log.append([label, "raised", *failure(error)])
        else:
            log.append([label, show(value)])

    def rec(label: str, value: object) -> None:
        log.append([label, show(value)])

    class catch:  # lower case: used like a function in the programs
        def __init__(self, label: str) -> None:
            self.label = label

        def __enter__(self) -> None:
            pass

        def __exit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
            if error is None:
                log.append([self.label, "ok"])
                return False
            log.append([self.label, "raised", *failure(error)])
            return isinstance(error, (Exception, asyncio.CancelledError))

    class Boom(Exception):
        pass

    def in_thread(fn: object) -> object:
        outcome: list[object] = []

        def target() -> None:
            try:
                outcome.append(("value", fn()))  # type: ignore[operator]
            except BaseException as error:
                outcome.append(("error", error))

        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
        kind, value = outcome[0]
        if kind == "error":
            raise value  # type: ignore[misc]
        return value

    def phased(*bodies: object, phases: int) -> None:
        barrier = threading.Barrier(len(bodies))
        problems: list[BaseException] = []

        def target(index: int, body: object) -> None:
            try:
                for phase in range(phases):
                    if phase % len(bodies) == index:
                        body(phase)  # type: ignore[operator]
                    barrier.wait()
            except threading.BrokenBarrierError:
                pass
            except BaseException as error:
                problems.append(error)
                barrier.abort()

        threads = [threading.Thread(target=target, args=(i, b)) for i, b in enumerate(bodies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if problems:
            raise problems[0]

    def unraisable(info: object) -> None:
        log.append(["unraisable", type(info.exc_value).__name__, address.sub("0x?", str(info.exc_value))])  # type: ignore[attr-defined]

    sys.unraisablehook = unraisable
    programs: list[list[list[str]]] = []
    for source in sources:
        log = []
        namespace = {
            "backends": backends, "asyncio": asyncio, "copy": copy, "pickle": pickle, "ob": ob, "rec": rec,
            "catch": catch, "Boom": Boom, "in_thread": in_thread, "phased": phased, "flags_now": flags_now,
            "contextvars": contextvars, "functools": functools, "weakref": weakref,
        }  # fmt: skip
        code = compile(source, "<program>", "exec")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                contextvars.Context().run(exec, code, namespace)
            except BaseException as error:
                log.append(["program aborted", *failure(error)])
            namespace.clear()
        log.extend(["warning", w.category.__name__, address.sub("0x?", str(w.message))] for w in caught)
        log.append(["threads left", str(threading.active_count())])
        backends.reset_defaults()
        backends.enable_global_flags()
        programs.append(log)
    return {"engine": _engine_facts(), "programs": programs}


def _engine_facts() -> dict[str, object]:
    """Which engine this process used, as seen from outside the programs."""
    import types

    import backends
    import backends.integrations.asyncio as integration
    from backends._engine import accelerator

    return {
        "file": backends.__file__,
        "ACCELERATED": accelerator.ACCELERATED,
        "describe": accelerator.describe(),
        # the reference __enter__ is a Python function; the accelerator's is its C base class's
        "enter is a Python function": isinstance(backends.Scope.__enter__, types.FunctionType),
        "stepper base": [cls.__name__ for cls in integration.synced.__mro__[1:2]],
    }


if __name__ == "__main__":
    import json
    import sys

    with open(sys.argv[1], encoding="utf-8") as file:
        result = _run(json.load(file))
    with open(sys.argv[2], "w", encoding="utf-8") as file:
        json.dump(result, file)
