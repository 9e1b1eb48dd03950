"""The Grid Proxy client: read-only HTTP access to a TFGrid Grid Proxy.

Every failure leaves this module as one of the typed errors in grid/types.py with a
message a person can act on; callers never see a `requests` or JSON error.

Every request has one wall-clock budget (`deadline`, GRID_DEADLINE): connecting, every try
and back-off and every byte of the answer. A socket time-out bounds one read only, so a
server dripping a byte a second would otherwise hold a worker for ever; a watchdog shuts
the socket when the budget is spent. A job step's budget (grid/deadline.py) caps it too.

Redirects are followed only to the configured scheme and host; one to anywhere else is
refused, naming that host.

What is retried, and why (our own loop, inside the budget, GET only):
- connect errors, read time-outs and connections broken mid-answer: transient by nature;
- 500/502/503/504 and 429 (the proxy has a rate limiter): transient on the proxy or
  its load balancer. `Retry-After` is ignored on purpose: an uncapped header would
  park a worker for as long as the server asks; our own back-off is bounded instead.
- statistics are the exception for 500: the proxy answers 500 both when the node is
  down/standby (permanent) and when its relay call to the node failed (it has already
  waited for the node), so repeating it only multiplies the wait. 502/503/504 are
  still retried there.

The parsers are strict: the capacity numbers decide what we sell, so a figure that is
missing, null, of the wrong type, negative or absurd stops that node instead of being
read as zero. Fields the product does not need are ignored; optional ones get a safe
default.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import re
import socket
import threading
import time
import unicodedata
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)
from urllib3.util.retry import Retry

from dashboard.capacity import GiB, MiB, Resources, SliceSize, format_size
from dashboard.grid import telemetry
from dashboard.grid.deadline import Deadline, current_step_deadline
from dashboard.grid.types import (
    MAX_NODE_CRU,
    MAX_NODE_HRU,
    MAX_NODE_MRU,
    MAX_NODE_SRU,
    NODE_STATUSES,
    DeployNotSupported,
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeCapacity,
    NodeNotFound,
    NodeOffline,
    NodePage,
    NodeStatistics,
    VmDeployed,
)

log = logging.getLogger(__name__)

# The outcome label of each failure a request can end in (/metrics: slicedash_grid_requests).
_OUTCOMES: dict[type[GridError], str] = {
    GridUnavailable: "unavailable",
    NodeNotFound: "not_found",
    NodeOffline: "offline",
    MalformedPayload: "malformed",
}

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
STATISTICS_RETRY_STATUSES = RETRY_STATUSES - {500}
# A page of 1000 nodes is about 2 MiB of JSON; anything far beyond is not an answer we want in memory.
MAX_BODY_BYTES = 32 * MiB
MAX_PAGE_SIZE = 1000
BACKOFF_MAX_SECONDS = 30.0
# The whole of one request (connecting, every try and back-off, every byte of the answer).
DEFAULT_DEADLINE_SECONDS = 30.0
# Redirects followed in one try, each to the configured scheme and host only (a moved path, a trailing slash).
MAX_REDIRECTS = 3

DEPLOY_NOT_SUPPORTED = (
    "the Grid Proxy is read-only: deploying needs the simulator backend or a deployer (GRID_BACKEND=simulator)"
)

# How far `used` may exceed `total` before the record is broken rather than merely
# over-provisioned. Legitimate excess exists: the proxy lets SSD be over-provisioned
# twice (SSDOverProvisionFactor = 2 in tfgrid-sdk-go grid-proxy), CPU cores are
# over-provisioned without limit, the 2 GiB memory reserve floor exceeds a tiny node's
# memory, and contracts stay on a node whose hardware shrank (a failed DIMM or disk).
# Four times the total plus the fixed reserve covers all of those; beyond it the
# figure cannot describe the machine and would only make every slice look phantom.
USED_OVER_TOTAL_FACTOR = 4
USED_FLOOR = {"mru": 2 * GiB, "sru": 20 * GiB, "hru": 0}
# Cores are over-provisioned freely, so used.cru only gets an absolute bound.
MAX_USED_CRU = 16 * MAX_NODE_CRU

_LIMITS = {"cru": MAX_NODE_CRU, "mru": MAX_NODE_MRU, "sru": MAX_NODE_SRU, "hru": MAX_NODE_HRU}
_KINDS = {
    "cru": "a non-negative core count",
    "mru": "a non-negative byte count",
    "sru": "a non-negative byte count",
    "hru": "a non-negative byte count",
}
_TEXT_LIMITS = {"farmName": 128, "country": 64, "city": 64}
TEXT_REFUSE_AFTER = 1024
_DOWN_STATUS_RE = re.compile(r"with status:\s*(down|standby)\b", re.IGNORECASE)


# --- strict field readers ----------------------------------------------------------------


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _whole_number(value: Any, *, where: str, path: str, kind: str) -> int:
    """An int from JSON: ints, or floats with no fraction; never bools or strings."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedPayload(f"{where}: {path} is {_describe(value)}, must be {kind}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise MalformedPayload(f"{where}: {path} is {value!r}, must be {kind} (a whole number)")
        value = int(value)
    return value


