"""``algorithms.deterministic`` on a real GPU: CUB's float scan and CuPy's own scan, which the
scope selects; the refused operations raise before launching and leave their output untouched;
``warn_only`` warns and runs; cuSPARSE's products and CSR/CSC minor-axis indexing give one result,
run after run, equal to a float64 reference computed on the host.

Run-to-run variation outside the scope is reported, never asserted: whether CUB's scan or
cuSPARSE's default algorithms vary on a given run is up to the GPU (cupy/cupy#8350 counted 3
distinct cumsum results in 1,000 runs). Inside the scope one result is asserted, and every value
is checked against float64.

Figures are printed with the ``[gpu]`` prefix and recorded for the script's JSON
(tests/gpu/harness.py).
"""

from __future__ import annotations

import hashlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import backends
from tests.gpu.harness import say

numpy: Any = pytest.importorskip("numpy")  # the host references (CuPy needs NumPy anyway)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cupy: Any = pytest.importorskip("cupy")

SIZE = 250_000
#: as many runs as cupy/cupy#8350 counted (3 distinct results in 1,000)
RUNS = 1_000


def deterministic() -> Any:
    return backends.algorithms.flags(deterministic=True)


def digest(result: Any) -> bytes:
    """A result's bytes, hashed (a thousand 1 MB results are not kept)."""
    if isinstance(result, cupy.ndarray):
        result = cupy.asnumpy(cupy.ascontiguousarray(result)).tobytes()
    return hashlib.blake2b(result, digest_size=16).digest()


def distinct(results: Iterator[Any] | list[Any]) -> int:
    return len({digest(result) for result in results})


def test_float32_cumsum_is_one_result_inside_the_scope_and_cubs_variation_is_reported() -> None:
    from cupy._core import _accelerator

    x = cupy.random.default_rng(0).standard_normal(SIZE, dtype=cupy.float32)
    outside = distinct(cupy.cumsum(x) for _ in range(RUNS))
    with deterministic():
        inside = distinct(cupy.cumsum(x) for _ in range(RUNS))
    accelerators = [str(a) for a in _accelerator.get_routine_accelerators()]  # CUB is 1 (CUPY_ACCELERATORS)
    say(
        f"float32 cumsum of {SIZE:,} elements, {RUNS} runs: {outside} distinct result(s) outside the scope "
        f"(CUB; reported, not asserted: cupy/cupy#8350 saw 3 in 1,000), {inside} inside; routine "
        f"accelerators {accelerators}",
        size=SIZE,
        runs=RUNS,
        distinct_outside=outside,
        distinct_inside=inside,
        routine_accelerators=accelerators,
    )
    assert inside == 1


def test_the_deterministic_scan_matches_float64_and_its_cost_is_reported() -> None:
    x = cupy.random.default_rng(1).standard_normal(SIZE, dtype=cupy.float32)
    with deterministic():
        own = cupy.cumsum(x)
    reference = cupy.cumsum(x.astype(cupy.float64))
    error = float(cupy.max(cupy.abs(own - reference)) / cupy.max(cupy.abs(reference)))

    def timed(on: bool) -> float:
        with backends.algorithms.flags(deterministic=on):
            cupy.cumsum(x)
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            for _ in range(20):
                cupy.cumsum(x)
            cupy.cuda.Device().synchronize()
            return (time.perf_counter() - start) / 20

    cub, native = [], []
    for _ in range(15):  # alternate, so clocks and caches treat both the same
        cub.append(timed(False))
        native.append(timed(True))
    cub_us, native_us = statistics.median(cub) * 1e6, statistics.median(native) * 1e6
    say(
        f"cumsum of {SIZE:,} float32: CuPy's own scan max error {error:.2e} against a float64 scan; "
        f"CUB {cub_us:.1f} us, CuPy's own scan {native_us:.1f} us (x{native_us / cub_us:.2f})",
        error=error,
        cub_us=cub_us,
        own_scan_us=native_us,
        ratio=native_us / cub_us,
    )
    assert error < 1e-4


