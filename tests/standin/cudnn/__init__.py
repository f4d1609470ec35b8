"""Stand-in for NVIDIA's cuDNN frontend Python package (import name ``cudnn``, 1.x).

Only what the sync layer touches: ``pygraph`` with a ``context``,
``create_execution_plans`` (also reached from ``build``), ``deselect_numeric_notes``
and ``execute``, and the ``numerical_note`` and ``data_type`` enums. Plans are
fake: three engines, one nondeterministic and one using tensor cores.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple


class data_type(enum.Enum):
    FLOAT = 0
    DOUBLE = 1
    HALF = 2
    BFLOAT16 = 9


class numerical_note(enum.Enum):
    TENSOR_CORE = 0
    DOWN_CONVERT_INPUTS = 1
    REDUCED_PRECISION_REDUCTION = 2
    FFT = 3
    NONDETERMINISTIC = 4


class Plan(NamedTuple):
    name: str
    notes: frozenset[numerical_note]


ALL_PLANS = (
    Plan("deterministic-ieee", frozenset()),
    Plan("atomics", frozenset({numerical_note.NONDETERMINISTIC})),
    Plan("tensor-core", frozenset({numerical_note.TENSOR_CORE, numerical_note.DOWN_CONVERT_INPUTS})),
)


class GraphContext(NamedTuple):
    io_data_type: Any
    intermediate_data_type: Any
    compute_data_type: Any


class pygraph:
    def __init__(self, name: str = "test_graph", io_data_type: Any = None, intermediate_data_type: Any = None,
                 compute_data_type: Any = None, handle: Any = None) -> None:
        self.context = GraphContext(io_data_type, intermediate_data_type or io_data_type,
                                    compute_data_type or io_data_type)
        self.plans: list[Plan] = []
        self.executed = 0

    def create_execution_plans(self, heuristics: Any = None) -> None:
        """Rank the plans (here: all three)."""
        self.plans = list(ALL_PLANS)

    def deselect_numeric_notes(self, notes: list[Any]) -> pygraph:
        """Drop plans carrying any of ``notes``."""
        self.plans = [plan for plan in self.plans if not plan.notes & set(notes)]
        return self

    def build(self, heuristics: Any = None, ctx: Any = None) -> None:
        self.create_execution_plans(heuristics)

    def execute(self, tensor_dict: Any, workspace: Any = None, handle: Any = None) -> None:
        self.executed += 1


def backend_version() -> int:
    return 90100
