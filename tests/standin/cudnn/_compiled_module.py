"""Stand-in for the frontend's compiled extension (``cudnn._compiled_module``).

The enums with the real values (1.23 and 1.32 agree on all used here), the C++ graph
that both releases end up driving (``_CppGraph``: validate, build the operation graph,
create execution plans, bar plans by numerical note, check support, build, execute),
and the pybind11 ``pygraph`` of 1.23 and older. Plans are fake: every graph gets the
four engines of ``ENGINES``, ranked in that order.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Any, NamedTuple


class data_type(enum.IntEnum):
    NOT_SET = 0
    FLOAT = 1
    DOUBLE = 2
    HALF = 3
    INT8 = 4
    INT32 = 5
    BFLOAT16 = 10


class numerical_note(enum.IntEnum):
    TENSOR_CORE = 1
    DOWN_CONVERT_INPUTS = 2
    REDUCED_PRECISION_REDUCTION = 3
    FFT = 4
    NONDETERMINISTIC = 5


class heur_mode(enum.IntEnum):
    A = 0
    B = 1
    FALLBACK = 2


class build_plan_policy(enum.IntEnum):
    HEURISTICS_CHOICE = 0
    ALL = 1


class cudnnGraphNotSupportedError(Exception):
    pass


class Engine(NamedTuple):
    name: str
    notes: frozenset[numerical_note]


# Ranked fastest first, so each filter shows in which engine gets built. On a float32 graph
# TENSOR_CORE with DOWN_CONVERT_INPUTS is TF32; on a half graph it is fp16/bf16 tensor-core
# math (cuDNN gives both notes there too), which allow_tf32 must leave alone.
_TF32 = frozenset({numerical_note.TENSOR_CORE, numerical_note.DOWN_CONVERT_INPUTS})
ENGINES = (
    Engine("tensor-core-atomics", _TF32 | {numerical_note.NONDETERMINISTIC}),
    Engine("tensor-core", _TF32),
    Engine("atomics", frozenset({numerical_note.NONDETERMINISTIC})),
    Engine("ieee", frozenset()),
)


class Run(NamedTuple):
    graph: str
    engine: str
    thread: int


class _Recorder:
    """What was built and executed (stand-in only)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.built: list[Run] = []
        self.executed: list[Run] = []

    def reset(self) -> None:
        with self.lock:
            self.built.clear()
            self.executed.clear()

    def add(self, into: list[Run], graph: str, engine: str) -> None:
        with self.lock:
            into.append(Run(graph, engine, threading.get_ident()))


RECORDER = _Recorder()


def backend_version() -> int:
    return 92800


class _CppGraph:
    """``cudnn_frontend::graph::Graph``: the steps, in the order cuDNN requires them."""

    def __init__(self, name: str, io: Any, intermediate: Any, compute: Any) -> None:
        self.name = name
        self.context = {"io_data_type": io, "intermediate_data_type": intermediate, "compute_data_type": compute}
        self.validated = self.operation_graph = False
        self.candidates: list[Engine] = []
        self.barred: set[int] = set()
        self.built: Engine | None = None

    def validate(self) -> None:
        self.validated = True

    def build_operation_graph(self) -> None:
        if not self.validated:
            raise RuntimeError("build_operation_graph() before validate()")
        self.operation_graph = True

    def create_execution_plans(self, modes: list[Any]) -> None:
        if not self.operation_graph:
            raise RuntimeError("create_execution_plans() before build_operation_graph()")
        self.candidates.extend(ENGINES)  # a second call appends, as in C++

    def deselect_numeric_notes(self, notes: list[Any]) -> None:
        self.barred |= {i for i, engine in enumerate(self.candidates) if engine.notes & set(notes)}

    def allowed(self) -> list[Engine]:
        return [engine for i, engine in enumerate(self.candidates) if i not in self.barred]

    def check_support(self) -> None:
        if not self.allowed():
            raise cudnnGraphNotSupportedError("No valid engine configs")

    def build_plans(self, policy: Any = build_plan_policy.HEURISTICS_CHOICE) -> None:
        allowed = self.allowed()
        if not allowed:
            raise cudnnGraphNotSupportedError("No valid execution plans built.")
        self.built = allowed[0]
        RECORDER.add(RECORDER.built, self.name, self.built.name)

    def execute(self) -> None:
        if self.built is None:
            raise RuntimeError("execute() before build_plans()")
        RECORDER.add(RECORDER.executed, self.name, self.built.name)


