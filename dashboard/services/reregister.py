"""Re-registering nodes: re-carving one node's catalog with its effective policy, or every stale one's.

Both run as jobs (services.jobs owns their life: request, claim, progress, result, reaping).

Re-registering a node (`node_reregister`):

- Rented and deployed slices are someone's VM: never deleted, never resized; their sizes are
  counted as occupied when carving.
- Free slices and "failed" ones are replaceable. A "failed" slice holds no VM (its deploy did
  not happen), so it is treated like a free one: removed, and replaced by a fresh free slice
  when the carve has room. It is never kept as "identical", so a second run is a no-op.
- Free slices already of the carved size are kept as they are (same rows, same indices):
  running twice changes nothing the second time ("already up to date").
- A free slice whose deploy is in flight (a "deploying" Deployment younger than
  services.deploy.IN_FLIGHT) is about to hold a VM: kept and counted as occupied. The final
  transaction, holding every slice row's lock, re-checks that no slice it deletes has a deploy
  started meanwhile (slice_deploy records its attempt under that same lock).
- New slices get indices after the highest kept one.
- The final transaction checks that the node's catalog_generation and its slice rows are
  exactly what the plan was made from; otherwise it fails with CATALOG_CHANGED and writes nothing.

Re-registering every stale node (`bulk_reregister`) makes the same plan per node, and applies
a batch of up to BULK_CHUNK nodes in one transaction with the same checks, node by node: a node
that moved since its plan is left out of its batch and planned again on its own.

Pause points for the kill tests (services.jobs.job_test_pause): "claimed", "planned", and
"swapped", INSIDE the final transaction after the catalog writes (a node's or a batch's).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from dashboard import capacity
from dashboard.grid import get_grid
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.types import Grid, GridError, GridUnavailable, MalformedPayload, NodeCapacity
from dashboard.models import AuditEvent, Deployment, Job, Node, Slice
from dashboard.services.catalog import carve_memoised, catalog_slices, policies_for_nodes, policy_for_node
from dashboard.services.deploy import IN_FLIGHT
from dashboard.services.figures import figures_compute, figures_refresh
from dashboard.services.jobs import JobError, JobLost, job_beating, job_progress, job_succeed, job_test_pause

log = logging.getLogger(__name__)

CATALOG_CHANGED = "the catalog changed while re-registering; try again"
# Reading live capacity: the Grid Proxy client already retries each request; these are whole
# reads, for a grid that is briefly unreachable (a restart, a load balancer flip).
GRID_READ_ATTEMPTS = 3
# Bulk runs read, plan and apply at most this many nodes per batch (one round of queries, one
# transaction), and split a smaller run into about BULK_PROGRESS_STEPS batches so its progress moves.
BULK_CHUNK = 100
BULK_PROGRESS_STEPS = 10
# Finding the stale nodes computes this many nodes' figures at a time (~1.3 MiB at 1,000).
STALE_SCAN_CHUNK = 1000
# Bulk runs stop when this many nodes in a row could not be read because the grid is unreachable:
# going on would only spend the time limit on timeouts.
BULK_GRID_DOWN_AFTER = 5
# A bulk result keeps counts and totals, every failure up to BULK_FAILURES_KEPT, and the first
# BULK_SAMPLE changed nodes: its size (the worker's memory, the job page) must not grow with the
# fleet. Each node's own detail is in its AuditEvent ("job.node-reregistered"), written with its catalog.
BULK_SAMPLE = 100
BULK_FAILURES_KEPT = 1000
SLICE_ORDER = ("index",)


class CatalogChanged(JobError):
    def __init__(self, message: str = CATALOG_CHANGED):
        super().__init__(message)


# --- re-registering one node ----------------------------------------------------------------


@dataclass
class ReregisterPlan:
    """What re-registering one node would do, computed outside any transaction."""

    node: Node
    generation: int
    policy: capacity.Policy
    seen: NodeCapacity
    carve: capacity.Carve
    snapshot: dict[int, tuple]  # slice pk -> (index, cru, mru, sru, state) as the plan read them
    deploying: frozenset[int]  # slice pks with a deploy in flight when the plan was made
    occupied: list[Slice]
    kept: list[Slice]
    removed: list[Slice]
    added: list[Slice]  # unsaved
    before: dict
    after: dict
    phantom_after: int
    placeable_after: int
    phantom_reasons_after: dict
    carved_slice_sru: int
    notes: list[str] = field(default_factory=list)

    @property
    def changes_slices(self) -> bool:
        return bool(self.removed or self.added)

    @property
    def changes_metadata(self) -> bool:
        n = self.node
        return (n.carved_policy_name, n.carved_policy_version, n.carved_slice_sru, n.carved_deployable) != (
            self.policy.name,
            self.policy.version,
            self.carved_slice_sru,
            self.carve.slices,
        )

    def result(self, *, dry_run: bool) -> dict:
        up_to_date = not self.changes_slices and not self.changes_metadata
        notes = list(self.notes)
        if up_to_date:
            notes.insert(0, "already up to date: the catalog is what the policy carves; nothing changed")
        elif not self.changes_slices:
            notes.insert(0, f"the slices were already right; recorded them as carved by policy {self.policy.name} v{self.policy.version}")
        return {
            "node_id": self.node.node_id,
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
            "removed": [_slice_item(s) for s in self.removed],
            "added": [_slice_item(s) for s in self.added],
            "kept": [_slice_item(s) for s in self.kept],
            "notes": notes,
        }


def node_reregister(*, job: Job) -> dict:
    """Re-carve the job's node with its effective policy; returns (and stores) the result.

    Reads live capacity, marks phantom slices, carves counting rented and deployed slices as
    occupied, then swaps the free slices and finishes the job in one short transaction.
    With job.dry_run the same result is recorded and no catalog or node row changes.
    """
    node = job.node
    if node is None:
        raise JobError("this re-register job has no node (was it deleted?)")
    job_test_pause("claimed")
    grid = get_grid()
    # Three steps the page can draw as a bar: read the grid, carve, save.
    job_progress(job=job, step=f"reading node {node.node_id}'s live capacity from the grid", done=0, total=3)
    seen = node_capacity_read(grid=grid, node_id=node.node_id, job=job, announce=False)
    job_progress(job=job, step=f"carving node {node.node_id}'s catalog", done=1)
    slices = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
    plan = reregister_plan(
        node=node, slices=slices, policy=policy_for_node(node), seen=seen,
        deploying=deploying_slices([node.pk]).get(node.pk, set()),
    )
    job_test_pause("planned")
    job_progress(job=job, step="saving the new catalog" if not job.dry_run else "recording the preview", done=2)
    result = reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=True)
    return result


def node_capacity_read(*, grid: Grid, node_id: int, job: Job | None = None, announce: bool = True) -> NodeCapacity:
    """The node's live capacity, retried (bounded, with back-off) while the grid is unreachable.

    With a job, every attempt after the first writes the step and heartbeat, and the heartbeat
    keeps beating while a read is in progress (so the reaper never takes a slow grid for a dead
    worker); `announce` also writes the first step. All the attempts together are one job step:
    they end within GRID_STEP_DEADLINE, and the error then says so.
    """
    with grid_step_deadline(settings.GRID_STEP_DEADLINE) as step:
        for attempt in range(1, GRID_READ_ATTEMPTS + 1):
            if job is not None and (announce or attempt > 1):
                suffix = f" (grid unreachable, attempt {attempt} of {GRID_READ_ATTEMPTS})" if attempt > 1 else ""
                job_progress(job=job, step=f"reading node {node_id}'s live capacity from the grid{suffix}")
            try:
                with job_beating(job=job):
                    seen = grid.node(node_id)
            except GridUnavailable:
                if attempt == GRID_READ_ATTEMPTS or step.passed():
                    raise
                time.sleep(min(settings.GRID_BACKOFF * 2 ** (attempt - 1), max(step.remaining(), 0)))
                continue
            if seen.node_id != node_id:
                raise MalformedPayload(f"asked the grid for node {node_id}, it answered for node {seen.node_id}")
            return seen
    raise AssertionError("unreachable")  # pragma: no cover


def reregister_plan(
    *,
    node: Node,
    slices: list[Slice],
    policy: capacity.Policy,
    seen: NodeCapacity,
    deploying: frozenset[int] | set[int] = frozenset(),
) -> ReregisterPlan:
    """The diff that re-carving `node` on the capacity `seen` would make; pure apart from building Slice objects.

    `deploying` holds the pks of free slices whose deploy is in flight (slice_deploy records the
    attempt, then asks the grid, then marks the slice deployed): they are about to hold a VM, so
    they are kept and counted as occupied, like rented and deployed ones.
    """
    if seen.total.mru <= 0 or seen.total.sru <= 0:
        raise JobError(
            f"the grid reports no {'memory' if seen.total.mru <= 0 else 'SSD disk'} for node {node.node_id}; "
            "refusing to re-carve its catalog on that reading"
        )
    slices = sorted(slices, key=lambda s: s.index)
    in_flight = [s for s in slices if not s.is_occupied and s.pk in deploying]
    occupied = sorted([s for s in slices if s.is_occupied] + in_flight, key=lambda s: s.index)
    replaceable = [s for s in slices if not s.is_occupied and s.pk not in deploying]
    free = [s for s in slices if s.state == Slice.State.FREE]
    pools = list(seen.pools_sru) if seen.pools_sru else node.pools_sru
    observed = capacity.observed_now(
        hidden_mru_per_vm=node.hidden_mru_per_vm,
        pool_room_below=node.pool_room_below,
        bound_used_sru=node.pool_room_below_used_sru,
        used_sru=seen.used.sru,
    )
    occupied_sizes = [s.size.resources for s in occupied]
    # Memoised: a fleet's nodes share a few shapes, and a carve with pools tries every device order.
    carve = carve_memoised(seen.total, policy, occupied=occupied_sizes, pools=pools or None, observed=observed)
    facts = capacity.live_node(policy=policy, pools=pools or None, occupied=occupied_sizes, observed=observed)

    same_policy = (node.carved_policy_name, node.carved_policy_version) == (policy.name, policy.version)
    kept_free = [
        s for s in replaceable
        if s.state == Slice.State.FREE and _still_current(s, carve.slice, same_policy, node.carved_slice_sru)
    ][: carve.new_slices]
    kept_ids = {s.pk for s in kept_free}
    removed = [s for s in replaceable if s.pk not in kept_ids]
    kept = sorted(occupied + kept_free, key=lambda s: s.index)
    to_add = carve.new_slices - len(kept_free)
    added: list[Slice] = []
    if to_add > 0:
        start = max((s.index for s in kept), default=-1) + 1
        added = list(
            catalog_slices(
                node=node, carve=replace(carve, new_slices=to_add), start_index=start, generation=node.catalog_generation + 1
            )
        )

    before_check = capacity.precheck([(s.index, s.size) for s in free], seen.total, seen.used, policy, live=facts)
    after_free = sorted(kept_free + added, key=lambda s: s.index)
    after_check = capacity.precheck(
        [(s.index, s.size) for s in after_free], seen.total, seen.used, policy, live=facts
    )
    offline = seen.status in ("down", "standby")
    before = {
        "slices": len(slices),
        "free": len(free),
        # One meaning everywhere: what the node can host at once (the carve), not nominal - phantom.
        "deployable": carve.slices,
        "placeable": 0 if offline else before_check.placeable_now,
        "phantom": len(free) if offline else len(before_check.phantom_slices),
    }
    phantom_after = len(after_free) if offline else len(after_check.phantom_slices)
    placeable_after = 0 if offline else after_check.placeable_now
    after = {
        "slices": len(kept) + len(added),
        "free": len(after_free) + len(in_flight),
        "deployable": carve.slices,
        "placeable": placeable_after,
        "phantom": phantom_after,
    }

    notes = list(carve.notes)
    if in_flight:
        notes.append(
            f"slice(s) {', '.join(str(s.index) for s in in_flight)} are being deployed right now; "
            "kept as they are and counted as occupied"
        )
    failed = [s for s in replaceable if s.state == Slice.State.FAILED]
    if failed:
        notes.append(f"{len(failed)} slice(s) marked failed hold no VM; they were treated like free slices")
    if carve.overcommitted:
        notes.append(
            f"the {len(occupied)} rented/deployed slice(s) alone exceed what node {node.node_id} can host "
            f"under policy {policy.name}; they are kept and no free slice is offered"
        )
    if offline:
        notes.append(f"node {node.node_id} is {seen.status} on the grid: nothing can be placed on it until it is up")
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
    return ReregisterPlan(
        node=node,
        generation=node.catalog_generation,
        policy=policy,
        seen=seen,
        carve=carve,
        snapshot={s.pk: _slice_key(s) for s in slices},
        deploying=frozenset(deploying),
        occupied=occupied,
        kept=kept,
        removed=removed,
        added=added,
        before=before,
        after=after,
        phantom_after=phantom_after,
        phantom_reasons_after=(
            ({seen.status: len(after_free)} if after_free else {}) if offline else after_check.phantom_by_reason
        ),
        placeable_after=placeable_after,
        # Kept slices of the size the node was carved with keep that size on record (see _still_current).
        carved_slice_sru=(
            node.carved_slice_sru if any(s.sru != carve.slice.sru for s in kept_free) else carve.slice.sru
        ),
        notes=notes,
    )


def reregister_apply(
    *, plan: ReregisterPlan, job: Job, dry_run: bool, finish: bool, progress: dict | None = None
) -> dict:
    """The one short transaction: check nothing moved, swap the free slices, store the node's figures.

    With finish=True the job's result is written in the same transaction (single-node jobs);
    bulk jobs pass finish=False: the transaction checks they still own the job and writes their
    heartbeat and `progress` (job_progress's step and done) with the node's new catalog.
    """
    result = plan.result(dry_run=dry_run)
    with transaction.atomic():
        if not dry_run:
            if _catalogs_lock_and_check([plan]):
                raise CatalogChanged()
            _catalogs_write([plan])
            job_test_pause("swapped")
        if finish:
            job_succeed(job=job, result=result, message=_reregister_words(plan, result))
        else:
            job_progress(job=job, **(progress or {"step": job.step}))
            _node_event(job=job, plan=plan, result=result).save()
    return result


def _catalogs_lock_and_check(plans: list[ReregisterPlan]) -> set[int]:
    """Lock the plans' nodes and every slice of them; the pks of the nodes that moved since their plan.

    A node moved when its catalog_generation or its slice rows are not what its plan read, or
    when a slice the plan removes has a deploy in flight now. Three queries for any number of
    plans; call it inside the transaction that writes the others.
    """
    pks = [plan.node.pk for plan in plans]
    generations = dict(
        Node.objects.select_for_update().filter(pk__in=pks).order_by("pk").values_list("pk", "catalog_generation")
    )
    current: dict[int, dict[int, tuple]] = {pk: {} for pk in pks}
    rows = Slice.objects.select_for_update().filter(node_id__in=pks).order_by("node_id", "index")
    for pk, node_pk, *key in rows.values_list("pk", "node_id", *_SLICE_KEY):
        current[node_pk][pk] = tuple(key)
    # slice_deploy records its attempt under the slice's row lock, which we now hold for every
    # slice of these nodes: a deploy that started since the plan is visible here, and one that
    # starts after our commit finds its slice gone (SliceChanged).
    in_flight = deploying_slices(pks)
    return {
        plan.node.pk for plan in plans
        if generations.get(plan.node.pk) != plan.generation
        or current[plan.node.pk] != plan.snapshot
        or in_flight.get(plan.node.pk, set()) & {s.pk for s in plan.removed}
    }


def _catalogs_write(plans: list[ReregisterPlan]) -> None:
    """Write checked plans, their nodes and slices locked: a fixed number of statements for any number.

    The removed slices go, the added ones come, each node's row takes what was read from the grid
    and how it was carved, and the nodes' figures are stored from the result.
    """
    removed = [s.pk for plan in plans for s in plan.removed]
    added, nodes = [], []
    for plan in plans:
        generation = plan.generation + (1 if plan.changes_slices else 0)
        for s in plan.added:
            s.generation = generation
        added.extend(plan.added)
        nodes.append(_node_values(plan, generation=generation))
    if removed:
        # What Slice.delete() does (a failed deploy's record keeps its slice index, not the row), in
        # two statements: the delete collector reads every slice first and deletes them 100 at a time.
        Deployment.objects.filter(slice_id__in=removed).update(slice=None)
        with connection.cursor() as cursor:
            table = connection.ops.quote_name(Slice._meta.db_table)
            cursor.execute(f"DELETE FROM {table} WHERE id IN ({', '.join(['%s'] * len(removed))})", removed)
    if added:
        Slice.objects.bulk_create(added)
    _nodes_write(nodes, now=timezone.now())
    figures_refresh([plan.node.pk for plan in plans])


# The Node columns a re-register writes from its plan, with their PostgreSQL types; then pools_sru
# (JSON text, None to keep the stored pools: the grid seldom reports them), and the times.
_NODE_COLUMNS = (
    ("id", "bigint"), ("status", "text"), ("total_cru", "bigint"), ("total_mru", "bigint"), ("total_sru", "bigint"),
    ("total_hru", "bigint"), ("used_cru", "bigint"), ("used_mru", "bigint"), ("used_sru", "bigint"),
    ("used_hru", "bigint"), ("placeable_now", "bigint"), ("phantom_slices", "bigint"), ("carved_policy_name", "text"),
    ("carved_policy_version", "bigint"), ("carved_slice_sru", "bigint"), ("carved_deployable", "bigint"),
    ("catalog_generation", "bigint"), ("country", "text"), ("city", "text"), ("pools_sru", "text"),
    ("phantom_reasons", "text"),
)  # fmt: skip
_NODE_TIMES = ("seen_at", "prechecked_at", "updated_at")


def _node_values(plan: ReregisterPlan, *, generation: int) -> tuple:
    """The plan's node row in _NODE_COLUMNS' order."""
    seen = plan.seen
    return (
        plan.node.pk,
        seen.status if seen.status in Node.Status.values else Node.Status.UNKNOWN,
        seen.total.cru, seen.total.mru, seen.total.sru, seen.total.hru,
        seen.used.cru, seen.used.mru, seen.used.sru, seen.used.hru,
        plan.placeable_after, plan.phantom_after,
        plan.policy.name, plan.policy.version, plan.carved_slice_sru, plan.carve.slices, generation,
        seen.country, seen.city,
        json.dumps(list(seen.pools_sru)) if seen.pools_sru else None,
        json.dumps(plan.phantom_reasons_after),
    )  # fmt: skip


def _nodes_write(rows: list[tuple], *, now) -> None:
    """Update each node's _NODE_COLUMNS and times from its row, in one statement.

    On PostgreSQL an UPDATE from one array per column: bulk_update writes a CASE per column with
    an arm per node, and building it took ~2.5 ms a node in Python (100 nodes a batch), most of
    a batch's time. Elsewhere (the embedded SQLite demo, a few nodes) bulk_update.
    """
    names = [name for name, _type in _NODE_COLUMNS]
    if connection.vendor != "postgresql":
        nodes = []
        for row in rows:
            fields = dict(zip(names, row))
            fields["pools_sru"] = json.loads(fields["pools_sru"]) if fields["pools_sru"] else F("pools_sru")
            fields["phantom_reasons"] = json.loads(fields["phantom_reasons"])
            nodes.append(Node(**fields, **dict.fromkeys(_NODE_TIMES, now)))
        Node.objects.bulk_update(nodes, [*names[1:], *_NODE_TIMES])
        return
    quote = connection.ops.quote_name
    assignments = [f"{quote(name)} = u.{quote(name)}" for name in names[1:] if name not in ("pools_sru", "phantom_reasons")]
    assignments.append(f"{quote('phantom_reasons')} = u.{quote('phantom_reasons')}::jsonb")
    assignments.append(f"{quote('pools_sru')} = COALESCE(u.{quote('pools_sru')}::jsonb, n.{quote('pools_sru')})")
    assignments.extend(f"{quote(name)} = %s" for name in _NODE_TIMES)
    arrays = ", ".join(f"%s::{column_type}[]" for _name, column_type in _NODE_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(Node._meta.db_table)} AS n SET {', '.join(assignments)} "
            f"FROM unnest({arrays}) AS u({', '.join(quote(name) for name in names)}) WHERE n.id = u.id",
            [now] * len(_NODE_TIMES) + [list(column) for column in zip(*rows)],
        )


def _node_event(*, job: Job, plan: ReregisterPlan, result: dict) -> AuditEvent:
    """A bulk node's own line (unsaved): a bulk result keeps only a sample of its nodes, so each node's
    detail is its audit event, committed with its catalog (and found from the node, the job, or both)."""
    return AuditEvent(
        actor_id=job.requested_by_id, source=job.source, action="job.node-reregistered",
        node=plan.node, job=job, message=_reregister_words(plan, result),
        detail={"result": _bulk_node_summary(result) | {"policy": result["policy"], "notes": result["notes"]}},
    )


def _reregister_words(plan: ReregisterPlan, result: dict) -> str:
    b, a = result["before"], result["after"]
    what = "dry run of re-register" if result["dry_run"] else "re-register"
    if result["up_to_date"]:
        return f"{what} of node {plan.node.node_id}: already up to date ({a['slices']} slices)"
    return (
        f"{what} of node {plan.node.node_id}: {b['slices']} -> {a['slices']} slices "
        f"(removed {len(result['removed'])}, added {len(result['added'])}, kept {len(result['kept'])}; "
        f"policy {plan.policy.name} v{plan.policy.version})"
    )


def _still_current(s: Slice, target: capacity.SliceSize, same_policy: bool, carved_slice_sru: int) -> bool:
    """A free slice worth keeping: of the carved size, or (same policy) of the size the node was carved with.

    The same tolerance as catalog.stale_reason: a deploy changes the rounding of what is left,
    so the carve may now offer a slightly larger disk; replacing every free slice for that
    would churn the catalog after each deploy, and the node is not stale for it either.
    """
    if (s.cru, s.mru) != (target.cru, target.mru):
        return False
    return s.sru == target.sru or (same_policy and s.sru == carved_slice_sru and s.sru <= target.sru)


_SLICE_KEY = ("index", "cru", "mru", "sru", "state")


def _slice_key(s: Slice) -> tuple:
    return (s.index, s.cru, s.mru, s.sru, s.state)


def _slice_item(s: Slice) -> dict:
    return {"index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru, "state": s.state}


# --- bulk re-register -------------------------------------------------------------------------


def bulk_reregister(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> dict:
    """Re-register every stale node (or one farm's), a batch of nodes per short transaction.

    Each batch (up to BULK_CHUNK nodes) is read from the grid and planned outside any
    transaction, then applied in ONE transaction: the batch's nodes and slices locked, each
    node checked against what its plan read, the slice changes, the node rows, the nodes'
    figures, their audit events and the job's progress written together. A node that moved
    meanwhile is left out of its batch and re-planned on its own afterwards; a batch that fails
    in the database is applied again one node at a time. A worker killed mid-batch leaves each
    of its nodes entirely old (the whole batch rolls back); the run that takes the job over
    finds them still stale.

    A node that fails is recorded in result["failures"] and the rest go on. Stops early (job
    failed, partial result kept) when the grid is unreachable for several nodes in a row.
    `stop_on` exceptions end the run instead of failing one node (the task's soft time limit).

    The result is bounded whatever the fleet: counts, slice and fleet totals, the failures (up to
    BULK_FAILURES_KEPT, then only counted) and the first BULK_SAMPLE changed nodes ("nodes", with
    "nodes_total" and "nodes_truncated"). Each node's own summary is in its audit trail.
    """
    grid = get_grid()
    job_progress(job=job, step="finding stale catalogs", done=0, total=0)
    stale = stale_node_pks(farm_id=job.farm_id)
    total = len(stale)
    job_progress(job=job, step=f"{total} stale catalog(s) to re-register", done=0, total=total)

    run = _BulkRun(job=job, grid=grid, total=total, stop_on=stop_on)
    size = _bulk_batch_size(total)
    for start in range(0, total, size):
        run.batch(stale[start : start + size])
    result = run.result
    if total == 0:
        result["notes"].append("no stale catalog" + (f" in farm {job.farm_id}" if job.farm_id is not None else ""))
    _bulk_words(result, job=job, total=total)
    with transaction.atomic():
        job_succeed(job=job, result=result, message=f"bulk re-register: {result['words']}")
    return result


def _bulk_batch_size(total: int) -> int:
    """BULK_CHUNK nodes a batch, fewer in a small run so that its progress still moves in steps."""
    return max(1, min(BULK_CHUNK, -(-total // BULK_PROGRESS_STEPS)))


class _BulkRun:
    """One bulk run between its batches: the result so far, nodes settled, and how the grid answers."""

    def __init__(self, *, job: Job, grid: Grid, total: int, stop_on: tuple[type[BaseException], ...]):
        self.job, self.grid, self.total, self.stop_on = job, grid, total, stop_on
        self.result = _bulk_result_new(job=job, total=total)
        self.done = 0
        self.unreachable_in_a_row = 0
        self.beat_at = time.monotonic()

    def batch(self, pks: list[int]) -> None:
        """Read, plan and apply these nodes; count each in node order, failed or not."""
        nodes = list(Node.objects.filter(pk__in=pks).order_by("node_id"))
        policies = policies_for_nodes(nodes)
        slices_by_node = _slices_by_node(pks)
        deploying = deploying_slices(pks)
        outcomes: dict[int, dict | str] = {}  # node pk -> its summary, or why it failed
        plans, stop = [], None
        # One beat for the batch's reads (a thread per node read would cost more than the read).
        with job_beating(job=self.job):
            for node in nodes:
                self._beat_while_reading(node)
                try:
                    seen = node_capacity_read(grid=self.grid, node_id=node.node_id, job=self.job, announce=False)
                    plan = reregister_plan(
                        node=node, slices=slices_by_node.get(node.pk, []), policy=policies[node.pk], seen=seen,
                        deploying=deploying.get(node.pk, set()),
                    )
                except self.stop_on:
                    raise
                except JobLost:
                    raise
                except Exception as exc:
                    outcomes[node.pk] = self._failure_words(node, exc)
                    self.unreachable_in_a_row = self.unreachable_in_a_row + 1 if isinstance(exc, GridUnavailable) else 0
                    if self.unreachable_in_a_row >= BULK_GRID_DOWN_AFTER:
                        stop = (self.done + len(outcomes) + len(plans), outcomes[node.pk], exc)
                        break
                else:
                    self.unreachable_in_a_row = 0
                    plans.append(plan)
        outcomes.update(self._apply(plans, failed=len(outcomes)))
        for node in nodes:
            outcome = outcomes.get(node.pk)
            if isinstance(outcome, dict):
                _bulk_count_node(self.result, outcome)
            elif outcome is not None:
                _bulk_count_failure(self.result, node_id=node.node_id, error=outcome)
        self.done += len(outcomes)
        if stop is not None:
            handled, error, exc = stop
            self.result["notes"].append(f"stopped after {handled} of {self.total} nodes")
            _bulk_words(self.result, job=self.job, total=self.total)
            raise JobError(
                f"the grid is unreachable: {self.unreachable_in_a_row} nodes in a row could not be read "
                f"(last: {error}); stopped after {handled} of {self.total} nodes, "
                f"{self.result['reregistered']} re-registered",
                result=self.result,
            ) from exc

    def _apply(self, plans: list[ReregisterPlan], *, failed: int) -> dict[int, dict | str]:
        """The batch in one transaction, then the nodes it left out one at a time; node pk -> outcome."""
        done = self.done + failed
        try:
            summaries, left_out = _bulk_apply(
                job=self.job, plans=plans, progress=lambda applied: self._progress(done + applied, failed=failed)
            )
        except self.stop_on:
            raise
        except JobLost:
            raise
        except Exception:
            # Nothing of the batch was written: each node on its own then fails alone, if at all.
            log.exception("bulk job %s: a batch of %d nodes failed; applying them one at a time", self.job.pk, len(plans))
            summaries, left_out = {}, plans
        self.beat_at = time.monotonic()
        outcomes: dict[int, dict | str] = dict(summaries)
        done += len(summaries)
        for plan in left_out:
            done += 1
            progress = {"step": f"node {plan.node.node_id} done ({done} of {self.total})", "done": done}
            try:
                outcomes[plan.node.pk] = _bulk_one(job=self.job, plan=plan, progress=progress)
            except self.stop_on:
                raise
            except JobLost:
                raise
            except Exception as exc:
                outcomes[plan.node.pk] = self._failure_words(plan.node, exc)
        return outcomes

    def _progress(self, done: int, *, failed: int) -> dict:
        failed += self.result["failed"]
        return {"step": f"{done} of {self.total} nodes done" + (f"; {failed} failed" if failed else ""), "done": done}

    def _beat_while_reading(self, node: Node) -> None:
        """A heartbeat while a batch is read: a slow grid must not look like a dead worker."""
        if time.monotonic() - self.beat_at < settings.JOB_HEARTBEAT_TIMEOUT / 4:
            return
        job_progress(job=self.job, step=f"reading node {node.node_id}'s live capacity ({self.done} of {self.total} done)")
        self.beat_at = time.monotonic()

    def _failure_words(self, node: Node, exc: Exception) -> str:
        if isinstance(exc, (JobError, GridError, capacity.CapacityError)):
            return str(exc) or type(exc).__name__
        log.exception("bulk job %s: node %s failed unexpectedly", self.job.pk, node.node_id)
        return f"internal error: {type(exc).__name__}: {exc}"


_FLEET_FIGURES = ("slices", "free", "deployable", "placeable", "phantom")


def _bulk_result_new(*, job: Job, total: int) -> dict[str, Any]:
    return {
        "dry_run": job.dry_run,
        "farm_id": job.farm_id,
        "stale": total,
        "seen": 0,
        "reregistered": 0,
        "unchanged": 0,
        "failed": 0,
        # Slices over every node handled, and the handled nodes' figures summed before and after.
        "slices": {"removed": 0, "added": 0, "kept": 0},
        "fleet": {"before": dict.fromkeys(_FLEET_FIGURES, 0), "after": dict.fromkeys(_FLEET_FIGURES, 0)},
        "failures": [],
        "failures_more": 0,
        "nodes": [],
        "nodes_total": 0,
        "nodes_truncated": False,
        "notes": [],
    }


def _bulk_count_node(result: dict, summary: dict) -> None:
    """Add one handled node to the counts; its summary is kept only while the sample has room."""
    result["seen"] += 1
    for key in ("removed", "added", "kept"):
        result["slices"][key] += summary[key]
    for when in ("before", "after"):
        for figure in _FLEET_FIGURES:
            result["fleet"][when][figure] += summary[when].get(figure) or 0
    if not summary["changed"]:
        result["unchanged"] += 1
        return
    result["reregistered"] += 1
    result["nodes_total"] += 1
    if len(result["nodes"]) < BULK_SAMPLE:
        result["nodes"].append(summary)
    else:
        result["nodes_truncated"] = True


def _bulk_count_failure(result: dict, *, node_id: int, error: str) -> None:
    result["seen"] += 1
    result["failed"] += 1
    if len(result["failures"]) < BULK_FAILURES_KEPT:
        result["failures"].append({"node_id": node_id, "error": error})
    else:
        result["failures_more"] += 1


def _bulk_words(result: dict, *, job: Job, total: int) -> None:
    verb = "would re-register" if job.dry_run else "re-registered"
    result["words"] = (
        f"{verb} {result['reregistered']} of {total} stale node(s); {result['unchanged']} already up to date; "
        f"{result['failed']} failed"
    )


def _bulk_apply(
    *, job: Job, plans: list[ReregisterPlan], progress: Callable[[int], dict]
) -> tuple[dict[int, dict], list[ReregisterPlan]]:
    """Apply the plans in ONE transaction; (node pk -> summary of each applied, the plans left out).

    A plan whose node moved since it was made is left out, its node untouched. The job's progress
    (`progress(number applied)`, job_progress's step and done) and heartbeat are written in the
    same transaction: a run that no longer owns the job (JobLost) writes nothing. A fixed number
    of statements whatever the number of plans.
    """
    results = {plan.node.pk: plan.result(dry_run=job.dry_run) for plan in plans}
    with transaction.atomic():
        moved = _catalogs_lock_and_check(plans) if plans and not job.dry_run else set()
        applied = [plan for plan in plans if plan.node.pk not in moved]
        if applied and not job.dry_run:
            _catalogs_write(applied)
        job_progress(job=job, **progress(len(applied)))
        AuditEvent.objects.bulk_create(
            [_node_event(job=job, plan=plan, result=results[plan.node.pk]) for plan in applied]
        )
        if applied and not job.dry_run:
            job_test_pause("swapped")
    summaries = {plan.node.pk: _bulk_node_summary(results[plan.node.pk]) for plan in applied}
    return summaries, [plan for plan in plans if plan.node.pk in moved]


def _bulk_one(*, job: Job, plan: ReregisterPlan, progress: dict) -> dict:
    """A node its batch left out (it moved meanwhile, or the batch failed): planned again on its own.

    The same capacity read and policy, the node's rows as they are now; a node that moves again
    before this commits fails with CATALOG_CHANGED.
    """
    node = plan.node
    node.refresh_from_db()
    fresh = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
    plan = reregister_plan(
        node=node, slices=fresh, policy=plan.policy, seen=plan.seen,
        deploying=deploying_slices([node.pk]).get(node.pk, set()),
    )
    return _bulk_node_summary(reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=False, progress=progress))


def _bulk_node_summary(result: dict) -> dict:
    """One node's line in a bulk result (and in its audit event): figures and counts, no slice lists."""
    return {
        "node_id": result["node_id"],
        "changed": result["changed"],
        "before": result["before"],
        "after": result["after"],
        "removed": len(result["removed"]),
        "added": len(result["added"]),
        "kept": len(result["kept"]),
    }


def stale_node_pks(*, farm_id: int | None = None) -> list[int]:
    """Primary keys of nodes whose stored catalog differs from what their effective policy carves, by node id.

    Computed from the slices and policies now (figures_compute), not from the stored figures, in
    STALE_SCAN_CHUNK nodes at a time (three queries each) so the worker's memory does not grow
    with the fleet.
    """
    nodes = Node.objects.order_by("node_id")
    if farm_id is not None:
        nodes = nodes.filter(farm_id=farm_id)
    pks = list(nodes.values_list("pk", flat=True))
    stale = []
    for start in range(0, len(pks), STALE_SCAN_CHUNK):
        chunk = pks[start : start + STALE_SCAN_CHUNK]
        figures = figures_compute(Node.objects.filter(pk__in=chunk))
        stale.extend(pk for pk in chunk if pk in figures and figures[pk].stale)
    return stale


def deploying_slices(node_pks: list[int]) -> dict[int, set[int]]:
    """Node pk -> pks of its slices with a deploy in flight (a "deploying" Deployment younger than
    services.deploy.IN_FLIGHT; an older one is a process that died and the slice is free again)."""
    rows = Deployment.objects.filter(
        node_id__in=node_pks,
        state=Deployment.State.DEPLOYING,
        started_at__gte=timezone.now() - IN_FLIGHT,
        slice__isnull=False,
    ).values_list("node_id", "slice_id")
    by_node: dict[int, set[int]] = {}
    for node_pk, slice_pk in rows:
        by_node.setdefault(node_pk, set()).add(slice_pk)
    return by_node


def _slices_by_node(node_pks: list[int]) -> dict[int, list[Slice]]:
    by_node: dict[int, list[Slice]] = {}
    for s in Slice.objects.filter(node_id__in=node_pks).order_by("node_id", "index"):
        by_node.setdefault(s.node_id, []).append(s)
    return by_node
