"""Stand-in for ``cupyx.scipy.ndimage`` (only the label statistics of ``_measurements``)."""

from cupyx.scipy.ndimage._measurements import (
    center_of_mass,
    mean,
    standard_deviation,
    sum,
    sum_labels,
    variance,
)

__all__ = ["center_of_mass", "mean", "standard_deviation", "sum", "sum_labels", "variance"]