def _amount(block: dict, key: str, *, where: str, path: str, required: bool, limit: int) -> int:
    kind = _KINDS[key]
    full = f"{path}.{key}"
    if key not in block:
        if required:
            raise MalformedPayload(f"{where}: {full} is missing")
        return 0
    value = block[key]
    if value is None:
        raise MalformedPayload(f"{where}: {full} is null, must be {kind}")
    number = _whole_number(value, where=where, path=full, kind=kind)
    if number < 0:
        raise MalformedPayload(f"{where}: {full} is {number}, must be {kind}")
    if number > limit:
        shown = f"{number}" if key == "cru" else f"{format_size(number)} ({number} bytes)"
        bound = f"{limit}" if key == "cru" else format_size(limit)
        raise MalformedPayload(f"{where}: {full} is {shown}, more than any single node has (limit {bound})")
    return number


def _resources(container: dict, key: str, *, where: str, prefix: str = "", used: bool = False) -> Resources:
    path = f"{prefix}{key}"
    if key not in container:
        raise MalformedPayload(f"{where}: {path} is missing")
    block = container[key]
    if not isinstance(block, dict):
        raise MalformedPayload(f"{where}: {path} is {_describe(block)}, must be an object with cru, mru and sru")
    limits = dict(_LIMITS, cru=MAX_USED_CRU) if used else _LIMITS
    return Resources(
        cru=_amount(block, "cru", where=where, path=path, required=True, limit=limits["cru"]),
        mru=_amount(block, "mru", where=where, path=path, required=True, limit=limits["mru"]),
        sru=_amount(block, "sru", where=where, path=path, required=True, limit=limits["sru"]),
        # HDD is optional: most nodes have none and some answers leave it out.
        hru=_amount(block, "hru", where=where, path=path, required=False, limit=limits["hru"]),
    )


def _check_used(total: Resources, used: Resources, *, where: str, path: str) -> None:
    for key, floor in USED_FLOOR.items():
        have, use = getattr(total, key), getattr(used, key)
        bound = USED_OVER_TOTAL_FACTOR * have + floor
        if use > bound:
            raise MalformedPayload(
                f"{where}: {path}.{key} is {format_size(use)} but the node has only {format_size(have)}; "
                f"more than {USED_OVER_TOTAL_FACTOR}x the total plus the node reserve is a broken record, "
                "not over-provisioning"
            )


def _identifier(payload: dict, key: str, *, where: str, required: bool) -> int | None:
    """A grid id (node, farm, twin): ids start at 1; 0 is Go's zero value for 'none'."""
    value = payload.get(key)
    if value is None:
        if required:
            raise MalformedPayload(
                f"{where}: {key} is {'null' if key in payload else 'missing'}, must be a positive id"
            )
        return None
    number = _whole_number(value, where=where, path=key, kind="a positive id")
    if number < 0 or number > 2**32 - 1:
        raise MalformedPayload(f"{where}: {key} is {number}, must be a positive id")
    if number == 0:
        if required:
            raise MalformedPayload(f"{where}: {key} is 0, must be a positive id")
        return None
    return number


