"""A loopback Grid Proxy over a fleet held in memory, whose nodes a test changes between reads.

A real HTTP server in the real shapes (flat entries for GET /nodes, nested `capacity` for
GET /nodes/{id}), with the real proxy's habits that the watch must live with: `node_ids`,
`farm_ids`, `page`, `size` and `ret_count` (the `count` header), 400 for a parameter it does not
know (`refuse_node_ids`: a proxy older than v0.15.6), and its rate limiter (`rate_limit` requests
in any 1 s window per client, then 429 with `Retry-After: 1`). `delay` adds that much to each
answer (the network's round trip from outside).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

GIB = 1024**3
KNOWN_PARAMETERS = {"node_ids", "farm_ids", "page", "size", "ret_count", "status"}


# tfgrid-sdk-go grid-proxy/pkg/types/validators.go Zos3NodesFeatures: what a full ZOS node lists.
FULL_ZOS_FEATURES = [
    "zmount", "zdb", "volume", "ipv4", "ip", "gateway-name-proxy", "gateway-fqdn-proxy", "qsfs", "zlogs",
    "network", "zmachine", "wireguard", "yggdrasil", "mycelium",
]  # fmt: skip


def fleet_node(node_id: int, *, farm_id: int = 4242, mru: int = 31 * GIB, sru: int = int(931.5 * GIB)) -> dict:
    """A node as today's GET /nodes lists it (grid/schemas/gridproxy.json Node): up, nothing deployed (used is
    the proxy's reserve)."""
    return {
        "id": f"{node_id:010d}-{farm_id:06d}-fleet",
        "nodeId": node_id,
        "farmId": farm_id,
        "farmName": f"farm-{farm_id}",
        "twinId": 10_000 + node_id,
        "country": "Belgium",
        "gridVersion": 3,
        "city": "Ghent",
        "uptime": 86_400,
        "created": 1_716_371_520,
        "farmingPolicyId": 1,
        "updatedAt": int(time.time()),
        "total_resources": {"cru": 8, "sru": sru, "hru": 0, "mru": mru},
        "used_resources": {"cru": 0, "sru": 20 * GIB, "hru": 0, "mru": max(mru // 10, 2 * GIB)},
        "location": {"country": "Belgium", "city": "Ghent", "longitude": None, "latitude": None},
        "publicConfig": {"domain": "", "gw4": "", "gw6": "", "ipv4": "", "ipv6": ""},
        "status": "up",
        "certificationType": "Diy",
        "dedicated": True,
        "inDedicatedFarm": False,
        "rentContractId": 0,
        "rented": False,
        "rentable": True,
        "rentedByTwinId": 0,
        "serialNumber": "Not Specified",
        "power": {"state": "Up", "target": "Up"},
        "num_gpu": 0,
        "extraFee": 0,
        "healthy": True,
        "dmi": {"bios": {"vendor": "", "version": ""}, "baseboard": {"manufacturer": "", "product_name": ""},
                "processor": [], "memory": []},
        "speed": {"upload": 0, "download": 0},
        "gpus": [],
        "price_usd": 0.0,
        "farm_free_ips": 0,
        "features": list(FULL_ZOS_FEATURES),
    }  # fmt: skip


@dataclass
class FleetProxy:
    nodes: dict[int, dict] = field(default_factory=dict)
    url: str = ""
    delay: float = 0.0
    refuse_node_ids: bool = False
    rate_limit: int | None = None
    fail_next: int = 0  # the next this many requests answer 503 (a proxy having a bad moment)
    requests: int = 0
    refused_for_rate: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _arrivals: deque = field(default_factory=deque)

    def add(self, *nodes: dict) -> None:
        with self.lock:
            for node in nodes:
                self.nodes[node["nodeId"]] = node

    def change(self, node_id: int, **fields: Any) -> None:
        """Change what the grid says about a node from now on (nested keys with a dict value merge)."""
        with self.lock:
            node = self.nodes[node_id]
            for key, value in fields.items():
                if isinstance(value, dict) and isinstance(node.get(key), dict):
                    node[key] = {**node[key], **value}
                else:
                    node[key] = value

    def _rate_refused(self) -> bool:
        if self.rate_limit is None:
            return False
        now = time.monotonic()
        with self.lock:
            while self._arrivals and self._arrivals[0] <= now - 1.0:
                self._arrivals.popleft()
            if len(self._arrivals) >= self.rate_limit:
                self.refused_for_rate += 1
                return True
            self._arrivals.append(now)
            return False

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            self.requests += 1
        if self._rate_refused():
            return 429, {"error": "too many requests"}, {"Retry-After": "1"}
        with self.lock:
            failing, self.fail_next = self.fail_next > 0, max(self.fail_next - 1, 0)
        if failing:
            return 503, {"error": "service unavailable"}, {}
        if self.delay:
            time.sleep(self.delay)
        unknown = set(query) - KNOWN_PARAMETERS
        if self.refuse_node_ids and "node_ids" in query:
            unknown.add("node_ids")
        if unknown:
            return 400, {"error": f"schema: invalid path {sorted(unknown)[0]!r}"}, {}
        with self.lock:
            snapshot = {k: json.loads(json.dumps(v)) for k, v in self.nodes.items()}
        if path.startswith("/nodes/"):
            return _one_node(snapshot, path[len("/nodes/") :])
        if path != "/nodes":
            return 404, {"error": "not found"}, {}
        chosen = _nodes_chosen(snapshot, query)
        size, page = int(query.get("size", 50)), int(query.get("page", 1))
        headers = {"count": str(len(chosen))} if query.get("ret_count") == "true" else {}
        return 200, chosen[(page - 1) * size : page * size], headers


def _one_node(snapshot: dict[int, dict], tail: str) -> tuple[int, Any, dict[str, str]]:
    """GET /nodes/<id>: the node with its capacity nested, as the proxy answers it, or 404."""
    if not tail.isdigit() or int(tail) not in snapshot:
        return 404, {"error": "node not found"}, {}
    node = snapshot[int(tail)]
    node["capacity"] = {
        "total_resources": node.pop("total_resources"),
        "used_resources": node.pop("used_resources"),
    }
    return 200, node, {}


def _nodes_chosen(snapshot: dict[int, dict], query: dict[str, str]) -> list[dict]:
    """GET /nodes: the nodes its filters (node_ids, farm_ids, status) keep, by node id."""
    chosen = sorted(snapshot.values(), key=lambda n: n["nodeId"])
    if "node_ids" in query:
        wanted = {int(n) for n in query["node_ids"].split(",") if n}
        chosen = [n for n in chosen if n["nodeId"] in wanted]
    if "farm_ids" in query:
        farms = {int(f) for f in query["farm_ids"].split(",") if f}
        chosen = [n for n in chosen if n["farmId"] in farms]
    if "status" in query:
        statuses = set(query["status"].split(","))
        chosen = [n for n in chosen if n["status"] in statuses]
    return chosen


def _handler(proxy: FleetProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server's naming
            parts = urlsplit(self.path)
            status, body, headers = proxy.answer(parts.path, dict(parse_qsl(parts.query)))
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


def start_fleet_proxy(proxy: FleetProxy | None = None) -> tuple[FleetProxy, ThreadingHTTPServer]:
    proxy = proxy or FleetProxy()
    server = _Server(("127.0.0.1", 0), _handler(proxy))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    return proxy, server
