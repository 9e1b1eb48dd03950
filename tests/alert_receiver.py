"""A webhook receiver on loopback for the alert tests: a real HTTP server that keeps what apprise posts."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class AlertReceiver:
    def __init__(self, *, delay: float = 0.0, status: int = 200, hold: threading.Event | None = None):
        """`delay`: seconds before answering (the real clock); `hold`: answer only once it is set
        (a receiver that is slow for as long as the test likes, with no clock at all)."""
        self.messages: list[dict] = []
        self.delay = delay
        self.hold = hold
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.hold is not None:
                    receiver.hold.wait(30)  # a guard: a test that never lets go must not hang the run
                receiver.messages.append(json.loads(body or b"{}"))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: close() waits up to one for the server's loop (0.5 s by default, in every test).
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """The apprise URL of this receiver (apprise's json:// posts {"title", "message", "type", ...})."""
        return f"json://127.0.0.1:{self.server.server_address[1]}/alerts"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
