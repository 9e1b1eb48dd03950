"""Redis for calls with a deadline: every socket read and write is cut to what is left of the call's.

redis-py bounds one socket operation (`socket_timeout`), not a command: a server that answers a byte
every second never trips a 2 s time-out, a hung one costs the whole time-out per operation, and
since redis-py 6 a client retries a timed-out command (ten times by default). One precheck against
a hung rmb-peer Redis ran 379 s (issue 44). So the clients the grid's doors use (the RMB door, the
request budgets) are built here:

- no retries: the caller's deadline decides, and a failed call says so once;
- inside `redis_within(deadline)` each recv, send and connect gets only what is left of the deadline
  (never more than `socket_timeout`): past it the command fails with redis's TimeoutError, and
  redis-py drops the connection (a half-read answer never reaches the next command);
- outside any deadline a command is bounded per operation by `socket_timeout`, as before.

The deadline travels in a context variable, as the job step's does (grid.deadline), so a budget's
window (grid.budget) is cut by the call it admits without a parameter through every layer.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from dashboard.grid.deadline import Deadline

_cut: ContextVar[Deadline | None] = ContextVar("redis_cut_deadline", default=None)


@contextmanager
def redis_within(deadline: Deadline | None, *, grace: float = 0.0) -> Iterator[None]:
    """Every Redis operation of a cut client inside ends by `deadline` (plus `grace`, the time a
    server's answer to a command timed to the deadline itself needs to arrive), or fails."""
    if deadline is not None and grace:
        deadline = replace(deadline, ends=deadline.ends + grace)
    token = _cut.set(deadline)
    try:
        yield
    finally:
        _cut.reset(token)


def _left(base: float | None) -> float | None:
    """The time-out for the next socket operation: what is left of the deadline, capped by `base`."""
    deadline = _cut.get()
    if deadline is None:
        return base
    left = deadline.remaining()
    if left <= 0:
        raise TimeoutError("the call's deadline passed before Redis answered")
    return left if base is None else min(base, left)


class CutSocket:
    """A connected socket whose every read and write is cut to the deadline in force (or `settimeout`'s)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._timeout = sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def _cut(self) -> None:
        if self._timeout == 0:  # a non-blocking peek (redis-py's can_read): nothing to cut
            return
        self._sock.settimeout(_left(self._timeout))

    def recv(self, *args: Any) -> bytes:
        self._cut()
        return self._sock.recv(*args)

    def recv_into(self, *args: Any) -> int:
        self._cut()
        return self._sock.recv_into(*args)

    def send(self, *args: Any) -> int:
        self._cut()
        return self._sock.send(*args)

    def sendall(self, *args: Any) -> None:
        # Since Python 3.5 a time-out bounds the whole sendall, not each chunk.
        self._cut()
        self._sock.sendall(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _connection_classes() -> dict[str, type]:
    """The cut variant of each of redis-py's connection classes, by URL scheme (made on first use)."""
    from redis.connection import Connection, SSLConnection, UnixDomainSocketConnection

    class _Cut:
        def _connect(self):  # redis-py's hook: the connected socket, which every command then uses
            saved = self.socket_connect_timeout
            self.socket_connect_timeout = _left(saved)
            try:
                sock = super()._connect()
            finally:
                self.socket_connect_timeout = saved
            return CutSocket(sock)

    return {
        "redis": type("CutConnection", (_Cut, Connection), {}),
        "rediss": type("CutSSLConnection", (_Cut, SSLConnection), {}),
        "unix": type("CutUnixConnection", (_Cut, UnixDomainSocketConnection), {}),
    }


_classes: dict[str, type] = {}


def redis_client(url: str, *, socket_timeout: float = 2.0):
    """A redis-py client for `url` that never retries and is cut by `redis_within`."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not _classes:
        _classes.update(_connection_classes())
    scheme = url.split("://", 1)[0].lower()
    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        retry=Retry(NoBackoff(), 0),
        connection_class=_classes.get(scheme, _classes["redis"]),
    )


__all__ = ["CutSocket", "redis_client", "redis_within"]
