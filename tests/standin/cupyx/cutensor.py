"""Stand-in for ``cupyx.cutensor`` (v14.2.0: a shim that imports the library module first, then
re-exports ``cupyx._cutensor``'s names; ``cupy.einsum`` reaches ``contraction`` as this module's
attribute). CuPy 13.6's ``cupyx.cutensor`` is the extension module itself, with the same names."""

from __future__ import annotations

from cupy_backends.cuda.libs import cutensor as _libs_cutensor  # noqa: F401

from cupyx._cutensor import _get_cutensor_dtype, check_availability, contraction

__all__ = ["_get_cutensor_dtype", "check_availability", "contraction"]
