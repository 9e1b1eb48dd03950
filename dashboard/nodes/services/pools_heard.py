"""Pools (and the build) heard from the nodes themselves over RMB, kept as pool reports like any other.

The RMB door (grid.rmb) asks; this module decides whom, keeps what is heard through the one pool
report writer (`nodes.services.pools.pools_report`, source `rmb`, or `zos` from the simulated grid's
loopback) and says, for a node that did not answer, why its catalog stays prudent. With no door
(`get_rmb()` None: no rmb-peer, and the Grid Proxy) nothing here asks.
Never call it inside a transaction: a silent node holds its caller for the whole deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.figures.services.node_writes import figures_follow
from dashboard.grid.rmb import POOLS, STATISTICS, VERSION, RmbCalls, RmbPeerFailed, Target, get_rmb
from dashboard.grid.types import (
    GridError,
    MalformedPayload,
    NodeCapacity,
    NodeStatistics,
    PoolMetrics,
    RmbRefused,
    ZosVersion,
)
from dashboard.lessons.services.memory_model import memory_lessons_for_new, zos_build_key
from dashboard.models import Node, PoolReport
from dashboard.nodes.selectors.stored_reading import node_stored_reading
from dashboard.nodes.services.pools import (
    PoolsError,
    pools_cache,
    pools_refused_note,
    pools_report,
    pools_words,
)
from dashboard.nodes.services.zos_cache import OVER_RMB, statistics_heard_many

PRUDENT = "its catalog is carved for every plausible layout of its SSD total until its pools are known"


@dataclass
class Heard:
    """What a round of calls heard: each node's pools, and for the others why not (one sentence each)."""

    pools: dict[int, tuple[PoolMetrics, ...]] = field(default_factory=dict)
    versions: dict[int, ZosVersion] = field(default_factory=dict)
    # Each node's `zos.statistics.get` (or its error): a node without its zos-cache says so there alone,
    # its pools and version answer as ever (nodes.services.zos_cache).
    statistics: dict[int, NodeStatistics | GridError] = field(default_factory=dict)
    why_not: dict[int, str] = field(default_factory=dict)
    # Of why_not, the nodes that did answer, and whose answer was not taken (the node page says why).
    refused: set[int] = field(default_factory=set)
    # The peer's Redis failed during the round: why, in words ("" when it did not); nothing more was asked.
    peer_failed: str = ""
    # Who heard it (the door's labels, grid.rmb.RmbCalls): the rmb-peer, or the simulated grid's loopback.
    source: str = PoolReport.Source.RMB
    origin: str = "rmb-peer"
    told_by: str = "rmb"

    def refuse(self, node_id: int, why: str) -> None:
        """The node answered, and its answer is not taken: why, and its pools are not kept."""
        self.pools.pop(node_id, None)
        self.why_not[node_id] = why
        self.refused.add(node_id)

    def words(self, node_id: int) -> str:
        if node_id in self.pools:
            ssd = [p.size for p in self.pools[node_id] if p.type == "ssd"]
            return f"node {node_id} answered over RMB: SSD pools {pools_words(ssd)}"
        if node_id in self.why_not:
            return f"{self.why_not[node_id]}; {PRUDENT}"
        return ""


def pools_hear(
    lives: Sequence[NodeCapacity], *, rmb: RmbCalls | None = None, version: bool = True, statistics: bool = False
) -> Heard:
    """Ask every node of `lives` without pools for them (one paced round), then the ones that answered (and
    the up ones whose reading told their pools) for their build and, with `statistics` (the watch's rounds),
    for their counters: a node that lost its zos-cache says so there alone. Nothing is written:
    `lives_with_pools` and `pools_heard_store` use it."""
    rmb = rmb or get_rmb()
    if rmb is None:
        return Heard()
    heard = Heard(source=rmb.pools_source, origin=rmb.pools_origin, told_by=rmb.version_told_by)
    targets, told = [], []
    for live in lives:
        if live.pools_sru:
            if live.status == "up" and live.twin_id:
                told.append(Target(node_id=live.node_id, twin_id=live.twin_id, total_sru=live.total.sru))
            continue
        if live.status != "up":
            # Off or asleep it never answers: asking costs a whole deadline and tells nothing.
            heard.why_not[live.node_id] = f"node {live.node_id} is {live.status}: not asked over RMB"
            continue
        if not live.twin_id:
            heard.why_not[live.node_id] = f"node {live.node_id} has no twin id on the grid, so RMB cannot reach it"
            continue
        targets.append(Target(node_id=live.node_id, twin_id=live.twin_id, total_sru=live.total.sru))
    totals = {t.node_id: t.total_sru for t in targets}
    for node_id, answer in rmb.ask_many(POOLS, targets).items():
        _heard_one(heard, node_id, answer, total=totals[node_id])
    answered = [t for t in targets if t.node_id in heard.pools] + told
    if version and answered:
        _ask_answered(rmb, heard, answered, statistics=statistics)
    return heard


