"""A library function pins its own flags with a decorator without disturbing its caller.

    python examples/library_pins_flags.py
"""

from __future__ import annotations

import itertools

import backends


@backends.deterministic()
def reproducible_sum_of_products(rows: list[list[float]]) -> float:
    """A library routine that must be bitwise reproducible, whatever its caller chose."""
    assert backends.cudnn.deterministic and not backends.cuda.matmul.allow_tf32
    return sum(a * b for row in rows for a, b in itertools.pairwise(row))


def main() -> None:
    with backends.cuda.matmul.tf32(True), backends.cudnn.flags(benchmark=True):
        result = reproducible_sum_of_products([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        # The caller's own choices are untouched after the call.
        print(f"result={result} caller: allow_tf32={backends.cuda.matmul.allow_tf32} "
              f"benchmark={backends.cudnn.benchmark}")
        assert backends.cuda.matmul.allow_tf32 and backends.cudnn.benchmark
    print(f"after the scope: allow_tf32={backends.cuda.matmul.allow_tf32}")


if __name__ == "__main__":
    main()
