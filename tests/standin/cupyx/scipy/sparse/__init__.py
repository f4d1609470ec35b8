"""Stand-in for ``cupyx.scipy.sparse``: 2-D ``coo_matrix``, ``csr_matrix`` and ``csc_matrix``
(no ``*_array`` classes, no 1-D arrays)."""

from cupyx.scipy.sparse._base import issparse, spmatrix
from cupyx.scipy.sparse._coo import coo_matrix
from cupyx.scipy.sparse._csc import csc_matrix
from cupyx.scipy.sparse._csr import csr_matrix

__all__ = ["coo_matrix", "csc_matrix", "csr_matrix", "issparse", "spmatrix"]
