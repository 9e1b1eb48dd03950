"""One request budget for the whole deployment: every Grid Proxy request of every process asks it first.

The public Grid Proxy allows each client IP 20 requests a second over a sliding 1 s window and
answers 429 past it (tfgrid-sdk-go grid-proxy, mw/ratelimiter.go). Every web process, worker and
command behind one outgoing IP shares those 20, so a limit kept in one process's memory is no
limit: N workers would each take it whole. The window lives where every process sees it:

- `RedisWindow` when the broker is Redis (a production fleet): a sorted set of the admitted
  requests' times, pruned and counted by one Lua script, so admitting is atomic across hosts
  and the clock is Redis's own (`TIME`), not each host's;
- `FileWindow` for the embedded default, which runs Celery's filesystem transport and has no
  Redis: a small file under VAR_DIR, read and written under an exclusive `flock` (its web
  process, worker and commands share one host).

`GRID_RATE_LIMIT` (default 15, below the proxy's 20 to leave room for anything else behind the
same IP) is the number of requests admitted in any 1 s window. `GRID_RATE_RESERVE` (default 3) of
them background work may not take: a watch or a bulk job reading thousands of nodes would
otherwise fill every window and make an admin's precheck wait behind it. Background work runs
inside `background()`; everything else is interactive.

A store that cannot be asked (Redis down or slow) does not stop the product: the process falls
back to its own window in memory, logs it, and keeps the limit per process, but only while the
store cannot answer: it is asked again every FALLBACK_RETRY_SECONDS. A fallback kept for good was
the leak issue 35 found (three workers, each with its own 15 a second, past the proxy's 20). Each
request a fallback admits is counted in /metrics (slicedash_grid_budget_wait_seconds, priority
"fallback"), so a budget that is not shared shows.

A request keeps its place until its answer is in (`sending`): the proxy counts a request when it
arrives, which on a busy host can be long after it was admitted, so a place freed at admission
would let requests admitted in two windows arrive in one. Counting each request from admission to
answer bounds what the proxy can see in any second by the limit, however late they arrive.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dashboard.grid import telemetry
from dashboard.grid.deadline import Deadline
from dashboard.grid.redis_cut import redis_client, redis_within
from dashboard.grid.types import GridUnavailable

log = logging.getLogger(__name__)

WINDOW_SECONDS = 1.0
DEFAULT_LIMIT = 15
DEFAULT_RESERVE = 3
# The label a budget's waits carry in the request tally (grid.telemetry; /metrics reads it apart).
BUDGET_ENDPOINT = "(budget)"
FALLBACK = "fallback"  # the /metrics priority label of requests a process's own window admitted
FALLBACK_RETRY_SECONDS = 5.0
# How often a request waiting behind ones still awaiting their answer looks again (their end is unknown).
POLL_SECONDS = 0.02
# The longest a request awaiting its answer keeps its place: past it, a process that died mid-request frees it.
HOLD_MAX_SECONDS = 120.0

INTERACTIVE = "interactive"
BACKGROUND = "background"
_priority: ContextVar[str] = ContextVar("grid_request_priority", default=INTERACTIVE)


@contextmanager
def background() -> Iterator[None]:
    """Grid requests made inside are background work (the watch, bulk jobs): they leave the reserve alone."""
    token = _priority.set(BACKGROUND)
    try:
        yield
    finally:
        _priority.reset(token)


def current_priority() -> str:
    return _priority.get()


class Window(Protocol):
    """Where the admitted requests of the last second are kept, for every process that shares it."""

    def admit(self, *, allowed: int, member: str | None = None, hold: float = 0.0) -> float:
        """Admit one request if fewer than `allowed` were counted in the last second (0.0), else the
        seconds until one would be; admitting nothing in that case. A request admitted with `hold`
        counts as sent for `hold` seconds more, until `settle(member)` says when its answer came."""
        ...

    def settle(self, member: str) -> None:
        """The request's answer is in: it counts from now, as any request sent now, then leaves."""
        ...


