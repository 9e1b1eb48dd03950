"""The Grid Proxy client: read-only HTTP access to a TFGrid Grid Proxy.

Every failure leaves this module as one of the typed errors in grid/types.py with a
message a person can act on; callers never see a `requests` or JSON error.

Every request goes one way, `GridProxyClient._get_json`: it holds the budget, the retries and the
watchdog, and is recorded for /metrics (`_recorded`); `_fetch` makes one try. Each try first asks the
deployment's request budget (grid/budget.py, GRID_RATE_LIMIT shared by every process), inside the
request's deadline.

Every request has one wall-clock budget (`deadline`, GRID_DEADLINE): connecting, every try and back-off and
every byte of the answer; a statistics read has its own (GRID_STATISTICS_DEADLINE: it goes through the relay
to the node, and the proxy gives it 30 s). A socket time-out bounds one read only, so a server dripping a byte
a second would otherwise hold a worker for ever; a watchdog shuts the socket when the budget is spent
(proxy/watchdog.py). A job step's budget (grid/deadline.py) caps it too. `clock` and `sleep` are seams.

Redirects are followed only to the configured scheme and host; one to anywhere else is refused, naming that host.

What is retried, and why (our own loop, inside the budget, GET only):
- connect errors, read time-outs and connections broken mid-answer: transient by nature;
- 500/502/503/504: transient on the proxy or its load balancer, with our own bounded back-off;
- 429 (the proxy's rate limiter: 20 requests a second per client IP): waited for as its
  `Retry-After` asks, capped by what is left of the request's deadline (a wait that would pass it
  ends the request at once, saying so), and counted for /metrics (outcome `rate_limited`). It is
  not a failure of the proxy, so it does not use up GRID_RETRIES; the deadline bounds it.
- statistics are the exception for 500: the proxy answers 500 both when the node is down/standby (permanent)
  and when its relay call to the node failed (it has already waited for the node), so repeating it only
  multiplies the wait. 502/503/504 are still retried there.

The answers are read by the strict parsers of proxy/parse.py (the node list: proxy/node_list.py; a node's
rent contract: proxy/rent.py).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple
from urllib.parse import urlencode, urljoin, urlsplit

import requests
import requests.auth
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

from dashboard.capacity import MiB, SliceSize, format_size
from dashboard.grid import telemetry
from dashboard.grid.budget import RequestBudget
from dashboard.grid.deadline import Deadline, current_step_deadline
from dashboard.grid.paging import pages_bounded
from dashboard.grid.proxy.answers import (
    count_header,
    json_decoded,
    parsed_at,
    proxy_words,
    retry_after_seconds,
    short_words,
)
from dashboard.grid.proxy.farms import FarmPublicIps, farm_ips_read
from dashboard.grid.proxy.node_list import node_page_read
from dashboard.grid.proxy.parse import parse_contracts, parse_node, parse_statistics
from dashboard.grid.proxy.rent import rent_contract_read
from dashboard.grid.proxy.watchdog import Watchdog, WatchedAdapter
from dashboard.grid.text import url_credentials_split, url_redacted
from dashboard.grid.types import (
    LIVE_CONTRACT_STATES,
    NODE_STATUSES,
    POOLS_NOT_AVAILABLE,
    Contract,
    DeployNotSupported,
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeAway,
    NodeCapacity,
    NodeContracts,
    NodeNotFound,
    NodePage,
    NodeStatistics,
    PoolMetrics,
    PoolsNotAvailable,
    QueryRefused,
    VmDeployed,
)

# The package's name, as it always was: logging configurations and tests name it.
log = logging.getLogger("dashboard.grid.proxy")

# The outcome label of each failure a request can end in (/metrics: slicedash_grid_requests).
_OUTCOMES: dict[type[GridError], str] = {
    GridUnavailable: "unavailable",
    NodeNotFound: "not_found",
    NodeAway: "offline",
    MalformedPayload: "malformed",
}

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# The outcome label of a try the proxy refused for rate (429), counted apart from the request's own.
RATE_LIMITED = "rate_limited"
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

_DOWN_STATUS_RE = re.compile(r"with status:\s*(down|standby)\b", re.IGNORECASE)


class _Answer(NamedTuple):
    """The answer a request ends with (not retried), and how many tries it took."""

    status: int
    reason: str
    body: bytes
    url: str  # the URL that answered: a same-host redirect is followed
    headers: Any
    tries: int


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
        contracts_page_size: int = 100,
        max_pages: int = 100,
        statistics_deadline: float | None = None,
        budget: RequestBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # A user:password in GRID_PROXY_URL becomes the session's basic auth and leaves the URL here,
        # so no message built from a URL (errors, job results, logs, the API's 503) can carry it.
        clean, credentials = url_credentials_split(str(base_url))
        shown = url_redacted(str(base_url))
        parts = urlsplit(clean)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"Grid Proxy URL {shown!r} must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"Grid Proxy URL {shown!r} must not carry a query or fragment")
        if not connect_timeout > 0 or not read_timeout > 0:
            raise ValueError("Grid Proxy time-outs must be more than zero seconds")
        if not deadline > 0 or (statistics_deadline is not None and not statistics_deadline > 0):
            raise ValueError("the Grid Proxy deadline must be more than zero seconds")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"Grid Proxy retries must be a whole number, zero or more (got {retries!r})")
        if backoff < 0:
            raise ValueError("Grid Proxy back-off must not be negative")
        self.base_url = clean.rstrip("/")
        self._origin = (parts.scheme, parts.netloc.lower())
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_body_bytes = max_body_bytes
        self.deadline = float(deadline)
        self.contracts_page_size = max(1, min(int(contracts_page_size), MAX_PAGE_SIZE))
        self.max_pages = max(1, int(max_pages))
        self.statistics_deadline = float(statistics_deadline if statistics_deadline is not None else deadline)
        # None: no budget (a client made by hand, a test); get_grid() always gives the deployment's.
        self.budget = budget
        self.clock, self.sleep = clock, sleep  # the request deadline's clock and the back-off's wait
        self.requests_sent = 0  # every HTTP request this client sent (tries and redirects included)
        self._session = _new_session()
        if credentials is not None:
            self._session.auth = requests.auth.HTTPBasicAuth(*credentials)

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
        node = parsed_at(parse_node, payload, url)
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
        if status is not None and status not in NODE_STATUSES:
            raise ValueError(f"status must be one of {', '.join(NODE_STATUSES)} (got {status!r})")
        return node_page_read(self._get_json, farms=farms, wanted=wanted, status=status, page=page, size=size)

    def statistics(self, node_id: int) -> NodeStatistics:
        node_id = _node_id_argument(node_id)
        payload, url = self._get_json(f"/nodes/{node_id}/statistics", node_id=node_id, statistics=True)
        return parsed_at(lambda p: parse_statistics(p, node_id=node_id), payload, url)

    def contracts(self, node_id: int) -> NodeContracts:
        """GET /contracts?node_id=N&state=Created,GracePeriod, every page (grid.paging.pages_bounded), each
        page one request under the deadlines; a page or an entry that cannot be trusted fails the node's read."""
        node_id = _node_id_argument(node_id)

        def fetch(page: int, size: int) -> tuple[list[Contract], int | None]:
            params = {"node_id": node_id, "state": ",".join(LIVE_CONTRACT_STATES), "page": page, "size": size}
            answer: dict[str, Any] = {}
            payload, url = self._get_json(
                "/contracts", params={**params, "ret_count": "true"}, node_id=None, answer=answer
            )
            return parsed_at(lambda p: parse_contracts(p, node_id=node_id), payload, url), count_header(
                answer.get("headers")
            )

        what, sent = f"node {node_id}'s contracts", self.requests_sent
        found, pages = pages_bounded(
            fetch, key=lambda c: c.contract_id, what=what, size=self.contracts_page_size, max_pages=self.max_pages
        )
        # requests: what the proxy saw (every try, retry and redirect), not only the pages.
        return NodeContracts(node_id=node_id, contracts=tuple(found), requests=max(self.requests_sent - sent, pages))

    def rent_contract(self, node_id: int) -> Contract | None:
        """GET /contracts?node_id=N&type=rent&state=Created,GracePeriod: one request (grid.proxy.rent)."""
        return rent_contract_read(self._get_json, _node_id_argument(node_id), parsed=parsed_at)

    def storage_pools(self, node_id: int) -> tuple[PoolMetrics, ...]:
        # The proxy has no such path: the pools are the node's to tell, over RMB.
        raise PoolsNotAvailable(POOLS_NOT_AVAILABLE)

    def farm_ips(self, farm_id: int) -> FarmPublicIps:
        """GET /farms?farm_id=F (grid.proxy.farms): one request under the same budget and deadline."""
        return farm_ips_read(self._get_json, _positive_argument(farm_id, "farm id"), parsed=parsed_at)

    def deploy_vm(self, node_id: int, size: SliceSize, *, name: str, public_ips: int = 0, gpus: int = 0) -> VmDeployed:
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
        answer: dict[str, Any] | None = None,
    ) -> tuple[Any, str]:
        """One request with its retries, recorded for /metrics (endpoint, outcome, duration).

        `answer`, when given, receives the answer's "headers" (e.g. the `count` of ret_count=true).
        """
        with _recorded(path):
            url = self.base_url + path + (f"?{urlencode(params)}" if params else "")
            # One budget for the whole request: every try, every back-off, every byte of the answer.
            seconds = self.statistics_deadline if statistics else self.deadline
            deadline = Deadline.within(seconds, clock=self.clock).earliest(current_step_deadline())
            final = self._final_answer(path, url, deadline, STATISTICS_RETRY_STATUSES if statistics else RETRY_STATUSES)
            if final.status == 200:
                if answer is not None:
                    answer["headers"] = final.headers
                return json_decoded(final.body, final.url, node_id=node_id), final.url
            raise self._refusal(final, node_id=node_id, statistics=statistics)

    def _final_answer(self, path: str, url: str, deadline: Deadline, retry_statuses: frozenset[int]) -> _Answer:
        """Try until an answer is not to be retried; a request that cannot get one raises GridUnavailable."""
        with Watchdog(deadline) as watchdog:
            tries = 0
            while True:
                tries += 1
                try:
                    tried = time.monotonic()
                    # `url` follows a same-host redirect: the next try asks where the last one was sent.
                    status, reason, body, url, headers = self._fetch(url, deadline=deadline)
                except requests.exceptions.RequestException as exc:
                    self._after_transport_error(exc, url, tries, deadline, fired=watchdog.fired)
                    continue
                if status == 429:
                    self._wait_as_asked(path, url, headers, deadline, tried=tried)
                    tries -= 1  # not a failure of the proxy: the deadline bounds these, not GRID_RETRIES
                    continue
                if status in retry_statuses and tries <= self.retries and deadline.remaining() > 0:
                    self._before_retry(url, tries, deadline, why=f"answered {status} {reason}")
                    continue
                return _Answer(status=status, reason=reason, body=body, url=url, headers=headers, tries=tries)

    def _after_transport_error(
        self, exc: requests.exceptions.RequestException, url: str, tries: int, deadline: Deadline, *, fired: bool
    ) -> None:
        """Raise when the request is over (its deadline, its tries, a TLS failure); else wait for the next try."""
        if fired or deadline.passed():
            raise GridUnavailable(_deadline_words(deadline, url)) from None
        if tries > self.retries or isinstance(exc, requests.exceptions.SSLError):
            raise GridUnavailable(self._transport_words(exc, url, tries)) from exc
        self._before_retry(url, tries, deadline, why=self._transport_words(exc, url, tries, short=True))

    def _wait_as_asked(self, path: str, url: str, headers: Any, deadline: Deadline, *, tried: float) -> None:
        """A 429: counted for /metrics, then waited for as Retry-After asks, unless that passes the deadline."""
        telemetry.record(endpoint=telemetry.endpoint_of(path), outcome=RATE_LIMITED, seconds=time.monotonic() - tried)
        wait = retry_after_seconds(headers, default=self.backoff)
        if wait >= deadline.remaining():
            raise GridUnavailable(
                f"the grid proxy refused {url} for rate (429: too many requests from this address) and "
                f"asked to wait {wait:g} s, past the request's deadline ({deadline.seconds:g} s); "
                "lower GRID_RATE_LIMIT if other programs share this address"
            )
        log.debug("grid proxy: %s answered 429; waiting %.2f s as it asks", url, wait)
        self.sleep(wait)

    def _refusal(self, final: _Answer, *, node_id: int | None, statistics: bool) -> GridError:
        """The typed error a final answer other than 200 stands for, in words a person can act on."""
        status, reason, url, tries = final.status, final.reason, final.url, final.tries
        message = proxy_words(final.body)
        if status == 404 and node_id is not None:
            return NodeNotFound(f"node {node_id} is not on the grid (404 from {url})")
        if statistics and status == 500:
            down = _DOWN_STATUS_RE.search(message)
            if down:
                return NodeAway(
                    f"node {node_id} is {down.group(1).lower()}: the grid proxy cannot fetch its statistics ({url})"
                )
            return GridUnavailable(
                f"the grid proxy could not get node {node_id}'s statistics from the node ({url} answered 500, "
                f"not retried: the proxy had already waited for the node): {message}"
            )
        if status in RETRY_STATUSES or status >= 500:
            return GridUnavailable(
                f"the grid proxy answered {status} {reason} for {url} after {tries} {'try' if tries == 1 else 'tries'}"
                + (f": {message}" if message else "")
            )
        if status == 400:
            return QueryRefused(f"the grid proxy refused {url} with 400 {reason}" + (f": {message}" if message else ""))
        return GridError(f"the grid proxy refused {url} with {status} {reason}" + (f": {message}" if message else ""))

    def _budgeted(self, deadline: Deadline, *, what: str) -> AbstractContextManager:
        return nullcontext() if self.budget is None else self.budget.sending(deadline, what=what)

    def _fetch(self, url: str, *, deadline: Deadline) -> tuple[int, str, bytes, str, Any]:
        """One try: status, reason, body, the URL that answered (a same-host redirect is followed), headers."""
        for hop in range(MAX_REDIRECTS + 1):
            # Each hop is a request the proxy counts, in the budget from admission until its answer is in.
            with self._budgeted(deadline, what=f"GET {url}" + (" (redirected)" if hop else "")):
                left = deadline.remaining()
                if left <= 0:
                    raise requests.exceptions.Timeout("the deadline passed")
                self.requests_sent += 1
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
                    return response.status_code, short_words(response.reason or ""), body, url, response.headers
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
                f"{short_words(where, 120)}; redirects to another host are not followed (check GRID_PROXY_URL)"
            )
        if parts.scheme != self._origin[0]:
            raise GridUnavailable(
                f"the grid proxy at {_host(url)} answered {status} for {url}, redirecting to {short_words(parts.scheme, 20)}:// "
                f"on the same host; only {self._origin[0]}:// is followed (check GRID_PROXY_URL)"
            )
        return target

    def _before_retry(self, url: str, tries: int, deadline: Deadline, *, why: str) -> None:
        pause = min(self.backoff * 2 ** (tries - 1), BACKOFF_MAX_SECONDS, max(deadline.remaining(), 0))
        # One line a retry, at DEBUG: the error a person finally reads already says how many tries
        # were made, and a command's stderr must stay that one line.
        log.debug("grid proxy: %s %s; try %d of %d in %.2f s", url, why, tries + 1, self.retries + 1, pause)
        self.sleep(pause)

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
        reason = _transport_reason(exc)
        # NewConnectionError subclasses ConnectTimeoutError in urllib3 2, so it is asked first.
        if isinstance(reason, NewConnectionError):
            what = _connect_failed_words(reason)
        elif isinstance(reason, ConnectTimeoutError) or isinstance(exc, requests.exceptions.ConnectTimeout):
            what = f"timed out connecting (connect timeout {self.connect_timeout:g}s)"
        elif isinstance(reason, ReadTimeoutError) or isinstance(exc, requests.exceptions.ReadTimeout):
            what = f"timed out waiting for the answer (read timeout {self.read_timeout:g}s)"
        elif isinstance(exc, requests.exceptions.SSLError):
            what = f"the TLS handshake failed ({short_words(reason)})"
        elif isinstance(reason, ProtocolError) or isinstance(exc, requests.exceptions.ChunkedEncodingError):
            what = f"the connection broke off mid-answer ({short_words(reason)})"
        else:
            what = short_words(reason)
        if short:
            return what
        return f"the grid proxy at {url} is unavailable: {what}, after {tries} {'try' if tries == 1 else 'tries'}"


