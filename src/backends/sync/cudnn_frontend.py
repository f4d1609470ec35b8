"""cuDNN through NVIDIA's cuDNN frontend Python package (import name ``cudnn``).

A frontend graph ranks its execution plans in ``create_execution_plans``; right after it,
the launching context's flags bar plans with the frontend's own numerical notes
(``deselect_numeric_notes``), which ``check_support`` and ``build_plans`` then respect:

* ``cudnn.deterministic`` or ``algorithms.deterministic`` True (torch's convolutions honour
  either): plans with the ``NONDETERMINISTIC`` note are barred;
* ``cudnn.allow_tf32`` False, on a graph whose I/O type is float32 (as in torch, TF32 is a
  float32 mode): plans with the ``TENSOR_CORE`` or ``DOWN_CONVERT_INPUTS`` note are barred.
  A half or bfloat16 graph (usually with compute type FLOAT) keeps its tensor-core plans.
  The I/O type is the ``io_data_type`` the graph was made with (a framework dtype such as
  ``torch.float32`` is converted by the frontend's own ``datatypes._library_type``); on a graph made without
  one the flag cannot be applied, and the first such build warns once (``UserWarning``);
* ``cudnn.enabled`` False: ``build``, ``execute`` and ``execute_plan_at_index`` raise
  ``RuntimeError``.

Where the flags act, by release:

* 1.32 (``pygraph`` is a Python class): ``build``, ``build_plans`` and ``execute`` reach
  ``create_execution_plans`` as an attribute, so wrapping it covers every path; the I/O
  type is ``graph.context.io_data_type``.
* 1.23 and older (``pygraph`` is a pybind11 class): C++ ``build(modes)`` calls C++
  ``create_execution_plans`` itself, so the wrapped ``build`` runs the same C++ steps
  from Python instead (``validate``, ``build_operation_graph``, ``create_execution_plans``,
  ``check_support``, ``build_plans(HEURISTICS_CHOICE)``, as ``PyGraph::build`` in
  ``python/pygraph/pygraph.cpp``). Such a graph has no ``context`` and no ``__dict__``, so
  the wrapped ``__init__`` records its ``io_data_type`` beside it (weakly).

Plans a caller picks itself (``create_execution_plan(engine_id, knobs)``, a deserialized
graph) are not filtered. ``cudnn.benchmark`` and ``benchmark_limit`` have no knob here:
autotuning a frontend graph needs the caller's buffers, so it stays the caller's call; the
first plan ranking under ``benchmark=True`` warns once (``UserWarning``). A
module called ``cudnn`` that is not NVIDIA's frontend is left alone.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import types
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._engine.state import read
from .wrapping import original, replace, warn_once

MODULE = "cudnn"

#: Names every frontend release has (1.23 and 1.32 checked), which together no other
#: ``cudnn`` module is likely to have.
_FRONTEND_NAMES = ("pygraph", "numerical_note", "data_type", "heur_mode", "build_plan_policy", "backend_version")
_NOTES = ("NONDETERMINISTIC", "TENSOR_CORE", "DOWN_CONVERT_INPUTS")

#: graph -> the io_data_type it was made with, for graphs that do not expose a context (<= 1.23)
_io_types: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def is_frontend(module: ModuleType) -> bool:
    """Whether ``module`` is NVIDIA's cuDNN frontend (not another module named ``cudnn``)."""
    notes = getattr(module, "numerical_note", None)
    return all(hasattr(module, name) for name in _FRONTEND_NAMES) and all(hasattr(notes, n) for n in _NOTES)


def _io_type(module: ModuleType, graph: Any) -> Any:
    """The graph's I/O type as a ``data_type`` (``None`` if unknown). A graph keeps the type
    as it was given, which may be a framework dtype (``torch.float32``): it is converted with
    the frontend's own ``datatypes._library_type``, as the frontend does when it lowers."""
    context = getattr(graph, "context", None)
    given = getattr(context, "io_data_type", None) if context is not None else _io_types.get(graph)
    if given is None or type(given) is module.data_type:
        return given
    try:
        return importlib.import_module(module.__name__ + ".datatypes")._library_type(given)
    except Exception:  # no such converter, or a type it cannot convert: unknown
        return None


