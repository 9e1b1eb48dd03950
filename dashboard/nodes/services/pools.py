"""A node's storage pools, reported by those who can read them: `pools_report`, the one writer.

The Grid Proxy never reports pools; the node answers them over RMB (`zos.storage.pools`: name,
type, size, used per pool, docs/domain.md "Who knows the pools"). They come from three places,
each kept as a PoolReport with who, when and from where:
- `api`: the marketplace's deployer, which speaks RMB, through PUT /api/v1/nodes/{id}/pools;
- `operator`: an admin's form on the node page, or `node_register --pools`;
- `zos`: the simulated node itself, asked through the simulated grid's RMB loopback (grid.rmb's `get_rmb`);
- `rmb`: the node itself, asked over RMB through rmb-peer (grid.rmb, nodes.services.pools_heard).

A report whose SSD pools do not add up to the SSD total the grid reports (sru) is refused with the
numbers: ZOS's SSD total is the sum of its SSD pools' device sizes, so a report that differs by
more than capacity.POOLS_TOLERANCE_PERMILLE is about another node, or mistyped. The node's pools then are
the report's SSD pools; its figures are refreshed at once, so a catalog carved without pools
becomes stale (catalog_rules) and a re-register gives the larger disks back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import audit_record
from dashboard.figures.services.figures import figures_compute
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.rmb import Target, get_rmb
from dashboard.grid.rmb.parse import parse_pools
from dashboard.grid.types import GridError, MalformedPayload, PoolMetrics, RmbRefused
from dashboard.models import Node, PoolReport, Slice


class PoolsError(ValueError):
    """A pool report that cannot be taken; the message says what and by how much. Nothing is written."""


def pools_parsed(entries: Sequence[Mapping | PoolMetrics], *, node_id: int) -> tuple[PoolMetrics, ...]:
    """A report of ZOS's `zos.storage.pools` answer (dicts or PoolMetrics) as PoolMetrics, read by the
    grid's one parser of a pool list; PoolsError names the entry and the field."""
    if isinstance(entries, Sequence) and not isinstance(entries, str | bytes):
        entries = [entry.as_dict() if isinstance(entry, PoolMetrics) else entry for entry in entries]
    try:
        parsed = parse_pools(entries, node_id=node_id, what="pools report")
        capacity.pools_bounded([p.size for p in parsed if p.type == "ssd"])
    except (MalformedPayload, ValueError) as exc:
        raise PoolsError(
            f"{exc}; pools are a list of {{name, type, size, used}}, as zos.storage.pools answers"
        ) from None
    if any(p.type == "ssd" and p.size <= 0 for p in parsed):
        raise PoolsError(f"node {node_id}: an SSD pool's size must be above zero")
    return parsed


def pools_check_total(pools: Sequence[PoolMetrics], *, node: Node) -> tuple[PoolMetrics, ...]:
    """The report's SSD pools, when their sizes add up to the node's SSD total (sru) within the tolerance."""
    ssd = tuple(p for p in pools if p.type == "ssd")
    if not ssd:
        raise PoolsError(f"node {node.grid_id}: the report has no SSD pool; ZOS places every VM disk in one")
    reported, total = sum(p.size for p in ssd), node.total_sru
    if not capacity.pools_match_total(reported, total):
        off = f"{abs(reported - total) / total:.1%}" if total else "all"
        raise PoolsError(
            f"node {node.grid_id}: the SSD pools add up to {capacity.format_size(reported)} ({reported} bytes), "
            f"the grid's SSD total is {capacity.format_size(total)} ({total} bytes): {off} off, "
            f"more than the {capacity.POOLS_TOLERANCE_PERMILLE / 10:g}% allowed; is this the node's own report?"
        )
    if max(p.size for p in ssd) < capacity.GiB * 20:
        raise PoolsError(f"node {node.grid_id}: no SSD pool holds the 20 GiB zos-cache ZOS keeps")
    return ssd


