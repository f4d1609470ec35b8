"""Task-step sync for trio: ``trio.run(main, instruments=[backends.trio.Instrument()])``.

trio calls an instrument's ``before_task_step`` from its run loop, outside the
task's context, so the instrument runs ``backends.sync()`` inside ``task.context``:
the handle then carries the flags of the task about to run. anyio on its trio
backend takes the same instrument (``anyio.run(main, backend="trio",
backend_options={"instruments": [...]})``, anyio 4.14 and newer; older ones drop
``backend_options`` on trio: call ``trio.lowlevel.add_instrument(Instrument())`` at
the start of ``main`` there).
"""

from __future__ import annotations

import trio

from ..sync import quietly, sync


class Instrument(trio.abc.Instrument):
    """Calls ``backends.sync()`` in each task's context before each of its steps:
    ``trio.run(main, instruments=[backends.trio.Instrument()])``."""

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        """trio's hook: sync the flags of ``task``, which is about to run a step (nothing
        ``sync()`` raises reaches trio or the task)."""
        task.context.run(quietly, sync)
