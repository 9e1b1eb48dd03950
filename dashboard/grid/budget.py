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
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dashboard.grid import telemetry
from dashboard.grid.deadline import Deadline
from dashboard.grid.types import GridUnavailable

log = logging.getLogger(__name__)

WINDOW_SECONDS = 1.0
DEFAULT_LIMIT = 15
DEFAULT_RESERVE = 3
# The label a budget's waits carry in the request tally (grid.telemetry; /metrics reads it apart).
BUDGET_ENDPOINT = "(budget)"
FALLBACK = "fallback"  # the /metrics priority label of requests a process's own window admitted
FALLBACK_RETRY_SECONDS = 5.0

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

    def admit(self, *, allowed: int) -> float:
        """Admit one request if fewer than `allowed` were admitted in the last second (0.0), else the
        seconds until one would be; admitting nothing in that case."""
        ...


# KEYS[1] the sorted set; ARGV: allowed, window in microseconds, a unique member.
# Scores are Redis's own clock in microseconds, so every host reads one time.
_ADMIT_LUA = """
local now_s = redis.call('TIME')
local now = tonumber(now_s[1]) * 1000000 + tonumber(now_s[2])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local allowed = tonumber(ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
if count < allowed then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], count - allowed, count - allowed, 'WITHSCORES')
return math.max(tonumber(oldest[2]) + window - now, 1)
"""


class RedisWindow:
    """The window in Redis: one Lua script admits or says how long to wait, atomically."""

    def __init__(self, url: str, *, key: str = "slicedash:grid-budget", socket_timeout: float = 2.0) -> None:
        import redis

        self.key = key
        self._redis = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
        self._script = self._redis.register_script(_ADMIT_LUA)

    def admit(self, *, allowed: int) -> float:
        waited_us = self._script(keys=[self.key], args=[allowed, int(WINDOW_SECONDS * 1_000_000), uuid.uuid4().hex])
        return int(waited_us) / 1_000_000


class FileWindow:
    """The window in a file, for processes on one host with no Redis (the embedded default).

    The file holds the admitted requests' times (time.time(): one host, one clock); an exclusive
    flock makes read-prune-count-append one step for every process.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def admit(self, *, allowed: int) -> float:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+") as handle:
                now = time.time()
                try:
                    times = [float(t) for t in json.loads(handle.read() or "[]")]
                except (ValueError, TypeError):  # a torn or foreign file: start the window again
                    times = []
                times = sorted(t for t in times if now - WINDOW_SECONDS < t <= now + WINDOW_SECONDS)
                if len(times) >= allowed:
                    return max(times[len(times) - allowed] + WINDOW_SECONDS - now, 1e-6)
                times.append(now)
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(times))
                return 0.0
        finally:
            os.close(fd)  # releases the lock


class MemoryWindow:
    """The window in this process only: the fallback when the shared store cannot be asked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []

    def admit(self, *, allowed: int) -> float:
        with self._lock:
            now = time.monotonic()
            self._times = [t for t in self._times if t > now - WINDOW_SECONDS]
            if len(self._times) >= allowed:
                return max(self._times[len(self._times) - allowed] + WINDOW_SECONDS - now, 1e-6)
            self._times.append(now)
            return 0.0


@dataclass
class RequestBudget:
    """`limit` requests in any 1 s window, `reserve` of them kept for interactive requests."""

    window: Window
    limit: int = DEFAULT_LIMIT
    reserve: int = DEFAULT_RESERVE
    # Seams for the tests: how to wait (the real clock by default).
    sleep: object = time.sleep
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

    def take(self, deadline: Deadline, *, what: str = "a grid proxy request") -> float:
        """Wait until the budget admits one request; the seconds waited.

        Raises GridUnavailable, without waiting, when the wait would pass the request's deadline.
        """
        priority = current_priority()
        allowed = self.allowed(priority)
        waited = 0.0
        while True:
            wait = self._admit(allowed)
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
        return waited

    def _admit(self, allowed: int) -> float:
        if self._fallback is not None and time.monotonic() < self._fallback_until:
            return self._by_fallback(allowed)
        try:
            wait = self.window.admit(allowed=allowed)
        except Exception as exc:  # a store that cannot be asked must not stop every grid read
            log.warning(
                "the shared grid request budget cannot be asked (%s); this process keeps its own window for "
                "%g s, then asks the store again",
                exc,
                FALLBACK_RETRY_SECONDS,
            )
            self._fallback = self._fallback or MemoryWindow()
            self._fallback_until = time.monotonic() + FALLBACK_RETRY_SECONDS
            return self._by_fallback(allowed)
        if self._fallback is not None:
            log.warning("the shared grid request budget answers again; this process's own window is dropped")
            self._fallback = None
        return wait

    def _by_fallback(self, allowed: int) -> float:
        wait = self._fallback.admit(allowed=allowed)
        if wait <= 0:
            telemetry.record(endpoint=BUDGET_ENDPOINT, outcome=FALLBACK, seconds=0.0)
        return wait


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
        import redis

        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"RMB_MAX_IN_FLIGHT must be a whole number of calls, 1 or more (got {cap!r})")
        self.cap, self.key = cap, key
        self._redis = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
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
