"""Stand-in for ``cudnn.datatypes``: ``_library_type``, as in 1.23 and 1.32.

The real one returns a ``data_type`` as it is and converts a framework dtype (torch's, the
only one it knows) to the matching ``data_type``; anything else raises. torch is not
installed for the tests, so ``TorchDtype`` stands for ``torch.float32`` and friends: an
object whose ``str()`` is ``"torch.float32"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._compiled_module import cudnnGraphNotSupportedError, data_type


@dataclass(frozen=True)
class TorchDtype:
    name: str  # "float32", "float16", "bfloat16", "float64"

    def __str__(self) -> str:
        return f"torch.{self.name}"


_TORCH = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16", "float64": "DOUBLE"}


def _library_type(input_type: Any) -> Any:
    if type(input_type) is data_type:
        return input_type
    if isinstance(input_type, TorchDtype) and input_type.name in _TORCH:
        return getattr(data_type, _TORCH[input_type.name])
    raise cudnnGraphNotSupportedError(f"No available conversion from type {input_type} to a library type.")
