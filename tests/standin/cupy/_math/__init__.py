"""Stand-in for ``cupy._math``."""
