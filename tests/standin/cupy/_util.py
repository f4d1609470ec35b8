"""Stand-in for ``cupy._util``: ``PerformanceWarning``."""


class PerformanceWarning(RuntimeWarning):
    """Warning that indicates possible performance issues."""