# KEYS[1] the sorted set; ARGV: allowed, window, a unique member, hold, poll (all times in microseconds).
# Scores are Redis's own clock, so every host reads one time; a score in the future is a request
# awaiting its answer, whose end nobody knows: a request behind it looks again after `poll`.
_ADMIT_LUA = """
local now_s = redis.call('TIME')
local now = tonumber(now_s[1]) * 1000000 + tonumber(now_s[2])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local allowed = tonumber(ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
if count < allowed then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(last[2]) - now + window) / 1000) + 1000)
  return 0
end
local oldest = tonumber(redis.call('ZRANGE', KEYS[1], count - allowed, count - allowed, 'WITHSCORES')[2])
if oldest > now then
  return tonumber(ARGV[5])
end
return math.max(oldest + window - now, 1)
"""

# KEYS[1] the sorted set; ARGV[1] the member: its answer is in, so it counts from now (if still there).
_SETTLE_LUA = """
local now_s = redis.call('TIME')
redis.call('ZADD', KEYS[1], 'XX', tonumber(now_s[1]) * 1000000 + tonumber(now_s[2]), ARGV[1])
return 0
"""


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _wait_behind(oldest: float, now: float) -> float:
    """The wait behind the request whose place is the next to free: its end, or a poll while it is awaited."""
    return POLL_SECONDS if oldest > now else max(oldest + WINDOW_SECONDS - now, 1e-6)


class RedisWindow:
    """The window in Redis: one Lua script admits or says how long to wait, atomically."""

    def __init__(self, url: str, *, key: str = "slicedash:grid-budget", socket_timeout: float = 2.0) -> None:
        self.key = key
        # Cut to the admitted request's deadline (grid.redis_cut): a hung store never holds a request past it.
        self._redis = redis_client(url, socket_timeout=socket_timeout)
        self._script = self._redis.register_script(_ADMIT_LUA)
        self._settle = self._redis.register_script(_SETTLE_LUA)

    def admit(self, *, allowed: int, member: str | None = None, hold: float = 0.0) -> float:
        args = [allowed, _us(WINDOW_SECONDS), member or uuid.uuid4().hex, _us(hold), _us(POLL_SECONDS)]
        return int(self._script(keys=[self.key], args=args)) / 1_000_000

    def settle(self, member: str) -> None:
        self._settle(keys=[self.key], args=[member])


class FileWindow:
    """The window in a file, for processes on one host with no Redis (the embedded default).

    The file maps each counted request to its time (time.time(): one host, one clock); an exclusive
    flock makes read-prune-count-append one step for every process.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def admit(self, *, allowed: int, member: str | None = None, hold: float = 0.0) -> float:
        with self._counted() as (now, counted):
            if len(counted) >= allowed:
                return _wait_behind(sorted(counted.values())[len(counted) - allowed], now)
            counted[member or uuid.uuid4().hex] = now + hold
            return 0.0

    def settle(self, member: str) -> None:
        with self._counted() as (now, counted):
            if member in counted:
                counted[member] = now

    @contextmanager
    def _counted(self) -> Iterator[tuple[float, dict[str, float]]]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+") as handle:
                now = time.time()
                try:
                    counted = {str(k): float(t) for k, t in json.loads(handle.read() or "{}").items()}
                except (ValueError, TypeError, AttributeError):  # a torn or foreign file: start the window again
                    counted = {}
                latest = now + WINDOW_SECONDS + HOLD_MAX_SECONDS  # a later time is a clock that jumped
                counted = {k: t for k, t in counted.items() if now - WINDOW_SECONDS < t <= latest}
                before = dict(counted)
                yield now, counted
                if counted != before:
                    handle.seek(0)
                    handle.truncate()
                    handle.write(json.dumps(counted))
        finally:
            os.close(fd)  # releases the lock


class MemoryWindow:
    """The window in this process only: the fallback when the shared store cannot be asked."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._counted: dict[str, float] = {}
        self._clock = clock

    def admit(self, *, allowed: int, member: str | None = None, hold: float = 0.0) -> float:
        with self._lock:
            now = self._clock()
            self._counted = {k: t for k, t in self._counted.items() if t > now - WINDOW_SECONDS}
            if len(self._counted) >= allowed:
                return _wait_behind(sorted(self._counted.values())[len(self._counted) - allowed], now)
            self._counted[member or uuid.uuid4().hex] = now + hold
            return 0.0

    def settle(self, member: str) -> None:
        with self._lock:
            if member in self._counted:
                self._counted[member] = self._clock()