def test_refused_operations_raise_before_launching_and_warn_only_runs_them() -> None:
    a = cupy.zeros(4, cupy.float32)
    index = cupy.array([0, 0, 0, 1])
    with deterministic():
        with pytest.raises(RuntimeError, match=r"cupy\.add\.at"):
            cupy.add.at(a, index, cupy.float32(1))
        assert float(a.sum()) == 0.0  # nothing was launched
        with pytest.raises(RuntimeError, match=r"cupy\.bincount"):
            cupy.bincount(index, weights=cupy.ones(4))
        cupy.maximum.at(a, index, cupy.float32(2))  # order-independent: allowed
        assert a.tolist() == [2.0, 2.0, 0.0, 0.0]
        with backends.algorithms.flags(warn_only=True), pytest.warns(backends.NondeterministicAlgorithmWarning):
            cupy.add.at(a, index, cupy.float32(1))
        assert a.tolist() == [5.0, 3.0, 0.0, 0.0]


# -- cuSPARSE products and CSR/CSC minor-axis indexing ------------------------------------------

SPARSE_RUNS = 10
ROWS, COLUMNS = 50_000, 200_000
#: float32 against float64, relative to |A| @ |x| (+ |y|) element by element: the float32
#: products and sums of this matrix stay below 2e-7 of that (1.7e-7 at most, computed on the CPU
#: in sequential order); a wrong algorithm (a dropped row, an ignored y) is off by order 1.
SPARSE_TOLERANCE = 1e-5


@dataclass
class PowerLaw:
    """A CSR matrix with power-law row lengths (row 0 the longest), on the device and on the host."""

    csr: Any
    indptr: numpy.ndarray
    indices: numpy.ndarray
    data: numpy.ndarray  # float64 copy of the float32 values

    @property
    def rows_of_entries(self) -> numpy.ndarray:
        return numpy.repeat(numpy.arange(ROWS), numpy.diff(self.indptr))

    def product(self, dense: numpy.ndarray, rows: slice = slice(None)) -> tuple[numpy.ndarray, numpy.ndarray]:
        """``A[rows] @ dense`` and ``|A[rows]| @ |dense|`` in float64 on the host (``dense``:
        a vector or a matrix)."""
        start, stop, _ = rows.indices(ROWS)
        lo, hi = self.indptr[start], self.indptr[stop]
        data, indices = self.data[lo:hi], self.indices[lo:hi]
        counts = numpy.diff(self.indptr[start : stop + 1])
        row = numpy.repeat(numpy.arange(stop - start), counts)
        shape = (stop - start, *dense.shape[1:])
        product, scale = numpy.zeros(shape), numpy.zeros(shape)
        terms = data.reshape(-1, *([1] * (dense.ndim - 1))) * dense[indices]
        numpy.add.at(product, row, terms)
        numpy.add.at(scale, row, numpy.abs(terms))
        return product, scale

    def column(self, j: int) -> numpy.ndarray:
        """Column ``j`` as a dense float64 vector."""
        dense = numpy.zeros(ROWS)
        hits = self.indices == j
        dense[self.rows_of_entries[hits]] = self.data[hits]
        return dense


