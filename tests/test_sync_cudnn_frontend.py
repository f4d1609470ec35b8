"""The cuDNN frontend target, against the stand-in frontend package (tests/standin/cudnn)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

import backends
from tests.standin_fixture import STANDIN


@pytest.fixture
def frontend() -> Iterator[ModuleType]:
    sys.path.insert(0, str(STANDIN))
    sys.modules.pop("cudnn", None)
    try:
        import cudnn

        yield cudnn
    finally:
        sys.modules.pop("cudnn", None)
        sys.path.remove(str(STANDIN))


def _plans(cudnn: ModuleType, io: object) -> list[str]:
    graph = cudnn.pygraph(io_data_type=io)
    graph.build()
    return [plan.name for plan in graph.plans]


def test_default_flags_keep_every_plan(frontend: ModuleType) -> None:
    # cudnn.allow_tf32 defaults to True, as in torch: tensor-core plans stay.
    assert _plans(frontend, frontend.data_type.FLOAT) == ["deterministic-ieee", "atomics", "tensor-core"]


def test_deterministic_drops_nondeterministic_plans(frontend: ModuleType) -> None:
    with backends.cudnn.flags(deterministic=True):
        assert _plans(frontend, frontend.data_type.FLOAT) == ["deterministic-ieee", "tensor-core"]


def test_no_tf32_drops_tensor_core_plans_for_float32_only(frontend: ModuleType) -> None:
    with backends.cudnn.tf32(False):
        assert _plans(frontend, frontend.data_type.FLOAT) == ["deterministic-ieee", "atomics"]
        assert _plans(frontend, frontend.data_type.HALF) == ["deterministic-ieee", "atomics", "tensor-core"]


def test_deterministic_preset_leaves_only_ieee_deterministic_plans(frontend: ModuleType) -> None:
    with backends.deterministic():
        assert _plans(frontend, frontend.data_type.FLOAT) == ["deterministic-ieee"]


def test_disabled_cudnn_refuses_build_and_execute(frontend: ModuleType) -> None:
    graph = frontend.pygraph(io_data_type=frontend.data_type.FLOAT)
    with backends.cudnn.flags(enabled=False):
        with pytest.raises(RuntimeError, match=r"backends\.cudnn\.enabled is False"):
            graph.build()
        with pytest.raises(RuntimeError, match=r"execute\(\) called while backends\.cudnn\.enabled"):
            graph.execute({})
    graph.build()
    graph.execute({})
    assert graph.executed == 1


def test_wrappers_keep_names_and_docs(frontend: ModuleType) -> None:
    assert frontend.pygraph.create_execution_plans.__name__ == "create_execution_plans"
    assert "Rank the plans" in (frontend.pygraph.create_execution_plans.__doc__ or "")