@dataclass
class RequestBudget:
    """`limit` requests in any 1 s window, `reserve` of them kept for interactive requests."""

    window: Window
    limit: int = DEFAULT_LIMIT
    reserve: int = DEFAULT_RESERVE
    # Seams for the tests (the real clock by default): how to wait, and the clock of the fallback's interval.
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    # Whose budget it is, for its words: the settings that size it and what every process shares.
    # The RMB door keeps one of its own (RMB_RATE_LIMIT, grid.rmb) with the same window.
    limit_setting: str = "GRID_RATE_LIMIT"
    reserve_setting: str = "GRID_RATE_RESERVE"
    shared: str = "this grid proxy"

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(
                f"{self.limit_setting} must be a whole number of requests a second, 1 or more (got {self.limit!r})"
            )
        if not isinstance(self.reserve, int) or not 0 <= self.reserve < self.limit:
            raise ValueError(
                f"{self.reserve_setting} must be a whole number from 0 to {self.limit_setting} - 1 "
                f"({self.limit - 1}), got {self.reserve!r}"
            )
        self._fallback: MemoryWindow | None = None
        self._fallback_until = 0.0

    def allowed(self, priority: str) -> int:
        return self.limit - self.reserve if priority == BACKGROUND else self.limit

    @contextmanager
    def sending(self, deadline: Deadline, *, what: str = "a grid proxy request") -> Iterator[float]:
        """Take a place for one request (the seconds waited) and keep it until the block ends with its
        answer in: the place counts from admission to answer, wherever in between the proxy counts it."""
        member = uuid.uuid4().hex
        hold = min(max(deadline.remaining(), 0.0), HOLD_MAX_SECONDS)
        waited, window = self._take(deadline, what=what, member=member, hold=hold)
        try:
            yield waited
        finally:
            try:
                window.settle(member)
            except Exception as exc:  # the place then frees itself at `hold`; the answer is what matters
                log.warning("the grid request budget could not be told a request was answered (%s)", exc)

    def take(self, deadline: Deadline, *, what: str = "a grid proxy request") -> float:
        """Wait until the budget admits one request, counted from now; the seconds waited.

        Raises GridUnavailable, without waiting, when the wait would pass the request's deadline.
        """
        return self._take(deadline, what=what, member=None, hold=0.0)[0]

    def _take(self, deadline: Deadline, *, what: str, member: str | None, hold: float) -> tuple[float, Window]:
        priority = current_priority()
        allowed = self.allowed(priority)
        waited = 0.0
        while True:
            with redis_within(deadline):  # a store that hangs costs this request its deadline, never more
                wait, window = self._admit(allowed, member=member, hold=hold)
            if wait <= 0:
                break
            if wait >= deadline.remaining():
                telemetry.record(endpoint=BUDGET_ENDPOINT, outcome=priority, seconds=waited)
                raise GridUnavailable(
                    f"{what} was not sent: the request budget ({self.limit} a second for every process sharing "
                    f"{self.shared}, {self.limit_setting}; {allowed} for {priority} work) had no room before its "
                    f"deadline ({deadline.seconds:g} s) passed; the grid is being read hard, try again shortly"
                )
            self.sleep(wait)
            waited += wait
        if waited:
            telemetry.record(endpoint=BUDGET_ENDPOINT, outcome=priority, seconds=waited)
        return waited, window

    def _admit(self, allowed: int, *, member: str | None, hold: float) -> tuple[float, Window]:
        """The wait (0.0: admitted) and the window that answered: the shared one, or this process's own."""
        if self._fallback is not None and self.clock() < self._fallback_until:
            return self._by_fallback(allowed, member=member, hold=hold)
        try:
            wait = self.window.admit(allowed=allowed, member=member, hold=hold)
        except Exception as exc:  # a store that cannot be asked must not stop every grid read
            log.warning(
                "the shared grid request budget cannot be asked (%s); this process keeps its own window for "
                "%g s, then asks the store again",
                exc,
                FALLBACK_RETRY_SECONDS,
            )
            self._fallback = self._fallback or MemoryWindow(clock=self.clock)
            self._fallback_until = self.clock() + FALLBACK_RETRY_SECONDS
            return self._by_fallback(allowed, member=member, hold=hold)
        if self._fallback is not None:
            log.warning("the shared grid request budget answers again; this process's own window is dropped")
            self._fallback = None
        return wait, self.window

    def _by_fallback(self, allowed: int, *, member: str | None, hold: float) -> tuple[float, Window]:
        fallback = self._fallback
        wait = fallback.admit(allowed=allowed, member=member, hold=hold)
        if wait <= 0:
            telemetry.record(endpoint=BUDGET_ENDPOINT, outcome=FALLBACK, seconds=0.0)
        return wait, fallback


