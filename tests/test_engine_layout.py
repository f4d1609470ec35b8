"""The house reads as it is: the engine's modules import one another without a circle, and the
integrations package says which integrations it holds."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests._helpers import PACKAGE

ENGINE = PACKAGE / "_engine"


def engine_imports(module: str) -> set[str]:
    """The engine modules that ``backends._engine.<module>`` imports, at the top or inside a function
    (``from .x import y``, ``from . import x``, ``from backends._engine.x import y``)."""
    tree = ast.parse((ENGINE / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                parts = [node.module] if node.module else [alias.name for alias in node.names]
            elif node.level == 0 and (node.module or "").startswith("backends._engine."):
                parts = [(node.module or "").split(".")[2]]
            else:
                continue
            found |= {part.split(".")[0] for part in parts}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("backends._engine.")}
    return found & MODULES


MODULES = {path.stem for path in ENGINE.glob("*.py") if path.stem != "__init__"}


def cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path of imports from ``start`` back to itself, or ``None``."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        module, path = stack.pop()
        for imported in sorted(graph[module]):
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_the_parser_sees_the_imports_it_is_meant_to_see() -> None:
    # A check of the check: the table imports the wording, the state imports the table.
    assert "wording" in engine_imports("table")
    assert {"table", "errors", "environment"} <= engine_imports("state")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_engine_module_imports_itself_through_others(module: str) -> None:
    graph = {name: engine_imports(name) for name in MODULES}
    cycle = cycle_from(module, graph)
    assert cycle is None, "an import circle in backends/_engine: " + " -> ".join(cycle or [])


def test_the_wording_is_at_the_bottom_of_the_engine() -> None:
    assert engine_imports("wording") == set()
    assert engine_imports("table") == {"record", "wording"}


def test_the_integrations_package_names_each_integration_it_holds() -> None:
    package = importlib.import_module("backends.integrations")
    doc = package.__doc__ or ""
    held = sorted(p.stem for p in (PACKAGE / "integrations").glob("*.py") if p.stem != "__init__")
    assert held == ["asyncio", "dask", "executors", "pytest_plugin", "ray", "trio"]
    for name in held:
        assert f"``{name}``" in doc, f"backends.integrations' docstring does not name {name}"
    assert "to come" not in doc
    # Each engine's integration knows only its engine.
    ray_source = (PACKAGE / "integrations" / "ray.py").read_text(encoding="utf-8")
    dask_source = (PACKAGE / "integrations" / "dask.py").read_text(encoding="utf-8")
    assert "import dask" not in ray_source and "distributed" not in ray_source
    assert "import ray" not in dask_source


def test_the_public_namespaces_have_one_module_and_the_base_class_another() -> None:
    from backends import _public_namespaces
    from backends._engine.namespace import Namespace

    assert isinstance(_public_namespaces.cudnn, Namespace)
    assert type(_public_namespaces.cudnn).__module__ == "backends._public_namespaces"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("backends._namespaces")
