"""Integrations with tools outside the engine, each imported only when used:

- ``asyncio``: ``backends.asyncio.install()``, a task factory whose tasks sync CuPy's handles to
  their own flags before each step;
- ``trio``: ``backends.trio.Instrument()``, the same for trio (and anyio on trio);
- ``executors``: ``backends.ThreadPoolExecutor``, ``backends.Thread`` and
  ``backends.run_in_executor``, which run each call under the flags of the code that submitted it;
- ``pytest_plugin``: per-test flags (``@pytest.mark.backends``, the ``backends_flags`` fixture)
  and leak detection, registered through pytest's entry point;
- ``ray``: ``backends.integrations.ray.remote``, ``ray.remote`` whose tasks and actor calls run
  under the flags of the code that calls ``.remote()`` (the ``ray`` extra);
- ``dask``: ``backends.integrations.dask.submit``, ``.map`` and ``.compute``, whose tasks run
  under the flags of the code that hands them to Dask (the ``dask`` extra).
"""
