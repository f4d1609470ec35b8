"""A real notebook, run by nbclient in a real ipykernel: the cells of docs/notebooks.md in order, then
cells that define a function, a coroutine function, a generator function, an async generator function
and a class with methods, each decorated with a scope, and send them (and ``backends.bind`` of them)
to a Dask ``LocalCluster`` with a worker process and to a local Ray, where each runs with its own pin
and the flags of the cell that sent it. Slow (a kernel, a cluster and Ray start): CI runs it."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import backends
from tests._dev_tools import import_extra, import_ray
from tests._main_cell import CELL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOC_CELL = re.compile(r"^```py\n(.*?)^```", re.S | re.M)

#: After CELL: each decorated kind on Dask, then on Ray, each printed as JSON for the test to read.
ON_DASK = """
import json

from distributed import Client, LocalCluster

from backends.integrations import dask as backends_dask


def listed(bound, count):
    return list(bound(count))


with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address="127.0.0.1:0") as cluster:
    with Client(cluster) as client:
        with backends.cudnn.flags(benchmark=True):
            futures = [
                backends_dask.submit(client, pinned, "submit"),
                backends_dask.submit(client, pinned_async, "async submit"),
                *backends_dask.map(client, pinned, ["map"]),
                backends_dask.submit(client, Model(2).predict, 3),
                client.submit(pinned, "dask alone"),
                client.submit(backends.bind(unpinned), "bound"),
                client.submit(listed, backends.bind(pinned_numbers), 2),  # a generator, bound: run on the worker
            ]
            (computed,) = backends_dask.compute(dask.delayed(pinned)("compute"))
        results = client.gather(futures)
print(json.dumps({"dask": [*results, computed], "accelerated": backends._engine.ACCELERATED}))
"""
ON_RAY = """
import json

import ray

from backends.integrations import ray as backends_ray


def collected(count):  # an async generator, consumed in a task
    async def collect():
        return [item async for item in pinned_async_numbers(count)]

    return asyncio.run(collect())


ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
try:
    with backends.cudnn.flags(benchmark=True):
        model = backends_ray.remote(Model).remote(2)
        refs = [
            backends_ray.remote(pinned).remote("remote"),
            model.predict.remote(3),
            model.predict_async.remote(4),
            ray.remote(pinned).remote("ray alone"),
            backends_ray.remote(collected).remote(2),
        ]
        streamed = backends_ray.remote(pinned_numbers).options(num_returns="streaming").remote(2)
    results = [*ray.get(refs), [ray.get(ref) for ref in streamed]]
finally:
    ray.shutdown()
print(json.dumps({"ray": results}))
"""


def doc_cells() -> list[str]:
    return DOC_CELL.findall((ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def kernel_spec(where: Path) -> str:
    """A kernel of this interpreter (whatever "python3" names elsewhere on this machine)."""
    name = "backends-test"
    spec = where / "kernels" / name
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": name, "language": "python"}))
    return name


def printed(cell: Any) -> str:
    return "".join(output.get("text", "") for output in cell.get("outputs", []) if output.get("name") == "stdout")


def test_a_notebooks_decorated_functions_run_on_dask_and_ray_workers(tmp_path: Path, monkeypatch: Any) -> None:
    nbformat = pytest.importorskip("nbformat", reason="needs nbformat (pip install --group notebook)")
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient (pip install --group notebook)")
    pytest.importorskip("ipykernel", reason="needs ipykernel (pip install --group notebook)")
    import_extra("distributed", "dask")
    import_ray()

    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("JUPYTER_PATH")])))
    documented = doc_cells()
    assert len(documented) >= 8, "docs/notebooks.md has lost its cells"
    cells = [*documented, "import dask\n" + CELL, ON_DASK, ON_RAY]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name=kernel_spec(tmp_path), resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, naming the cell and its traceback, if a cell fails

    report: dict[str, Any] = {}
    for cell in notebook.cells[-2:]:
        report.update(json.loads(printed(cell).strip().splitlines()[-1]))
    pin, alone = [True, True], [True, False]  # (deterministic, benchmark): its pin and the cell's, its pin only
    numbers = [[0, pin], [1, pin]]
    assert report["dask"] == [
        ["submit", pin], ["async submit", pin], ["map", pin], [6, pin], ["dask alone", alone],
        ["bound", [False, True]], numbers, ["compute", pin],
    ]  # fmt: skip
    assert report["ray"] == [["remote", pin], [6, pin], [8, pin], ["ray alone", alone], numbers, numbers]
    assert report["accelerated"] is backends._engine.ACCELERATED  # the kernel ran this process's engine
