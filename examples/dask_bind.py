"""Carry the caller's flags into a Dask distributed worker process with backends.bind.

    python examples/dask_bind.py
"""

from __future__ import annotations

import backends


def work(n: int) -> tuple[int, bool]:
    return n, backends.cudnn.deterministic


def main() -> None:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print("dask.distributed is not installed (pip install 'dask[distributed]'): nothing to show")
        return
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None)
    with cluster, Client(cluster) as client, backends.cudnn.flags(deterministic=True):
        lost = client.submit(work, 1).result()  # the worker process has its own defaults
        kept = client.submit(backends.bind(work), 2).result()
    print(f"plain client.submit: {lost}  client.submit(backends.bind(fn)): {kept}")
    assert lost == (1, False) and kept == (2, True)


if __name__ == "__main__":
    main()
