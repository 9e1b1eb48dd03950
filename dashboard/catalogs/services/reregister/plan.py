"""The plan of a re-register: what re-carving one node on a reading would do, before anything is written.

Pure apart from building unsaved Slice rows: it reads nothing and writes nothing, so one table of
cases (tests/catalogs/test_reregister_plan.py) pins what is kept, removed and added in every situation.
The rules are in the package's docstring; the tolerance for kept slices is catalog_rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from django.utils import timezone

from dashboard import capacity
from dashboard.capacity.catalog import slice_is_current
from dashboard.figures.closure import closure_of
from dashboard.grid.types import NodeCapacity
from dashboard.jobs.results import ReregisterResult
from dashboard.jobs.services.jobs import JobError
from dashboard.models import Node, Slice
from dashboard.nodes.services.registration import catalog_slices

SLICE_KEY = ("index", "cru", "mru", "sru", "state")


@dataclass
class ReregisterPlan:
    """What re-registering one node would do, computed outside any transaction."""

    node: Node
    generation: int
    policy: capacity.Policy
    seen: NodeCapacity
    read_at: datetime  # when `seen` was read from the grid
    carve: capacity.Carve
    snapshot: dict[int, tuple]  # slice pk -> (index, cru, mru, sru, state) as the plan read them
    deploying: frozenset[int]  # slice pks with a deploy in flight when the plan was made
    held: frozenset[int]  # free slice pks under a live hold when the plan was made (kept, like `deploying`)
    occupied: list[Slice]
    kept: list[Slice]
    removed: list[Slice]
    added: list[Slice]  # unsaved
    before: dict
    after: dict
    phantom_after: int
    placeable_after: int
    phantom_reasons_after: dict
    slice_index_next: int  # the number the next new slice of this node will get
    carved_slice_sru: int
    notes: list[str] = field(default_factory=list)

    @property
    def changes_slices(self) -> bool:
        return bool(self.removed or self.added)

    @property
    def changes_metadata(self) -> bool:
        n = self.node
        return (
            n.carved_policy_name,
            n.carved_policy_version,
            n.carved_slice_sru,
            n.carved_deployable,
            n.carved_pools_known,
        ) != (
            self.policy.name,
            self.policy.version,
            self.carved_slice_sru,
            self.carve.slices,
            self.carve.pools_known,
        )

    def result(self, *, dry_run: bool) -> ReregisterResult:
        up_to_date = not self.changes_slices and not self.changes_metadata
        notes = list(self.notes)
        if up_to_date:
            notes.insert(0, "already up to date: the catalog is what the policy carves; nothing changed")
        elif not self.changes_slices:
            notes.insert(
                0,
                f"the slices were already right; {'they would be recorded' if dry_run else 'recorded them'} "
                f"as carved by policy {self.policy.name} v{self.policy.version}",
            )
        return ReregisterResult.model_validate(
            {
                "node_id": self.node.grid_id,
                "dry_run": dry_run,
                "changed": not up_to_date,
                "up_to_date": up_to_date,
                "policy": {"name": self.policy.name, "version": self.policy.version},
                "slice": {"cru": self.carve.slice.cru, "mru": self.carve.slice.mru, "sru": self.carve.slice.sru},
                "limited_by": self.carve.limited_by,
                "generation": {
                    "before": self.generation,
                    "after": self.generation + (1 if self.changes_slices and not dry_run else 0),
                },
                "capacity_seen": self.seen.as_dict(),
                "before": self.before,
                "after": self.after,
                "removed": [slice_item(s) for s in self.removed],
                "added": [slice_item(s) for s in self.added],
                "kept": [slice_item(s) for s in self.kept],
                "notes": notes,
            }
        )


def reregister_plan(
    *,
    node: Node,
    slices: list[Slice],
    policy: capacity.Policy,
    seen: NodeCapacity,
    deploying: frozenset[int] | set[int] = frozenset(),
    held: frozenset[int] | set[int] = frozenset(),
    read_at: datetime | None = None,
) -> ReregisterPlan:
    """The diff that re-carving `node` on the capacity `seen` would make; pure apart from building Slice objects.

    `deploying` holds the pks of free slices whose deploy is in flight (slice_deploy records the attempt,
    then asks the grid, then marks the slice deployed): they are about to hold a VM, so they are kept and
    counted as occupied, like rented and deployed ones. `held` holds the pks of free slices under a hold
    live at the caller's `now` (stale.held_slices): a buyer was promised each until its hold ends, and
    their `deployed` report will take it, so they are kept as they are and counted as occupied too, never
    removed or resized.
    """
    _refuse_an_empty_reading(node=node, seen=seen)
    slices = sorted(slices, key=lambda s: s.index)
    fates = _slice_fates(slices, deploying=deploying, held=held)
    carve, facts = _carve_on_reading(node=node, seen=seen, policy=policy, occupied=fates.occupied)
    diff = _catalog_diff(node=node, slices=slices, fates=fates, carve=carve, policy=policy)
    closed = closure_of(node, live=seen)
    figures = _before_and_after(
        slices=slices, fates=fates, diff=diff, carve=carve, seen=seen, policy=policy, facts=facts, closed=closed
    )
    notes = _plan_notes(
        node=node,
        policy=policy,
        seen=seen,
        carve=carve,
        fates=fates,
        closed=closed,
        phantom_after=figures.phantom_after,
    )
    return ReregisterPlan(
        node=node,
        generation=node.catalog_generation,
        policy=policy,
        seen=seen,
        read_at=read_at or timezone.now(),
        carve=carve,
        snapshot={s.pk: slice_key(s) for s in slices},
        deploying=frozenset(deploying),
        held=frozenset(s.pk for s in fates.held_kept),
        occupied=fates.occupied,
        kept=diff.kept,
        removed=diff.removed,
        added=diff.added,
        before=figures.before,
        after=figures.after,
        phantom_after=figures.phantom_after,
        phantom_reasons_after=figures.phantom_reasons_after,
        placeable_after=figures.placeable_after,
        slice_index_next=diff.start + len(diff.added),
        carved_slice_sru=_carved_slice_sru(node, carve=carve, diff=diff),
        notes=notes,
    )


def _carved_slice_sru(node: Node, *, carve: capacity.Carve, diff: _CatalogDiff) -> int:
    """The slice size on record: kept slices of the size the node was carved with keep it (catalog_rules)."""
    return node.carved_slice_sru if any(s.sru != carve.slice.sru for s in diff.kept_free) else carve.slice.sru


def _refuse_an_empty_reading(*, node: Node, seen: NodeCapacity) -> None:
    # A reading with no memory or no disk is a grid fault, not a node to empty.
    if seen.total.mru <= 0 or seen.total.sru <= 0:
        raise JobError(
            f"the grid reports no {'memory' if seen.total.mru <= 0 else 'SSD disk'} for node {node.grid_id}; "
            "refusing to re-carve its catalog on that reading"
        )


@dataclass(frozen=True)
class _SliceFates:
    """The node's slices, sorted by what the re-carve may do to them."""

    in_flight: list[Slice]  # free, with a deploy in flight: kept, counted as occupied
    held_kept: list[Slice]  # free, under a live hold: kept, counted as occupied
    occupied: list[Slice]  # rented or deployed, plus the two above; never touched
    replaceable: list[Slice]  # free or failed and unprotected: kept only if still the right size
    free: list[Slice]  # every free slice, protected or not (the "before" figures)