class _method:
    """A pybind11 method (``instancemethod``): not a Python function, and its body calls
    the C++ graph directly, so replacing another method on the class does not reach it."""

    def __init__(self, name: str, body: Callable[..., Any]) -> None:
        self.__name__ = self.__qualname__ = name
        self.__doc__ = f"{name}(self: cudnn._compiled_module.pygraph, *args) -> None"
        self._body = body

    def __get__(self, graph: Any, owner: type | None = None) -> Any:
        if graph is None:
            return self
        return lambda *args, **kwargs: self._body(graph, *args, **kwargs)

    def __call__(self, graph: Any, *args: Any, **kwargs: Any) -> Any:
        return self._body(graph, *args, **kwargs)


def _build(graph: pygraph, *args: Any) -> None:
    """``PyGraph::build``: two C++ overloads, positional only."""
    cpp = graph._cpp
    if len(args) > 1 or (args and not isinstance(args[0], list)):
        raise TypeError("build(): incompatible function arguments")
    cpp.validate()
    cpp.build_operation_graph()
    if args:  # build(modes): the full sequence, in C++ (pygraph.cpp PyGraph::build)
        cpp.create_execution_plans(args[0])
        cpp.check_support()
        cpp.build_plans(build_plan_policy.HEURISTICS_CHOICE)


class pygraph:
    """The pybind11 graph of frontend 1.23: no ``context`` attribute, no instance
    ``__dict__`` (setting an attribute raises ``AttributeError``), weak-referenceable."""

    __slots__ = ("__weakref__", "_cpp")

    def __init__(
        self, name: str = "test_graph", io_data_type: Any = data_type.NOT_SET,
        intermediate_data_type: Any = data_type.NOT_SET, compute_data_type: Any = data_type.NOT_SET,
        handle: Any = None, sm_count: Any = None, sm_version: Any = None, kernel_cache: Any = None,
        device_property: Any = None, is_dynamic_shape_enabled: bool = False, is_override_shape_enabled: bool = False,
    ) -> None:  # fmt: skip
        self._cpp = _CppGraph(name, io_data_type, intermediate_data_type, compute_data_type)

    validate = _method("validate", lambda graph: graph._cpp.validate())
    build_operation_graph = _method("build_operation_graph", lambda graph: graph._cpp.build_operation_graph())
    create_execution_plans = _method(
        "create_execution_plans", lambda graph, modes: graph._cpp.create_execution_plans(modes)
    )
    deselect_numeric_notes = _method(
        "deselect_numeric_notes", lambda graph, notes: graph._cpp.deselect_numeric_notes(notes)
    )
    check_support = _method("check_support", lambda graph: graph._cpp.check_support())
    build_plans = _method(
        "build_plans",
        lambda graph, policy=build_plan_policy.HEURISTICS_CHOICE: graph._cpp.build_plans(policy),
    )
    build = _method("build", _build)
    _execute = _method("_execute", lambda graph, var_pack, workspace, handle, *rest: graph._cpp.execute())
    _execute_plan_at_index = _method(
        "_execute_plan_at_index", lambda graph, var_pack, workspace, index, handle, *rest: graph._cpp.execute()
    )
    get_execution_plan_count = _method("get_execution_plan_count", lambda graph: len(graph._cpp.candidates))
    get_plan_name_at_index = _method("get_plan_name_at_index", lambda graph, index: graph._cpp.candidates[index].name)
