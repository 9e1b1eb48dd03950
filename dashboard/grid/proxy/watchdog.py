"""The deadline on the wire: a watchdog that shuts a request's socket when its budget is spent.

A socket time-out bounds each read, so a server that drips one byte a second is never
timed out. A watchdog thread shuts the request's socket down when the budget is spent;
the blocked read then returns at once and the request fails with the deadline's words.
The connection classes below tell the watchdog of this thread which socket to watch.

General: it knows requests' and urllib3's connections and a Deadline, nothing of the Grid
Proxy. Use: mount `WatchedAdapter` on a requests.Session and make the request inside
`with Watchdog(deadline) as watchdog:`; afterwards `watchdog.fired` says whether it cut.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
from typing import Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from dashboard.grid.deadline import Deadline

_watching = threading.local()


class Watchdog:
    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.fired = False
        self.finished = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Watchdog:
        self._outer = getattr(_watching, "dog", None)
        _watching.dog = self
        _clock.add(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _watching.dog = self._outer
        with self._lock:
            self.finished = True
            self._sockets.clear()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if not any(known is sock for known in self._sockets):
                self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)

    def fire(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


class _WatchdogClock:
    """One thread for every request's deadline (a timer thread per request costs more than a request)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Watchdog]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, dog: Watchdog) -> None:
        with self._wake:
            heapq.heappush(self._due, (dog.deadline.ends, next(self._order), dog))
            # Started on first use, and again in a forked child (a worker process), where it is gone.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="grid-deadline-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._due and self._due[0][2].finished:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                wait = self._due[0][2].deadline.remaining()  # on the deadline's own clock
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                dog = heapq.heappop(self._due)[2]
            dog.fire()

    def recheck(self) -> None:
        """Fire, in the caller's thread, every watchdog whose deadline has passed; wake the thread for the rest."""
        due = []
        with self._wake:
            while self._due and (self._due[0][2].finished or self._due[0][2].deadline.remaining() <= 0):
                dog = heapq.heappop(self._due)[2]
                if not dog.finished:
                    due.append(dog)
            self._wake.notify()
        for dog in due:
            dog.fire()


_clock = _WatchdogClock()


def deadlines_moved() -> None:
    """Look at every request's deadline again now, and cut those passed before returning. The watchdog
    waits on the real clock for what is left of each; an injected clock that jumps ahead (a test's,
    Deadline.clock) says so here, so the cut comes before anything else the test does."""
    _clock.recheck()


def _shut(sock: Any) -> None:
    # TLS inside a proxy tunnel is urllib3's SSLTransport, which keeps the real socket as .socket.
    while not isinstance(sock, socket.socket) and getattr(sock, "socket", None) is not None:
        sock = sock.socket
    if not isinstance(sock, socket.socket):
        return
    try:
        # socket.socket's own shutdown, also under TLS: it wakes a read blocked in another thread.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _watched(connection: Any) -> None:
    # The socket itself, not the connection: http.client hands it to the response and forgets it
    # (connection.sock is None) when the server will close after answering.
    dog = getattr(_watching, "dog", None)
    sock = getattr(connection, "sock", None)
    if dog is not None and sock is not None:
        dog.watch(sock)


class _Watched:
    """Put before urllib3's HTTP or HTTPS connection: watched from its connect, and again at each request."""

    def connect(self) -> None:
        super().connect()
        _watched(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watched(self)  # a kept-alive connection is not connected again
        super().request(*args, **kwargs)


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_WATCHED_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = dict(_WATCHED_POOLS)
        return manager


__all__ = ["WatchedAdapter", "Watchdog", "deadlines_moved"]
