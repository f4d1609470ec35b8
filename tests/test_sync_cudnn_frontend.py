"""The cuDNN frontend target, against the stand-in frontend package (``tests/standin/cudnn``),
as release 1.23 (pybind11 ``pygraph``) and as 1.32 (pure-Python ``pygraph``).

What a user can observe is which engine a graph builds and runs: the stand-in ranks four
engines fastest first (``tensor-core-atomics``, ``tensor-core``, ``atomics``, ``ieee``) and
records what was built and executed.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import backends
from backends.sync import cudnn_frontend, hooks, wrapping
from tests.standin_fixture import STANDIN

VERSIONS = ("1.23", "1.32")


def _forget_cudnn() -> None:
    for name in [name for name in sys.modules if name == "cudnn" or name.startswith("cudnn.")]:
        del sys.modules[name]


@pytest.fixture(params=VERSIONS)
def frontend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The stand-in frontend as the release ``request.param``, freshly imported (and so wrapped)."""
    monkeypatch.setenv("STANDIN_CUDNN_FRONTEND", request.param)
    sys.path.insert(0, str(STANDIN))
    _forget_cudnn()
    try:
        import cudnn

        assert cudnn.__version__ == request.param + ".0"
        yield cudnn
    finally:
        _forget_cudnn()
        sys.path.remove(str(STANDIN))


def graph(cudnn: ModuleType, io: str | None, compute: str | None = None) -> Any:
    types = cudnn.data_type
    kwargs = {"io_data_type": getattr(types, io)} if io else {}
    if compute:
        kwargs["compute_data_type"] = getattr(types, compute)
    return cudnn.pygraph(**kwargs)


def by_build(g: Any, cudnn: ModuleType) -> None:
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


def by_steps(g: Any, cudnn: ModuleType) -> None:
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.check_support()
    g.build_plans()


def built(cudnn: ModuleType, make: Callable[[], Any], how: Callable[[Any, ModuleType], None] = by_build) -> str:
    """The engine that building a graph from ``make()`` the way ``how`` does chose."""
    how(make(), cudnn)
    return str(cudnn.RECORDER.built[-1].engine)


BUILDS = {"build(modes)": by_build, "step by step": by_steps}


# -- 8. deterministic and allow_tf32 hold for build(modes) on 1.23 and on 1.32 ------------------------


@pytest.mark.parametrize("how", BUILDS)
def test_default_flags_build_the_fastest_engine(frontend: ModuleType, how: str) -> None:
    # cudnn.allow_tf32 defaults to True, as in torch.
    assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "tensor-core-atomics"


@pytest.mark.parametrize("how", BUILDS)
def test_deterministic_drops_nondeterministic_engines(frontend: ModuleType, how: str) -> None:
    with backends.cudnn.flags(deterministic=True):
        assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "tensor-core"
        assert built(frontend, lambda: graph(frontend, "HALF", "FLOAT"), BUILDS[how]) == "tensor-core"


@pytest.mark.parametrize("how", BUILDS)
def test_algorithms_deterministic_drops_them_too_as_torch_convolutions_honour_either_flag(
    frontend: ModuleType, how: str
) -> None:
    with backends.algorithms.flags(deterministic=True):
        assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "tensor-core"
    with backends.cudnn.flags(deterministic=True), backends.algorithms.flags(deterministic=False):
        assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "tensor-core"
    assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "tensor-core-atomics"


@pytest.mark.parametrize("how", BUILDS)
def test_no_tf32_drops_tensor_core_engines_of_float32_graphs(frontend: ModuleType, how: str) -> None:
    with backends.cudnn.tf32(False):
        assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "atomics"
        assert built(frontend, lambda: graph(frontend, "FLOAT", "FLOAT"), BUILDS[how]) == "atomics"
    with backends.deterministic():
        assert built(frontend, lambda: graph(frontend, "FLOAT"), BUILDS[how]) == "ieee"


