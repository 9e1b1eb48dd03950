"""The RMB door: calls to ZOS nodes through an rmb-peer, over its Redis (threefoldtech/rmb-rs docs/readme.md).

A call is one JSON request RPUSHed to `msgbus.system.local`; rmb-peer signs it with the marketplace
twin's key, sends it through the relay, and RPUSHes each destination's answer onto the call's `ret`
queue. Here:
- every call has a deadline (RMB_DEADLINE, cut by the job step's), sent as its `exp` too: a node that
  is off never answers, so the deadline is the only end, and it becomes NodeSilent's words;
- every Redis operation of a call is cut to what is left of that deadline (grid.redis_cut): a hung or
  dripping Redis costs a call its deadline, never more, and a round that finds the peer's Redis failing
  stops asking (RmbPeerFailed, for the nodes asked and those not asked yet);
- the reply queue is this process's own (host, pid and a random part), emptied before each round;
  answers are matched by `ref`, one from another twin than the call's destination is refused, never
  taken for the node's, and the queue is read a batch at a time with the clock looked at after every
  answer, so a flood of junk ends at the deadline too;
- an answer that cannot be read (not JSON, nested past the stack, the wrong shape) is that node's
  MalformedPayload, never an exception out of the round;
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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dashboard.grid.budget import RedisInFlight, RequestBudget
from dashboard.grid.deadline import Deadline, current_step_deadline
from dashboard.grid.redis_cut import redis_client, redis_within
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
# Answers taken off the reply queue in one round trip; each is matched with a look at the clock.
_BATCH = 32
# A Redis answer to a command timed to the deadline itself (a BLPOP) needs this long to arrive.
_GRACE = 0.03
# What the end of a round (leases given back, the queue's expiry) may take beyond its last deadline.
_CLEANUP_SECONDS = 0.03


class RmbPeerFailed(GridUnavailable):
    """The peer's Redis failed or did not answer within the call's deadline: nothing more is asked of it
    in this round, and every node of the round (asked or not yet) is told so in these words."""


@dataclass(frozen=True)
class Target:
    """Whom a call is for: the node (for the words) and its twin (RMB's address)."""

    node_id: int
    twin_id: int
    total_sru: int | None = None  # the grid's SSD total: a pools answer above it is refused


@dataclass
class _Round:
    """One `ask_many`: the calls awaiting their answer (by ref), what each node got, and the peer's state."""

    cmd: str
    queue: str
    single: bool  # one call awaits: an answer that cannot be read can only be its own
    results: dict[int, Any]
    pending: dict[str, tuple[Target, Deadline]] = field(default_factory=dict)
    backlog: deque = field(default_factory=deque)  # answers taken off the queue, not matched yet
    stray: int = 0  # answers that matched no call
    failed: str = ""  # why the peer's Redis cannot be asked any more in this round

    def earliest(self) -> Deadline:
        return min((deadline for _target, deadline in self.pending.values()), key=lambda d: d.ends)


class RmbCalls:
    """The commands the product asks of a node, over `ask_many`: the rmb-peer's client below, and the
    simulated grid's loopback (settings.SIMULATED_RMB), which read every answer as `answer_read` does.

    The labels say who told what a call heard: a pool report's source and origin, a build's told_by."""

    name = "rmb"
    pools_source = "rmb"
    pools_origin = "rmb-peer"
    version_told_by = "rmb"
    over = "over RMB"  # how a sentence says the node was asked

    def ask_many(self, cmd: str, targets: Sequence[Target], *, body: Any = None) -> dict[int, Any]:
        raise NotImplementedError

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


class RmbClient(RmbCalls):
    def __init__(
        self,
        url: str,
        *,
        deadline: float,
        budget: RequestBudget,
        in_flight: RedisInFlight,
        socket_timeout: float = 2.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.deadline = deadline
        self.budget = budget
        self.in_flight = in_flight
        self.clock = clock  # the request's `now` and `exp` (unix time, as rmb-peer reads them)
        # The calls' deadlines; a test's clock is a seam (it then takes no job step's deadline, whose clock differs).
        self.monotonic = monotonic
        self._redis = redis_client(url, socket_timeout=socket_timeout)
        self._lock = threading.Lock()
        self._queue: tuple[int, str] | None = None

    def __repr__(self) -> str:
        return f"RmbClient({url_redacted(self.url)!r})"

    # --- calls -------------------------------------------------------------------------

    def ask_many(self, cmd: str, targets: Sequence[Target], *, body: Any = None) -> dict[int, Any]:
        """Each target's parsed answer, or the GridError that says why there is none, by node id."""
        results: dict[int, Any] = {}
        if not targets:
            return results
        with self._lock:
            call = _Round(cmd=cmd, queue=self._reply_queue(), single=len(targets) == 1, results=results)
            unsent = deque(targets)
            try:
                self._queue_emptied(call)
                while (unsent or call.pending) and not call.failed:
                    self._send_some(call, unsent, body=body)
                    self._collect(call)
                    self._expire(call)
            finally:
                self._end(call, unsent)
        return results

    def _call_deadline(self) -> Deadline:
        deadline = Deadline.within(self.deadline, clock=self.monotonic)
        return deadline.earliest(current_step_deadline()) if self.monotonic is time.monotonic else deadline

    def _queue_emptied(self, call: _Round) -> None:
        """What is left on the process's queue answers calls that ended (or is junk): never this round's."""
        deadline = self._call_deadline()
        if deadline.passed():  # the job step's deadline: each call says so, none blames the Redis
            return
        try:
            with redis_within(deadline, grace=_GRACE):
                self._redis.delete(call.queue)
        except Exception as exc:  # redis raises many kinds; each is "the peer's Redis failed"
            self._fail(call, exc)

    def _send_some(self, call: _Round, unsent: deque, *, body: Any) -> None:
        while unsent and len(call.pending) < self.in_flight.cap and not call.failed:
            self._send(call, unsent.popleft(), body=body)
            if unsent:  # answers that came while the budget paced us: their places freed now
                self._collect(call, wait=0)

    def _send(self, call: _Round, target: Target, *, body: Any) -> None:
        deadline = self._call_deadline()
        what = f"{call.cmd} to node {target.node_id} (twin {target.twin_id})"
        if deadline.passed():
            call.results[target.node_id] = GridUnavailable(
                f"{what} was not sent: the job step's deadline had passed ({deadline.seconds:g} s)"
            )
            return
        with redis_within(deadline, grace=_GRACE):
            try:
                self.budget.take(deadline, what=what)
            except GridUnavailable as exc:
                call.results[target.node_id] = exc
                return
            ref = uuid.uuid4().hex
            try:
                refused = self._lease(ref, deadline, what=what)
                if refused is not None:
                    call.results[target.node_id] = refused
                    return
                self._redis.rpush(REQUEST_QUEUE, json.dumps(self._request(call, target, ref, deadline, body)))
            except Exception as exc:  # redis raises many kinds; each is "the peer's Redis failed"
                self._fail(call, exc)
                call.results[target.node_id] = RmbPeerFailed(f"{what} was not sent: {call.failed}")
                return
        call.pending[ref] = (target, deadline)

    def _lease(self, ref: str, deadline: Deadline, *, what: str) -> GridUnavailable | None:
        """Take a place among the calls awaiting an answer; the refusal when none frees before the deadline."""
        while not self.in_flight.lease(ref, seconds=max(deadline.remaining(), 0.001)):
            # Every place is taken by calls of other processes: theirs end by their deadlines.
            if deadline.remaining() <= _LEASE_WAIT:
                return GridUnavailable(
                    f"{what} was not sent: {self.in_flight.cap} calls were awaiting an answer until its "
                    f"deadline ({deadline.seconds:g} s; RMB_MAX_IN_FLIGHT, shared by every process)"
                )
            self.budget.sleep(_LEASE_WAIT)
        return None

    def _request(self, call: _Round, target: Target, ref: str, deadline: Deadline, body: Any) -> dict:
        now = self.clock()
        return {
            "ver": 1,
            "ref": ref,
            "cmd": call.cmd,
            "exp": int(now + max(deadline.remaining(), 0)) + 1,
            "dat": base64.b64encode(json.dumps(body).encode()).decode() if body is not None else "",
            "tag": None,
            "dst": [target.twin_id],
            "ret": call.queue,
            "shm": "",
            "now": int(now),
        }

    def _collect(self, call: _Round, *, wait: float | None = None) -> None:
        """Wait a little (or not at all, wait=0) for answers and match them, until the earliest call's
        deadline: answers are taken a batch at a time and the clock is looked at after each one."""
        if not call.pending:
            return
        ends = call.earliest()
        if wait is None:
            wait = min(_POLL_SECONDS, max(ends.remaining(), 0.001))
        try:
            with redis_within(ends, grace=_GRACE):
                if not call.backlog:
                    call.backlog.extend(self._taken(call.queue, wait=wait, ends=ends))
                while call.backlog and call.pending:
                    self._match(call, call.backlog.popleft())
                    if ends.passed():
                        return  # _expire says so; what is left is matched on the next look
                    if not call.backlog and call.pending:
                        call.backlog.extend(self._taken(call.queue, wait=0, ends=ends))
        except Exception as exc:  # redis raises many kinds; each is "the peer's Redis failed"
            self._fail(call, exc)

    def _taken(self, queue: str, *, wait: float, ends: Deadline) -> list[bytes]:
        """The next answers on the queue: one waited for up to `wait` s, or (wait=0) up to a batch at once."""
        if wait > 0:
            try:
                item = self._redis.blpop([queue], timeout=wait)
            except Exception:
                # Redis ends a BLPOP on its own timer (up to 1/hz, 100 ms, late): one cut at the deadline
                # is the deadline's end, not a failure. A hung Redis is found by the round's other commands.
                if ends.passed():
                    return []
                raise
            return [item[1]] if item is not None else []
        # A pipeline of LPOPs, not LPOP's count (Redis 6.2+): any rmb-peer's Redis takes it.
        pipe = self._redis.pipeline(transaction=False)
        for _ in range(_BATCH):
            pipe.lpop(queue)
        return [raw for raw in pipe.execute() if raw is not None]

    def _match(self, call: _Round, raw: bytes) -> None:
        envelope = envelope_read(raw)
        if isinstance(envelope, MalformedPayload):
            if call.single and call.pending:  # one call awaits: it can only be its answer
                ref, (target, _d) = next(iter(call.pending.items()))
                call.results[target.node_id] = unreadable(call.cmd, target, envelope)
                self._settle(ref, call)
                return
            log.warning("an RMB answer was left: %s", envelope)
            call.stray += 1
            return
        if envelope.ref not in call.pending:
            call.stray += 1  # a late answer to a call that ended, or someone else's: not ours to take
            return
        target, _deadline = call.pending[envelope.ref]
        self._settle(envelope.ref, call)
        call.results[target.node_id] = answer_read(call.cmd, envelope, target)

    def _expire(self, call: _Round) -> None:
        for ref, (target, deadline) in list(call.pending.items()):
            if deadline.passed():
                extra = f" ({call.stray} answer(s) that matched no call came meanwhile)" if call.stray else ""
                call.results[target.node_id] = silent(call.cmd, target, deadline, extra=extra)
                call.pending.pop(ref)  # its lease lapsed with its deadline: nothing to give back

    def _fail(self, call: _Round, exc: BaseException) -> None:
        """The peer's Redis failed: every call awaiting an answer is told so, and nothing more is asked."""
        call.failed = (
            f"the RMB peer's Redis ({url_redacted(self.url)}) failed or did not answer within the call's deadline: "
            f"{text_printable(exc) or type(exc).__name__}"
        )
        for target, _deadline in call.pending.values():
            call.results[target.node_id] = RmbPeerFailed(
                f"node {target.node_id}'s {call.cmd} answer could not be read: {call.failed}"
            )
        call.pending.clear()  # their leases end by themselves at their deadlines: nothing more is asked of it

    def _end(self, call: _Round, unsent: deque) -> None:
        """The round's end: the nodes it never asked, the leases of calls left (an error), the queue's expiry."""
        for target in unsent:
            if call.failed:
                call.results[target.node_id] = RmbPeerFailed(
                    f"node {target.node_id} was not asked {call.cmd} over RMB: {call.failed}, earlier in this round"
                )
        if call.failed:
            return
        with redis_within(Deadline.within(_CLEANUP_SECONDS)):
            for ref in list(call.pending):
                self._release(ref)
            try:  # a late answer after the call may create the queue again: it lapses on its own
                self._redis.expire(call.queue, int(self.deadline) + 60)
            except Exception:
                pass

    def _settle(self, ref: str, call: _Round) -> None:
        call.pending.pop(ref, None)
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


def answer_read(cmd: str, envelope: parse.Envelope, target: Target) -> Any:
    """The call's result from the answer's envelope: the parsed body, or the GridError that says why it
    was not taken (another twin's answer, a `dat` that cannot be read, an `err`). Every RMB door reads
    an answer here, the simulated grid's loopback too."""
    if envelope.src is not None and envelope.src != target.twin_id:
        return MalformedPayload(
            f"twin {envelope.src} answered the {cmd} call to node {target.node_id} (twin {target.twin_id}); "
            "an answer for another node is not taken"
        )
    if envelope.problem:
        return MalformedPayload(
            f"node {target.node_id} answered {cmd} over RMB with {envelope.problem}; its answer was not taken"
        )
    if envelope.err_code is not None or envelope.err_message:
        return parse.refusal(envelope, node_id=target.node_id, twin_id=target.twin_id, cmd=cmd)
    return _parsed(cmd, envelope.body, target)


def unreadable(cmd: str, target: Target, problem: MalformedPayload) -> MalformedPayload:
    """The call's answer, whose envelope could not be read (`envelope_read`'s words)."""
    return MalformedPayload(f"node {target.node_id} answered {cmd} over RMB with {problem}; its answer was not taken")


def silent(cmd: str, target: Target, deadline: Deadline, *, extra: str = "") -> NodeSilent:
    """A call no answer came to by its deadline."""
    return NodeSilent(
        f"node {target.node_id} did not answer {cmd} over RMB {deadline.words()}{extra}: it may be "
        "off, on standby or unreachable, or the peer lost the call"
    )


def envelope_read(raw: bytes) -> parse.Envelope | MalformedPayload:
    """The answer's envelope, or why it cannot be read: whatever the bytes, never an exception."""
    try:
        return parse.parse_envelope(raw)
    except MalformedPayload as exc:
        return exc
    except Exception as exc:  # a case the parser did not foresee: that answer's problem, and a bug to log
        log.exception("an RMB answer could not be read")
        return MalformedPayload(f"an answer that could not be read ({type(exc).__name__})")


def _parsed(cmd: str, body: Any, target: Target) -> Any:
    """The body as the command's answer, or the MalformedPayload that says why it was not taken."""
    try:
        if cmd == POOLS:
            return parse.parse_pools(body, node_id=target.node_id, total_sru=target.total_sru)
        if cmd == STATISTICS:
            return parse.parse_zos_statistics(body, node_id=target.node_id)
        if cmd == VERSION:
            return parse.parse_version(body, node_id=target.node_id)
        return body
    except MalformedPayload as exc:
        return MalformedPayload(f"{exc}; the answer was not taken")
    except Exception as exc:  # a case the parser did not foresee: that node's problem, and a bug to log
        log.exception("node %s's %s answer could not be read", target.node_id, cmd)
        return MalformedPayload(
            f"node {target.node_id}'s {cmd} answer could not be read ({type(exc).__name__}); the answer was not taken"
        )


__all__ = [
    "POOLS",
    "REQUEST_QUEUE",
    "STATISTICS",
    "VERSION",
    "RmbCalls",
    "RmbClient",
    "RmbPeerFailed",
    "Target",
    "answer_read",
    "envelope_read",
    "silent",
    "unreadable",
]
