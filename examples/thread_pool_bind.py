"""Carry the caller's flags into a thread pool and a process pool with backends.bind.

    python examples/thread_pool_bind.py
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import backends


def work(n: int) -> tuple[int, bool]:
    return n, backends.cudnn.deterministic


def main() -> None:
    with ThreadPoolExecutor(1) as threads:
        threads.submit(work, 0).result()  # the worker thread starts here, outside the scope
        with backends.cudnn.flags(deterministic=True):
            lost = threads.submit(work, 1).result()  # a worker thread has its own context
            kept = threads.submit(backends.bind(work), 2).result()
            spawn = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(1, mp_context=spawn) as processes:
                remote = processes.submit(backends.bind(work), 3).result()
    print(f"plain submit: {lost}  bind: {kept}  bind in a spawned process: {remote}")
    assert lost == (1, False) and kept == (2, True) and remote == (3, True)


if __name__ == "__main__":
    main()