def test_the_flags_of_the_building_context_decide(frontend: ModuleType) -> None:
    g = graph(frontend, "FLOAT")
    with backends.cudnn.flags(deterministic=True):
        g.validate()  # the flags in force when the plans are made count, not those at construction
    by_build(g, frontend)
    assert frontend.RECORDER.built[-1].engine == "tensor-core-atomics"


def test_execute_builds_with_the_flags_on_1_32(frontend: ModuleType) -> None:
    if frontend.__version__ != "1.32.0":
        pytest.skip("only 1.32's execute() builds a graph that is not built")
    with backends.cudnn.flags(deterministic=True, allow_tf32=False):
        graph(frontend, "FLOAT").execute({})
    assert [run.engine for run in (frontend.RECORDER.built[-1], frontend.RECORDER.executed[-1])] == ["ieee"] * 2


def test_plain_build_on_1_23_still_only_validates(frontend: ModuleType) -> None:
    if frontend.__version__ != "1.23.0":
        pytest.skip("build() without modes is 1.23's validate + build_operation_graph")
    g = graph(frontend, "FLOAT")
    g.build()
    assert frontend.RECORDER.built == []
    with backends.cudnn.flags(deterministic=True):
        g.create_execution_plans([frontend.heur_mode.A])
        g.check_support()
        g.build_plans()
    assert frontend.RECORDER.built[-1].engine == "tensor-core"


# -- 9. the TF32 filter keys on float32 I/O, not on compute type FLOAT -------------------------------


@pytest.mark.parametrize("how", BUILDS)
@pytest.mark.parametrize("io", ["HALF", "BFLOAT16", "DOUBLE"])
def test_no_tf32_keeps_tensor_cores_of_other_graphs(frontend: ModuleType, how: str, io: str) -> None:
    # io HALF / BFLOAT16 with compute FLOAT is the normal half-precision graph.
    with backends.cudnn.tf32(False):
        assert built(frontend, lambda: graph(frontend, io, "FLOAT"), BUILDS[how]) == "tensor-core-atomics"
        assert built(frontend, lambda: graph(frontend, io), BUILDS[how]) == "tensor-core-atomics"


