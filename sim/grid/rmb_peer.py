"""A stand-in rmb-peer: the simulated nodes answer RMB calls over the same Redis protocol as the real peer.

`manage.py simgrid rmb-peer --redis URL` runs it. It takes requests off `msgbus.system.local` as
rmb-peer does (threefoldtech/rmb-rs docs/readme.md) and RPUSHes each destination's answer onto the
request's `ret` queue, from the simulated grid: `zos.storage.pools` from the node's ZosMachine,
`zos.statistics.get` from its counters, `zos.system.version` the node's own build (answers.py). Like the real grid, a node
that is down or on standby, or a twin no simulated node has, never answers; a request past its `exp`
is dropped. `delay` holds every answer back that long (answers are scheduled, so a slow peer still
serves many calls at once) and `error_rate` answers that share of calls with an `err`.
"""

from __future__ import annotations

import base64
import heapq
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from dashboard.grid.types import GridError, RmbRefused
from sim.grid.answers import version_body
from sim.grid.store import SimulatedGrid

log = logging.getLogger(__name__)

REQUEST_QUEUE = "msgbus.system.local"
_TWIN_REFRESH_SECONDS = 1.0


class StandInPeer:
    """Serves until `stop` is set; `served` counts the answers sent (for the command's last words)."""

    def __init__(
        self,
        grid: SimulatedGrid,
        url: str,
        *,
        delay: float = 0.0,
        error_rate: float = 0.0,
        seed: int | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        import redis

        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error rate must be from 0 to 1 (got {error_rate!r})")
        if delay < 0:
            raise ValueError(f"delay must be zero or more seconds (got {delay!r})")
        self.grid = grid
        self.redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.delay, self.error_rate = delay, error_rate
        self.random = random.Random(seed)
        self.stop = stop or threading.Event()
        self.served = 0
        self._twins: dict[int, int] = {}
        self._twins_read = 0.0
        self._due: list[tuple[float, int, str, str]] = []  # (when, order, ret queue, answer)
        self._order = 0

    def serve_forever(self) -> None:
        while not self.stop.is_set():
            self.serve_once()

    def serve_once(self, wait: float = 0.2) -> None:
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            _, _, ret, answer = heapq.heappop(self._due)
            self.redis.rpush(ret, answer)
            self.served += 1
        timeout = wait if not self._due else max(min(wait, self._due[0][0] - now), 0.001)
        item = self.redis.blpop([REQUEST_QUEUE], timeout=timeout)
        if item is not None:
            self.take(item[1])

    def take(self, raw: bytes) -> None:
        try:
            request = json.loads(raw)
            # rmb-rs JsonOutgoingRequest: `ref`, `tag` and `shm` are Option<String>, absent or null (grid3's
            # client leaves an empty ref out); cmd, dst and ret are required.
            ref, cmd, ret, dst = request.get("ref"), request["cmd"], request["ret"], request["dst"]
            expires = float(request.get("exp") or 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("the stand-in peer dropped a request that is not rmb-peer's JSON")
            return
        if expires and expires < time.time():
            return  # rmb-peer drops a message past its expiry
        asked = _request_body(request.get("dat"))
        for twin in dst if isinstance(dst, list) else []:
            answer = self.answer(ref, cmd, twin, asked=asked)
            if answer is not None:
                self._order += 1
                heapq.heappush(self._due, (time.monotonic() + self.delay, self._order, ret, json.dumps(answer)))

    def answer(self, ref: str | None, cmd: str, twin: int, *, asked: Any = None) -> dict | None:
        """The envelope the twin's node sends back, or None when it would stay silent."""
        node_id = self._node_of(twin)
        if node_id is None:
            return None
        return node_answer(
            self.grid,
            ref,
            cmd,
            node_id=node_id,
            twin=twin,
            asked=asked,
            fails=lambda: bool(self.error_rate) and self.random.random() < self.error_rate,
        )

    def _node_of(self, twin: Any) -> int | None:
        if isinstance(twin, bool) or not isinstance(twin, int):
            return None
        if twin not in self._twins and time.monotonic() - self._twins_read > _TWIN_REFRESH_SECONDS:
            self._twins, page = {}, 1
            while True:
                nodes = self.grid.nodes(page=page, size=500).nodes
                self._twins.update({n.twin_id: n.node_id for n in nodes if n.twin_id is not None})
                if len(nodes) < 500:
                    break
                page += 1
            self._twins_read = time.monotonic()
        return self._twins.get(twin)


def node_answer(
    grid: SimulatedGrid,
    ref: str | None,
    cmd: str,
    *,
    node_id: int,
    twin: int,
    asked: Any = None,
    fails: Callable[[], bool] = lambda: False,
) -> dict | None:
    """The envelope node `node_id` (twin `twin`) sends back to `cmd`, or None when it stays silent (down,
    asleep or gone); `fails()` true: a simulated failure (--error-rate). The stand-in peer sends it over
    Redis, the loopback (rmb_loopback.py) hands it to the product's parser in process."""
    try:
        if grid.node(node_id).status != "up":
            return None
        if fails():
            return envelope(ref, twin, err={"code": 500, "message": "simulated failure (--error-rate)"})
        body = answer_body(grid, cmd, node_id, asked=asked)
    except RmbRefused as exc:
        return envelope(ref, twin, err={"code": getattr(exc, "code", 404), "message": str(exc)})
    except GridError:
        return None  # a node away (or gone) meanwhile: as silent as a real one
    if body is None:
        return envelope(ref, twin, err={"code": 404, "message": f"unknown command: {cmd}"})
    return envelope(ref, twin, body=body)


def answer_body(grid: SimulatedGrid, cmd: str, node_id: int, *, asked: Any = None) -> Any:
    """The body of the node's answer to `cmd` (None: a command it does not know)."""
    if cmd == "zos.storage.pools":
        return [pool.as_dict() for pool in grid.storage_pools(node_id)]
    if cmd == "zos.statistics.get":
        stats = grid.statistics(node_id)
        # zosbase pkg/provision.go Counters; gridtypes.Capacity carries ipv4u (public IPs in use: not modelled).
        return {
            "total": {**stats.total.as_dict(), "ipv4u": 0},
            "used": {**stats.used.as_dict(), "ipv4u": 0},
            "system": {**stats.system.as_dict(), "ipv4u": 0},
            "users": {
                "deployments": stats.deployments,
                "workloads": stats.workloads,
                "last_deployment_timestamp": 0,
            },
            "open_connections": 0,
        }
    if cmd == "zos.system.version":
        return version_body(grid.zos_version(node_id))
    if cmd == "zos.perf.get":
        return perf_body(grid.node(node_id), asked)
    return None


# zosbase pkg/perf/cpubench/cpubench_task.go: the one perf task the simulated node runs.
CPU_BENCHMARK = "cpu-benchmark"
CPU_BENCHMARK_WORDS = (
    "Measures the performance of the node CPU by reporting the timespent of computing a task in seconds."
)


def perf_body(node, asked: Any) -> dict:
    """zos.perf.get's TaskResult (zosbase pkg/performance_monitor.go) for {"name": "cpu-benchmark"}; the
    request names its task as zosbase pkg/zos_api/perf.go reads it. Another task: RmbRefused, as a node
    with no such result in its cache refuses it."""
    name = (asked or {}).get("name") if isinstance(asked, dict) else None
    if name != CPU_BENCHMARK:
        raise RmbRefused(f"no result for perf task {name!r} on the simulated node")
    return {
        "name": CPU_BENCHMARK,
        "description": CPU_BENCHMARK_WORDS,
        "timestamp": int(time.time()),
        # CPUBenchmarkResult {single, multi float64 seconds; threads, workloads int}: not measured here.
        "result": {"single": 0.0, "multi": 0.0, "threads": node.total.cru, "workloads": 0},
    }


def _request_body(dat: Any) -> Any:
    """The request's body (base64 of JSON, "" for none); None when it is not that."""
    if not isinstance(dat, str) or not dat:
        return None
    try:
        return json.loads(base64.b64decode(dat, validate=True))
    except ValueError:
        return None


def envelope(ref: str | None, twin: int, *, body: Any = None, err: dict | None = None) -> dict:
    """An answer as rmb-peer RPUSHes it onto `ret` (rmb-rs JsonIncomingResponse; grid/schemas/rmb.json Response)."""
    return {
        "ver": 1,
        "ref": ref,
        "dat": "" if err else base64.b64encode(json.dumps(body).encode()).decode(),
        "src": str(twin),
        "shm": None,
        "now": int(time.time()),
        "err": err,
    }


__all__ = ["REQUEST_QUEUE", "StandInPeer", "answer_body", "envelope", "node_answer"]