def _slice_fates(
    slices: list[Slice], *, deploying: frozenset[int] | set[int], held: frozenset[int] | set[int]
) -> _SliceFates:
    in_flight = [s for s in slices if not s.is_occupied and s.pk in deploying]
    # Only a free slice can be held (deployments.selectors.holds.live_holds); one also in flight is said once, deploying.
    held_kept = [s for s in slices if s.state == Slice.State.FREE and s.pk in held and s.pk not in deploying]
    protected = {s.pk for s in in_flight + held_kept}
    return _SliceFates(
        in_flight=in_flight,
        held_kept=held_kept,
        occupied=sorted([s for s in slices if s.is_occupied] + in_flight + held_kept, key=lambda s: s.index),
        replaceable=[s for s in slices if not s.is_occupied and s.pk not in protected],
        free=[s for s in slices if s.state == Slice.State.FREE],
    )


def _carve_on_reading(
    *, node: Node, seen: NodeCapacity, policy: capacity.Policy, occupied: list[Slice]
) -> tuple[capacity.Carve, capacity.LiveNode]:
    """The carve of the node on this reading, and the live facts the precheck judges it by."""
    pools = list(seen.pools_sru) if seen.pools_sru else node.pools_sru
    observed = node.observed_on(seen.used.sru)
    occupied_sizes = [s.size.resources for s in occupied]
    # Memoised: a fleet's nodes share a few shapes, and a carve with pools tries every device order.
    # The zos-cache's bound goes with the pools it came from: the reading's, else the node's report.
    cache = seen.zos_cache_sru if seen.pools_sru and seen.zos_cache_sru is not None else node.zos_cache
    light = bool(seen.light)  # a ZOS-light node: its unreported pools may be partitions (capacity.layouts)
    carve = capacity.carve_memoised(
        seen.total, policy, occupied=occupied_sizes, pools=pools or None, observed=observed, cache=cache, light=light
    )
    facts = capacity.live_node(
        policy=policy, pools=pools or None, occupied=occupied_sizes, observed=observed, cache=cache, light=light
    )
    return carve, facts


