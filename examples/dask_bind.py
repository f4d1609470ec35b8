"""Carry the caller's flags into a Dask distributed worker process: backends.bind, and
backends.integrations.dask (submit, map, compute), which take the flags when the work is handed over.

    python examples/dask_bind.py
"""

from __future__ import annotations

import backends


def work(n: int) -> tuple[int, bool]:
    return n, backends.cudnn.deterministic


def main() -> None:
    try:
        import dask
        from distributed import Client, LocalCluster

        from backends.integrations import dask as backends_dask
    except ImportError:
        print("dask.distributed is not installed (pip install 'scoped-backends[dask]'): nothing to show")
        return
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster) as client:
        bound = backends.bind(work)  # the flags now, outside any scope
        with backends.cudnn.flags(deterministic=True):
            lost = client.submit(work, 1).result()  # the worker process has its own defaults
            kept = client.submit(backends.bind(work), 2).result()
            early = client.submit(bound, 3).result()  # bind's flags: those when it was called
            submitted = backends_dask.submit(client, work, 4).result()  # the flags at submit
            mapped = client.gather(backends_dask.map(client, work, [5, 6]))
            (computed,) = backends_dask.compute(dask.delayed(work)(7))
    print(f"plain client.submit: {lost}  client.submit(backends.bind(fn)): {kept}  bound earlier: {early}")
    print(f"backends_dask.submit: {submitted}  .map: {mapped}  .compute: {computed}")
    assert lost == (1, False) and kept == (2, True) and early == (3, False)
    assert submitted == (4, True) and mapped == [(5, True), (6, True)] and computed == (7, True)


if __name__ == "__main__":
    main()
