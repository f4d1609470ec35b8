"""Stand-in for ``cupyx.scipy.linalg`` (only ``solve_triangular``)."""

from cupyx.scipy.linalg._solve_triangular import solve_triangular

__all__ = ["solve_triangular"]