def _text(payload: dict, key: str, *, where: str) -> str:
    value = payload.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedPayload(f"{where}: {key} is {_describe(value)}, must be text")
    # A little over the column is cut; far over it is not a name but a broken or hostile answer.
    if len(value) > TEXT_REFUSE_AFTER:
        raise MalformedPayload(
            f"{where}: {key} is {len(value):,} characters long; no name is longer than {TEXT_REFUSE_AFTER:,}, refusing it"
        )
    position, what = _unstorable(value)
    if what:
        # PostgreSQL refuses a NUL in text and UTF-8 cannot encode a lone surrogate: refused here,
        # with the field's name, instead of as a traceback from the write.
        raise MalformedPayload(f"{where}: {key} contains {what} at character {position + 1}; refusing it")
    # Stored in bounded columns; a runaway name must not fail the write later.
    return " ".join(value.split())[: _TEXT_LIMITS.get(key, 128)]


def _unstorable(text: str) -> tuple[int, str]:
    """The first character no column should hold (NUL, a lone surrogate, a control character)."""
    for position, char in enumerate(text):
        if char in "\t\n\r":
            continue  # whitespace, folded into spaces by the caller
        code = ord(char)
        if code == 0:
            return position, "a NUL character (U+0000)"
        if 0xD800 <= code <= 0xDFFF:
            return position, f"a lone surrogate (U+{code:04X})"
        if unicodedata.category(char) == "Cc":
            return position, f"a control character (U+{code:04X})"
    return -1, ""


def _flag(payload: dict, key: str, *, where: str) -> bool:
    value = payload.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise MalformedPayload(f"{where}: {key} is {_describe(value)}, must be true or false")
    return value


def _status(payload: dict, *, where: str) -> str:
    if "status" not in payload or payload["status"] is None:
        state = "missing" if "status" not in payload else "null"
        raise MalformedPayload(f"{where}: status is {state}, must be one of {', '.join(NODE_STATUSES)}")
    value = payload["status"]
    if not isinstance(value, str) or value.strip().lower() not in NODE_STATUSES:
        raise MalformedPayload(f"{where}: status is {_describe(value)}, must be one of {', '.join(NODE_STATUSES)}")
    return value.strip().lower()


def _timestamp(payload: dict, key: str, *, where: str) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    number = _whole_number(value, where=where, path=key, kind="a unix timestamp")
    return number if number > 0 else None


# --- pure parsers ------------------------------------------------------------------------


def parse_node(payload: Any) -> NodeCapacity:
    """One node from GET /nodes/{id} (nested `capacity`) or one entry of GET /nodes (flat)."""
    if not isinstance(payload, dict):
        raise MalformedPayload(f"node payload is {_describe(payload)}, must be a JSON object")
    node_id = _identifier(payload, "nodeId", where="node payload", required=True)
    where = f"node {node_id}"
    if "capacity" in payload:
        capacity = payload["capacity"]
        if not isinstance(capacity, dict):
            raise MalformedPayload(f"{where}: capacity is {_describe(capacity)}, must be an object")
        total = _resources(capacity, "total_resources", where=where, prefix="capacity.")
        used = _resources(capacity, "used_resources", where=where, prefix="capacity.", used=True)
        used_path = "capacity.used_resources"
    elif "total_resources" in payload or "used_resources" in payload:
        total = _resources(payload, "total_resources", where=where)
        used = _resources(payload, "used_resources", where=where, used=True)
        used_path = "used_resources"
    else:
        raise MalformedPayload(
            f"{where}: has neither capacity.total_resources (GET /nodes/{{id}}) nor total_resources (GET /nodes)"
        )
    _check_used(total, used, where=where, path=used_path)
    return NodeCapacity(
        node_id=node_id,
        farm_id=_identifier(payload, "farmId", where=where, required=True),
        farm_name=_text(payload, "farmName", where=where),
        twin_id=_identifier(payload, "twinId", where=where, required=False),
        status=_status(payload, where=where),
        dedicated=_flag(payload, "dedicated", where=where),
        rented_by_twin_id=_identifier(payload, "rentedByTwinId", where=where, required=False),
        total=total,
        used=used,
        country=_text(payload, "country", where=where),
        city=_text(payload, "city", where=where),
        updated_at=_timestamp(payload, "updatedAt", where=where),
    )


