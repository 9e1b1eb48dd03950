"""What many test modules share and is not a fixture: a clock the test moves, the one wait helper,
and the property tests' example counts.

A test module never imports another test module (tests/test_architecture.py); what two of them
share lives here, in conftest.py, or in a helper module of its own (factories.py, gridproxy_*.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class FakeClock:
    """A monotonic clock that moves only when told: `clock()` reads it, `clock.sleep(s)` and
    `clock.advance(s)` move it on at once. `on_advance` callbacks run after each move (the Grid
    Proxy watchdog's `deadlines_moved`, so a request blocked on a socket sees its deadline pass)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self.slept: list[float] = []
        self.on_advance: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for callback in self.on_advance:
            callback()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)


def busiest_window(arrivals: list[float], seconds: float = 1.0) -> int:
    """The most arrivals in any window of `seconds` (a sliding window, as the proxy's limiter counts)."""
    times, most, first = sorted(arrivals), 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def wait_until(condition: Callable[[], object], *, timeout: float, what: str, every: float = 0.05) -> None:
    """Poll `condition` until it is true; fail naming `what` after `timeout` seconds.

    For what a test can only see by looking (a row another process writes, a port that opens, a
    worker's log line): `timeout` is a guard against a hang, never a figure the test asserts.
    """
    ends = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ends, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


def examples(full: int) -> int:
    """How many examples a property test tries: `full` in `make test`, a quarter of them (at least 10)
    in `make check`, which runs under the Hypothesis profile "quick" (tests/conftest.py)."""
    from hypothesis import settings

    return max(10, full // 4) if settings.get_current_profile_name() == "quick" else full


def farm_cell_node_ids(farm) -> list[int]:
    """The nodes of a fleet-map farm, in the order of its cells (figures.selectors.fleet_map)."""
    return [int(node_id) for node_id in re.findall(r'data-node="(\d+)"', farm.cells_html)]


@contextmanager
def worker_stops_quickly(app) -> Iterator[None]:
    """An in-process worker started after this (start_worker) stops within a tenth of a second.

    Told to stop, the worker's thread ends at its loop's next turn, and on Redis a turn ends when its
    BRPOP returns: after a second (kombu's brpop_timeout) when no message comes, a second on every worker
    test's teardown. kombu takes the BRPOP's timeout from the transport option polling_interval. Only
    the consumer's wait changes; what a task does and what is sent are as in production.
    """
    options = app.conf.broker_transport_options
    if app.conf.broker_url.startswith("redis"):
        app.conf.broker_transport_options = options | {"polling_interval": 0.1}
    try:
        yield
    finally:
        app.conf.broker_transport_options = options
