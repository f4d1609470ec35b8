"""cuSPARSE: SpMV and SpMM take NVIDIA's bit-wise deterministic algorithms where
``algorithms.deterministic`` is on; the products that have none are refused.

CuPy calls ``cupy_backends.cuda.libs.cusparse.spMV_bufferSize`` then ``spMV`` (and
``spMM_bufferSize`` then ``spMM``), looked up on the module at each call, always with the
default algorithm (``CUSPARSE_MV_ALG_DEFAULT`` / ``CUSPARSE_MM_ALG_DEFAULT``, 0): in
``cupyx.cusparse.spmv``/``spmm`` (so ``csr @ x``, ``csr.sum()``, ``csr.sum(axis=1)``, ``csc``
products through ``csc.T``) and in ``cupyx.scipy.sparse.linalg``'s fast matvec and Lanczos,
which call the module directly. cuSPARSE documents run-to-run variation for those defaults,
and bit-wise deterministic results for ``CUSPARSE_SPMV_CSR_ALG2`` (3) and ``SPMV_COO_ALG2``
(4), ``CUSPARSE_SPMM_CSR_ALG3`` (12) and ``SPMM_COO_ALG2`` (2), with the sparse matrix not
transposed; for the (conjugate) transpose it documents none. So in the scope both the
size query and the launch get the deterministic algorithm of the descriptor's format
(``spMatGetFormat``, a host call), and a transposed product, or a format without one, is
refused at the launch (``nondeterministic.alert``).

The buffer a launch gets must be sized for its algorithm. The query wrapper records, per
thread, the arguments of the last query it rewrote; a launch whose algorithm differs from
the one its buffer was sized for (a query made outside the scope and a launch inside it, or
the reverse) gets a workspace of its own, sized by the query for its algorithm.

On a ROCm/HIP build no algorithm is changed (hipSPARSE maps them to rocSPARSE's, whose
reproducibility page calls its non-transposed products deterministic already), and the
transposed products are refused there too, including the legacy ``?csrmv``, ``?csrmm`` and
``?csrmm2`` that CuPy's CSC products take on ROCm (``cupyx/scipy/sparse/_csc.py``). CuPy 14
binds those legacy functions only in its HIP build; CuPy 13's CUDA build binds them too (and
never calls them: cuSPARSE 11 removed them), and they are guarded wherever they are.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from types import ModuleType
from typing import Any

from .._engine.state import read
from .nondeterministic import alert, guard
from .wrapping import original, replace

MODULE = "cupy_backends.cuda.libs.cusparse"
NON_TRANSPOSE = 0  # CUSPARSE_OPERATION_NON_TRANSPOSE
FORMAT_CSR, FORMAT_CSC, FORMAT_COO = 1, 2, 3  # cusparseFormat_t, CuPy's CUSPARSE_FORMAT_*
# cusparseSpMVAlg_t and cusparseSpMMAlg_t (cusparse.h); CuPy names only 3 and 2 of these
SPMV_CSR_ALG2 = 3  # CuPy: CUSPARSE_CSRMV_ALG2
SPMV_COO_ALG2 = 4
SPMM_CSR_ALG3 = 12
SPMM_COO_ALG2 = 2  # CuPy: CUSPARSE_COOMM_ALG2

WHY = "cuSPARSE documents no bit-wise deterministic algorithm for the transposed product"
WHY_FORMAT = "cuSPARSE documents no bit-wise deterministic algorithm for this sparse format"
REMEDY = "Convert it with .tocsr() first: csr_matrix @ x takes cuSPARSE's deterministic algorithm"
LEGACY_WHY = "rocSPARSE documents run-to-run differences for the transposed csrmv/csrmm"


class _Routine:
    """One generic product: its parameter names (CuPy's, from the Cython signatures), where
    the operation, the sparse matrix, the algorithm and the buffer are, and its algorithms."""

    def __init__(self, name: str, params: tuple[str, ...], algorithms: dict[int, int], operation: str) -> None:
        self.name, self.query = name, f"{name}_bufferSize"
        self.params = (*params, "alg", "externalBuffer")
        self.alg_at = len(params)
        self.buffer_at = self.alg_at + 1
        self.matrix_at = params.index("matA")
        self.algorithms = algorithms
        self.operation = operation

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The call's arguments, all positional (CuPy passes them so)."""
        call = list(args)
        for name in self.params[len(call) :]:
            if name in kwargs:
                call.append(kwargs.pop(name))
            elif kwargs:
                raise TypeError(f"{self.name}() missing argument {name!r}")
        if kwargs:
            raise TypeError(f"{self.name}() got unexpected arguments {sorted(kwargs)}")
        return call


SPMV = _Routine(
    "spMV",
    ("handle", "opA", "alpha", "matA", "vecX", "beta", "vecY", "computeType"),
    {FORMAT_CSR: SPMV_CSR_ALG2, FORMAT_COO: SPMV_COO_ALG2},
    "cupyx.cusparse.spmv with a transposed matrix (also csc_matrix @ vector, csc_matrix.sum(), "
    "csr_matrix.sum(axis=0) and their means)",
)
SPMM = _Routine(
    "spMM",
    ("handle", "opA", "opB", "alpha", "matA", "matB", "beta", "matC", "computeType"),
    {FORMAT_CSR: SPMM_CSR_ALG3, FORMAT_COO: SPMM_COO_ALG2},
    "cupyx.cusparse.spmm with a transposed matrix (also csc_matrix @ matrix)",
)

_last = threading.local()  # .query: (routine name, arguments before alg, alg) of the last rewritten query
_module: Any = None
hip = False  #: whether the installed CuPy is a ROCm/HIP build (then no algorithm is changed)


def algorithm(routine: _Routine, op_a: Any, matrix: Any) -> int | None:
    """The algorithm ``routine`` takes in a deterministic context for a sparse matrix
    descriptor ``matrix`` under operation ``op_a``, or ``None`` where none is deterministic."""
    if op_a != NON_TRANSPOSE:
        return None
    return routine.algorithms.get(int(_module.spMatGetFormat(matrix)))


def _query(routine: _Routine) -> Any:
    def make(query: Any) -> Any:
        def sized(*args: Any, **kwargs: Any) -> Any:
            if not read("algorithms.deterministic"):
                return query(*args, **kwargs)
            call = routine.bind(args, kwargs)
            chosen = algorithm(routine, call[1], call[routine.matrix_at])
            if chosen is None or chosen == call[routine.alg_at]:
                return query(*call)  # refused at the launch, or already deterministic
            call[routine.alg_at] = chosen
            size = query(*call)
            _last.query = (routine.name, tuple(call[: routine.alg_at]), chosen)
            return size

        return sized

    return make


def _launch(routine: _Routine, query: Any) -> Any:
    def make(launch: Any) -> Any:
        def product(*args: Any, **kwargs: Any) -> Any:
            deterministic = read("algorithms.deterministic")
            pending = getattr(_last, "query", None)
            if not deterministic and pending is None:
                return launch(*args, **kwargs)
            call = routine.bind(args, kwargs)
            asked = call[routine.alg_at]
            key = tuple(call[: routine.alg_at])
            sized_for = asked
            if pending is not None and pending[0] == routine.name and pending[1] == key:
                sized_for = pending[2]  # the caller's buffer came from our rewritten query
                _last.query = None
            chosen = asked
            if deterministic:
                found = algorithm(routine, call[1], call[routine.matrix_at])
                if found is None:
                    why = WHY if call[1] != NON_TRANSPOSE else WHY_FORMAT
                    alert(routine.operation, why, REMEDY)  # raises, or warns and runs as asked
                else:
                    chosen = found
            call[routine.alg_at] = chosen
            workspace = None  # kept alive until cuSPARSE has the launch queued
            if chosen != sized_for:  # a buffer of the right size for this algorithm
                import cupy

                workspace = cupy.empty(query(*call[: routine.buffer_at]), cupy.int8)
                call[routine.buffer_at] = workspace.data.ptr
            return launch(*call)

        return product

    return make


def _transposed(handle: Any = None, op_a: Any = NON_TRANSPOSE, *args: Any, **kwargs: Any) -> bool:
    return bool(op_a != NON_TRANSPOSE)


def install(module: ModuleType) -> None:
    """Wrap ``spMV``, ``spMM`` and their ``_bufferSize`` queries of ``module`` (CuPy's cuSPARSE
    bindings), and on a HIP build the legacy ``?csrmv``, ``?csrmm`` and ``?csrmm2``."""
    global _module, hip
    _module = module
    _last.__dict__.clear()
    hip = bool(getattr(importlib.import_module("cupy_backends.cuda.api.runtime"), "is_hip", False))
    for routine in (SPMV, SPMM):
        if hip or not hasattr(module, "spMatGetFormat"):
            guard(module, routine.name, routine.operation, WHY, _transposed)
            continue
        query = inspect.getattr_static(module, routine.query, None)
        if query is None or inspect.getattr_static(module, routine.name, None) is None:
            continue
        replace(module, routine.query, _query(routine))
        replace(module, routine.name, _launch(routine, original(query)))
    for prefix in "sdcz":  # CuPy 14: HIP builds only; CuPy 13: every build
        for name, product in (("csrmv", "vector"), ("csrmm", "matrix"), ("csrmm2", "matrix")):
            operation = f"cupyx.cusparse.{name} with a transposed matrix (ROCm: also csc_matrix @ {product})"
            guard(module, f"{prefix}{name}", operation, LEGACY_WHY, _transposed)
