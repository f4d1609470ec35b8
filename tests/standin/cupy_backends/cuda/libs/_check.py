"""Fails the import of a library module listed in ``STANDIN_CUPY_MISSING_LIBS``."""

from __future__ import annotations

import os


def require(library: str) -> None:
    missing = {name.strip() for name in os.environ.get("STANDIN_CUPY_MISSING_LIBS", "").split(",")}
    if library in missing:
        raise ImportError(f"Unable to load lib{library}: the stand-in CuPy was told it is not installed")
