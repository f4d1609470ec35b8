"""Stand-in for ``cupy.linalg``."""

from cupy.linalg._decomposition import cholesky
from cupy.linalg._einsum import einsum
from cupy.linalg._product import dot, matmul, tensordot
from cupy.linalg._solve import solve

__all__ = ["cholesky", "dot", "einsum", "matmul", "solve", "tensordot"]
