"""A real HTTP server on loopback that answers like the Grid Proxy, from canned JSON.

The public Grid Proxy is off this machine, so this is where the client meets real
sockets, real time-outs and real status codes. Routes answer a list of responses in
turn (the last one repeats), so "500, 500, then 200" is one line in a test. An answer whose body
is a function is asked for the body with the request's query (a dict of its parameters): a
proxy that ignores `page`, or one that invents new nodes on every page, is a few lines.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

SAMPLES = Path(__file__).resolve().parent / "data" / "gridproxy"


def sample(name: str) -> Any:
    """One of the synthetic Grid Proxy answers (copied from ../shared/gridproxy)."""
    return json.loads((SAMPLES / name).read_text())


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # dict/list -> JSON, str/bytes -> sent as is; a function of the query -> one of those
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds between the body's bytes: a server that drips its answer (never idle long enough
    # for a read time-out) until the client hangs up.
    drip: float = 0.0
    # A test's clock (tests/support.py FakeClock): the drip moves it on instead of sleeping.
    clock: Any = None


@dataclass
class CannedProxy:
    url: str = ""
    routes: dict[str, list[Answer]] = field(default_factory=dict)
    hits: Counter = field(default_factory=Counter)
    queries: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # each request's Authorization header ("" if none)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request's arrival
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, *answers: Answer | Any) -> None:
        self.routes[path] = [a if isinstance(a, Answer) else Answer(body=a) for a in answers]

    def next_answer(self, path: str) -> Answer | None:
        with self.lock:
            self.hits[path] += 1
            answers = self.routes.get(path)
            if not answers:
                return None
            return answers[min(self.hits[path], len(answers)) - 1]


def _body_bytes(answer: Answer, query: str) -> bytes:
    """The answer's body as sent: made from the query when it is a function, JSON for a dict or list."""
    body = answer.body
    if callable(body):
        body = body(dict(parse_qsl(query)))
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    return body or b""


def _drip(wfile, body: bytes, answer: Answer) -> None:
    """Send the body a byte at a time, `answer.drip` seconds apart (on the answer's clock when it has one)."""
    wfile.flush()
    for i in range(len(body)):
        wfile.write(body[i : i + 1])
        wfile.flush()
        if answer.clock is not None:
            answer.clock.advance(answer.drip)
        else:
            time.sleep(answer.drip)


def _handler(canned: CannedProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            parts = urlsplit(self.path)
            canned.arrivals.append(time.monotonic())
            canned.queries.append(parts.query)
            canned.authorizations.append(self.headers.get("Authorization", ""))
            answer = canned.next_answer(parts.path) or Answer(404, {"error": "not found"})
            if answer.delay:
                time.sleep(answer.delay)
            body = _body_bytes(answer, parts.query)
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if answer.drip:
                    _drip(self.wfile, body, answer)
                else:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a time-out test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


def start_canned_proxy() -> tuple[CannedProxy, _Server]:
    canned = CannedProxy()
    server = _Server(("127.0.0.1", 0), _handler(canned))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    canned.url = f"http://127.0.0.1:{server.server_address[1]}"
    return canned, server
