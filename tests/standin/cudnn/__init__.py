"""Stand-in for NVIDIA's cuDNN frontend Python package (import name ``cudnn``).

Two releases, chosen at import by ``STANDIN_CUDNN_FRONTEND``: ``1.32`` (the default;
``pygraph`` is the pure-Python class of ``cudnn._pygraph``) or ``1.23`` (``pygraph`` is
the pybind11 class of ``cudnn._compiled_module``, whose ``build(modes)`` runs the C++
steps itself, and which has no ``context``). As in both real ``__init__.py`` files, the
public names are copied from the compiled module, and on 1.23 ``execute`` and
``execute_plan_at_index`` are Python functions set on the pybind11 class. See
``README.md`` beside this file.
"""

from __future__ import annotations

import os
from typing import Any

from . import _compiled_module, datatypes
from ._compiled_module import (
    RECORDER,
    backend_version,
    build_plan_policy,
    cudnnGraphNotSupportedError,
    data_type,
    heur_mode,
    numerical_note,
)

__version__ = {"1.23": "1.23.0", "1.32": "1.32.0"}[os.environ.get("STANDIN_CUDNN_FRONTEND", "1.32")]

if __version__ == "1.23.0":
    pygraph: Any = _compiled_module.pygraph

    def _execute(self: Any, tensor_to_device_buffer: Any, workspace: Any, handle: Any = None,
                 override_uids: Any = None, override_shapes: Any = None, override_strides: Any = None) -> None:
        """Execute a cudnn graph."""
        self._execute({}, workspace, handle)

    def _execute_plan_at_index(self: Any, tensor_to_device_buffer: Any, workspace: Any, index: int,
                               handle: Any = None, override_uids: Any = None, override_shapes: Any = None,
                               override_strides: Any = None) -> None:
        """Execute a cudnn graph."""
        self._execute_plan_at_index({}, workspace, index, handle)

    pygraph.execute = _execute
    pygraph.execute_plan_at_index = _execute_plan_at_index
else:
    from ._pygraph import GraphContext as GraphContext
    from ._pygraph import pygraph

__all__ = [
    "RECORDER",
    "backend_version",
    "build_plan_policy",
    "cudnnGraphNotSupportedError",
    "data_type",
    "datatypes",
    "heur_mode",
    "numerical_note",
    "pygraph",
]