def _ask_answered(rmb: RmbCalls, heard: Heard, answered: list[Target], *, statistics: bool) -> None:
    """The nodes that answered their pools, asked for their build (and their counters)."""
    for node_id, answer in rmb.ask_many(VERSION, answered).items():
        if not isinstance(answer, GridError):
            heard.versions[node_id] = answer
    if statistics:
        heard.statistics = rmb.ask_many(STATISTICS, answered)


def _heard_one(heard: Heard, node_id: int, answer, *, total: int) -> None:
    """One node's pools answer, kept in `heard` (taken, refused, or why there is none)."""
    if isinstance(answer, RmbPeerFailed):
        heard.why_not[node_id] = str(answer)
        heard.peer_failed = heard.peer_failed or str(answer)
        return
    if isinstance(answer, MalformedPayload | RmbRefused):
        heard.refuse(node_id, str(answer))
        return
    if isinstance(answer, GridError):  # silent, or the budget had no room: nothing was said
        heard.why_not[node_id] = str(answer)
        return
    ssd = sum(p.size for p in answer if p.type == "ssd")
    if not capacity.pools_match_total(ssd, total):
        heard.refuse(
            node_id,
            f"node {node_id} answered SSD pools adding up to {pools_words([ssd])}, not the grid's SSD total "
            f"of {pools_words([total])}: not taken",
        )
        return
    heard.pools[node_id] = answer


def lives_with_pools(lives: Sequence[NodeCapacity], heard: Heard) -> list[NodeCapacity]:
    """The readings with the SSD pools heard (and the zos-cache they bound), so the carve knows them."""
    return [live_with_pools(live, heard.pools[live.node_id]) if live.node_id in heard.pools else live for live in lives]


def live_with_pools(live: NodeCapacity, pools: Sequence[PoolMetrics]) -> NodeCapacity:
    """The reading with the node's own pools answer: its SSD pool sizes and the zos-cache's bound."""
    ssd = [p for p in pools if p.type == "ssd"]
    cache = pools_cache(ssd, live.used.sru)
    return replace(live, pools_sru=tuple(p.size for p in ssd), zos_cache_sru=cache[0] if cache else None)


def without_pools(live: NodeCapacity) -> NodeCapacity:
    """The reading as if the node had not told its pools: carved for every plausible layout."""
    return replace(live, pools_sru=None, zos_cache_sru=None)


def pools_not_taken_words(node_id: int, exc: Exception) -> str:
    """Why a registration carved a node as for unknown pools though it answered them."""
    return f"node {node_id}'s pools answer was not taken: {exc}"


def pools_heard_store(nodes: Sequence[Node], heard: Heard, *, at: datetime | None = None) -> int:
    """Keep each registered node's heard pools as a pool report (the door's source) and its build; how many kept."""
    at = at or timezone.now()
    kept: list[int] = []
    regrouped: list[int] = []
    for node in nodes:
        version = heard.versions.get(node.grid_id)
        if version is not None and _version_store(node, version.zos, heard=heard, at=at):
            regrouped.append(node.pk)
        pools = heard.pools.get(node.grid_id)
        if pools is not None:
            try:
                pools_report(node=node, pools=pools, source=heard.source, origin=heard.origin, at=at, figures=False)
            except PoolsError as exc:
                heard.refuse(node.grid_id, f"node {node.grid_id}'s pools answer was not taken: {exc}")
            else:
                kept.append(node.pk)
        if node.grid_id in heard.refused:
            pools_refused_note(node=node, why=heard.why_not[node.grid_id], at=at)
    if heard.statistics:
        # A node that lost its zos-cache refuses everything: closed until it answers again.
        registered = {node.grid_id for node in nodes}
        statistics_heard_many({k: v for k, v in heard.statistics.items() if k in registered}, source=OVER_RMB)
    if regrouped:
        # A version told moves the node to its build's group: that group's lesson decides its memory now.
        with transaction.atomic():
            memory_lessons_for_new(regrouped)
    # The figures of every node whose pools were kept, in batches rather than one transaction each.
    for start in range(0, len(kept), 100):
        figures_follow(kept[start : start + 100])
    return len(kept)


def _version_store(node: Node, zos: str, *, heard: Heard, at: datetime) -> bool:
    """Keep the ZOS version the node told; whether it moved the node to another build's group."""
    told = zos[:128]
    regrouped = zos_build_key(told) != zos_build_key(Node.objects.values_list("zos_version", flat=True).get(pk=node.pk))
    Node.objects.filter(pk=node.pk).update(zos_version=told, zos_version_at=at, zos_version_source=heard.told_by)
    return regrouped


def pools_hear_nodes(nodes: Sequence[Node], *, rmb: RmbCalls | None = None) -> Heard:
    """Registered nodes asked for their pools (the watch, a precheck): heard and kept in one go."""
    rmb = rmb or get_rmb()
    if rmb is None or not nodes:
        return Heard()
    # Their stored pools left out: a registered node is asked them again (the watch keeps them fresh).
    lives = [replace(node_stored_reading(node), pools_sru=None) for node in nodes]
    heard = pools_hear(lives, rmb=rmb, statistics=True)
    pools_heard_store(nodes, heard)
    return heard


__all__ = ["PRUDENT", "Heard", "lives_with_pools", "pools_hear", "pools_hear_nodes", "pools_heard_store"]
