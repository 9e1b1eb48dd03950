"""The simulated grid's RMB: the product's `get_rmb()` when the grid is the simulator and no rmb-peer is set.

It answers the calls the product makes of an RMB client (`ask_many` and the commands on it) with the
very envelope the stand-in peer would RPUSH (rmb_peer.node_answer), read by the production door's own
reader (grid.rmb.client: `envelope_read`, `answer_read`, so grid.rmb.parse): a node down or asleep is
NodeSilent, an `err` answer RmbRefused, a body the parser refuses MalformedPayload, as over Redis.
Only the transport is left out: no Redis, no budget, no deadline to wait for (a silent node is said at
once). settings.SIMULATED_RMB names it; the product never imports sim/.

Its labels say the simulated node answered: pool reports from it are source "zos" with the grid's
name as origin, builds told_by "simulated" (the pages say "the simulated node itself, over the simulated grid's RMB loopback").
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from dashboard.grid.deadline import Deadline
from dashboard.grid.rmb.client import RmbCalls, Target, answer_read, envelope_read, silent, unreadable
from dashboard.grid.types import GridError, MalformedPayload
from sim.grid.rmb_peer import node_answer
from sim.grid.store import SimulatedGrid


class LoopbackRmb(RmbCalls):
    name = "rmb-loopback"
    pools_source = "zos"
    version_told_by = "simulated"
    over = "over the simulated grid's RMB loopback"

    def __init__(self, grid: SimulatedGrid, *, deadline: float) -> None:
        self.grid = grid
        self.deadline = deadline  # only for a silent node's words: nothing here waits
        self.pools_origin = grid.name

    def __repr__(self) -> str:
        return f"LoopbackRmb({self.grid.name!r})"

    def ask_many(self, cmd: str, targets: Sequence[Target], *, body: Any = None) -> dict[int, Any]:
        """Each target's answer as the production door reads it, or the GridError that says why there is none."""
        return {target.node_id: self._asked(cmd, target, body=body) for target in targets}

    def _asked(self, cmd: str, target: Target, *, body: Any) -> Any:
        answer = None
        if self._twin_of(target.node_id) == target.twin_id:  # RMB reaches a twin: another's node never answers
            answer = node_answer(
                self.grid, uuid.uuid4().hex, cmd, node_id=target.node_id, twin=target.twin_id, asked=body
            )
        if answer is None:
            return silent(cmd, target, Deadline.within(self.deadline))
        # The bytes the peer would RPUSH, read as the client reads them off the reply queue.
        envelope = envelope_read(json.dumps(answer).encode())
        if isinstance(envelope, MalformedPayload):
            return unreadable(cmd, target, envelope)
        return answer_read(cmd, envelope, target)

    def _twin_of(self, node_id: int) -> int | None:
        try:
            return self.grid.node(node_id).twin_id
        except GridError:
            return None


def rmb_from_settings() -> LoopbackRmb:
    """What `dashboard.grid.rmb.get_rmb` serves with GRID_BACKEND "simulator" and RMB_REDIS_URL unset."""
    from django.conf import settings

    from sim.grid import grid_from_settings

    return LoopbackRmb(grid_from_settings(), deadline=settings.RMB_DEADLINE)


__all__ = ["LoopbackRmb", "rmb_from_settings"]
