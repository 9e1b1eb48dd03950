"""How the Grid Proxy answered this process: requests by endpoint and outcome, with their durations.

The client records every request here (in memory, a lock and a dict update: it costs nothing next
to an HTTP round trip). The process's tally is written to the database by whoever owns the process's
lifetime (jobs.services.grid_requests, after each web request and each Celery task), so /metrics adds up
what every web process and every worker saw, on any host, and a restart loses nothing written.

Buckets are fixed (Prometheus histograms must keep theirs): the proxy answers in 0.1 to 0.3 s from
outside, and a request is cut at GRID_DEADLINE (30 s by default).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

# Upper bounds in seconds; the last bucket (+Inf) is implied.
BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
INF = "+Inf"

# Outcomes: "ok" (a 200 read), or the kind of failure the caller was given.
OK = "ok"


@dataclass(frozen=True)
class Tally:
    """Requests seen since the last drain: count and total seconds per (endpoint, outcome, bucket)."""

    counts: dict[tuple[str, str, str], int]
    seconds: dict[tuple[str, str, str], float]

    def __bool__(self) -> bool:
        return bool(self.counts)


_lock = threading.Lock()
_counts: Counter[tuple[str, str, str]] = Counter()
_seconds: Counter[tuple[str, str, str]] = Counter()


def bucket_of(seconds: float) -> str:
    """The label of the smallest bucket holding this duration (not cumulative: the reader sums)."""
    for bound in BUCKETS:
        if seconds <= bound:
            return repr(bound)
    return INF


def record(*, endpoint: str, outcome: str, seconds: float) -> None:
    with _lock:
        key = (endpoint, outcome, bucket_of(seconds))
        _counts[key] += 1
        _seconds[key] += seconds


def drain() -> Tally:
    """What was recorded since the last drain, and forget it (the caller stores it)."""
    with _lock:
        tally = Tally(counts=dict(_counts), seconds=dict(_seconds))
        _counts.clear()
        _seconds.clear()
    return tally


def restore(tally: Tally) -> None:
    """Put a drained tally back (its store failed): counted at the next chance, never lost or doubled."""
    with _lock:
        _counts.update(tally.counts)
        _seconds.update(tally.seconds)


def endpoint_of(path: str) -> str:
    """A path's endpoint as a label: /nodes/1774/statistics -> /nodes/{id}/statistics (bounded cardinality)."""
    parts = [("{id}" if part.isdigit() else part) for part in path.split("?", 1)[0].split("/")]
    label = "/".join(parts)
    return label if label in KNOWN_ENDPOINTS else "other"


KNOWN_ENDPOINTS = ("/nodes", "/nodes/{id}", "/nodes/{id}/statistics", "/contracts", "/farms", "/stats")