def test_no_tf32_on_a_graph_without_io_type_warns_once_and_filters_nothing(
    frontend: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wrapping, "warned", set())
    with backends.cudnn.tf32(False), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert built(frontend, lambda: graph(frontend, None, "FLOAT")) == "tensor-core-atomics"
        assert built(frontend, lambda: graph(frontend, None)) == "tensor-core-atomics"
    [warning] = caught
    assert warning.category is UserWarning
    assert "allow_tf32" in str(warning.message) and "io_data_type" in str(warning.message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert built(frontend, lambda: graph(frontend, None)) == "tensor-core-atomics"  # allow_tf32 True
    assert caught == []


def test_no_tf32_reads_a_framework_dtype_as_the_frontend_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.32 keeps io_data_type as given (torch.float32, say) and converts it only when lowering.
    monkeypatch.setenv("STANDIN_CUDNN_FRONTEND", "1.32")
    sys.path.insert(0, str(STANDIN))
    _forget_cudnn()
    try:
        import cudnn

        def torch_graph(name: str) -> Any:
            return cudnn.pygraph(io_data_type=cudnn.datatypes.TorchDtype(name))

        with backends.cudnn.tf32(False), warnings.catch_warnings():
            warnings.simplefilter("error")
            assert built(cudnn, lambda: torch_graph("float32")) == "atomics"
            assert built(cudnn, lambda: torch_graph("float16")) == "tensor-core-atomics"
    finally:
        _forget_cudnn()
        sys.path.remove(str(STANDIN))


def test_benchmark_warns_once_that_frontend_graphs_are_not_autotuned(
    frontend: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wrapping, "warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built(frontend, lambda: graph(frontend, "FLOAT"))  # benchmark False: nothing to say
        with backends.cudnn.flags(benchmark=True):
            assert built(frontend, lambda: graph(frontend, "FLOAT")) == "tensor-core-atomics"
            built(frontend, lambda: graph(frontend, "FLOAT"))
    [warning] = caught
    assert warning.category is UserWarning and "cudnn.benchmark" in str(warning.message)
    assert warning.filename == __file__  # pointed at the caller's build, not at backends


# -- cudnn.enabled -----------------------------------------------------------------------------------


def test_disabled_cudnn_refuses_build_and_execute(frontend: ModuleType) -> None:
    g = graph(frontend, "FLOAT")
    with backends.cudnn.flags(enabled=False):
        with pytest.raises(RuntimeError, match=r"build\(\) called while backends\.cudnn\.enabled is False"):
            by_build(g, frontend)
        for call in (lambda: g.execute({}, None), lambda: g.execute_plan_at_index({}, None, 0)):
            with pytest.raises(RuntimeError, match=r"execute(_plan_at_index)?\(\) called while backends\.cudnn"):
                call()
    assert frontend.RECORDER.built == frontend.RECORDER.executed == []
    by_build(g, frontend)
    g.execute({}, None)
    assert [run.engine for run in frontend.RECORDER.executed] == ["tensor-core-atomics"]


# -- the stand-in models each release, and the wrappers keep their faces ------------------------------


def test_the_stand_in_models_each_release(frontend: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the wrappers: 1.23's C++ build(modes) reaches no Python-level
    create_execution_plans and its graph has no context or __dict__; 1.32's does and has."""
    calls: list[object] = []
    plan = frontend.pygraph.create_execution_plans.__backends_wrapped__
    monkeypatch.setattr(frontend.pygraph, "create_execution_plans", lambda self, *a: calls.append(a) or plan(self, *a))
    g = graph(frontend, "FLOAT")
    frontend.pygraph.build.__backends_wrapped__(g, [frontend.heur_mode.A])  # the release's own build
    if frontend.__version__ == "1.23.0":
        assert calls == []
        assert not hasattr(g, "context")
        with pytest.raises(AttributeError):
            g.anything = 1
    else:
        assert len(calls) == 1
        assert g.context.io_data_type == g.context.compute_data_type == frontend.data_type.FLOAT


def test_wrappers_keep_names_and_docs(frontend: ModuleType) -> None:
    names = ["create_execution_plans", "build", "execute", "execute_plan_at_index"]
    if frontend.__version__ == "1.23.0":
        names.append("__init__")  # to learn the graph's I/O type, which a 1.23 graph does not tell
    for name in names:
        wrapper = getattr(frontend.pygraph, name)
        original = wrapper.__backends_wrapped__
        assert (wrapper.__name__, wrapper.__doc__) == (original.__name__, original.__doc__), name


def test_installing_twice_wraps_once(frontend: ModuleType) -> None:
    cudnn_frontend.install(frontend)
    with backends.cudnn.flags(deterministic=True):
        assert built(frontend, lambda: graph(frontend, "FLOAT")) == "tensor-core"
    assert not hasattr(frontend.pygraph.build.__backends_wrapped__, "__backends_wrapped__")


# -- 10b. a module that merely happens to be called cudnn is left alone -------------------------------


def test_an_unrelated_module_called_cudnn_is_not_touched(tmp_path: Path) -> None:
    package = tmp_path / "cudnn"
    package.mkdir()
    (package / "__init__.py").write_text(
        "class pygraph:\n"
        "    def build(self):\n        return 'theirs'\n"
        "    def execute(self):\n        return 'theirs'\n"
        "numerical_note = None\n"
    )
    failures = len(hooks.failures)
    sys.path.insert(0, str(tmp_path))
    _forget_cudnn()
    try:
        import cudnn

        assert not any(hasattr(value, "__backends_wrapped__") for value in vars(cudnn.pygraph).values())
        with backends.cudnn.flags(enabled=False):
            assert cudnn.pygraph().build() == "theirs"
    finally:
        _forget_cudnn()
        sys.path.remove(str(tmp_path))
    assert len(hooks.failures) == failures
