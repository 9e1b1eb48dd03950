"""The rate-limited Grid Proxy stand-in of tests/grid/test_grid_budget_fleet.py, in a process of its own.

It counts arrivals as the real proxy does, on its own clock and out of the processes it limits (in
the test's process its handler threads would share the GIL with the clients and the live server, and
note arrival times late). `python -m tests.gridproxy_counting NODES LIMIT` prints its port, then
serves until SIGTERM; `GET /_test/arrivals` answers every arrival so far (monotonic seconds) and
the count of 429s, `GET /_test/reset` forgets them. Neither is counted or limited.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from tests.gridproxy_fleet import FleetProxy, fleet_node, start_fleet_proxy


class CountingProxy(FleetProxy):
    """The stand-in, keeping the arrival time of every request it was sent (the refused ones too)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.arrivals: list[float] = []

    def answer(self, path, query):
        if path == "/_test/arrivals":
            with self.lock:
                return 200, {"arrivals": list(self.arrivals), "refused": self.refused_for_rate}, {}
        if path == "/_test/reset":
            with self.lock:
                self.arrivals.clear()
                self.requests = self.refused_for_rate = 0
            return 200, {}, {}
        with self.lock:
            self.arrivals.append(time.monotonic())
        return super().answer(path, query)


def main(nodes: int, limit: int) -> None:
    proxy, server = start_fleet_proxy(CountingProxy(rate_limit=limit))
    proxy.add(*(fleet_node(n) for n in range(1, nodes + 1)))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(proxy.url.rsplit(":", 1)[1], flush=True)
    stopped.wait()
    server.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