@dataclass(frozen=True)
class _CatalogDiff:
    kept_free: list[Slice]  # replaceable free slices still of the carve's size
    kept: list[Slice]  # occupied + kept_free, by index
    removed: list[Slice]
    added: list[Slice]  # unsaved
    start: int  # the index of the first added slice


def _catalog_diff(
    *, node: Node, slices: list[Slice], fates: _SliceFates, carve: capacity.Carve, policy: capacity.Policy
) -> _CatalogDiff:
    same_policy = (node.carved_policy_name, node.carved_policy_version) == (policy.name, policy.version)
    # Carved for unknown pools and the pools known now: the free slices' smaller disks are not kept.
    same_policy = same_policy and (node.carved_pools_known or not carve.pools_known)
    kept_free = [
        s
        for s in fates.replaceable
        if s.state == Slice.State.FREE
        and slice_is_current(
            (s.cru, s.mru, s.sru), target=carve.slice, same_policy=same_policy, carved_slice_sru=node.carved_slice_sru
        )
    ][: carve.new_slices]
    kept_ids = {s.pk for s in kept_free}
    to_add = carve.new_slices - len(kept_free)
    added: list[Slice] = []
    # New slices are numbered after every number this node ever used: never a removed slice's.
    start = max(node.slice_index_next, max((s.index for s in slices), default=-1) + 1)
    if to_add > 0:
        added = list(
            catalog_slices(
                node=node,
                carve=replace(carve, new_slices=to_add),
                start_index=start,
                generation=node.catalog_generation + 1,
            )
        )
    return _CatalogDiff(
        kept_free=kept_free,
        kept=sorted(fates.occupied + kept_free, key=lambda s: s.index),
        removed=[s for s in fates.replaceable if s.pk not in kept_ids],
        added=added,
        start=start,
    )


@dataclass(frozen=True)
class _BeforeAndAfter:
    before: dict
    after: dict
    phantom_after: int
    placeable_after: int
    phantom_reasons_after: dict


