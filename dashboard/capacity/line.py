"""The one least-squares line of the product: y over x through points, and the sums it rests on.

ZOS's memory line per build (`overhead`), a node's reserve and per-VM overhead (policies.services.calibration)
and the history's trend (figures.selectors.history) all draw it here, so the arithmetic, and its rounding,
is the same wherever a line is fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """y = intercept + slope * x, by ordinary least squares; `sxx` and `sxy` the centred sums it rests on."""

    slope: float
    intercept: float
    mean_x: float
    mean_y: float
    sxx: float  # sum of (x - mean x)^2: how far apart the points' x are
    sxy: float  # sum of (x - mean x) * (y - mean y)


def least_squares(points: Sequence[tuple[float, float]]) -> Line:
    """The line through `points` (x, y); at least two distinct x (one x draws no line: ZeroDivisionError)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return Line(slope=slope, intercept=mean_y - slope * mean_x, mean_x=mean_x, mean_y=mean_y, sxx=sxx, sxy=sxy)
