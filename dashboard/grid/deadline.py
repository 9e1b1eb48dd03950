"""Wall-clock budgets for calls out to the grid: one per request, and one per job step.

A socket time-out bounds one read, not an answer: a server that sends a byte every second
never trips a ten-second read time-out, and an answer can take as long as it likes. So every
request the Grid Proxy client makes has a total budget (tries and back-off included), and a
job step that reads the grid (`grid_step_deadline`) caps every request inside it as well.

The step budget travels in a context variable rather than through the Grid interface, so
the simulator (which makes no call out) needs no parameter it would ignore.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Deadline:
    """Ends at `ends` on `clock` (time.monotonic by default; a test's clock is a seam, as in `Pace`);
    `seconds` is the budget it was given, for messages. Deadlines compared share one clock."""

    ends: float
    seconds: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    @classmethod
    def within(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(ends=clock() + seconds, seconds=seconds, clock=clock)

    def remaining(self) -> float:
        return self.ends - self.clock()

    def passed(self) -> bool:
        return self.remaining() <= 0

    def words(self) -> str:
        return f"within {self.seconds:g} s"

    def earliest(self, other: Deadline | None) -> Deadline:
        return self if other is None or self.ends <= other.ends else other


_step: ContextVar[Deadline | None] = ContextVar("grid_step_deadline", default=None)


@contextmanager
def grid_step_deadline(seconds: float, *, clock: Callable[[], float] = time.monotonic) -> Iterator[Deadline]:
    """Every grid request made inside finishes (or fails) within `seconds` of now.

    Nested steps keep the earlier end, so an inner step never extends an outer one.
    """
    deadline = Deadline.within(seconds, clock=clock).earliest(_step.get())
    token = _step.set(deadline)
    try:
        yield deadline
    finally:
        _step.reset(token)


def current_step_deadline() -> Deadline | None:
    return _step.get()


__all__ = ["Deadline", "current_step_deadline", "grid_step_deadline"]