def _warn_io_type_unknown() -> None:
    warn_once(
        "frontend io_data_type",
        "backends.cudnn.allow_tf32 is False, but a cuDNN frontend graph was made without an io_data_type "
        "backends can read, so it cannot tell whether the graph is float32: its TF32 plans are kept; pass "
        "io_data_type to cudnn.pygraph(...)",
        library=(MODULE,),
    )


def _drop_plans(module: ModuleType, graph: Any) -> None:
    notes = module.numerical_note
    if read("cudnn.deterministic") or read("algorithms.deterministic"):  # as torch: either flag
        graph.deselect_numeric_notes([notes.NONDETERMINISTIC])
    if read("cudnn.benchmark"):
        warn_once(
            "frontend benchmark",
            "backends.cudnn.benchmark is True, but a cuDNN frontend graph is not autotuned by backends: "
            "timing its plans needs the caller's buffers; the graph's plans keep the heuristics' order",
            library=(MODULE,),
        )
    if not read("cudnn.allow_tf32"):
        io = _io_type(module, graph)
        if io is None or io == getattr(module.data_type, "NOT_SET", None):
            _warn_io_type_unknown()
        elif io == module.data_type.FLOAT:
            graph.deselect_numeric_notes([notes.TENSOR_CORE, notes.DOWN_CONVERT_INPUTS])


def _refuse_when_disabled(name: str) -> None:
    if not read("cudnn.enabled"):
        raise RuntimeError(f"cudnn.pygraph.{name}() called while backends.cudnn.enabled is False")


def install(module: ModuleType) -> None:
    """Wrap ``module.pygraph`` if ``module`` is NVIDIA's frontend (see the module doc)."""
    if not is_frontend(module):
        return
    graph_class = module.pygraph

    def planned(plan: Any) -> Callable[..., Any]:
        def create_execution_plans(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = plan(self, *args, **kwargs)
            _drop_plans(module, self)
            return result

        return create_execution_plans

    replace(graph_class, "create_execution_plans", planned)
    # A Python build (1.32) calls the wrapper above; a C++ one (<= 1.23) does not, so it is run step by step.
    in_cpp = not isinstance(original(inspect.getattr_static(graph_class, "build", None)), types.FunctionType)
    replace(graph_class, "build", lambda build: _guarded("build", _build_in_steps(module, build) if in_cpp else build))
    for name in ("execute", "execute_plan_at_index"):
        replace(graph_class, name, functools.partial(_guarded, name))
    if inspect.getattr_static(graph_class, "context", None) is None:  # no context: remember the I/O type
        replace(graph_class, "__init__", _recording_io_type)


def _guarded(name: str, original: Any) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_when_disabled(name)
        return original(self, *args, **kwargs)

    return method


def _build_in_steps(module: ModuleType, build: Any) -> Callable[..., Any]:
    """``PyGraph::build(modes)`` of frontend <= 1.23, step by step from Python, so that the
    wrapped ``create_execution_plans`` runs. ``build()`` without modes only validates and
    builds the operation graph (no plans), so it is left to C++, as is any other call."""

    def build_steps(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            return build(self, *args, **kwargs)
        self.validate()
        self.build_operation_graph()
        self.create_execution_plans(args[0])
        self.check_support()
        self.build_plans(module.build_plan_policy.HEURISTICS_CHOICE)
        return None

    return build_steps


def _recording_io_type(init: Any) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # pygraph(name, io_data_type, intermediate_data_type, compute_data_type, ...), in 1.23 as in 1.32.
        # A graph that cannot be weakly referenced stays unknown rather than fail its construction.
        with contextlib.suppress(TypeError):
            _io_types[self] = kwargs.get("io_data_type", args[1] if len(args) > 1 else None)

    return __init__


def sync() -> None:
    """Nothing to push ahead of time: the flags apply when plans are made."""
