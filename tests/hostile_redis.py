"""Redis servers that misbehave, on loopback: one that accepts and never answers, one that answers a byte
at a time. They stand where an rmb-peer's Redis hangs (a stuck host, a full disk) or drips (a link
that delivers a byte now and then); the product must end every call by its deadline all the same.
Also the RMB client the RMB tests build (its budget and in-flight cap in keys of their own).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

from dashboard.capacity import GiB
from dashboard.grid.budget import RedisInFlight, RedisWindow, RequestBudget
from dashboard.grid.rmb import RmbClient

DEADLINE = 0.5  # seconds: an honest node answers within it; a silent one costs it once
ONE_SSD = int(931.5 * GiB)
GOOD_POOLS = [{"name": "a", "type": "ssd", "size": ONE_SSD, "used": 0}]


def rmb_client(url: str, *, deadline: float = DEADLINE, budget_url: str | None = None, **options) -> RmbClient:
    """An RMB client on `url`; its budget and in-flight cap on `budget_url` (default the same Redis)."""
    key = uuid.uuid4().hex
    store = budget_url or url
    return RmbClient(
        url,
        deadline=deadline,
        budget=RequestBudget(window=RedisWindow(store, key=f"test-rmb-budget:{key}"), limit=50, reserve=0),
        in_flight=RedisInFlight(store, cap=8, key=f"test-rmb-if:{key}"),
        **options,
    )


class LoopbackRedis:
    """A TCP server on a free loopback port; `serve(conn)` is what each accepted connection gets."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.stop = threading.Event()
        self.accepted = 0
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._listener.settimeout(0.05)
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        for conn in self._conns:
            try:
                conn.close()
            except OSError:
                pass
        self._listener.close()


class HungRedis(LoopbackRedis):
    """Accepts every connection and reads what it is sent, and never answers."""

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.1)
        while not self.stop.is_set():
            try:
                if not conn.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


class DripRedis(LoopbackRedis):
    """Answers each command with a long bulk string, one byte every `every` seconds: no single read
    ever waits long, so a per-read time-out never trips."""

    def __init__(self, every: float = 0.05) -> None:
        self.every = every
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.1)
        try:
            while not self.stop.is_set():
                try:
                    if not conn.recv(65536):
                        return
                except TimeoutError:
                    continue
                for byte in b"$1000000\r\n" + b"x" * 1000:
                    if self.stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
        except OSError:
            return
