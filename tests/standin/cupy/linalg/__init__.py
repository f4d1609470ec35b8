"""Stand-in for ``cupy.linalg``."""

from cupy.linalg._decomposition import cholesky
from cupy.linalg._product import dot, matmul, tensordot

__all__ = ["cholesky", "dot", "matmul", "tensordot"]
