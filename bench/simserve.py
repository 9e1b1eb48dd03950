"""`python -m bench.simserve PATH [--nodelay] [--latency-ms N] [--arrivals FILE]`: serve the simulated grid at PATH
on loopback; prints the port.

--latency-ms adds N ms before every answer, as the real Grid Proxy is 100-300 ms away.
--arrivals appends each request's arrival (unix seconds) to FILE, one a line: what the proxy's rate
limiter would count (the bench's requests-in-any-second figure).

Without --nodelay it forces Nagle's algorithm back on, as serve_simulator had it before it set
TCP_NODELAY: the headers and the body go out in two sends, so Nagle holds the body until the
client's delayed ACK (about 40 ms on Linux) on every keep-alive request. The bench measures
both, to show what the setting saves.
Stops by itself when its parent (the bench) is gone or after MAX_SECONDS.
"""

from __future__ import annotations

import os
import sys
import threading
import time

MAX_SECONDS = 30 * 60


def main(path: str, *, nodelay: bool = False, latency_ms: int = 0, arrivals: str = "") -> None:
    from sim.grid import SimulatedGrid, serve_simulator

    server = serve_simulator(SimulatedGrid(path), host="127.0.0.1", port=0, latency=latency_ms / 1000)
    server.RequestHandlerClass.disable_nagle_algorithm = nodelay
    if arrivals:
        answer, lock = server.RequestHandlerClass.do_GET, threading.Lock()

        def do_get(handler) -> None:
            with lock, open(arrivals, "a") as log:
                log.write(f"{time.time():.6f}\n")
            answer(handler)

        server.RequestHandlerClass.do_GET = do_get
    parent = os.getppid()

    def watchdog() -> None:
        started = time.monotonic()
        while os.getppid() == parent and time.monotonic() - started < MAX_SECONDS:
            time.sleep(1)
        server.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    latency = [int(arg.split("=", 1)[1]) for arg in sys.argv[2:] if arg.startswith("--latency-ms=")]
    arrivals = [arg.split("=", 1)[1] for arg in sys.argv[2:] if arg.startswith("--arrivals=")]
    main(
        sys.argv[1],
        nodelay="--nodelay" in sys.argv[2:],
        latency_ms=latency[-1] if latency else 0,
        arrivals=arrivals[-1] if arrivals else "",
    )
