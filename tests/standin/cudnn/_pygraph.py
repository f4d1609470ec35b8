"""Stand-in for frontend 1.32's pure-Python graph (``cudnn._pygraph``).

As in 1.32: ``context`` (a ``GraphContext`` whose intermediate and compute types default
to the I/O type), one-shot ``create_execution_plans``, note filters recorded and applied
when ``build_plans`` walks the ranked list, and ``build`` / ``build_plans`` / ``execute``
that reach ``create_execution_plans`` through the instance (a Python attribute lookup).
The plans come from the C++ graph of ``_compiled_module``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._compiled_module import _CppGraph, build_plan_policy
from .datatypes import _library_type


@dataclass
class GraphContext:
    """Graph-level configuration defaults."""

    io_data_type: Any = None
    intermediate_data_type: Any = None
    compute_data_type: Any = None


class pygraph:
    """Pure Python graph representation."""

    def __init__(
        self, name: str = "test_graph", io_data_type: Any = None, intermediate_data_type: Any = None,
        compute_data_type: Any = None, handle: Any = None, sm_count: Any = None, sm_version: Any = None,
        kernel_cache: Any = None, device_property: Any = None, is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False, cuda_graph_retention: Any = None, *,
        is_cuda_graph_replay_expected: bool = False, **kwargs: Any,
    ) -> None:  # fmt: skip
        self._context = GraphContext(io_data_type, intermediate_data_type or io_data_type,
                                     compute_data_type or io_data_type)  # fmt: skip
        # As 1.32: the context keeps the types as given (a torch dtype too); lowering converts them.
        lowered = [None if t is None else _library_type(t) for t in (io_data_type, intermediate_data_type,
                                                                     compute_data_type)]  # fmt: skip
        self._lowered_graph = _CppGraph(name, *lowered)
        self._is_validated = self._planning_done = self._is_built = False

    @property
    def context(self) -> GraphContext:
        """Graph context."""
        return self._context

    @property
    def plans(self) -> list[Any]:
        """The ranked plan list from create_execution_plans()."""
        return list(self._lowered_graph.candidates)

    def validate(self) -> None:
        """Validate graph and infer properties."""
        self._lowered_graph.validate()
        self._is_validated = True

    def build_operation_graph(self) -> None:
        """Validate the graph; lower to C++."""
        if not self._is_validated:
            self.validate()
        if not self._lowered_graph.operation_graph:
            self._lowered_graph.build_operation_graph()

    def create_execution_plans(self, heuristics: list[Any] | None = None) -> None:
        """Build the ranked execution-plan list (the dispatch stage)."""
        if not self._is_validated:
            self.validate()
        if self._planning_done:
            raise RuntimeError("create_execution_plans() was already called on this graph; planning is one-shot")
        self.build_operation_graph()
        self._lowered_graph.create_execution_plans(heuristics or [])
        self._planning_done = True

    def deselect_numeric_notes(self, notes: list[Any]) -> pygraph:
        """Classic: exclude plans carrying any of ``notes``."""
        self._lowered_graph.deselect_numeric_notes(list(notes))
        self._is_built = False
        return self

    def check_support(self) -> None:
        """Check that the graph can be served."""
        self._lowered_graph.check_support()

    def build_plans(self, *args: Any, ctx: Any = None, **kwargs: Any) -> None:
        """Walk the ranked plan list and finalize the first entry that builds."""
        if not self._planning_done:
            self.create_execution_plans()
        self._lowered_graph.build_plans(kwargs.get("policy", args[0] if args else build_plan_policy.HEURISTICS_CHOICE))
        self._is_built = True

    def build(self, heuristics: list[Any] | None = None, ctx: Any = None) -> None:
        """Convenience: validate -> build_operation_graph -> create_execution_plans
        -> check_support -> build_plans, in sequence."""
        if not self._is_validated:
            self.validate()
        self.build_operation_graph()
        if not self._planning_done:
            self.create_execution_plans(heuristics)
        self.check_support()
        self.build_plans(ctx=ctx)

    def execute(self, tensor_dict: Any, workspace: Any = None, handle: Any = None, override_uids: Any = None,
                override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        """Execute the selected plan. Automatically calls build() if it hasn't run yet."""
        if not self._is_built:
            if not self._planning_done:
                self.create_execution_plans()
            self.build()
        self._lowered_graph.execute()

    def execute_plan_at_index(self, tensor_dict: Any, workspace: Any = None, index: int = 0, handle: Any = None,
                              *args: Any, tensor_uids: Any = None, **kwargs: Any) -> None:
        """Execute one ranked plan without changing the graph's selected plan."""
        self._lowered_graph.execute()

    def get_execution_plan_count(self) -> int:
        return len(self._lowered_graph.candidates)

    def get_plan_name_at_index(self, index: int) -> str:
        return self._lowered_graph.candidates[index].name
