"""cuSPARSE: SpMV and SpMM take NVIDIA's bit-wise deterministic algorithms where
``algorithms.deterministic`` is on; the products that have none are refused.

CuPy calls ``cupy_backends.cuda.libs.cusparse.spMV_bufferSize`` then ``spMV`` (and
``spMM_bufferSize`` then ``spMM``), looked up on the module at each call, always with the
default algorithm (``CUSPARSE_MV_ALG_DEFAULT`` / ``CUSPARSE_MM_ALG_DEFAULT``, 0): in
``cupyx.cusparse.spmv``/``spmm`` (so ``csr @ x``, ``csr.sum()``, ``csr.sum(axis=1)``, ``csc``
products through ``csc.T``, ``x @ csr`` through ``csr.T``) and in ``cupyx.scipy.sparse.linalg``'s
fast matvec and Lanczos, which call the module directly. cuSPARSE documents run-to-run
variation for those defaults, and bit-wise deterministic results for ``CUSPARSE_SPMV_CSR_ALG2``
(3) and ``SPMV_COO_ALG2`` (4), ``CUSPARSE_SPMM_CSR_ALG3`` (12) and ``SPMM_COO_ALG2`` (2), with the
sparse matrix not transposed; for the (conjugate) transpose it documents none. So in the scope
the launch gets the deterministic algorithm of the descriptor's format (``spMatGetFormat``, a
host call), and a transposed product, or a format without one, is refused there
(``nondeterministic.alert``).

Workspace. The size query, in every context, answers the larger of the sizes for the algorithm
asked and for the deterministic one (two host queries, where the product has one), so a buffer
sized by it fits whichever of the two the launch takes: a query outside the scope and the launch
inside it, or the reverse, and CuPy's solvers, which size one buffer and launch with it many
times (new vector descriptors each CG/GMRES iteration; the same ones through a Lanczos run),
with no second query and no allocation per launch, and nothing remembered between calls. The
cost outside the scope: that second host query and ``spMatGetFormat`` per query, and buffers as
large as the deterministic algorithm needs.

Reported wrong. ``CUSPARSE_SPMV_CSR_ALG2`` is reported (NVIDIA's cuOpt) to give wrong results
for a CSR matrix with one row or one column on every cuSPARSE 12, so on every cuSPARSE CuPy can
load (CUDA 13's is 12.6), and, in an older comment of the same code, to ignore ``y`` with
``beta=1``. In the scope, ``cupyx.cusparse.spmv`` (which ``csr @ x``, ``csr.dot`` and the sums
call) does not give those to it: a one-row product is a sum of the stored entries times ``x``
(CuPy's reduction, a fixed order), a one-column product one multiplication per stored entry,
and with a ``y`` and ``beta != 0`` it asks cuSPARSE for ``alpha * A @ x`` alone and adds
``beta * y`` itself. A one-row or one-column CSR descriptor that reaches ``spMV`` directly
(``cupyx.scipy.sparse.linalg`` on a 1x1 matrix) is refused there.

``CUSPARSE_SPMM_CSR_ALG3`` has no fallback since CUDA 12.2.1: cuSPARSE refuses operands it does
not cover (a conjugate-transposed ``B``, some type combinations; its log names them), expectedly
with ``CUSPARSE_STATUS_NOT_SUPPORTED`` (not seen on a GPU here). In the scope that status from
the deterministic algorithm is reported as a refusal naming the operands (``alert``:
``RuntimeError``, or with ``warn_only`` a warning and CuPy's own algorithm). cuSPARSE runs the
same operand checks in the size query and the launch (its messages name the function they run
in: an assumption from the library's strings, not checked on a GPU), so a query that could not
size the deterministic algorithm is followed by a launch that refuses it, not one that runs it on
a smaller buffer.

On a ROCm/HIP build no algorithm is changed (hipSPARSE maps them to rocSPARSE's, whose
reproducibility page calls its non-transposed products deterministic already), and the
transposed products are refused there too, including the legacy ``?csrmv``, ``?csrmm`` and
``?csrmm2`` that CuPy's CSC products take on ROCm (``cupyx/scipy/sparse/_csc.py``). CuPy 14
binds those legacy functions only in its HIP build; CuPy 13's CUDA build binds them too (and
never calls them: cuSPARSE 11 removed them), and they are guarded wherever they are.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any

from .._engine.state import read
from .nondeterministic import alert, guard
from .wrapping import replace

# install() gets either: the bindings, or cupyx.cusparse (whose spmv takes the one-row, one-column path)
MODULES = ("cupy_backends.cuda.libs.cusparse", "cupyx.cusparse")
NON_TRANSPOSE = 0  # CUSPARSE_OPERATION_NON_TRANSPOSE
FORMAT_CSR, FORMAT_CSC, FORMAT_COO = 1, 2, 3  # cusparseFormat_t, CuPy's CUSPARSE_FORMAT_*
# cusparseSpMVAlg_t and cusparseSpMMAlg_t (cusparse.h); CuPy names only 3 and 2 of these
SPMV_CSR_ALG2 = 3  # CuPy: CUSPARSE_CSRMV_ALG2
SPMV_COO_ALG2 = 4
SPMM_CSR_ALG3 = 12
SPMM_COO_ALG2 = 2  # CuPy: CUSPARSE_COOMM_ALG2
NOT_SUPPORTED = 10  # CUSPARSE_STATUS_NOT_SUPPORTED
ALGORITHM_NAMES = {
    ("spMV", SPMV_CSR_ALG2): "CUSPARSE_SPMV_CSR_ALG2",
    ("spMV", SPMV_COO_ALG2): "CUSPARSE_SPMV_COO_ALG2",
    ("spMM", SPMM_CSR_ALG3): "CUSPARSE_SPMM_CSR_ALG3",
    ("spMM", SPMM_COO_ALG2): "CUSPARSE_SPMM_COO_ALG2",
}
# cudaDataType_t (library_types.h) of what CuPy's products take, for the refusal messages
DATA_TYPES = {
    0: "CUDA_R_32F", 1: "CUDA_R_64F", 2: "CUDA_R_16F", 4: "CUDA_C_32F", 5: "CUDA_C_64F", 6: "CUDA_C_16F",
    14: "CUDA_R_16BF", 15: "CUDA_C_16BF",
}  # fmt: skip

WHY = "cuSPARSE documents no bit-wise deterministic algorithm for the transposed product"
WHY_FORMAT = "cuSPARSE documents no bit-wise deterministic algorithm for this sparse format"
REMEDY = (
    "Multiply by a CSR matrix of the operand as the product uses it, made once: for a csc_matrix C, "
    "C.tocsr() (then C.tocsr() @ x); for a csr_matrix A used transposed (A.T @ x, x @ A, A.sum(axis=0)), "
    "B = A.T.tocsr() (then B @ x, (B @ x.T).T, B.sum(axis=1).T): a CSR product takes cuSPARSE's "
    "deterministic algorithm"
)
ONE_ROW_OPERATION = (
    "cupy_backends.cuda.libs.cusparse.spMV of a CSR matrix with one row or one column (called directly, "
    "e.g. by cupyx.scipy.sparse.linalg on a 1x1 matrix)"
)
ONE_ROW_WHY = (
    "cuSPARSE's deterministic CUSPARSE_SPMV_CSR_ALG2 is reported to give wrong results for such a matrix "
    "on every cuSPARSE 12"
)
ONE_ROW_REMEDY = "cupyx.cusparse.spmv (and so csr_matrix @ vector) computes such a product without it in the scope"
LEGACY_WHY = "rocSPARSE documents run-to-run differences for the transposed csrmv/csrmm"


class _Routine:
    """One generic product: its parameter names (CuPy's, from the Cython signatures), where
    the operation, the sparse matrix and the algorithm are, its algorithms, and what its
    refusals say."""

    def __init__(
        self, name: str, params: tuple[str, ...], algorithms: dict[int, int], operation: str, unsupported: str
    ) -> None:
        self.name, self.query = name, f"{name}_bufferSize"
        self.params = (*params, "alg", "externalBuffer")
        self.alg_at = len(params)
        self.matrix_at = params.index("matA")
        self.algorithms = algorithms
        self.operation = operation
        self.unsupported = unsupported  # how to proceed when cuSPARSE refuses the deterministic algorithm

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
    "cupyx.cusparse.spmv with a transposed matrix (also csc_matrix @ vector, vector @ csr_matrix, "
    "csc_matrix.sum(), csr_matrix.sum(axis=0) and their means)",
    "",
)
SPMM = _Routine(
    "spMM",
    ("handle", "opA", "opB", "alpha", "matA", "matB", "beta", "matC", "computeType"),
    {FORMAT_CSR: SPMM_CSR_ALG3, FORMAT_COO: SPMM_COO_ALG2},
    "cupyx.cusparse.spmm with a transposed matrix (also csc_matrix @ matrix, matrix @ csr_matrix)",
    "Multiply one dense column at a time instead (csr_matrix @ X[:, k] takes cuSPARSE's deterministic SpMV)",
)

_module: Any = None
_error: Any = ()  # CuPy's CuSparseError (an empty tuple catches nothing where there is none)
hip = False  #: whether the installed CuPy is a ROCm/HIP build (then no algorithm is changed)


def algorithm(routine: _Routine, op_a: Any, matrix: Any) -> int | None:
    """The algorithm ``routine`` takes in a deterministic context for a sparse matrix
    descriptor ``matrix`` under operation ``op_a``, or ``None`` where none is deterministic."""
    if op_a != NON_TRANSPOSE:
        return None
    return routine.algorithms.get(int(_module.spMatGetFormat(matrix)))


def _attributes(matrix: Any) -> Any:
    """What ``csrGet`` / ``cooGet`` (host calls) answer for a CSR or COO descriptor, or ``None``.
    The format is asked first: cuSPARSE logs an error to stderr for a getter of another format."""
    getter = {FORMAT_CSR: "csrGet", FORMAT_COO: "cooGet"}.get(int(_module.spMatGetFormat(matrix)))
    return None if getter is None or not hasattr(_module, getter) else getattr(_module, getter)(matrix)


def _one_row_or_column(matrix: Any) -> bool:
    """Whether the CSR descriptor ``matrix`` has one row or one column (``csrGet``, a host call)."""
    attributes = _module.csrGet(matrix) if hasattr(_module, "csrGet") else None
    return attributes is not None and 1 in (int(attributes.rows), int(attributes.cols))


def _operands(routine: _Routine, call: list[Any]) -> str:
    """The operands as the refusal names them: shape and value type of A, operations, compute type."""
    parts = []
    try:
        attributes = _attributes(call[routine.matrix_at])
    except Exception:  # (a description only: never in the way of the refusal)
        attributes = None
    if attributes is not None:
        kind = "CSR" if hasattr(attributes, "rowOffsets") else "COO"
        value_type = DATA_TYPES.get(int(attributes.valueType), attributes.valueType)
        parts.append(f"A: {attributes.rows}x{attributes.cols} {kind} of {value_type}")
    operations = "NTC"
    parts.append(f"opA={operations[call[1]] if call[1] in (0, 1, 2) else call[1]}")
    if routine is SPMM:
        parts.append(f"opB={operations[call[2]] if call[2] in (0, 1, 2) else call[2]}")
    compute = call[routine.alg_at - 1]
    parts.append(f"compute type {DATA_TYPES.get(compute, compute)}")
    return ", ".join(parts)


def _refuse_unsupported(routine: _Routine, call: list[Any], error: BaseException) -> None:
    """cuSPARSE answered ``CUSPARSE_STATUS_NOT_SUPPORTED`` for the deterministic algorithm of
    ``call``: refuse the product (``alert``: raises, chained to ``error``; or warns)."""
    name = ALGORITHM_NAMES.get((routine.name, call[routine.alg_at]), str(call[routine.alg_at]))
    operation = f"cupyx.cusparse.{routine.name.lower()} of these operands ({_operands(routine, call)})"
    why = f"cuSPARSE's deterministic {name} does not support them: {error}"
    try:
        alert(operation, why, routine.unsupported)
    except RuntimeError as refusal:
        raise refusal from error


def _query(routine: _Routine) -> Any:
    def make(query: Any) -> Any:
        def sized(*args: Any, **kwargs: Any) -> Any:
            size = query(*args, **kwargs)  # CuPy's own (and its errors), for the algorithm asked
            call = routine.bind(args, kwargs)
            chosen = algorithm(routine, call[1], call[routine.matrix_at])
            if chosen is None or chosen == call[routine.alg_at]:
                return size
            call[routine.alg_at] = chosen
            try:
                return max(size, query(*call))  # fits whichever of the two the launch takes
            except _error:  # never in the way of CuPy's own call: a launch with it gets the same
                return size  # answer, and in the scope reports it (_launch)

        return sized

    return make


def _launch(routine: _Routine) -> Any:
    def make(launch: Any) -> Any:
        def product(*args: Any, **kwargs: Any) -> Any:
            if not read("algorithms.deterministic"):
                return launch(*args, **kwargs)
            call = routine.bind(args, kwargs)
            asked = call[routine.alg_at]
            chosen = algorithm(routine, call[1], call[routine.matrix_at])
            if chosen is None:
                alert(routine.operation, WHY if call[1] != NON_TRANSPOSE else WHY_FORMAT, REMEDY)
                return launch(*call)  # warned: as CuPy asked
            if chosen == SPMV_CSR_ALG2 and _one_row_or_column(call[routine.matrix_at]):
                alert(ONE_ROW_OPERATION, ONE_ROW_WHY, ONE_ROW_REMEDY)
                return launch(*call)
            call[routine.alg_at] = chosen  # the buffer fits it: sized by the wrapped query
            try:
                return launch(*call)
            except _error as error:
                if getattr(error, "status", None) != NOT_SUPPORTED or asked == chosen:
                    raise
                _refuse_unsupported(routine, call, error)  # raises, or warns: then as CuPy asked
            call[routine.alg_at] = asked
            return launch(*call)

        return product

    return make


def _spmv(spmv: Any) -> Any:
    """``cupyx.cusparse.spmv(a, x, y=None, alpha=1, beta=0, transa=False)``, which in a
    deterministic context computes what ``CUSPARSE_SPMV_CSR_ALG2`` is reported to get wrong
    without it (see the module's docstring); everything else, and every error, is CuPy's."""

    def product(a: Any, x: Any, y: Any = None, alpha: Any = 1, beta: Any = 0, transa: Any = False) -> Any:
        if not read("algorithms.deterministic") or hip:
            return spmv(a, x, y, alpha, beta, transa)
        csr, transposed = (a.T, not transa) if getattr(a, "format", None) == "csc" else (a, bool(transa))
        if getattr(csr, "format", None) != "csr" or transposed or len(getattr(csr, "shape", ())) != 2:
            return spmv(a, x, y, alpha, beta, transa)  # COO, refused at the launch, or not CuPy's
        rows, cols = csr.shape
        accumulates = y is not None and not _is_zero(beta)
        if (rows > 1 and cols > 1 and not accumulates) or _cupy_raises(csr, x, y):
            return spmv(a, x, y, alpha, beta, transa)
        return _spmv_in_order(spmv, csr, x, y, alpha, beta)

    return product


def _is_zero(value: Any) -> bool:
    try:
        return bool(value == 0)
    except Exception:  # not a scalar: CuPy's conversion decides (and raises)
        return False


def _cupy_raises(csr: Any, x: Any, y: Any) -> bool:
    """Whether CuPy's ``spmv`` refuses these operands (or launches nothing, for an empty
    matrix) before it launches: then it runs, and raises its own error."""
    rows, cols = csr.shape
    return bool(cols != len(x) or (y is not None and len(y) != rows) or csr.nnz == 0 or not csr.has_canonical_format)


def _spmv_in_order(spmv: Any, csr: Any, x: Any, y: Any, alpha: Any, beta: Any) -> Any:
    """``alpha * csr @ x + beta * y`` as CuPy's ``spmv`` returns it (in the common type of the
    operands; into ``y`` itself where it has that type), with CuPy's own reduction for one row,
    one multiplication per stored entry for one column, and cuSPARSE's deterministic algorithm
    with ``beta=0`` otherwise (``csr`` is canonical: at most one entry per (row, column))."""
    import cupy
    import numpy

    rows, cols = csr.shape
    dtypes = [csr.dtype, x.dtype] + ([y.dtype] if y is not None else [])
    dtype = functools.reduce(numpy.promote_types, dtypes)
    scale = numpy.array(alpha, dtype)[()]  # as CuPy converts alpha and beta (numpy scalars for CuPy's ufuncs)
    data, x = csr.data.astype(dtype, copy=False), x.astype(dtype, copy=False)
    if rows == 1:  # a sum over the stored entries, in CuPy's reduction's fixed order
        product = ((data * x[csr.indices]).sum() * scale).reshape(1)
    elif cols == 1:  # one product per stored entry, each in its own row
        product = cupy.zeros(rows, dtype)
        product[csr.tocoo().row] = data * x[0] * scale
    else:
        product = spmv(csr, x, cupy.zeros(rows, dtype), alpha, 0)
    if y is None:
        return product
    out = y if y.dtype == dtype else y.astype(dtype)
    if _is_zero(beta):
        out[...] = product
    else:
        out[...] = product + out * numpy.array(beta, dtype)[()]
    return out


def _transposed(handle: Any = None, op_a: Any = NON_TRANSPOSE, *args: Any, **kwargs: Any) -> bool:
    return bool(op_a != NON_TRANSPOSE)


def install(module: ModuleType) -> None:
    """Wrap ``spMV``, ``spMM`` and their ``_bufferSize`` queries of ``module`` (CuPy's cuSPARSE
    bindings), and on a HIP build the legacy ``?csrmv``, ``?csrmm`` and ``?csrmm2``; or, for
    ``module`` ``cupyx.cusparse``, its ``spmv``."""
    global _module, _error, hip
    hip = bool(getattr(importlib.import_module("cupy_backends.cuda.api.runtime"), "is_hip", False))
    if module.__name__ == "cupyx.cusparse":
        replace(module, "spmv", _spmv)
        return
    _module = module
    _error = getattr(module, "CuSparseError", ())
    for routine in (SPMV, SPMM):
        if hip or not hasattr(module, "spMatGetFormat"):
            guard(module, routine.name, routine.operation, WHY, _transposed)
            continue
        if inspect.getattr_static(module, routine.query, None) is None:
            continue
        if inspect.getattr_static(module, routine.name, None) is None:
            continue
        replace(module, routine.query, _query(routine))
        replace(module, routine.name, _launch(routine))
    for prefix in "sdcz":  # CuPy 14: HIP builds only; CuPy 13: every build
        for name, product in (("csrmv", "vector"), ("csrmm", "matrix"), ("csrmm2", "matrix")):
            operation = f"cupyx.cusparse.{name} with a transposed matrix (ROCm: also csc_matrix @ {product})"
            guard(module, f"{prefix}{name}", operation, LEGACY_WHY, _transposed)
