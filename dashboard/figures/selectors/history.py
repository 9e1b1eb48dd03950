"""Capacity over time, as the fleet and node pages show it: sparklines and a trend, one query.

Reads the SnapshotFigures of one series (the fleet, a farm or a node) over the last TREND_DAYS;
figures.services.snapshots writes and thins them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from dashboard import capacity
from dashboard.models import SnapshotFigures

TREND_DAYS = 14
# The sparkline's drawing box (SVG user units); the page scales it.
WIDTH, HEIGHT = 120, 28
# A slope smaller than this (slices a day, either way) is called steady.
STEADY = 0.05

# figure -> how the page names it
LINES = {
    "free_deployable": "Free deployable",
    "deployable": "Deployable",
    "placeable": "Placeable now",
    "phantom": "Phantom",
}


@dataclass(frozen=True)
class Sparkline:
    figure: str
    label: str
    points: str  # the polyline's "x,y x,y ..." in a WIDTH x HEIGHT box
    first: int
    last: int
    low: int
    high: int

    @property
    def words(self) -> str:
        return f"{self.label}: {self.first} to {self.last} (lowest {self.low}, highest {self.high})"


@dataclass(frozen=True)
class Trend:
    words: str
    method: str
    per_day: float | None = None
    days_left: float | None = None


@dataclass(frozen=True)
class History:
    snapshots: int
    since: datetime
    sparklines: list[Sparkline]
    trend: Trend


def capacity_history(*, scope: str, subject: int, now: datetime, days: int = TREND_DAYS) -> History:
    """The series' sparklines and trend over the last `days` days; one query."""
    since = now - timedelta(days=days)
    rows = list(
        SnapshotFigures.objects.filter(scope=scope, subject=subject, snapshot__at__gte=since)
        .order_by("snapshot__at", "snapshot_id")
        .values_list("snapshot__at", *LINES)
    )
    times = [row[0] for row in rows]
    lines = [
        _sparkline(figure, label, times, [row[i + 1] for row in rows])
        for i, (figure, label) in enumerate(LINES.items())
    ]
    return History(
        snapshots=len(rows),
        since=since,
        sparklines=[line for line in lines if line is not None],
        trend=trend_of(times, [row[1] for row in rows], days=days),
    )


def _sparkline(figure: str, label: str, times: list[datetime], values: list[int]) -> Sparkline | None:
    if not values:
        return None
    start, span = times[0], max((times[-1] - times[0]).total_seconds(), 1.0)
    low, high = min(values), max(values)
    height = max(high - low, 1)
    points = " ".join(
        f"{(t - start).total_seconds() / span * WIDTH:.1f},{HEIGHT - 2 - (v - low) / height * (HEIGHT - 4):.1f}"
        for t, v in zip(times, values, strict=True)
    )
    if len(values) == 1:
        points = f"0,{HEIGHT / 2:.1f} {WIDTH},{HEIGHT / 2:.1f}"
    return Sparkline(figure=figure, label=label, points=points, first=values[0], last=values[-1], low=low, high=high)


# A trend is said from the first snapshots this far apart (the beat takes one every SNAPSHOT_EVERY, 15 min,
# and one after every job): in an hour-old fleet, by the hour, until a day of history says it by the day.
SHORT_SPAN = timedelta(minutes=10)
# Below this span the trend is shown but not fed to the run-out alert (per_day None): too short to act on.
ALERTING_SPAN = timedelta(hours=1)


def _span_words(span: timedelta) -> str:
    minutes = round(span.total_seconds() / 60)
    return f"{minutes} minutes" if minutes < 120 else f"{minutes // 60} hours"


def trend_of(times: list[datetime], values: list[int], *, days: int = TREND_DAYS) -> Trend:
    """Free deployable slices over time, by least squares over the snapshots given, and when none are left:
    a day at a time once a day of history exists, an hour at a time before (from SHORT_SPAN on)."""
    method = (
        f"Least-squares line through the {len(values)} snapshot{'' if len(values) == 1 else 's'} of the last {days} days "
        "(free deployable = deployable slices less those rented or deployed)."
    )
    span = times[-1] - times[0] if times else timedelta(0)
    if len(values) < 2 or span < SHORT_SPAN:
        return Trend(
            words="Not enough history for a trend yet: it needs snapshots 10 minutes apart or more "
            "(one every SNAPSHOT_EVERY and one after every job).",
            method=method,
        )
    xs = [(t - times[0]).total_seconds() / 86400 for t in times]
    slope = capacity.least_squares(list(zip(xs, values, strict=True))).slope
    daily = span >= timedelta(days=1)
    rate, unit = (slope, "a day") if daily else (slope / 24, "an hour")
    short = "" if daily else f" over the last {_span_words(span)} (a short history: it firms up as snapshots gather)"
    # Too short to act on: said on the page, not given to the run-out alert.
    alerting = span >= ALERTING_SPAN
    per_day = slope if alerting else None
    now_value = values[-1]
    if slope <= -STEADY:
        left_days = 0.0 if now_value <= 0 else now_value / -slope
        left = (
            "none are left now"
            if now_value <= 0
            else f"none left in about {left_days:.0f} days"
            if left_days >= 2
            else f"none left in about {left_days * 24:.0f} hours"
        )
        return Trend(
            words=f"Free deployable slices falling by {-rate:.1f} {unit}{short}; {left}.",
            method=method,
            per_day=per_day,
            days_left=left_days if alerting else None,
        )
    if slope >= STEADY:
        return Trend(
            words=f"Free deployable slices rising by {rate:.1f} {unit}{short}.", method=method, per_day=per_day
        )
    return Trend(words=f"Free deployable slices steady{short}.", method=method, per_day=per_day)
