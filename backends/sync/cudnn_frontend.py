"""cuDNN through NVIDIA's cuDNN frontend Python package (import name ``cudnn``).

A frontend graph ranks its execution plans in ``pygraph.create_execution_plans``
(also reached from ``pygraph.build``). Right after it, the launching context's
flags filter the plans with the frontend's own notes:

* ``cudnn.deterministic`` True: plans with the ``NONDETERMINISTIC`` numerical note
  are dropped;
* ``cudnn.allow_tf32`` False, on a graph whose compute type is float32: plans with
  the ``TENSOR_CORE`` or ``DOWN_CONVERT_INPUTS`` note (TF32 for float32) are dropped;
* ``cudnn.enabled`` False: ``build`` and ``execute`` raise ``RuntimeError``.

``cudnn.benchmark`` and ``benchmark_limit`` have no knob here: autotuning a frontend
graph needs the caller's buffers, so it stays the caller's call.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .._engine.state import read

MODULE = "cudnn"


def _drop_plans(module: ModuleType, graph: Any) -> None:
    notes = module.numerical_note
    if read("cudnn.deterministic"):
        graph.deselect_numeric_notes([notes.NONDETERMINISTIC])
    context = getattr(graph, "context", None)
    if not read("cudnn.allow_tf32") and getattr(context, "compute_data_type", None) == module.data_type.FLOAT:
        graph.deselect_numeric_notes([notes.TENSOR_CORE, notes.DOWN_CONVERT_INPUTS])


def _refuse_when_disabled(name: str) -> None:
    if not read("cudnn.enabled"):
        raise RuntimeError(f"cudnn.pygraph.{name}() called while backends.cudnn.enabled is False")


def install(module: ModuleType) -> None:
    graph_class = getattr(module, "pygraph", None)
    if graph_class is None:
        return
    plan = getattr(graph_class.create_execution_plans, "__backends_wrapped__", graph_class.create_execution_plans)

    @functools.wraps(plan)
    def create_execution_plans(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = plan(self, *args, **kwargs)
        _drop_plans(module, self)
        return result

    create_execution_plans.__backends_wrapped__ = plan  # type: ignore[attr-defined]
    graph_class.create_execution_plans = create_execution_plans
    for name in ("build", "execute"):
        original = getattr(graph_class, name, None)
        if original is None:
            continue
        original = getattr(original, "__backends_wrapped__", original)
        graph_class_method = _guarded(name, original)
        setattr(graph_class, name, graph_class_method)


def _guarded(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_when_disabled(name)
        return original(self, *args, **kwargs)

    method.__backends_wrapped__ = original  # type: ignore[attr-defined]
    return method


def sync() -> None:
    """Nothing to push ahead of time: the flags apply when plans are made."""