def pools_cache(ssd: Sequence[PoolMetrics], used_sru: int | None, *, deployed: int = 0) -> tuple[int, int] | None:
    """(the zos-cache's quota bound, its pool) from a report's SSD pools beside the VMs' disks known to be
    there: the reading's (the proxy's used SSD less its fixed 20 GiB) or the catalog's `deployed` ones,
    whichever is more (a reading older than a deploy would count that VM's disks as cache); None when
    there is no reading (capacity.cache_bound says why)."""
    disks = max(used_sru - capacity.PROXY_CACHE_SRU, deployed) if used_sru is not None else None
    return capacity.cache_bound([p.size for p in ssd], [p.used for p in ssd], disks_sru=disks)


def deployed_disks(node: Node) -> int:
    """The disks of the node's deployed slices as ZOS holds them: data disk and root filesystem each."""
    slices = node.slices.filter(state=Slice.State.DEPLOYED).values_list("cru", "mru", "sru")
    return sum(sru + capacity.zos_rootfs(cru, mru) for cru, mru, sru in slices)


def _figures_judged_before_the_lock(node: Node, parsed: tuple[PoolMetrics, ...]) -> None:
    """Judging pools is the costly part of the figures: judged here, before the node is locked, so
    that inside the lock it is found again (memoised), unless the node changed in between."""
    ssd = pools_check_total(parsed, node=node)
    cache = pools_cache(ssd, node.used_sru, deployed=deployed_disks(node))
    figures_compute(
        Node.objects.filter(pk=node.pk),
        pools={node.pk: ([p.size for p in ssd], [p.used for p in ssd], cache[0] if cache else None)},
    )


def _pools_said_again(locked: Node, *, at: datetime, source: str, cache: tuple[int | None, int | None]) -> bool:
    """The node says what it said last time: one row per change, the age moves on (and the cache with it);
    whether the cache moved (the figures with it)."""
    cache_sru, cache_pool = cache
    Node.objects.filter(pk=locked.pk).update(
        pools_reported_at=at,
        pools_source=source,
        zos_cache_sru=cache_sru,
        zos_cache_pool=cache_pool,
        **_refusal_cleared(True),
    )
    return (cache_sru, cache_pool) != (locked.zos_cache_sru, locked.zos_cache_pool)


def _pools_reported_record(report: PoolReport, *, node: Node, ssd: tuple[PoolMetrics, ...], by, origin: str) -> None:
    """The audit event of a second-hand report that changed the node's SSD pools (`origin` as given)."""
    source = report.source
    audit_record(
        actor=by,
        source="api" if source == PoolReport.Source.API else "web" if by else "command",
        action="pools reported",
        node=node,
        message=f"node {node.grid_id}: SSD pools {pools_words(p.size for p in ssd)} ({source})",
        detail={"origin": origin, "pools": report.pools},
    )


def pools_report(
    *,
    node: Node,
    pools: Sequence[Mapping | PoolMetrics],
    source: str,
    by=None,
    token=None,
    origin: str = "",
    at: datetime | None = None,
    figures: bool = True,
) -> PoolReport:
    """Keep one pool report and make its SSD pools the node's; the figures follow in the same transaction
    (`figures=False`: the caller refreshes them itself, once for many reports, as pools_heard_store does)."""
    if source not in PoolReport.Source.values:
        raise PoolsError(f"source {source!r} is not one of {', '.join(PoolReport.Source.values)}")
    parsed = pools_parsed(pools, node_id=node.grid_id)
    at = at or timezone.now()
    if figures:
        _figures_judged_before_the_lock(node, parsed)
    with node_writes([node.pk], refresh=figures) as writes:
        locked = Node.objects.get(pk=node.pk)
        ssd = pools_check_total(parsed, node=locked)
        latest = locked.pool_reports.first()
        first_hand = source in (PoolReport.Source.ZOS, PoolReport.Source.RMB)
        # With each report, beside the reading the node has now (the cache is not reported on its own).
        cache_sru, cache_pool = pools_cache(ssd, locked.used_sru, deployed=deployed_disks(locked)) or (None, None)
        if first_hand and latest is not None and latest.pools == [p.as_dict() for p in parsed]:
            if not _pools_said_again(locked, at=at, source=source, cache=(cache_sru, cache_pool)):
                writes.refresh_only(())  # the same pools and cache: the same figures
            return latest
        report = PoolReport.objects.create(
            node=locked,
            pools=[p.as_dict() for p in parsed],
            source=source,
            by=by,
            token=token,
            origin=origin[:255],
            reported_at=at,
        )
        changed = [p.size for p in ssd] != (locked.pools_sru or [])
        Node.objects.filter(pk=locked.pk).update(
            pools_sru=[p.size for p in ssd],
            pools_used=[p.used for p in ssd],
            pools_reported_at=at,
            pools_source=source,
            zos_cache_sru=cache_sru,
            zos_cache_pool=cache_pool,
            **_refusal_cleared(first_hand),
        )
        if changed and not first_hand:
            _pools_reported_record(report, node=locked, ssd=ssd, by=by, origin=origin)
    return report


