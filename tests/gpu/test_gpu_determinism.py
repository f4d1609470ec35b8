"""``algorithms.deterministic`` on a real GPU: CUB's float scan varies from run to run and
CuPy's own scan, which the scope selects, does not; the refused operations raise before
launching and leave their output untouched; ``warn_only`` warns and runs.

Figures are printed with the ``[gpu]`` prefix (scripts/gpu_check.sh passes ``-s``).
"""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

import pytest

import backends

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cupy: Any = pytest.importorskip("cupy")

SIZE = 250_000
RUNS = 200


def say(text: str) -> None:
    print(f"[gpu] {text}", flush=True)


def distinct_cumsums(x: Any) -> int:
    results = set()
    for _ in range(RUNS):
        results.add(cupy.cumsum(x).tobytes())
    return len(results)


def test_float32_cumsum_varies_with_cub_and_is_one_result_inside_the_scope() -> None:
    x = cupy.random.default_rng(0).standard_normal(SIZE, dtype=cupy.float32)
    outside = distinct_cumsums(x)
    with backends.algorithms.flags(deterministic=True):
        inside = distinct_cumsums(x)
    say(
        f"float32 cumsum of {SIZE:,} elements, {RUNS} runs: "
        f"{outside} distinct results outside the scope, {inside} inside"
    )
    assert inside == 1
    assert outside > 1, "CUB's scan gave one result in every run: the case this flag exists for did not show here"


def test_the_deterministic_scan_matches_cub_closely_and_its_cost_is_reported() -> None:
    x = cupy.random.default_rng(1).standard_normal(SIZE, dtype=cupy.float32)
    with backends.algorithms.flags(deterministic=True):
        own = cupy.cumsum(x)
    reference = cupy.cumsum(x.astype(cupy.float64))
    error = float(cupy.max(cupy.abs(own - reference)) / cupy.max(cupy.abs(reference)))
    say(f"CuPy's own scan: max error {error:.2e} against a float64 scan")
    assert error < 1e-4

    def timed(deterministic: bool) -> float:
        with backends.algorithms.flags(deterministic=deterministic):
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
        f"cumsum of {SIZE:,} float32: CUB {cub_us:.1f} us, "
        f"CuPy's own scan {native_us:.1f} us (x{native_us / cub_us:.2f})"
    )


def test_refused_operations_raise_before_launching_and_warn_only_runs_them() -> None:
    a = cupy.zeros(4, cupy.float32)
    index = cupy.array([0, 0, 0, 1])
    with backends.algorithms.flags(deterministic=True):
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


# -- cuSPARSE products and CSR/CSC minor-axis indexing (issue 22) -------------------------------------

SPARSE_RUNS = 10


def sparse_matrix(fmt: str = "csr") -> Any:
    import cupyx.scipy.sparse as sparse

    # rows of very different lengths: where cuSPARSE's default algorithms split work and add atomically
    return sparse.random(20_000, 20_000, density=0.002, format=fmt, dtype=cupy.float32, random_state=0)


def distinct(results: list[Any]) -> int:
    return len({r.tobytes() if isinstance(r, cupy.ndarray) else r for r in results})


def test_sparse_products_are_bit_for_bit_equal_run_to_run_inside_the_scope() -> None:
    import cupyx.cusparse

    csr = sparse_matrix()
    x = cupy.random.default_rng(1).standard_normal(20_000, dtype=cupy.float32)
    X = cupy.asfortranarray(cupy.random.default_rng(2).standard_normal((20_000, 8), dtype=cupy.float32))
    dense = csr.toarray().astype(cupy.float64)
    products = {  # name: (product, its float64 dense reference)
        "csr @ x": (lambda: csr @ x, dense @ x.astype(cupy.float64)),
        "csr @ X": (lambda: csr @ X, dense @ X.astype(cupy.float64)),
        "coo spmv": (lambda: cupyx.cusparse.spmv(csr.tocoo(), x), dense @ x.astype(cupy.float64)),
        "coo spmm": (lambda: cupyx.cusparse.spmm(csr.tocoo(), X), dense @ X.astype(cupy.float64)),
        "csr.sum(axis=1)": (lambda: csr.sum(axis=1), dense.sum(axis=1, keepdims=True)),
    }
    for name, (product, reference) in products.items():
        outside = distinct([product() for _ in range(SPARSE_RUNS)])
        with backends.algorithms.flags(deterministic=True):
            runs = [product() for _ in range(SPARSE_RUNS)]
        error = float(cupy.abs(runs[0] - reference).max() / cupy.abs(reference).max())
        say(f"{name}: {distinct(runs)} distinct result(s) in {SPARSE_RUNS} runs inside the scope, "
            f"{outside} outside; relative error {error:.1e}")  # fmt: skip
        assert distinct(runs) == 1, name
        assert error < 1e-5, name
    with backends.algorithms.flags(deterministic=True), pytest.raises(RuntimeError, match="tocsr"):
        csr.tocsc() @ x  # a transposed product: refused, naming the way out


def test_minor_axis_fancy_indexing_is_bit_for_bit_equal_run_to_run_inside_the_scope() -> None:
    csr = sparse_matrix()
    idx = cupy.random.default_rng(3).integers(0, 20_000, 5_000, dtype=cupy.int32)
    parts = ("data", "indices", "indptr")

    def picked() -> bytes:
        result = csr[:, idx]
        return b"".join(getattr(result, part).tobytes() for part in parts)

    outside = distinct([picked() for _ in range(SPARSE_RUNS)])
    with backends.algorithms.flags(deterministic=True):
        runs = [picked() for _ in range(SPARSE_RUNS)]
        result = csr[:, idx]
    say(f"csr[:, idx] ({idx.size} columns): {distinct(runs)} distinct result(s) in {SPARSE_RUNS} runs inside the "
        f"scope, {outside} outside")  # fmt: skip
    assert distinct(runs) == 1
    assert result.has_sorted_indices
    assert bool((result.toarray() == csr.toarray()[:, idx]).all())  # the same matrix as CuPy's own path
