"""Applying re-register plans: the one short transaction, and the single-node job around it.

The transaction locks the plans' nodes and every slice of them, checks each node is exactly what
its plan read (catalog generation, slice rows, no deploy started and no live hold on a slice it
removes), then
writes a fixed number of statements for any number of plans. Pause point "swapped" (for the kill
tests) is INSIDE it, after the writes.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import AuditEntry, audit_records
from dashboard.catalogs.services.reregister.plan import SLICE_KEY, ReregisterPlan, reregister_plan
from dashboard.catalogs.services.reregister.rollback import generations_record
from dashboard.catalogs.services.reregister.stale import deploying_slices, held_slices
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.types import Grid, GridUnavailable, MalformedPayload, NodeCapacity
from dashboard.jobs.results import BulkNode, ReregisterResult
from dashboard.jobs.services.job_pause import job_test_pause
from dashboard.jobs.services.jobs import JobError, job_beating, job_progress, job_succeed
from dashboard.lessons.services.refused_readings import BY_REREGISTER, readings_refused
from dashboard.models import Deployment, Hold, Job, Node, Policy, Slice
from dashboard.nodes.services.pools import pools_read_from_node
from dashboard.nodes.services.readings import LiveReading, readings_store
from dashboard.policies.selectors.policy_book import policies_for_nodes, policy_for_node
from dashboard.rows import rows_update

log = logging.getLogger(__name__)

CATALOG_CHANGED = "the catalog changed while re-registering; try again"
# Reading live capacity: the Grid Proxy client already retries each request; these are whole
# reads, for a grid that is briefly unreachable (a restart, a load balancer flip).
GRID_READ_ATTEMPTS = 3
SLICE_ORDER = ("index",)


class CatalogChanged(JobError):
    def __init__(self, message: str = CATALOG_CHANGED):
        super().__init__(message)


def policy_change_words(before: capacity.Policy, now: capacity.Policy) -> str:
    return f"{before.name} v{before.version} -> {now.name} v{now.version}"


def node_reregister(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> ReregisterResult:
    """Re-carve the job's node with its effective policy; returns (and stores) the result.

    Reads live capacity, marks phantom slices, carves counting rented and deployed slices (and free
    ones in flight or under a live hold) as occupied, then swaps the free slices and finishes the job in one short transaction.
    With job.dry_run the same result is recorded and no catalog or node row changes. (`stop_on`:
    the runners' protocol, dashboard.jobs.kinds; one node's run has no step it would stop between.)
    """
    node = job.node
    if node is None:
        raise JobError("this re-register job has no node (was it deleted?)")
    job_test_pause("claimed")
    grid = get_grid()
    # Three steps the page can draw as a bar: read the grid, carve, save.
    job_progress(job=job, step=f"reading node {node.grid_id}'s live capacity from the grid", done=0, total=3)
    seen = node_capacity_read(grid=grid, node_id=node.grid_id, job=job, announce=False)
    # Where the node itself can be asked (the simulated grid), its pools come with the reading.
    if not job.dry_run and pools_read_from_node(node=node) is not None:
        node.refresh_from_db()
    job_progress(job=job, step=f"carving node {node.grid_id}'s catalog", done=1)
    slices = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
    plan = reregister_plan(
        node=node,
        slices=slices,
        policy=policy_for_node(node),
        seen=seen,
        deploying=deploying_slices([node.pk]).get(node.pk, set()),
        held=held_slices([node.pk], now=timezone.now()).get(node.pk, set()),
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
                if seen.node_id != node_id:
                    raise MalformedPayload(f"asked the grid for node {node_id}, it answered for node {seen.node_id}")
            except GridUnavailable:
                if attempt == GRID_READ_ATTEMPTS or step.passed():
                    raise
                time.sleep(min(settings.GRID_BACKOFF * 2 ** (attempt - 1), max(step.remaining(), 0)))
                continue
            except MalformedPayload as exc:
                # Nothing of it is written; the node keeps its reading, and its page says this one was refused.
                readings_refused({node_id: str(exc)}, by=BY_REREGISTER)
                raise
            return seen
    raise AssertionError("unreachable")  # pragma: no cover


def reregister_apply(
    *, plan: ReregisterPlan, job: Job, dry_run: bool, finish: bool, progress: dict | None = None
) -> ReregisterResult:
    """The one short transaction: check nothing moved, swap the free slices, store the node's figures.

    With finish=True the job's result is written in the same transaction (single-node jobs);
    bulk jobs pass finish=False: the transaction checks they still own the job and writes their
    heartbeat and `progress` (job_progress's step and done) with the node's new catalog.
    """
    result = plan.result(dry_run=dry_run)
    with transaction.atomic():
        if not dry_run:
            policy_moved: dict[int, capacity.Policy] = {}
            held_since: dict[int, list[int]] = {}
            if catalogs_lock_and_check([plan], policy_moved=policy_moved, held_since=held_since):
                if plan.node.pk in policy_moved:
                    raise CatalogChanged(
                        f"the policy of node {plan.node.grid_id} changed while re-registering "
                        f"({policy_change_words(plan.policy, policy_moved[plan.node.pk])}); nothing was written, "
                        "try again"
                    )
                if plan.node.pk in held_since:
                    raise CatalogChanged(
                        f"slice(s) {', '.join(map(str, held_since[plan.node.pk]))} of node {plan.node.grid_id} "
                        "were held for a buyer while re-registering; nothing was written, try again "
                        "(the next plan keeps them)"
                    )
                raise CatalogChanged()
            catalogs_write([plan])
            generations_record(job=job, plans=[plan])
            job_test_pause("swapped")
        if finish:
            job_succeed(job=job, result=result)
        else:
            job_progress(job=job, **(progress or {"step": job.step}))
            audit_records([node_event(job=job, plan=plan, result=result)])
    return result


def catalogs_lock_and_check(
    plans: list[ReregisterPlan],
    *,
    policy_moved: dict[int, capacity.Policy] | None = None,
    held_since: dict[int, list[int]] | None = None,
) -> set[int]:
    """Lock the plans' policies, nodes and every slice of them; the pks of the nodes that moved since their plan.

    A node moved when the policy in force on it is not the name and version its plan carved with
    (an edit committed meanwhile: those nodes and their policy now go in `policy_moved`), when its
    catalog_generation or its slice rows are not what its plan read, or when a slice the plan
    removes has a deploy in flight or a live hold now (those nodes and the removed slices' indices
    go in `held_since`, for the holds). A fixed number of queries for any number of plans; call it
    inside the transaction that writes the others.

    The policy rows in force are locked first (as policy_update locks its row before the nodes'
    figures): an edit either committed before this check, and is seen, or waits for this commit
    and then finds these nodes carved by the old version, stale, as they are.
    """
    pks = [plan.node.pk for plan in plans]
    moved_policy = _policies_lock_and_check(plans)
    if policy_moved is not None:
        policy_moved.update(moved_policy)
    generations = dict(
        Node.objects.select_for_update().filter(pk__in=pks).order_by("pk").values_list("pk", "catalog_generation")
    )
    current: dict[int, dict[int, tuple]] = {pk: {} for pk in pks}
    rows = Slice.objects.select_for_update().filter(node_id__in=pks).order_by("node_id", "index")
    for pk, node_pk, *key in rows.values_list("pk", "node_id", *SLICE_KEY):
        current[node_pk][pk] = tuple(key)
    # slice_deploy records its attempt under the slice's row lock, which we now hold for every
    # slice of these nodes: a deploy that started since the plan is visible here, and one that
    # starts after our commit finds its slice gone (SliceChanged).
    in_flight = deploying_slices(pks)
    # hold_create locks the node's row before it reads the slice: a hold made since the plan is
    # live here (judged now, under the locks), and one asked after our commit finds its slice gone.
    held = held_slices(pks, now=timezone.now())
    moved = set()
    for plan in plans:
        removed = {s.pk: s.index for s in plan.removed}
        held_now = sorted(removed[pk] for pk in held.get(plan.node.pk, set()) & removed.keys())
        if held_now and held_since is not None:
            held_since[plan.node.pk] = held_now
        if (
            plan.node.pk in moved_policy
            or generations.get(plan.node.pk) != plan.generation
            or current[plan.node.pk] != plan.snapshot
            or in_flight.get(plan.node.pk, set()) & removed.keys()
            or held_now
        ):
            moved.add(plan.node.pk)
    return moved


def _policies_lock_and_check(plans: list[ReregisterPlan]) -> dict[int, capacity.Policy]:
    """Lock the policy rows that can be in force on the plans' nodes; node pk -> policy now, where it moved."""
    nodes = [plan.node for plan in plans]
    rows = Policy.objects.select_for_update(no_key=True).filter(
        Q(scope=Policy.Scope.FLEET)
        | Q(scope=Policy.Scope.FARM, farm_id__in={n.farm_id for n in nodes})
        | Q(scope=Policy.Scope.NODE, node_id__in=[n.pk for n in nodes])
    )
    list(rows.order_by("pk").values_list("pk", flat=True))
    now = policies_for_nodes(nodes)
    return {
        plan.node.pk: now[plan.node.pk]
        for plan in plans
        if (now[plan.node.pk].name, now[plan.node.pk].version) != (plan.policy.name, plan.policy.version)
    }


def catalogs_write(plans: list[ReregisterPlan]) -> None:
    """Write checked plans, their nodes and slices locked: a fixed number of statements for any number.

    The removed slices go, the added ones come, each node's row takes what was read from the grid
    (nodes.services.readings) and how it was carved, and the nodes' figures are stored from the result:
    the carve the figures need is the plan's own (capacity.carve_memoised), and the nodes are
    already locked by catalogs_lock_and_check.
    """
    with node_writes([plan.node.pk for plan in plans]):  # locked by catalogs_lock_and_check already
        removed = [s.pk for plan in plans for s in plan.removed]
        added, records = [], []
        for plan in plans:
            generation = plan.generation + (1 if plan.changes_slices else 0)
            for s in plan.added:
                s.generation = generation
            added.extend(plan.added)
            records.append(_carve_record(plan, generation=generation))
        if removed:
            # What Slice.delete() does (a failed deploy's record keeps its slice index, not the row), in
            # two statements: the delete collector reads every slice first and deletes them 100 at a time.
            Deployment.objects.filter(slice_id__in=removed).update(slice=None)
            # A live hold on a free slice keeps it (the plan kept it; the check above refused one made since).
            # An open hold left on a removed slice has expired, with no write: it is ended as such, at its
            # expiry. One still running on a slice marked failed (no reader counts it) ends with the slice.
            # Both are kept as history, without their slice.
            now = timezone.now()
            expired = Q(expires_at__lte=now)
            Hold.objects.filter(slice_id__in=removed, ended_at__isnull=True).update(
                ended_at=Case(When(expired, then=F("expires_at")), default=Value(now)),
                end=Case(When(expired, then=Value(Hold.End.EXPIRED)), default=Value(Hold.End.RETIRED)),
            )
            Hold.objects.filter(slice_id__in=removed).update(slice=None)
            with connection.cursor() as cursor:
                table = connection.ops.quote_name(Slice._meta.db_table)
                cursor.execute(f"DELETE FROM {table} WHERE id IN ({', '.join(['%s'] * len(removed))})", removed)
        if added:
            Slice.objects.bulk_create(added)
        readings_store([LiveReading(plan.node.pk, plan.seen, plan.read_at) for plan in plans])
        rows_update(Node, _CARVE_COLUMNS, records, stamped=("updated_at",))


# How each node's catalog was carved: this module's columns (nodes.services.readings has the reading's).
_CARVE_COLUMNS = (
    ("id", "bigint"),
    ("carved_policy_name", "text"),
    ("carved_policy_version", "bigint"),
    ("carved_slice_sru", "bigint"),
    ("carved_deployable", "bigint"),
    ("carved_pools_known", "boolean"),
    ("catalog_generation", "bigint"),
    ("slice_index_next", "bigint"),
)


def _carve_record(plan: ReregisterPlan, *, generation: int) -> tuple:
    """The plan's carve as the node's row records it, in _CARVE_COLUMNS' order."""
    return (
        plan.node.pk,
        plan.policy.name,
        plan.policy.version,
        plan.carved_slice_sru,
        plan.carve.slices,
        plan.carve.pools_known,
        generation,
        plan.slice_index_next,
    )


def node_event(*, job: Job, plan: ReregisterPlan, result: ReregisterResult) -> AuditEntry:
    """A bulk node's own line (not stored yet): a bulk result keeps only a sample of its nodes, so each node's
    detail is its audit event, committed with its catalog (and found from the node, the job, or both)."""
    return AuditEntry(
        actor_id=job.requested_by_id,
        source=job.source,
        action="job.node-reregistered",
        node=plan.node,
        job=job,
        message=f"{'dry run of ' if result.dry_run else ''}re-register of node {plan.node.grid_id}: {result.sentence()}",
        detail={
            "result": bulk_node_summary(result).model_dump(mode="json")
            | {"policy": result.policy.model_dump(), "notes": result.notes}
        },
    )


def bulk_node_summary(result: ReregisterResult) -> BulkNode:
    """One node's line in a bulk result (and in its audit event): figures and counts, no slice lists."""
    return BulkNode(
        node_id=result.node_id,
        changed=result.changed,
        before=result.before,
        after=result.after,
        removed=len(result.removed),
        added=len(result.added),
        kept=len(result.kept),
    )