# KEYS[1] the sorted set of calls in flight; ARGV: cap, lease in microseconds, the call's member.
# A lease ends by itself (its score is when), so a process that died mid-call frees its place.
_LEASE_LUA = """
local now_s = redis.call('TIME')
local now = tonumber(now_s[1]) * 1000000 + tonumber(now_s[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) / 1000) + 1000)
  return 1
end
return 0
"""


class RedisInFlight:
    """A cap on calls awaiting their answer, shared by every process through Redis (the RMB door's):
    `lease` takes a place for one call until `seconds` from now unless `release`d first."""

    def __init__(self, url: str, *, cap: int, key: str = "slicedash:rmb-in-flight", socket_timeout: float = 2.0):
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"RMB_MAX_IN_FLIGHT must be a whole number of calls, 1 or more (got {cap!r})")
        self.cap, self.key = cap, key
        self._redis = redis_client(url, socket_timeout=socket_timeout)  # cut by the RMB call's deadline
        self._script = self._redis.register_script(_LEASE_LUA)

    def lease(self, member: str, *, seconds: float) -> bool:
        return bool(self._script(keys=[self.key], args=[self.cap, max(int(seconds * 1_000_000), 1), member]))

    def release(self, member: str) -> None:
        self._redis.zrem(self.key, member)


_budgets: dict[tuple, RequestBudget] = {}
_budgets_lock = threading.Lock()


def budget_for(*, broker_url: str, var_dir: Path, limit: int, reserve: int) -> RequestBudget:
    """The process's budget for these settings (one store connection per process)."""
    key = (broker_url, str(var_dir), limit, reserve)
    with _budgets_lock:
        if key not in _budgets:
            if broker_url.startswith(("redis://", "rediss://", "unix://")):
                window: Window = RedisWindow(broker_url)
            else:
                window = FileWindow(Path(var_dir) / "grid-budget.json")
            _budgets[key] = RequestBudget(window=window, limit=limit, reserve=reserve)
        return _budgets[key]


def budget_from_settings() -> RequestBudget:
    from django.conf import settings

    return budget_for(
        broker_url=settings.CELERY_BROKER_URL,
        var_dir=settings.VAR_DIR,
        limit=settings.GRID_RATE_LIMIT,
        reserve=settings.GRID_RATE_RESERVE,
    )


__all__ = [
    "BACKGROUND",
    "BUDGET_ENDPOINT",
    "INTERACTIVE",
    "FileWindow",
    "MemoryWindow",
    "RedisInFlight",
    "RedisWindow",
    "RequestBudget",
    "background",
    "budget_for",
    "budget_from_settings",
    "current_priority",
]