@dataclass(frozen=True)
class PoolsAnswer:
    """The node's own answer to `zos.storage.pools`, before anything is kept: its pools, or why they
    are not taken (`refused`: an answer came, malformed or an `err`)."""

    source: str
    origin: str
    pools: tuple[PoolMetrics, ...] = ()
    refused: str = ""


def pools_ask_node(*, node: Node) -> PoolsAnswer | None:
    """Ask the node itself (`zos.storage.pools`) through the RMB door (`get_rmb()`: the rmb-peer, or the
    simulated grid's loopback; its labels name the report's source and origin). None where nothing can
    ask (no door: the Grid Proxy alone), and for a node silent or away, or pools still fresh: nothing to
    keep or say. Nothing is written: call it before any transaction (a silent node costs the RMB
    deadline), then `pools_keep`."""
    rmb = get_rmb()
    if rmb is None:
        return None
    source, origin = rmb.pools_source, rmb.pools_origin
    # A call costs up to RMB_DEADLINE on a silent node: only for pools unknown or too old.
    fresh = node.pools_reported_at and node.pools_reported_at > timezone.now() - timedelta(hours=settings.POOLS_MAX_AGE)
    if not node.twin_id or (node.pools_sru and fresh):
        return None
    target = Target(node_id=node.grid_id, twin_id=node.twin_id, total_sru=node.total_sru)
    try:
        return PoolsAnswer(source=source, origin=origin, pools=rmb.storage_pools(target))
    except (MalformedPayload, RmbRefused) as exc:
        return PoolsAnswer(source=source, origin=origin, refused=str(exc))
    except GridError:  # silent or away
        return None


def pools_keep(*, node: Node, answer: PoolsAnswer) -> PoolReport | None:
    """Keep the node's answer as its pool report; one not taken (malformed, refused, or not adding up to
    its SSD total) is said on the node (`pools_refused`) and its carve stays as it was. None then."""
    if answer.refused:
        pools_refused_note(node=node, why=answer.refused)
        return None
    try:
        return pools_report(node=node, pools=answer.pools, source=answer.source, origin=answer.origin)
    except PoolsError as exc:
        pools_refused_note(node=node, why=f"its answer over {answer.origin or answer.source} was not taken: {exc}")
        return None


def _refusal_cleared(first_hand: bool) -> dict:
    """A first-hand report taken answers the node's earlier refusal: it is no longer what the node says."""
    return {"pools_refused": "", "pools_refused_at": None} if first_hand else {}


def pools_read_from_node(*, node: Node) -> PoolReport | None:
    """`pools_ask_node` then `pools_keep`, for a caller that holds no transaction (a re-register's read)."""
    answer = pools_ask_node(node=node)
    return pools_keep(node=node, answer=answer) if answer is not None else None


def pools_refused_note(*, node: Node, why: str, at: datetime | None = None) -> None:
    """Say on the node why its own pools answer was not taken (the node page and the API show it)."""
    Node.objects.filter(pk=node.pk).update(pools_refused=why[:300], pools_refused_at=at or timezone.now())


def pools_words(sizes) -> str:
    return " + ".join(capacity.format_size(size) for size in sizes)
