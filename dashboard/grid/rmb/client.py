"""The RMB door: calls to ZOS nodes through an rmb-peer, over its Redis (threefoldtech/rmb-rs docs/readme.md).

A call is one JSON request RPUSHed to `msgbus.system.local`; rmb-peer signs it with the marketplace
twin's key, sends it through the relay, and RPUSHes each destination's answer onto the call's `ret`
queue. Here:
- every call has a deadline (RMB_DEADLINE, cut by the job step's), sent as its `exp` too: a node that
  is off never answers, so the deadline is the only end, and it becomes NodeSilent's words;
- the reply queue is this process's own (host, pid and a random part); answers are matched by `ref`,
  and one from another twin than the call's destination is refused, never taken for the node's;
- each call first takes its place in the RMB budget (RMB_RATE_LIMIT calls a second, RMB_MAX_IN_FLIGHT
  awaiting an answer), kept in the peer's Redis so every process shares it, as the proxy's budget is;
- `ask_many` sends a page of calls at once (paced by the budget) and collects their answers together,
  so a page with silent nodes costs one deadline, not one per node.

A process's calls take a lock: the reply queue is the process's, so two threads must not read it at once.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.grid.budget import RedisInFlight, RequestBudget
from dashboard.grid.deadline import Deadline, current_step_deadline
from dashboard.grid.rmb import parse
from dashboard.grid.text import text_printable, url_redacted
from dashboard.grid.types import (
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeSilent,
    NodeStatistics,
    PoolMetrics,
    ZosVersion,
)

log = logging.getLogger(__name__)

REQUEST_QUEUE = "msgbus.system.local"
POOLS = "zos.storage.pools"
STATISTICS = "zos.statistics.get"
VERSION = "zos.system.version"
# How long one wait on the reply queue lasts at most, so sending the next paced call is not held up.
_POLL_SECONDS = 0.2
_LEASE_WAIT = 0.05


@dataclass(frozen=True)
class Target:
    """Whom a call is for: the node (for the words) and its twin (RMB's address)."""

    node_id: int
    twin_id: int
    total_sru: int | None = None  # the grid's SSD total: a pools answer above it is refused


class RmbClient:
    name = "rmb"

    def __init__(
        self,
        url: str,
        *,
        deadline: float,
        budget: RequestBudget,
        in_flight: RedisInFlight,
        socket_timeout: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        import redis

        self.url = url
        self.deadline = deadline
        self.budget = budget
        self.in_flight = in_flight
        self.clock = clock
        self._redis = redis.Redis.from_url(url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
        self._lock = threading.Lock()
        self._queue: tuple[int, str] | None = None

    def __repr__(self) -> str:
        return f"RmbClient({url_redacted(self.url)!r})"

    # --- the commands ------------------------------------------------------------------

    def storage_pools(self, target: Target) -> tuple[PoolMetrics, ...]:
        return self._one(POOLS, target)

    def statistics(self, target: Target) -> NodeStatistics:
        return self._one(STATISTICS, target)

    def version(self, target: Target) -> ZosVersion:
        return self._one(VERSION, target)

    def pools_many(self, targets: Sequence[Target]) -> dict[int, tuple[PoolMetrics, ...] | GridError]:
        return self.ask_many(POOLS, targets)

    def _one(self, cmd: str, target: Target):
        answer = self.ask_many(cmd, [target])[target.node_id]
        if isinstance(answer, GridError):
            raise answer
        return answer

    # --- calls -------------------------------------------------------------------------

    def ask_many(self, cmd: str, targets: Sequence[Target], *, body: Any = None) -> dict[int, Any]:
        """Each target's parsed answer, or the GridError that says why there is none, by node id."""
        results: dict[int, Any] = {}
        if not targets:
            return results
        with self._lock:
            queue = self._reply_queue()
            pending: dict[str, tuple[Target, Deadline]] = {}
            unsent = list(targets)
            stray = 0
            try:
                while unsent or pending:
                    while unsent and len(pending) < self.in_flight.cap:
                        target = unsent.pop(0)
                        sent = self._send(cmd, target, body=body, queue=queue)
                        if isinstance(sent, GridError):
                            results[target.node_id] = sent
                        else:
                            pending[sent[0]] = sent[1:]
                        if unsent:  # answers that came while the budget paced us: their places freed now
                            stray += self._collect(cmd, queue, pending, results, single=False, wait=0)
                    stray += self._collect(cmd, queue, pending, results, single=len(targets) == 1)
                    self._expire(cmd, pending, results, stray=stray)
            finally:
                for ref in pending:
                    self._release(ref)
                self._forget(queue)
        return results

    def _send(self, cmd: str, target: Target, *, body: Any, queue: str) -> tuple[str, Target, Deadline] | GridError:
        deadline = Deadline.within(self.deadline).earliest(current_step_deadline())
        what = f"{cmd} to node {target.node_id} (twin {target.twin_id})"
        try:
            self.budget.take(deadline, what=what)
        except GridUnavailable as exc:
            return exc
        ref = uuid.uuid4().hex
        try:
            while not self.in_flight.lease(ref, seconds=max(deadline.remaining(), 0.001)):
                # Every place is taken by calls of other processes: theirs end by their deadlines.
                if deadline.remaining() <= _LEASE_WAIT:
                    return GridUnavailable(
                        f"{what} was not sent: {self.in_flight.cap} calls were awaiting an answer until its "
                        f"deadline ({deadline.seconds:g} s; RMB_MAX_IN_FLIGHT, shared by every process)"
                    )
                self.budget.sleep(_LEASE_WAIT)
            now = self.clock()
            request = {
                "ver": 1,
                "ref": ref,
                "cmd": cmd,
                "exp": int(now + max(deadline.remaining(), 0)) + 1,
                "dat": base64.b64encode(json.dumps(body).encode()).decode() if body is not None else "",
                "tag": None,
                "dst": [target.twin_id],
                "ret": queue,
                "shm": "",
                "now": int(now),
            }
            self._redis.rpush(REQUEST_QUEUE, json.dumps(request))
        except Exception as exc:  # redis raises many kinds; each is "the peer's Redis failed"
            self._release(ref)
            return GridUnavailable(
                f"{what} was not sent: the RMB peer's Redis ({url_redacted(self.url)}) failed: {text_printable(exc)}"
            )
        return ref, target, deadline

    def _collect(
        self, cmd: str, queue: str, pending: dict, results: dict, *, single: bool, wait: float | None = None
    ) -> int:
        """Wait a little (or not at all, wait=0) for answers and match them; how many matched no call."""
        if not pending:
            return 0
        if wait is None:
            wait = min(_POLL_SECONDS, max(min(d.remaining() for _, d in pending.values()), 0.001))
        try:
            if wait > 0:
                item = self._redis.blpop([queue], timeout=wait)
            else:
                raw = self._redis.lpop(queue)
                item = (queue, raw) if raw is not None else None
        except Exception as exc:
            for ref, (target, _d) in list(pending.items()):
                results[target.node_id] = GridUnavailable(
                    f"node {target.node_id}'s {cmd} answer could not be read: the RMB peer's Redis "
                    f"({url_redacted(self.url)}) failed: {text_printable(exc)}"
                )
                self._release(ref)
            pending.clear()
            return 0
        stray = 0
        while item is not None:
            stray += self._match(cmd, item[1], pending, results, single=single)
            try:
                raw = self._redis.lpop(queue)
            except Exception:  # the next blpop says it
                raw = None
            item = (queue, raw) if raw is not None else None
        return stray

    def _match(self, cmd: str, raw: bytes, pending: dict, results: dict, *, single: bool) -> int:
        try:
            envelope = parse.parse_envelope(raw)
        except MalformedPayload as exc:
            if single and pending:  # one call awaits: it can only be its answer
                ref, (target, _d) = next(iter(pending.items()))
                results[target.node_id] = MalformedPayload(
                    f"node {target.node_id} answered {cmd} over RMB with {exc}; its answer was not taken"
                )
                self._settle(ref, pending)
                return 0
            log.warning("an RMB answer was left: %s", exc)
            return 1
        if envelope.ref not in pending:
            return 1  # a late answer to a call that ended, or someone else's: not ours to take
        target, _deadline = pending[envelope.ref]
        self._settle(envelope.ref, pending)
        if envelope.src != target.twin_id:
            results[target.node_id] = MalformedPayload(
                f"twin {envelope.src} answered the {cmd} call to node {target.node_id} (twin {target.twin_id}); "
                "an answer for another node is not taken"
            )
        elif envelope.err_code is not None or envelope.err_message:
            results[target.node_id] = parse.refusal(envelope, node_id=target.node_id, cmd=cmd)
        else:
            try:
                results[target.node_id] = _parsed(cmd, envelope.body, target)
            except MalformedPayload as exc:
                results[target.node_id] = MalformedPayload(f"{exc}; the answer was not taken")
        return 0

    def _expire(self, cmd: str, pending: dict, results: dict, *, stray: int) -> None:
        for ref, (target, deadline) in list(pending.items()):
            if deadline.passed():
                extra = f" ({stray} answer(s) that matched no call came meanwhile)" if stray else ""
                results[target.node_id] = NodeSilent(
                    f"node {target.node_id} did not answer {cmd} over RMB {deadline.words()}{extra}: it may be off, "
                    "on standby or unreachable, or the peer lost the call"
                )
                self._settle(ref, pending)

    def _settle(self, ref: str, pending: dict) -> None:
        pending.pop(ref, None)
        self._release(ref)

    def _release(self, ref: str) -> None:
        try:
            self.in_flight.release(ref)
        except Exception:  # a lease ends by itself at its deadline
            pass

    def _reply_queue(self) -> str:
        pid = os.getpid()
        if self._queue is None or self._queue[0] != pid:  # a forked worker takes a queue of its own
            self._queue = (pid, f"slicedash.rmb.{socket.gethostname()}.{pid}.{uuid.uuid4().hex[:8]}")
        return self._queue[1]

    def _forget(self, queue: str) -> None:
        """A late answer after the call may create the queue again: it lapses on its own."""
        try:
            self._redis.expire(queue, int(self.deadline) + 60)
        except Exception:
            pass


def _parsed(cmd: str, body: Any, target: Target):
    if cmd == POOLS:
        return parse.parse_pools(body, node_id=target.node_id, total_sru=target.total_sru)
    if cmd == STATISTICS:
        return parse.parse_zos_statistics(body, node_id=target.node_id)
    if cmd == VERSION:
        return parse.parse_version(body, node_id=target.node_id)
    return body


__all__ = ["POOLS", "REQUEST_QUEUE", "STATISTICS", "VERSION", "RmbClient", "Target"]