def parse_statistics(payload: Any, *, node_id: int | None = None) -> NodeStatistics:
    """GET /nodes/{id}/statistics: the node's own view (system = its reserve)."""
    where = f"node {node_id} statistics" if node_id is not None else "statistics"
    if not isinstance(payload, dict):
        raise MalformedPayload(f"{where}: payload is {_describe(payload)}, must be a JSON object")
    total = _resources(payload, "total", where=where)
    used = _resources(payload, "used", where=where, used=True)
    system = _resources(payload, "system", where=where)
    _check_used(total, used, where=where, path="used")
    users = payload.get("users")
    if users is None:
        users = {}
    if not isinstance(users, dict):
        raise MalformedPayload(f"{where}: users is {_describe(users)}, must be an object")
    counts = {}
    for key in ("deployments", "workloads"):
        value = users.get(key)
        if value is None:
            counts[key] = 0
            continue
        number = _whole_number(value, where=where, path=f"users.{key}", kind="a non-negative count")
        if number < 0:
            raise MalformedPayload(f"{where}: users.{key} is {number}, must be a non-negative count")
        counts[key] = number
    return NodeStatistics(system=system, total=total, used=used, **counts)


# --- the client --------------------------------------------------------------------------


class GridProxyClient:
    """Reads node capacity from a Grid Proxy; cannot deploy."""

    name = "gridproxy"
    can_deploy = False

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 3.05,
        read_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_body_bytes: int = MAX_BODY_BYTES,
        deadline: float = DEFAULT_DEADLINE_SECONDS,
    ) -> None:
        parts = urlsplit(str(base_url))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"Grid Proxy URL {base_url!r} must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"Grid Proxy URL {base_url!r} must not carry a query or fragment")
        if not connect_timeout > 0 or not read_timeout > 0:
            raise ValueError("Grid Proxy time-outs must be more than zero seconds")
        if not deadline > 0:
            raise ValueError("the Grid Proxy deadline must be more than zero seconds")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"Grid Proxy retries must be a whole number, zero or more (got {retries!r})")
        if backoff < 0:
            raise ValueError("Grid Proxy back-off must not be negative")
        self.base_url = str(base_url).rstrip("/")
        self._origin = (parts.scheme, parts.netloc.lower())
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_body_bytes = max_body_bytes
        self.deadline = float(deadline)
        self._session = _new_session()

    def __repr__(self) -> str:
        return f"GridProxyClient({self.base_url!r}, retries={self.retries}, deadline={self.deadline:g})"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> GridProxyClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the Grid interface

    def node(self, node_id: int) -> NodeCapacity:
        node_id = _node_id_argument(node_id)
        payload, url = self._get_json(f"/nodes/{node_id}", node_id=node_id)
        node = _parsed(parse_node, payload, url)
        if node.node_id != node_id:
            raise MalformedPayload(f"asked {url} for node {node_id}, the grid proxy answered with node {node.node_id}")
        return node

    def nodes(
        self,
        *,
        farm_id: int | None = None,
        page: int = 1,
        size: int = 50,
        farm_ids: Sequence[int] | None = None,
        node_ids: Sequence[int] | None = None,
        status: str | None = None,
    ) -> NodePage:
        if isinstance(page, bool) or not isinstance(page, int) or page < 1:
            raise ValueError(f"page must be a whole number from 1 (got {page!r})")
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
            raise ValueError(f"page size must be a whole number from 1 to {MAX_PAGE_SIZE} (got {size!r})")
        farms = [
            _positive_argument(f, "farm id") for f in [*(farm_ids or ()), *([farm_id] if farm_id is not None else [])]
        ]
        wanted = [_node_id_argument(n) for n in node_ids or ()]
        farm_set, wanted_set = set(farms), set(wanted)
        if status is not None and status not in NODE_STATUSES:
            raise ValueError(f"status must be one of {', '.join(NODE_STATUSES)} (got {status!r})")
        params: dict[str, Any] = {}
        if farms:
            params["farm_ids"] = ",".join(str(f) for f in farms)
        if wanted:
            params["node_ids"] = ",".join(str(n) for n in wanted)
        if status is not None:
            params["status"] = status
        # No sort_by: the proxy lists nodes by node id already, and the query keeps the shape it always had.
        # Offset paging can still miss a node added between two pages; a second run reads it.
        params.update({"page": page, "size": size})
        payload, url = self._get_json("/nodes", params=params, node_id=None)
        if not isinstance(payload, list):
            raise MalformedPayload(f"the node list from {url} is {_describe(payload)}, must be a JSON array")
        nodes: list[NodeCapacity] = []
        skipped: list[tuple[str, str]] = []
        seen: set[int] = set()
        for position, item in enumerate(payload, start=1):
            label = _entry_label(item, position)
            try:
                node = parse_node(item)
            except MalformedPayload as exc:
                skipped.append((label, str(exc)))
                continue
            if node.node_id in seen:
                skipped.append((label, f"node {node.node_id} appears twice in the page; the first entry is kept"))
                continue
            if farm_set and node.farm_id not in farm_set:
                asked = ", ".join(str(f) for f in farms)
                skipped.append(
                    (label, f"node {node.node_id} belongs to farm {node.farm_id}, not the requested farm {asked}")
                )
                continue
            if wanted_set and node.node_id not in wanted_set:
                skipped.append((label, f"node {node.node_id} was not asked for"))
                continue
            seen.add(node.node_id)
            nodes.append(node)
        return NodePage(nodes=tuple(nodes), page=page, size=size, skipped=tuple(skipped))

    def statistics(self, node_id: int) -> NodeStatistics:
        node_id = _node_id_argument(node_id)
        payload, url = self._get_json(f"/nodes/{node_id}/statistics", node_id=node_id, statistics=True)
        return _parsed(lambda p: parse_statistics(p, node_id=node_id), payload, url)

    def deploy_vm(self, node_id: int, size: SliceSize, *, name: str) -> VmDeployed:
        raise DeployNotSupported(DEPLOY_NOT_SUPPORTED)

    def delete_vm(self, node_id: int, workload_id: str) -> None:
        raise DeployNotSupported(DEPLOY_NOT_SUPPORTED)

    # --- HTTP

    def _get_json(
        self,
        path: str,
        *,
        node_id: int | None,
        params: dict[str, Any] | None = None,
        statistics: bool = False,
    ) -> tuple[Any, str]:
        """One request with its retries, recorded for /metrics (endpoint, outcome, duration)."""
        started, outcome = time.monotonic(), telemetry.OK
        try:
            return self._get_json_retrying(path, node_id=node_id, params=params, statistics=statistics)
        except GridError as exc:
            outcome = _OUTCOMES.get(type(exc), "refused")
            raise
        finally:
            telemetry.record(endpoint=telemetry.endpoint_of(path), outcome=outcome, seconds=time.monotonic() - started)

    def _get_json_retrying(
        self,
        path: str,
        *,
        node_id: int | None,
        params: dict[str, Any] | None = None,
        statistics: bool = False,
    ) -> tuple[Any, str]:
        url = self.base_url + path + (f"?{urlencode(params)}" if params else "")
        # One budget for the whole request: every try, every back-off, every byte of the answer.
        deadline = Deadline.within(self.deadline).earliest(current_step_deadline())
        retry_statuses = STATISTICS_RETRY_STATUSES if statistics else RETRY_STATUSES
        with _Watchdog(deadline) as watchdog:
            tries = 0
            while True:
                tries += 1
                try:
                    status, reason, body, url = self._fetch(url, deadline=deadline)
                except requests.exceptions.RequestException as exc:
                    if watchdog.fired or deadline.passed():
                        raise GridUnavailable(_deadline_words(deadline, url)) from None
                    if tries > self.retries or isinstance(exc, requests.exceptions.SSLError):
                        raise GridUnavailable(self._transport_words(exc, url, tries)) from exc
                    self._before_retry(url, tries, deadline, why=self._transport_words(exc, url, tries, short=True))
                    continue
                if status in retry_statuses and tries <= self.retries and deadline.remaining() > 0:
                    self._before_retry(url, tries, deadline, why=f"answered {status} {reason}")
                    continue
                break

        if status == 200:
            return _decode(body, url, node_id=node_id), url
        message = _error_message(body)
        if status == 404 and node_id is not None:
            raise NodeNotFound(f"node {node_id} is not on the grid (404 from {url})")
        if statistics and status == 500:
            down = _DOWN_STATUS_RE.search(message)
            if down:
                raise NodeOffline(
                    f"node {node_id} is {down.group(1).lower()}: the grid proxy cannot fetch its statistics ({url})"
                )
            raise GridUnavailable(
                f"the grid proxy could not get node {node_id}'s statistics from the node ({url} answered 500, "
                f"not retried: the proxy had already waited for the node): {message}"
            )
        if status in RETRY_STATUSES or status >= 500:
            raise GridUnavailable(
                f"the grid proxy answered {status} {reason} for {url} after {tries} {_plural(tries, 'try', 'tries')}"
                + (f": {message}" if message else "")
            )
        raise GridError(f"the grid proxy refused {url} with {status} {reason}" + (f": {message}" if message else ""))

    def _fetch(self, url: str, *, deadline: Deadline) -> tuple[int, str, bytes, str]:
        """One try: status, reason, body and the URL that answered (a same-host redirect is followed)."""
        for _hop in range(MAX_REDIRECTS + 1):
            left = deadline.remaining()
            if left <= 0:
                raise requests.exceptions.Timeout("the deadline passed")
            with self._session.get(
                url,
                timeout=(min(self.connect_timeout, left), min(self.read_timeout, left)),
                stream=True,
                # Followed by hand below, and only to the configured host: the proxy's answer must not
                # send the worker (and whatever it is trusted with) to another address.
                allow_redirects=False,
            ) as response:
                if response.is_redirect:
                    url = self._redirect_target(url, response.headers.get("Location", ""), response.status_code)
                    continue
                body = self._read_body(response, url, deadline)
                return response.status_code, _short(response.reason or ""), body, url
        raise GridError(
            f"the grid proxy at {_host(url)} redirected {url} more than {MAX_REDIRECTS} times; not followed further"
        )

    def _redirect_target(self, url: str, location: str, status: int) -> str:
        target = urljoin(url, location.strip())
        parts = urlsplit(target)
        if parts.netloc.lower() != self._origin[1]:
            where = parts.netloc or "(no host)"
            raise GridUnavailable(
                f"the grid proxy at {_host(url)} answered {status} for {url}, redirecting to another host, "
                f"{_short(where, 120)}; redirects to another host are not followed (check GRID_PROXY_URL)"
            )
        if parts.scheme != self._origin[0]:
            raise GridUnavailable(
                f"the grid proxy at {_host(url)} answered {status} for {url}, redirecting to {_short(parts.scheme, 20)}:// "
                f"on the same host; only {self._origin[0]}:// is followed (check GRID_PROXY_URL)"
            )
        return target

    def _before_retry(self, url: str, tries: int, deadline: Deadline, *, why: str) -> None:
        pause = min(self.backoff * 2 ** (tries - 1), BACKOFF_MAX_SECONDS, max(deadline.remaining(), 0))
        # One line a retry, at DEBUG: the error a person finally reads already says how many tries
        # were made, and a command's stderr must stay that one line.
        log.debug("grid proxy: %s %s; try %d of %d in %.2f s", url, why, tries + 1, self.retries + 1, pause)
        time.sleep(pause)

    def _read_body(self, response: requests.Response, url: str, deadline: Deadline) -> bytes:
        chunks: list[bytes] = []
        received = 0
        for chunk in response.iter_content(chunk_size=64 * 1024):
            received += len(chunk)
            if received > self.max_body_bytes:
                raise MalformedPayload(
                    f"the answer from {url} is larger than {format_size(self.max_body_bytes)}; refusing to read it"
                )
            chunks.append(chunk)
            if deadline.passed():  # the watchdog's twin, for an answer that never pauses long enough
                raise requests.exceptions.Timeout("the deadline passed")
        return b"".join(chunks)

    def _transport_words(
        self, exc: requests.exceptions.RequestException, url: str, tries: int, *, short: bool = False
    ) -> str:
        reason: BaseException = exc
        inner = exc.args[0] if exc.args else None
        if isinstance(inner, MaxRetryError):
            reason = inner.reason or inner
        elif isinstance(inner, BaseException):
            reason = inner
        # NewConnectionError subclasses ConnectTimeoutError in urllib3 2, so it is asked first.
        if isinstance(reason, NewConnectionError):
            text = str(reason).lower()
            if "refused" in text:
                what = "connection refused"
            elif "resolution" in text or "name or service" in text or "nodename" in text:
                what = f"its host name could not be resolved ({_short(reason)})"
            else:
                what = f"could not connect ({_short(reason)})"
        elif isinstance(reason, ConnectTimeoutError) or isinstance(exc, requests.exceptions.ConnectTimeout):
            what = f"timed out connecting (connect timeout {self.connect_timeout:g}s)"
        elif isinstance(reason, ReadTimeoutError) or isinstance(exc, requests.exceptions.ReadTimeout):
            what = f"timed out waiting for the answer (read timeout {self.read_timeout:g}s)"
        elif isinstance(exc, requests.exceptions.SSLError):
            what = f"the TLS handshake failed ({_short(reason)})"
        elif isinstance(reason, ProtocolError) or isinstance(exc, requests.exceptions.ChunkedEncodingError):
            what = f"the connection broke off mid-answer ({_short(reason)})"
        else:
            what = _short(reason)
        if short:
            return what
        return f"the grid proxy at {url} is unavailable: {what}, after {tries} {_plural(tries, 'try', 'tries')}"


