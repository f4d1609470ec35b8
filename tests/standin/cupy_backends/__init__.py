"""Stand-in for ``cupy_backends`` (tests only; see ``tests/standin/README.md``)."""