@contextmanager
def _recorded(path: str) -> Iterator[None]:
    """The request inside, recorded for /metrics: its endpoint, its outcome (the GridError it raised) and how long."""
    started, outcome = time.monotonic(), telemetry.OK
    try:
        yield
    except GridError as exc:
        outcome = _OUTCOMES.get(type(exc), "refused")
        raise
    finally:
        telemetry.record(endpoint=telemetry.endpoint_of(path), outcome=outcome, seconds=time.monotonic() - started)


def _transport_reason(exc: requests.exceptions.RequestException) -> BaseException:
    """What urllib3 says went wrong under requests' wrapping (a MaxRetryError's reason), else `exc` itself."""
    inner = exc.args[0] if exc.args else None
    if isinstance(inner, MaxRetryError):
        return inner.reason or inner
    if isinstance(inner, BaseException):
        return inner
    return exc


def _connect_failed_words(reason: NewConnectionError) -> str:
    """Why no connection was made: refused, a host name that does not resolve, or another reason."""
    text = str(reason).lower()
    if "refused" in text:
        return "connection refused"
    if "resolution" in text or "name or service" in text or "nodename" in text:
        return f"its host name could not be resolved ({short_words(reason)})"
    return f"could not connect ({short_words(reason)})"


def _new_session() -> requests.Session:
    session = requests.Session()
    # Retries are ours (GridProxyClient._get_json): they must stay inside the request's budget,
    # and urllib3's own would log a "Retrying (...)" warning for each.
    adapter = WatchedAdapter(max_retries=Retry(total=0, redirect=False, raise_on_status=False))
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


__all__ = ["DEPLOY_NOT_SUPPORTED", "GridProxyClient"]