def power_law_matrix(dtype: Any = numpy.float32) -> PowerLaw:
    """50,000 x 200,000, about 480,000 entries: row r (by rank) has about 10^5 / (r + 1)^1.2
    entries before duplicates are dropped, so a few rows hold 10^4 to 10^5 entries (row 0 the
    longest, about 79,000) and most hold one to a few: the rows cuSPARSE's default algorithms
    split and add atomically. Canonical (sorted, no duplicates) by construction, and said so
    explicitly: ``spmv``/``spmm`` of its COO form require it."""
    import cupyx.scipy.sparse as sparse

    rng = numpy.random.default_rng(0)
    lengths = numpy.maximum(1, (1e5 / numpy.arange(1, ROWS + 1) ** 1.2).astype(numpy.int64))
    lengths = lengths[numpy.concatenate([[0], 1 + rng.permutation(ROWS - 1)])]  # row 0 stays the longest
    row = numpy.repeat(numpy.arange(ROWS, dtype=numpy.int64), lengths)
    keys = numpy.unique(row * COLUMNS + rng.integers(0, COLUMNS, row.size))  # sorted, no duplicates
    indices = (keys % COLUMNS).astype(numpy.int32)
    indptr = numpy.searchsorted(keys // COLUMNS, numpy.arange(ROWS + 1)).astype(numpy.int32)
    data = rng.standard_normal(keys.size).astype(dtype)
    csr = sparse.csr_matrix((cupy.asarray(data), cupy.asarray(indices), cupy.asarray(indptr)), shape=(ROWS, COLUMNS))
    csr.sum_duplicates()  # the canonical-format precondition, explicit (nothing to sum here)
    assert csr.has_canonical_format
    return PowerLaw(csr, indptr, indices, data.astype(numpy.float64))


@pytest.fixture(scope="module")
def matrix() -> PowerLaw:
    built = power_law_matrix()
    lengths = numpy.diff(built.indptr)
    say(
        f"power-law matrix {ROWS:,} x {COLUMNS:,}: {built.csr.nnz:,} entries; longest rows "
        f"{sorted(lengths.tolist())[-5:][::-1]}; {int((lengths >= 10_000).sum())} rows with 10^4 or more, "
        f"median row {int(numpy.median(lengths))}",
        nnz=built.csr.nnz,
        longest_rows=sorted(lengths.tolist())[-5:][::-1],
        rows_with_10k_or_more=int((lengths >= 10_000).sum()),
    )
    return built


def bound_error(result: Any, reference: numpy.ndarray, scale: numpy.ndarray) -> float:
    """``max |result - reference| / scale`` over the elements where ``scale`` > 0, in float64;
    where ``scale`` is 0 the result must be 0 exactly (else infinity)."""
    got = cupy.asnumpy(result).astype(numpy.float64).reshape(reference.shape)
    difference = numpy.abs(got - reference)
    if bool((difference[scale == 0] != 0).any()):
        return float("inf")
    return float((difference[scale > 0] / scale[scale > 0]).max(initial=0.0))


def vector(n: int, seed: int) -> Any:
    return cupy.random.default_rng(seed).standard_normal(n, dtype=cupy.float32)


def run_to_run(
    name: str, product: Callable[[], Any], reference: numpy.ndarray, scale: numpy.ndarray, may_refuse: str = ""
) -> None:
    """``product`` run SPARSE_RUNS times outside the scope (distinct results reported) and inside
    it (one result asserted, within SPARSE_TOLERANCE of ``reference``). ``may_refuse``: the
    algorithm cuSPARSE may refuse in the scope; then a ``RuntimeError`` that names it passes,
    reported."""
    outside = [product() for _ in range(SPARSE_RUNS)]
    try:
        with deterministic():
            inside = [product() for _ in range(SPARSE_RUNS)]
    except RuntimeError as error:
        if not may_refuse or may_refuse not in str(error):
            raise
        say(f"{name}: refused in the scope: {error}", product=name, refused=True, message=str(error)[:500])
        return
    error, error_outside = bound_error(inside[0], reference, scale), bound_error(outside[0], reference, scale)
    results_inside, results_outside = distinct(inside), distinct(outside)
    say(
        f"{name}: {results_inside} distinct result(s) in {SPARSE_RUNS} runs inside the scope, "
        f"{results_outside} outside; error against float64 (relative to |A||x|) {error:.1e} inside, "
        f"{error_outside:.1e} outside",
        product=name,
        distinct_inside=results_inside,
        distinct_outside=results_outside,
        error_inside=error,
        error_outside=error_outside,
    )
    assert results_inside == 1, name
    assert error <= SPARSE_TOLERANCE, name


def test_sparse_products_are_one_result_run_to_run_inside_the_scope(matrix: PowerLaw) -> None:
    import cupyx.cusparse

    csr = matrix.csr
    coo = csr.tocoo()  # csr2coo copies the CSR's flag, made canonical above
    assert coo.has_canonical_format
    x = vector(COLUMNS, 1)
    X = cupy.asfortranarray(cupy.random.default_rng(2).standard_normal((COLUMNS, 8), dtype=cupy.float32))
    xr, Xr = cupy.asnumpy(x).astype(numpy.float64), cupy.asnumpy(X).astype(numpy.float64)
    Ax, Ax_scale = matrix.product(xr)
    AX, AX_scale = matrix.product(Xr)
    A1, A1_scale = matrix.product(Xr[:, :1])
    ones, ones_scale = matrix.product(numpy.ones(COLUMNS))
    products: dict[str, tuple[Callable[[], Any], numpy.ndarray, numpy.ndarray]] = {
        "csr @ x (SPMV_CSR_ALG2)": (lambda: csr @ x, Ax, Ax_scale),
        "cupyx.cusparse.spmv(coo, x) (SPMV_COO_ALG2)": (lambda: cupyx.cusparse.spmv(coo, x), Ax, Ax_scale),
        "cupyx.cusparse.spmm(coo, X) (SPMM_COO_ALG2)": (lambda: cupyx.cusparse.spmm(coo, X), AX, AX_scale),
        "csr.sum(axis=1)": (lambda: csr.sum(axis=1), ones, ones_scale),
        # cuSPARSE: "when n is 1, this operation may use spmv"; which algorithm then is not said
        "csr @ X[:, :1] (one-column SpMM)": (lambda: csr @ X[:, :1], A1, A1_scale),
    }
    for name, (product, reference, scale) in products.items():
        run_to_run(name, product, reference, scale, may_refuse="ALG3" if "SpMM" in name else "")
    with deterministic(), pytest.raises(RuntimeError, match="tocsr"):
        csr.tocsc() @ x  # a transposed product: refused, naming the way out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_spmm_csr_alg3_is_taken_or_its_refusal_is_reported_as_such(dtype: str) -> None:
    """``csr @ X`` (CuPy's own SpMM: op N, F-order X, one batch) in the scope asks cuSPARSE for
    SPMM_CSR_ALG3, which since CUDA 12.2.1 refuses the inputs it does not cover instead of
    falling back. Either the product is right and one result run to run, or the error says
    that ALG3 was refused."""
    built = power_law_matrix(numpy.dtype(dtype).type)
    X = cupy.asfortranarray(cupy.random.default_rng(3).standard_normal((COLUMNS, 8)).astype(dtype))
    reference, scale = built.product(cupy.asnumpy(X).astype(numpy.float64))
    try:
        with deterministic():
            runs = [built.csr @ X for _ in range(SPARSE_RUNS)]
    except Exception as error:
        say(
            f"{dtype} csr @ X (8 columns) in the scope: refused: {type(error).__name__}: {error}",
            dtype=dtype,
            accepted=False,
            error_type=type(error).__name__,
            message=str(error)[:500],
        )
        assert "ALG3" in str(error), f"the refusal does not say that SPMM_CSR_ALG3 was refused: {error!r}"
        return
    error, results = bound_error(runs[0], reference, scale), distinct(runs)
    say(
        f"{dtype} csr @ X (8 columns) in the scope: taken; {results} distinct result(s) in "
        f"{SPARSE_RUNS} runs, error against float64 {error:.1e}",
        dtype=dtype,
        accepted=True,
        distinct_inside=results,
        error=error,
    )
    assert results == 1
    assert error <= (SPARSE_TOLERANCE if dtype == "float32" else 1e-12)


def test_one_row_and_one_column_spmv_match_float64_inside_the_scope(matrix: PowerLaw) -> None:
    """SPMV_CSR_ALG2 is reported wrong for matrices of one row or one column (cuSPARSE before
    13): in the scope these products must still be right."""
    csr = matrix.csr
    x = vector(COLUMNS, 4)
    xr = cupy.asnumpy(x).astype(numpy.float64)
    one_row, one_row_scale = matrix.product(xr, slice(0, 1))
    j = int(numpy.bincount(matrix.indices, minlength=COLUMNS).argmax())  # the fullest column
    column = matrix.column(j)
    one_column = column * xr[j]
    cases: dict[str, tuple[Callable[[], Any], numpy.ndarray, numpy.ndarray]] = {
        f"csr[0:1] @ x (one row, {int(numpy.diff(matrix.indptr)[0]):,} entries)": (
            lambda: csr[0:1] @ x,
            one_row,
            one_row_scale,
        ),
        f"csr[:, {j}:{j + 1}] @ x[{j}:{j + 1}] (one column, {int((column != 0).sum())} entries)": (
            lambda: csr[:, j : j + 1] @ x[j : j + 1],
            one_column,
            numpy.abs(one_column),
        ),
    }
    for name, (product, reference, scale) in cases.items():
        run_to_run(name, product, reference, scale)


def test_spmv_with_beta_1_adds_y_inside_the_scope(matrix: PowerLaw) -> None:
    """``cupyx.cusparse.spmv(a, x, y=y0, beta=1)`` is ``a @ x + y0`` (a report says SPMV_CSR_ALG2
    ignores y with beta=1 before cuSPARSE 13), also for one row."""
    import cupyx.cusparse

    csr = matrix.csr
    x = vector(COLUMNS, 5)
    y0 = vector(ROWS, 6) * 10
    xr, yr = cupy.asnumpy(x).astype(numpy.float64), cupy.asnumpy(y0).astype(numpy.float64)
    Ax, Ax_scale = matrix.product(xr)
    row, row_scale = matrix.product(xr, slice(0, 1))
    found = {}
    with deterministic():
        found["spmv(csr, x, y=y0, beta=1)"] = (
            cupyx.cusparse.spmv(csr, x, y=y0.copy(), beta=1),
            Ax + yr,
            Ax_scale + numpy.abs(yr),
        )
        found["csr @ x + y0"] = (csr @ x + y0, Ax + yr, Ax_scale + numpy.abs(yr))
        found["spmv(csr[0:1], x, y=y0[:1], beta=1)"] = (
            cupyx.cusparse.spmv(csr[0:1], x, y=y0[:1].copy(), beta=1),
            row + yr[:1],
            row_scale + numpy.abs(yr[:1]),
        )
    errors = {name: bound_error(result, reference, scale) for name, (result, reference, scale) in found.items()}
    say(
        "in the scope, against float64 (relative to |A||x| + |y0|): "
        + "; ".join(f"{name} {error:.1e}" for name, error in errors.items()),
        errors=errors,
    )
    assert max(errors.values()) <= SPARSE_TOLERANCE, errors


def host_minor_index(
    indptr: numpy.ndarray, indices: numpy.ndarray, data: numpy.ndarray, idx: numpy.ndarray
) -> numpy.ndarray:
    """The entries of ``A[:, idx]`` (CSR ``A`` on the host) as rows (row, output column, value),
    sorted: each stored (r, c, v) once for every position p with idx[p] == c."""
    order = numpy.argsort(idx, kind="stable")
    lo = numpy.searchsorted(idx[order], indices, "left")
    counts = numpy.searchsorted(idx[order], indices, "right") - lo
    source = numpy.repeat(numpy.arange(indices.size), counts)
    offset = numpy.arange(source.size) - numpy.repeat(numpy.cumsum(counts) - counts, counts)
    row = numpy.repeat(numpy.arange(indptr.size - 1), numpy.diff(indptr))[source]
    entries = numpy.stack([row, order[lo[source] + offset], data[source]], axis=1).astype(numpy.float64)
    return entries[numpy.lexsort(entries.T[::-1])]


def device_entries(result: Any) -> numpy.ndarray:
    """A CSR result's entries as sorted rows (row, column, value), on the host."""
    indptr, indices, data = (cupy.asnumpy(part) for part in (result.indptr, result.indices, result.data))
    row = numpy.repeat(numpy.arange(indptr.size - 1), numpy.diff(indptr))
    entries = numpy.stack([row, indices, data], axis=1).astype(numpy.float64)
    return entries[numpy.lexsort(entries.T[::-1])]


def test_minor_axis_fancy_indexing_is_one_result_run_to_run_inside_the_scope(matrix: PowerLaw) -> None:
    csr = matrix.csr
    idx = cupy.random.default_rng(7).integers(0, COLUMNS, 5_000, dtype=cupy.int32)
    reference = host_minor_index(matrix.indptr, matrix.indices, matrix.data, cupy.asnumpy(idx))
    parts = ("data", "indices", "indptr")

    def picked() -> bytes:
        result = csr[:, idx]
        return b"".join(getattr(result, part).tobytes() for part in parts)

    outside = distinct([picked() for _ in range(SPARSE_RUNS)])
    with deterministic():
        inside = distinct([picked() for _ in range(SPARSE_RUNS)])
        result = csr[:, idx]
    entries = device_entries(result)
    equal = entries.shape == reference.shape and bool((entries == reference).all())
    say(
        f"csr[:, idx] ({idx.size} columns, {result.nnz:,} entries): {inside} distinct result(s) in "
        f"{SPARSE_RUNS} runs inside the scope, {outside} outside; equal to the host reference: {equal}",
        distinct_inside=inside,
        distinct_outside=outside,
        equal_to_reference=equal,
    )
    assert inside == 1
    assert result.has_sorted_indices
    assert equal


def test_a_column_of_csc_indexed_by_a_2d_index_is_right_inside_the_scope(matrix: PowerLaw) -> None:
    """``csc[idx.reshape(-1, 1), j]``: CuPy hands the 2-D index to the minor-axis indexing; in the
    scope it must give what NumPy gives for the dense matrix, shape (k, 1), and raise nothing."""
    csc = matrix.csr.tocsc()
    j = int(numpy.bincount(matrix.indices, minlength=COLUMNS).argmax())
    column = matrix.column(j)
    rng = numpy.random.default_rng(8)
    rows = numpy.concatenate([numpy.flatnonzero(column), rng.integers(0, ROWS, 200)])
    rng.shuffle(rows)
    idx = cupy.asarray(rows.astype(numpy.int32)).reshape(-1, 1)
    reference = column[rows].reshape(-1, 1)
    try:  # CuPy's own path, reported only: its kernel takes the index as flat
        outside = cupy.asnumpy(csc[idx, j].toarray())
        outside_equal: bool | str = outside.shape == reference.shape and bool((outside == reference).all())
    except Exception as error:
        outside_equal = f"raised {type(error).__name__}: {error}"
    with deterministic():
        result = csc[idx, j]
    got = cupy.asnumpy(result.toarray()).astype(numpy.float64)
    equal = got.shape == reference.shape and bool((got == reference).all())
    say(
        f"csc[idx.reshape(-1, 1), {j}] ({rows.size} rows): shape {result.shape}, equal to NumPy's dense "
        f"result inside the scope: {equal}; CuPy's own path outside: {outside_equal}",
        shape=list(result.shape),
        equal_inside=equal,
        equal_outside=outside_equal,
    )
    assert result.shape == reference.shape
    assert equal


def test_minor_axis_indexing_of_a_matrix_with_duplicates_is_not_flagged_canonical() -> None:
    """A CSR with a duplicate (r, c) indexed as ``A[:, idx]`` in the scope keeps the duplicate in
    its result: the result must not claim canonical format (``sum_duplicates`` would skip it),
    and its values (duplicates summed when densified, outside the scope) must be right."""
    import cupyx.scipy.sparse as sparse

    # row 1 stores column 2 twice; integer values, so every sum is exact in float32
    data = numpy.array([1, 2, 3, 4, 5, 6, 7], numpy.float32)
    indices = numpy.array([0, 2, 2, 5, 1, 3, 4], numpy.int32)
    indptr = numpy.array([0, 1, 4, 6, 7], numpy.int32)
    a = sparse.csr_matrix((cupy.asarray(data), cupy.asarray(indices), cupy.asarray(indptr)), shape=(4, 6))
    assert not a.has_canonical_format  # CuPy's own check of the input
    dense = numpy.zeros((4, 6))
    numpy.add.at(dense, (numpy.repeat(numpy.arange(4), numpy.diff(indptr)), indices), data)
    idx = numpy.array([2, 0, 2, 5, 4])
    with deterministic():
        result = a[:, cupy.asarray(idx, dtype=cupy.int32)]
    canonical = bool(result.has_canonical_format)
    values = cupy.asnumpy(result.toarray())  # sums the duplicates: outside the scope
    say(
        f"csr_with_duplicates[:, idx] in the scope: has_canonical_format {canonical} (the input had duplicates)",
        has_canonical_format=canonical,
    )
    assert canonical is False
    assert (values == dense[:, idx]).all()
    result.sum_duplicates()
    assert result.has_canonical_format
    assert (cupy.asnumpy(result.toarray()) == dense[:, idx]).all()
