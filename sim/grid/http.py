"""The simulated grid behind the Grid Proxy's own HTTP paths and JSON shapes.

So the real GridProxyClient can be pointed at the simulator (GRID_BACKEND=gridproxy,
GRID_PROXY_URL=http://127.0.0.1:8081) and exercised end to end without the internet.

    GET /nodes?farm_ids=1,2&node_ids=..&status=up&page=1&size=50[&ret_count=true]   flat total_resources / used_resources (and a `count` header)
    GET /nodes/{id}                          nested capacity.total_resources / used_resources
    GET /nodes/{id}/statistics               system / total / used / users
    GET /contracts?node_id=N&state=Created,GracePeriod&page=1&size=50[&ret_count=true]   types.Contract, by contract id
    GET /farms?farm_id=F  or  GET /farms?page=1&size=50                                   types.Farm with publicIps

Every answer is in today's shape, judged in the quick loop by grid/schemas/gridproxy.json (strict: no field
the real proxy does not send; tests/grid/test_contracts_simulated.py).

Errors answer as the proxy does (tfgrid-sdk-go grid-proxy, mw.AsHandlerFunc): a JSON
body {"error": "..."}; 404 {"error": "node not found"} for an unknown node; and for
the statistics of a down or standby node the proxy's 500 with
{"error": "cannot fetch statistics from node N with status: down"} (it refuses to ask
the node over the relay). One deliberate difference: a node id that is not a number
gets 400 here, where the proxy answers 502 (its parse error is wrapped as a bad gateway).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dashboard.grid.types import NODE_STATUSES, GridError, NodeAway, NodeCapacity, NodeNotFound, RmbRefused

logger = logging.getLogger(__name__)

_NODE_RE = re.compile(r"^/nodes/([^/]+)/?$")
NOT_FOUND_TEXT = b"404 page not found\n"
_STATISTICS_RE = re.compile(r"^/nodes/([^/]+)/statistics/?$")


# From its first byte, a request (line and headers) must arrive within this long; a client that
# drips it is cut off rather than holding a thread for as long as it likes.
REQUEST_READ_DEADLINE = 10.0


class SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    # Shutting down must not wait for a client that keeps its connection open.
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client cut off or gone away is routine here, not a traceback on the terminal.
        logger.debug("simulated grid proxy: connection from %s ended with an error", client_address, exc_info=True)


def serve_simulator(
    grid: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    request_read_deadline: float = REQUEST_READ_DEADLINE,
    latency: float = 0.0,
    timer: Callable[[float, Callable[[], None]], Any] = threading.Timer,
) -> ThreadingHTTPServer:
    """A server for `grid` (not yet serving: run `serve_forever()`, in a thread if need be).

    `latency` seconds are added before every answer: the real proxy is 100-300 ms away, and a
    read that is fast on loopback can still be far too slow at grid scale (the bench's case).
    `timer(seconds, cut_off)` keeps the request read deadline (threading.Timer; a test's is a seam).
    """
    handler = type(
        "SimulatorHandler",
        (_Handler,),
        {
            "grid": grid,
            "request_read_deadline": request_read_deadline,
            "latency": float(latency),
            "timer": staticmethod(timer),
        },
    )
    return SimulatorServer((host, port), handler)


class _BadRequest(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    grid: Any
    server_version = "simgrid"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with keep-alive, Nagle's algorithm would hold the
    # body until the client's delayed ACK (~40 ms a request, measured in BENCHMARKS.md).
    disable_nagle_algorithm = True
    request_read_deadline = REQUEST_READ_DEADLINE
    latency = 0.0
    timer = staticmethod(threading.Timer)

    def handle_one_request(self) -> None:
        try:
            # Waiting for a kept-alive client's next request costs nothing; the clock starts at its first byte.
            if not self.rfile.peek(1):
                self.close_connection = True
                return
        except OSError:
            self.close_connection = True
            return
        self._read_timer = self.timer(self.request_read_deadline, self._cut_off)
        self._read_timer.daemon = True
        self._read_timer.start()
        try:
            super().handle_one_request()
        finally:
            self._read_timer.cancel()

    def _cut_off(self) -> None:
        logger.info(
            "simulated grid proxy: %s did not send its request within %g s; cut off",
            self.address_string(),
            self.request_read_deadline,
        )
        self.close_connection = True
        try:
            socket.socket.shutdown(self.connection, socket.SHUT_RDWR)
        except OSError:
            pass

    def do_GET(self) -> None:  # http.server's naming
        self._read_timer.cancel()  # the request is in: answering is ours to bound
        if self.latency:
            time.sleep(self.latency)
        parts = urlsplit(self.path)
        self._headers: dict[str, str] = {}
        try:
            status, body = self._route(parts.path, parse_qs(parts.query, keep_blank_values=True))
        except _BadRequest as exc:
            status, body = 400, {"error": str(exc)}
        except NodeNotFound:
            status, body = 404, {"error": "node not found"}
        except ValueError as exc:  # e.g. a node id beyond the grid's range
            status, body = 400, {"error": str(exc)}
        except GridError as exc:
            status, body = 500, {"error": str(exc)}
        except Exception:
            logger.exception("simulated grid proxy failed on %s", self.path)
            status, body = 500, {"error": "internal error"}
        self._send(status, body)

    def _route(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path.rstrip("/") == "/nodes":
            body, count = self._nodes(query)
            if _last(query, "ret_count") == "true" and count is not None:  # a grid that does not count says nothing
                self._headers["count"] = str(count)
            return 200, body
        if path.rstrip("/") == "/contracts":
            body, count = self._contracts(query)
            if _last(query, "ret_count") == "true":
                self._headers["count"] = str(count)
            return 200, body
        if path.rstrip("/") == "/farms":
            return 200, self._farms(query)
        match = _STATISTICS_RE.match(path)
        if match:
            return self._statistics(_node_id(match.group(1)))
        match = _NODE_RE.match(path)
        if match:
            return 200, _node_json(self.grid.node(_node_id(match.group(1))), nested=True)
        # A path the proxy's router does not know: gorilla/mux's default handler, Go's http.NotFound (text).
        return 404, NOT_FOUND_TEXT

    def _nodes(self, query: dict[str, list[str]]) -> tuple[list[dict], int | None]:
        page = _uint(query, "page", default=1)
        size = _uint(query, "size", default=50)
        farm_ids, node_ids = _uint_list(query, "farm_ids"), _uint_list(query, "node_ids")
        status = _last(query, "status") or None
        if status is not None and status not in NODE_STATUSES:
            raise _BadRequest(f"invalid status {status!r}")
        if page == 0 or size == 0:
            return [], 0
        read = self.grid.nodes(page=page, size=size, farm_ids=farm_ids, node_ids=node_ids, status=status)
        return [_node_json(node, nested=False) for node in read.nodes], read.count

    def _farms(self, query: dict[str, list[str]]) -> list[dict]:
        """GET /farms (types.Farm): the farm of farm_id (an empty list for a farm no node names), or
        every farm a node names, by farm id, a page at a time (page, size: the proxy's Limit)."""
        farm_id = _uint(query, "farm_id", default=0)
        if farm_id:
            # A farm exists when a node names it (the simulated chain keeps no farm rows of its own).
            named = self.grid.nodes(farm_ids=[farm_id], page=1, size=1).nodes
            return [_farm_json(self.grid.farm_ips(farm_id))] if named else []
        page, size = _uint(query, "page", default=1), _uint(query, "size", default=50)
        if page == 0 or size == 0:
            return []
        farm_ids: set[int] = set()
        nodes_page = 1
        while True:
            read = self.grid.nodes(page=nodes_page, size=500)
            farm_ids.update(n.farm_id for n in read.nodes)
            if len(read.nodes) < 500:
                break
            nodes_page += 1
        chosen = sorted(farm_ids)[(page - 1) * size : page * size]
        return [_farm_json(self.grid.farm_ips(f)) for f in chosen]

    def _contracts(self, query: dict[str, list[str]]) -> tuple[list[dict], int]:
        """GET /contracts as grid-proxy's listContracts answers it (types.Contract), for node_id and state.

        Like the proxy (gorilla/schema), a parameter it does not know is a 400, not ignored; the
        other filters it knows are accepted and only node_id, state and type are applied here.
        """
        unknown = sorted(set(query) - _CONTRACT_PARAMS)
        if unknown:
            raise _BadRequest(f'failed to decode params: schema: invalid path "{unknown[0]}"')
        page = _uint(query, "page", default=1)
        size = _uint(query, "size", default=50)
        node_id = _uint(query, "node_id", default=0)
        states = {s.lower() for s in _last(query, "state").split(",") if s}
        kind = _last(query, "type")
        if not node_id or page == 0 or size == 0:
            return [], 0
        found = [
            c
            for c in self.grid.contracts(node_id).contracts
            if (not states or c.state.lower() in states) and (not kind or c.type == kind)
        ]
        chosen = found[(page - 1) * size : page * size]
        return [_contract_json(c) for c in chosen], len(found)

    def _statistics(self, node_id: int) -> tuple[int, Any]:
        node = self.grid.node(node_id)
        if node.status in ("down", "standby"):
            return 500, {"error": f"cannot fetch statistics from node {node_id} with status: {node.status}"}
        try:
            stats = self.grid.statistics(node_id)
        except NodeAway as exc:  # went down between the two reads
            return 500, {"error": f"cannot fetch statistics from node {node_id}: {exc}"}
        except RmbRefused as exc:
            # The node answered the relay with an error (a node without its zos-cache, zos#2043): the proxy
            # passes it on (tfgrid-sdk-go grid-proxy internal/explorer/server.go getNodeStatistics).
            return 500, {"error": f"failed to get get node statistics from relay: {exc}"}
        last = max((vm.created_at for vm in self.grid.vms(node_id)), default=0) if hasattr(self.grid, "vms") else 0
        # types.NodeStatistics: each figure with ipv4u (public IPs the node's workloads use; not modelled: 0).
        return 200, {
            "system": {**_resources_json(stats.system), "ipv4u": 0},
            "total": {**_resources_json(stats.total), "ipv4u": 0},
            "used": {**_resources_json(stats.used), "ipv4u": 0},
            "users": {
                "deployments": stats.deployments,
                "workloads": stats.workloads,
                "last_deployment_timestamp": last,
            },
        }

    def _method_not_allowed(self) -> None:
        self._send(405, {"error": "the grid proxy is read-only: only GET is served"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _method_not_allowed

    def _send(self, status: int, body: Any) -> None:
        text = isinstance(body, bytes)
        data = body if text else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in getattr(self, "_headers", {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), format % args)


# --- the proxy's JSON shapes -------------------------------------------------------------


def _resources_json(resources) -> dict[str, int]:
    return {"cru": resources.cru, "mru": resources.mru, "sru": resources.sru, "hru": resources.hru}


def _node_json(node: NodeCapacity, *, nested: bool) -> dict[str, Any]:
    """types.Node (flat) or types.NodeWithNestedCapacity, every field as today's proxy writes it.

    grid/schemas/gridproxy.json is the shape (tfgrid-sdk-go pkg/types/nodes.go, rendered by
    internal/explorer/converters.go); the quick loop validates these answers against it strictly, so
    nothing here may be invented. What the simulation does not model is the Go zero value.
    """
    total, used = _resources_json(node.total), _resources_json(node.used)
    data = _node_head_json(node)
    if nested:
        data["capacity"] = {"total_resources": total, "used_resources": used}
    else:
        data["total_resources"] = total
        data["used_resources"] = used
    data.update(_node_tail_json(node))
    return data


def _node_head_json(node: NodeCapacity) -> dict[str, Any]:
    """The node's fields before its capacity, in the proxy's order."""
    return {
        "id": f"{node.node_id:010d}-{node.farm_id:06d}-simulated",
        "nodeId": node.node_id,
        "farmId": node.farm_id,
        "farmName": node.farm_name,
        "twinId": node.twin_id or 0,
        "country": node.country,
        "gridVersion": 3,
        "city": node.city,
        "uptime": node.uptime or 0,
        "created": 0,
        "farmingPolicyId": 1,
        "updatedAt": node.updated_at or 0,
    }


def _node_tail_json(node: NodeCapacity) -> dict[str, Any]:
    """The node's fields after its capacity, in the proxy's order."""
    up = node.status == "up"
    return {
        "location": {"country": node.country, "city": node.city, "longitude": None, "latitude": None},
        "publicConfig": {"domain": "", "gw4": "", "gw6": "", "ipv4": "", "ipv6": ""},
        "status": node.status,
        "certificationType": "Diy",
        "dedicated": node.dedicated,
        "inDedicatedFarm": node.in_dedicated_farm,
        "rentContractId": node.rent_contract_id or 0,
        "rented": node.rented_by_twin_id is not None,
        "rentable": node.rented_by_twin_id is None,
        "rentedByTwinId": node.rented_by_twin_id or 0,
        "serialNumber": "simulated",
        # tfchain's PowerState and PowerTarget as farmerbot sets them: a standby or down node is off.
        "power": {"state": "Up" if up else "Down", "target": "Up" if up else "Down"},
        "num_gpu": node.num_gpu,
        "extraFee": node.extra_fee,
        "healthy": up,
        "dmi": {
            "bios": {"vendor": "", "version": ""},
            "baseboard": {"manufacturer": "", "product_name": ""},
            "processor": [],
            "memory": [],
        },
        "speed": {"upload": 0, "download": 0},
        "cpu_benchmark": {"single": 0, "multi": 0, "threads": 0, "workloads": 0},
        # ZOS's zos.gpu.list as the proxy's GPU indexer keeps it; `[]` without GPUs (converters.go).
        "gpus": [
            {"id": g.id, "vendor": g.vendor, "device": g.device, "contract": g.contract, "vram": g.vram}
            for g in node.gpus
        ],
        "price_usd": 0.0,
        "farm_free_ips": 0,
        # A list of names, `[]` when none are known (converters.go): never an object.
        "features": list(node.features or ()),
    }


def _farm_json(farm) -> dict[str, Any]:
    """types.Farm with its publicIps as today's proxy writes them (tfgrid-sdk-go pkg/types farms.go and
    publicips.go; db/setup.sql builds each IP with id, ip, contract_id and gateway: farm_id is left out)."""
    return {
        "name": farm.farm_name,
        "farmId": farm.farm_id,
        "twinId": 0,
        "pricingPolicyId": 1,
        "certificationType": "NotCertified",
        "stellarAddress": "",
        "dedicated": False,
        "publicIps": [
            {"id": f"{farm.farm_id}-{ip.ip}", "ip": ip.ip, "gateway": ip.gateway, "contract_id": ip.contract_id}
            for ip in farm.ips
        ],
    }


def _contract_json(contract) -> dict[str, Any]:
    """types.Contract with NodeContractDetails (or RentContractDetails), as listContracts sends it."""
    details: dict[str, Any] = {"nodeId": contract.node_id, "farm_name": "", "farm_id": 0}
    if contract.type == "node":
        data = {"version": 0, "type": contract.deployment_type, "name": contract.name, "projectName": contract.name}
        details.update(
            {
                "deployment_data": json.dumps(data, separators=(",", ":")),
                "deployment_hash": f"{contract.contract_id:032x}",
                "number_of_public_ips": 0,
            }
        )
    return {
        "contract_id": contract.contract_id,
        "twin_id": contract.twin_id,
        "state": contract.state,
        "created_at": contract.created_at or 0,
        "type": contract.type,
        "details": details,
    }


# ContractFilter's and Limit's schema keys (tfgrid-sdk-go grid-proxy pkg/types): all the proxy decodes.
_CONTRACT_PARAMS = frozenset(
    {
        "contract_id",
        "twin_id",
        "node_id",
        "type",
        "state",
        "name",
        "number_of_public_ips",
        "deployment_data",
        "deployment_hash",
        "farm_name",
        "farm_id",
        "size",
        "page",
        "ret_count",
        "randomize",
        "sort_by",
        "sort_order",
        "balance",
    }
)


# --- query parsing, with the proxy's words -----------------------------------------------


def _last(query: dict[str, list[str]], key: str) -> str:
    values = query.get(key)
    return values[-1] if values else ""


def _parse_uint(name: str, value: str) -> int:
    if not value.isdigit():
        raise _BadRequest(f"couldn't parse {name} {value!r}: must be a whole number")
    return int(value)


def _uint_list(query: dict[str, list[str]], key: str) -> list[int] | None:
    raw = _last(query, key)
    return [_parse_uint(key, item) for item in raw.split(",")] if raw else None


def _uint(query: dict[str, list[str]], key: str, *, default: int) -> int:
    value = _last(query, key)
    return _parse_uint(key, value) if value else default


def _node_id(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise _BadRequest(f"invalid node id {text!r}")
    return int(text)


__all__ = ["SimulatorServer", "serve_simulator"]