def _before_and_after(
    *,
    slices: list[Slice],
    fates: _SliceFates,
    diff: _CatalogDiff,
    carve: capacity.Carve,
    seen: NodeCapacity,
    policy: capacity.Policy,
    facts: capacity.LiveNode,
    closed: capacity.Closure | None,
) -> _BeforeAndAfter:
    """The catalog's figures now and after the plan, both judged by the precheck on this reading."""
    # On a closed node (down, standby, ...: capacity.closures) every slice is phantom, for that reason.
    before_check = capacity.precheck(
        [(s.index, s.size) for s in fates.free], seen.total, seen.used, policy, live=facts, closure=closed
    )
    after_free = sorted(diff.kept_free + diff.added, key=lambda s: s.index)
    after_check = capacity.precheck(
        [(s.index, s.size) for s in after_free], seen.total, seen.used, policy, live=facts, closure=closed
    )
    return _BeforeAndAfter(
        before={
            "slices": len(slices),
            "free": len(fates.free),
            # One meaning everywhere: what the node can host at once (the carve), not nominal - phantom.
            "deployable": carve.slices,
            "placeable": before_check.placeable_now,
            "phantom": len(before_check.phantom_slices),
        },
        after={
            "slices": len(diff.kept) + len(diff.added),
            "free": len(after_free) + len(fates.in_flight) + len(fates.held_kept),
            "deployable": carve.slices,
            "placeable": after_check.placeable_now,
            "phantom": len(after_check.phantom_slices),
        },
        phantom_after=len(after_check.phantom_slices),
        placeable_after=after_check.placeable_now,
        phantom_reasons_after=after_check.phantom_by_reason,
    )


def _plan_notes(
    *,
    node: Node,
    policy: capacity.Policy,
    seen: NodeCapacity,
    carve: capacity.Carve,
    fates: _SliceFates,
    closed: capacity.Closure | None,
    phantom_after: int,
) -> list[str]:
    """What a person should know about the plan beyond its figures, carve's own notes first."""
    notes = list(carve.notes)
    if fates.in_flight:
        notes.append(
            f"slice(s) {', '.join(str(s.index) for s in fates.in_flight)} are being deployed right now; "
            "kept as they are and counted as occupied"
        )
    if fates.held_kept:
        notes.append(_held_note(fates.held_kept))
    failed = [s for s in fates.replaceable if s.state == Slice.State.FAILED]
    if failed:
        notes.append(f"{len(failed)} slice(s) marked failed hold no VM; they were treated like free slices")
    if carve.overcommitted:
        notes.append(
            f"the {len(fates.occupied)} rented/deployed slice(s) alone exceed what node {node.grid_id} can host "
            f"under policy {policy.name}; they are kept and no free slice is offered"
        )
    if closed is not None:
        notes.append(f"node {node.grid_id} {closed.what}: nothing can be placed on it {closed.reason.until}")
    elif phantom_after:
        notes.append(
            f"{phantom_after} of the new free slices cannot be placed now: the node's live usage is higher "
            "than its catalog accounts for (VMs outside the catalog, or host memory in use)"
        )
    if (seen.total.mru, seen.total.sru) != (node.total_mru, node.total_sru):
        notes.append(
            f"the grid now reports {capacity.format_size(seen.total.mru)} memory and "
            f"{capacity.format_size(seen.total.sru)} SSD (stored: {capacity.format_size(node.total_mru)} and "
            f"{capacity.format_size(node.total_sru)}); carved on what the grid reports"
        )
    return notes


def _held_note(held_kept: list[Slice]) -> str:
    indices = ", ".join(str(s.index) for s in held_kept)
    if len(held_kept) == 1:
        return (
            f"1 held slice kept (slice {indices}): a buyer holds it until its hold ends, so it is kept as it is "
            "and counted as occupied"
        )
    return (
        f"{len(held_kept)} held slices kept (slices {indices}): a buyer holds each until its hold ends, "
        "so they are kept as they are and counted as occupied"
    )


def slice_key(s: Slice) -> tuple:
    return (s.index, s.cru, s.mru, s.sru, s.state)


def slice_item(s: Slice) -> dict:
    return {"index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru, "state": s.state}
