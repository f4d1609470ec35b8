"""Stand-in for ``cupyx.scipy.sparse.linalg``: only ``_iterative._make_fast_matvec``, the
cuSPARSE pattern of CuPy's iterative solvers (no solver is modelled)."""