# --- the deadline on the wire ------------------------------------------------------------
#
# A socket time-out bounds each read, so a server that drips one byte a second is never
# timed out. A watchdog thread shuts the request's socket down when the budget is spent;
# the blocked read then returns at once and the request fails with the deadline's words.
# The connection classes below tell the watchdog of this thread which socket to watch.

_watching = threading.local()


class _Watchdog:
    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.fired = False
        self.finished = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> _Watchdog:
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
        self._due: list[tuple[float, int, _Watchdog]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, dog: _Watchdog) -> None:
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
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                dog = heapq.heappop(self._due)[2]
            dog.fire()


_clock = _WatchdogClock()


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


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _watched(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watched(self)  # a kept-alive connection is not connected again
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watched(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watched(self)
        super().request(*args, **kwargs)


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_WATCHED_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = dict(_WATCHED_POOLS)
        return manager


def _new_session() -> requests.Session:
    session = requests.Session()
    # Retries are ours (GridProxyClient._get_json): they must stay inside the request's budget,
    # and urllib3's own would log a "Retrying (...)" warning for each.
    adapter = _WatchedAdapter(max_retries=Retry(total=0, redirect=False, raise_on_status=False))
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers.update({"Accept": "application/json", "User-Agent": "slicedash-gridproxy-client"})
    return session


def _deadline_words(deadline: Deadline, url: str) -> str:
    return f"the grid proxy did not finish answering {deadline.words()} ({url})"


def _host(url: str) -> str:
    return urlsplit(url).netloc or url


# --- helpers -----------------------------------------------------------------------------


def _node_id_argument(node_id: Any) -> int:
    return _positive_argument(node_id, "node id")


def _positive_argument(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive whole number (got {value!r})")
    return value


def _parsed(parse, payload: Any, url: str):
    try:
        return parse(payload)
    except MalformedPayload as exc:
        raise MalformedPayload(f"{exc} (from {url})") from None


def _decode(body: bytes, url: str, *, node_id: int | None) -> Any:
    where = f"node {node_id}: " if node_id is not None else ""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise MalformedPayload(f"{where}the answer from {url} is not JSON ({detail})") from None


def _error_message(body: bytes) -> str:
    """The proxy's own words from {"error": "..."} (or the start of a non-JSON body)."""
    text = body[:4096].decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # a deeply nested body must not escape as a crash
        return _short(text)
    if isinstance(data, dict):
        for key in ("error", "message", "Message"):
            if isinstance(data.get(key), str):
                return _short(data[key])
    return _short(text)


def _entry_label(item: Any, position: int) -> str:
    if isinstance(item, dict):
        node_id = item.get("nodeId")
        if isinstance(node_id, int) and not isinstance(node_id, bool):
            return str(node_id)
    return f"position {position}"


def _short(value: Any, limit: int = 300) -> str:
    """One printable line: the grid's words end up in job rows and on a terminal."""
    text = " ".join(str(value).split()).translate(_UNPRINTABLE)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# NUL, the other control characters and lone surrogates become U+FFFD: PostgreSQL refuses a NUL in
# text, UTF-8 cannot encode a surrogate, and an escape sequence must not reach a terminal.
_UNPRINTABLE = {code: "\ufffd" for code in [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]}


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


__all__ = ["DEPLOY_NOT_SUPPORTED", "GridProxyClient", "parse_node", "parse_statistics"]
