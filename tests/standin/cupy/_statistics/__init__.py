"""Stand-in for ``cupy._statistics``."""
