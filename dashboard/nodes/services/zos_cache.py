"""A node without its zos-cache: what it said, kept on its row, until it answers for its statistics again.

ZOS keeps its own state and the images it pulls in the `zos-cache` subvolume. When the subvolume is gone
(zos#2043: about 75 main-net nodes at once), provisiond's reserve cannot be counted (zos
cmds/modules/provisiond/main.go getNodeReserved -> storaged Cache() -> `subvolume 'zos-cache' not found`),
so the node refuses every workload, and `zos.statistics.get` (and the proxy's /statistics) answers that
error instead of its counters; its uptime reports stop too, so it turns `down` within about 80 minutes.
Until then it looks free to anyone reading the proxy alone.

This is the one writer of `Node.zos_cache_missing*`: a statistics answer over RMB or through the proxy, or
a deploy ZOS refused in those words, is handed here; the words are kept (with who heard them and when)
and the node's figures refreshed, so its closure (capacity.closures "no-cache") shows on every page, total,
API answer, metric and placement through the one seam. An answer with its counters clears it; any other
error (a silent node, a time-out) tells nothing of the cache and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.utils import timezone

from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.types import GridError, NodeStatistics
from dashboard.grid.zos_words import CACHE_MISSING
from dashboard.models import Deployment, Node

# Who heard the node say it (Node.zos_cache_missing_source, 40 characters).
OVER_RMB = "zos.statistics.get over RMB"
THROUGH_PROXY = "the Grid Proxy's /statistics"
DEPLOY_REFUSED = "a deploy ZOS refused"
OUTCOME_REPORTED = "a reported deploy ZOS refused"


def zos_cache_heard(*, node: Node, said: str | None, source: str, at: datetime | None = None) -> bool:
    """What the node said of itself: `said` is ZOS's error text when it answered one, None when it answered
    with its counters (so it has its cache). Kept, and the node's figures refreshed when its closure
    changes; True when it changed. An error that does not name the cache changes nothing."""
    missing = CACHE_MISSING.search(said) if said is not None else None
    if said is not None and missing is None:
        return False
    at = at or timezone.now()
    with node_writes([node.pk]) as writes:
        was = Node.objects.filter(pk=node.pk).values_list("zos_cache_missing", flat=True).first()
        if was is None or (missing is None and not was):
            writes.refresh_only(())
            return False  # deleted meanwhile, or open already
        if missing is None:
            Node.objects.filter(pk=node.pk).update(
                zos_cache_missing="", zos_cache_missing_source="", zos_cache_missing_at=None
            )
        else:
            Node.objects.filter(pk=node.pk).update(
                zos_cache_missing=missing.group(0)[:120], zos_cache_missing_source=source[:40], zos_cache_missing_at=at
            )
            if was:
                writes.refresh_only(())
                return False  # closed already: the newer words and time are kept, the figures are the same
    return True


def zos_cache_refused(deployment: Deployment, *, source: str) -> bool:
    """A deploy ZOS refused: when its words say the zos-cache is gone, the node is closed (dated by it)."""
    if deployment.cause != Deployment.Cause.CACHE_MISSING:
        return False
    return zos_cache_heard(node=deployment.node, said=deployment.raw_error, source=source, at=deployment.started_at)


def statistics_heard(*, node: Node, answer: NodeStatistics | GridError, source: str) -> bool:
    """A `zos.statistics.get` answer (or the proxy's /statistics), or the error that came instead, kept."""
    if isinstance(answer, NodeStatistics):
        return zos_cache_heard(node=node, said=None, source=source)
    return zos_cache_heard(node=node, said=str(answer), source=source)


def statistics_heard_many(answers: Mapping[int, NodeStatistics | GridError], *, source: str) -> int:
    """Many nodes' answers by grid id (a watch's round): each kept; how many closures changed."""
    nodes = {n.grid_id: n for n in Node.objects.filter(grid_id__in=list(answers))}
    return sum(
        statistics_heard(node=nodes[grid_id], answer=answer, source=source)
        for grid_id, answer in answers.items()
        if grid_id in nodes
    )


__all__ = [
    "DEPLOY_REFUSED",
    "OUTCOME_REPORTED",
    "OVER_RMB",
    "THROUGH_PROXY",
    "statistics_heard",
    "statistics_heard_many",
    "zos_cache_heard",
    "zos_cache_refused",
]
