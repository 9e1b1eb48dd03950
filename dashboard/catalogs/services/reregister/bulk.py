"""Re-registering every stale node (or one farm's): batches of plans, each applied in one transaction
(bulk_reregister says how)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import audit_records
from dashboard.catalogs.services.reregister.apply import (
    SLICE_ORDER,
    bulk_node_summary,
    catalogs_lock_and_check,
    catalogs_write,
    node_capacity_read,
    node_event,
    policy_change_words,
    reregister_apply,
)
from dashboard.catalogs.services.reregister.bulk_result import (
    bulk_count_failure,
    bulk_count_node,
    bulk_result_new,
    bulk_words,
)
from dashboard.catalogs.services.reregister.bulk_seams import BULK_GRID_DOWN_AFTER, NO_HOOKS, BulkHooks, BulkLimits
from dashboard.catalogs.services.reregister.plan import ReregisterPlan, reregister_plan
from dashboard.catalogs.services.reregister.rollback import generations_record
from dashboard.catalogs.services.reregister.stale import (
    deploying_slices,
    held_slices,
    slices_by_node,
    stale_again_count,
    stale_node_pks,
)
from dashboard.catalogs.services.reregister.waves import wave_run_of, waves_finished, waves_run
from dashboard.grid import get_grid
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.paging import MAX_PAGE_SIZE, ReadFailed, ids_page
from dashboard.grid.types import Grid, GridError, GridUnavailable, NodeCapacity
from dashboard.jobs.results import BulkNode, BulkResult
from dashboard.jobs.services.job_pause import job_test_pause
from dashboard.jobs.services.jobs import JobError, JobLost, job_beating, job_progress, job_succeed
from dashboard.models import Job, Node, Slice
from dashboard.policies.selectors.policy_book import policies_for_nodes, policy_for_node

log = logging.getLogger(__name__)


def bulk_reregister(
    *,
    job: Job,
    stop_on: tuple[type[BaseException], ...] = (),
    limits: BulkLimits | None = None,
    hooks: BulkHooks = NO_HOOKS,
    grid: Grid | None = None,
) -> BulkResult:
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
    `limits`, `hooks` and `grid` are the run's seams (BulkLimits, BulkHooks; the configured grid
    by default): jobs.services.job_run.job_execute passes them on from its caller.

    The result is bounded whatever the fleet: counts, slice and fleet totals, the failures (up to
    BULK_FAILURES_KEPT, then only counted) and the first BULK_SAMPLE changed nodes ("nodes", with
    "nodes_total" and "nodes_truncated"). Each node's own summary is in its audit trail.
    """
    grid = grid or get_grid()
    limits = limits or BulkLimits()
    run = _BulkRun(job=job, grid=grid, total=0, stop_on=stop_on, limits=limits, hooks=hooks)
    run.progress(step="finding stale catalogs", done=0, total=0)
    stale = stale_node_pks(farm_id=job.farm_id)
    total = run.total = run.result.stale = len(stale)
    run.progress(step=f"{total} stale catalog(s) to re-register", done=0, total=total)

    stopped = waves_run(run, stale) if (wave := wave_run_of(job)) is not None else False
    if wave is None:
        size = _bulk_batch_size(total, limits)
        for start in range(0, total, size):
            run.batch(stale[start : start + size])
            if hooks.batch_done:
                hooks.batch_done(run.done)
    result = run.result
    if total == 0:
        result.notes.append("no stale catalog" + (f" in farm {job.farm_id}" if job.farm_id is not None else ""))
    elif not job.dry_run and (again := stale_again_count(handled=stale, failed=result.failed)):
        result.notes.append(
            f"{again} node(s) re-registered by this run are stale again: a policy changed after their batch was "
            "written; run the bulk re-register again for them"
        )
    bulk_words(result, job=job, total=total)
    with transaction.atomic():
        if wave is not None and (note := waves_finished(job=job, stopped=stopped)):
            result.notes.append(note)
        job_succeed(job=job, result=result)
    return result


def _too_old(read_at: datetime) -> bool:
    """A reading a plan must not be applied from any more (settings.BULK_READING_MAX_AGE)."""
    return timezone.now() - read_at > timedelta(seconds=settings.BULK_READING_MAX_AGE)


def _bulk_batch_size(total: int, limits: BulkLimits) -> int:
    """BULK_CHUNK nodes a batch, fewer in a small run so that its progress still moves in steps."""
    return max(1, min(limits.chunk, -(-total // limits.progress_steps)))


class _BulkRun:
    """One bulk run between its batches: the result so far, nodes settled, and how the grid answers."""

    def __init__(
        self,
        *,
        job: Job,
        grid: Grid,
        total: int,
        stop_on: tuple[type[BaseException], ...],
        limits: BulkLimits,
        hooks: BulkHooks,
    ):
        self.job, self.grid, self.total = job, grid, total
        self.limits, self.hooks = limits, hooks
        # What a node's (or a batch's) failure never swallows: the task's time limit, the job taken away.
        self.passed_on = (*stop_on, JobLost)
        self.result = bulk_result_new(job=job, total=total)
        self.done = 0
        self.unreachable_in_a_row = 0
        self.beat_at = time.monotonic()

    def progress(self, **fields) -> None:
        """job_progress, told to the progressed hook first."""
        if self.hooks.progressed:
            self.hooks.progressed(fields)
        job_progress(job=self.job, **fields)

    def batch(self, pks: list[int]) -> None:
        """Read (one page, then one by one what it lacks), plan and apply these nodes; count each in node order."""
        nodes = list(Node.objects.filter(pk__in=pks).order_by("grid_id"))
        policies = policies_for_nodes(nodes)
        slices = slices_by_node(pks)
        deploying = deploying_slices(pks)
        held = held_slices(pks, now=timezone.now())
        outcomes: dict[int, BulkNode | str] = {}  # node pk -> its summary, or why it failed

        def plan_of(node: Node, reading: tuple[NodeCapacity, datetime]) -> ReregisterPlan | None:
            try:
                plan = reregister_plan(
                    node=node,
                    slices=slices.get(node.pk, []),
                    policy=policies[node.pk],
                    seen=reading[0],
                    deploying=deploying.get(node.pk, set()),
                    held=held.get(node.pk, set()),
                    read_at=reading[1],
                )
                if self.hooks.planned:
                    self.hooks.planned(node)
                return plan
            except self.passed_on:
                raise
            except Exception as exc:
                outcomes[node.pk] = self._failure_words(node, exc)
                return None

        with job_beating(job=self.job):
            readings, stop = self._read(nodes, outcomes)
            plans = {node.pk: plan_of(node, readings[node.pk]) for node in nodes if node.pk in readings}
            # A plan made from a reading past BULK_READING_MAX_AGE (a page read before a long run of
            # one-by-one reads) is made again from a fresh read, once.
            old = [node for node in nodes if plans.get(node.pk) is not None and _too_old(plans[node.pk].read_at)]
            if old and stop is None:
                self.result.reread += len(old)
                again, stop = self._read(old, outcomes)
                for node in old:
                    plans[node.pk] = plan_of(node, again[node.pk]) if node.pk in again else None
        ready = [plan for plan in plans.values() if plan is not None]
        outcomes.update(self._apply(ready, failed=len(outcomes)))
        self._count(nodes, outcomes)
        self.done += len(outcomes)
        if stop is not None:
            self._stop(*stop)

    def _count(self, nodes: list[Node], outcomes: dict[int, BulkNode | str]) -> None:
        """Each node's outcome into the result, in node order: its summary, or its failure."""
        for node in nodes:
            outcome = outcomes.get(node.pk)
            if isinstance(outcome, BulkNode):
                bulk_count_node(self.result, outcome, sample=self.limits.sample)
            elif outcome is not None:
                bulk_count_failure(self.result, node_id=node.grid_id, error=outcome, kept=self.limits.failures_kept)

    def _stop(self, handled: int, error: str, exc: BaseException) -> None:
        """The grid is unreachable: the run stops with what it did so far as its result."""
        self.result.notes.append(f"stopped after {handled} of {self.total} nodes")
        bulk_words(self.result, job=self.job, total=self.total)
        raise JobError(
            f"the grid is unreachable: {self.unreachable_in_a_row} nodes in a row could not be read "
            f"(last: {error}); stopped after {handled} of {self.total} nodes, "
            f"{self.result.reregistered} re-registered",
            result=self.result,
        ) from exc

    def _read(self, nodes: list[Node], outcomes: dict) -> tuple[dict[int, tuple[NodeCapacity, datetime]], tuple | None]:
        """These nodes' readings: ONE page by id, then one at a time only the nodes it lacks or failed on.

        Node pk -> (reading, when read). A node that cannot be read gets its failure in `outcomes`;
        the second value is set when BULK_GRID_DOWN_AFTER nodes in a row were unreachable (the run stops).
        """
        readings: dict[int, tuple[NodeCapacity, datetime]] = {}
        got: dict[int, tuple[NodeCapacity, datetime]] = {}
        size = max(1, min(settings.GRID_PAGE_SIZE, MAX_PAGE_SIZE))  # what the proxy serves in one page
        for start in range(0, len(nodes), size):
            chunk = nodes[start : start + size]
            self._beat_while_reading(f"reading nodes {chunk[0].grid_id}-{chunk[-1].grid_id} from the grid, a page")
            read_at = timezone.now()
            self.result.requests += 1
            try:
                with grid_step_deadline(settings.GRID_STEP_DEADLINE):
                    page = ids_page(self.grid, node_ids=[node.grid_id for node in chunk])
            except ReadFailed as exc:
                # The page's nodes are read one at a time below; the run goes on.
                log.warning("bulk job %s: %s; reading its nodes one at a time", self.job.pk, exc)
                self.result.pages_failed += 1
                continue
            self.result.pages += 1
            got.update((live.node_id, (live, read_at)) for live in page.nodes)
        for node in nodes:
            if node.grid_id in got:
                readings[node.pk] = got[node.grid_id]
                self.unreachable_in_a_row = 0
                continue
            self._beat_while_reading(f"reading node {node.grid_id}'s live capacity on its own")
            try:
                self.result.read_alone += 1
                self.result.requests += 1
                live = node_capacity_read(grid=self.grid, node_id=node.grid_id, job=self.job, announce=False)
            except self.passed_on:
                raise
            except Exception as exc:
                outcomes[node.pk] = self._failure_words(node, exc)
                self.unreachable_in_a_row = self.unreachable_in_a_row + 1 if isinstance(exc, GridUnavailable) else 0
                if self.unreachable_in_a_row >= BULK_GRID_DOWN_AFTER:
                    handled = self.done + nodes.index(node) + 1
                    return readings, (handled, outcomes[node.pk], exc)
            else:
                self.unreachable_in_a_row = 0
                readings[node.pk] = (live, timezone.now())
        return readings, None

    def _apply(self, plans: list[ReregisterPlan], *, failed: int) -> dict[int, BulkNode | str]:
        """The batch in one transaction, then the nodes it left out one at a time; node pk -> outcome."""
        done = self.done + failed
        policy_moved: dict[int, capacity.Policy] = {}
        try:
            summaries, left_out = _bulk_apply(
                job=self.job,
                plans=plans,
                progress=lambda applied: self._progress(done + applied, failed=failed),
                hooks=self.hooks,
                policy_moved=policy_moved,
            )
        except self.passed_on:
            raise
        except Exception:
            # Nothing of the batch was written: each node on its own then fails alone, if at all.
            log.exception(
                "bulk job %s: a batch of %d nodes failed; applying them one at a time", self.job.pk, len(plans)
            )
            summaries, left_out = {}, plans
        self.beat_at = time.monotonic()
        self._policy_moved_note(plans, policy_moved)
        outcomes: dict[int, BulkNode | str] = dict(summaries)
        done += len(summaries)
        for plan in left_out:
            done += 1
            progress = {
                "step": f"node {plan.node.grid_id} done ({done} of {self.total})",
                "done": done,
                "failed": self.result.failed,
            }
            if self.hooks.progressed:
                self.hooks.progressed(progress)
            try:
                outcomes[plan.node.pk] = _bulk_one(job=self.job, plan=plan, progress=progress, hooks=self.hooks)
            except self.passed_on:
                raise
            except Exception as exc:
                outcomes[plan.node.pk] = self._failure_words(plan.node, exc)
        return outcomes

    def _policy_moved_note(self, plans: list[ReregisterPlan], policy_moved: dict[int, capacity.Policy]) -> None:
        """Say (once per batch) which nodes a policy edit made stale after they were planned: planned again."""
        if not policy_moved:
            return
        changes = sorted(
            {
                policy_change_words(plan.policy, policy_moved[plan.node.pk])
                for plan in plans
                if plan.node.pk in policy_moved
            }
        )
        shown = ", ".join(str(plan.node.grid_id) for plan in plans if plan.node.pk in policy_moved)
        self.result.notes.append(
            f"{len(policy_moved)} node(s) planned again with the policy in force at apply time: it changed during "
            f"the run ({'; '.join(changes)}): node(s) {shown}"
        )

    def _progress(self, done: int, *, failed: int) -> dict:
        failed += self.result.failed
        return {
            "step": f"{done} of {self.total} nodes done" + (f"; {failed} failed" if failed else ""),
            "done": done,
            "failed": failed,
        }

    def _beat_while_reading(self, words: str) -> None:
        """A heartbeat while a batch is read: a slow grid must not look like a dead worker."""
        if time.monotonic() - self.beat_at < settings.JOB_HEARTBEAT_TIMEOUT / 4:
            return
        self.progress(step=f"{words} ({self.done} of {self.total} done)")
        self.beat_at = time.monotonic()

    def _failure_words(self, node: Node, exc: Exception) -> str:
        if isinstance(exc, (JobError, GridError, capacity.CapacityError)):
            return str(exc) or type(exc).__name__
        log.exception("bulk job %s: node %s failed unexpectedly", self.job.pk, node.grid_id)
        return f"internal error: {type(exc).__name__}: {exc}"


def _bulk_apply(
    *,
    job: Job,
    plans: list[ReregisterPlan],
    progress: Callable[[int], dict],
    hooks: BulkHooks,
    policy_moved: dict[int, capacity.Policy],
) -> tuple[dict[int, BulkNode], list[ReregisterPlan]]:
    """Apply the plans in ONE transaction; (node pk -> summary of each applied, the plans left out).

    A plan whose node moved since it was made is left out, its node untouched; one whose policy in
    force changed meanwhile also goes in `policy_moved` (node pk -> its policy now), to be planned
    again with it and said in the result. The job's progress
    (`progress(number applied)`, job_progress's step and done) and heartbeat are written in the
    same transaction: a run that no longer owns the job (JobLost) writes nothing. A fixed number
    of statements whatever the number of plans.
    """
    results = {plan.node.pk: plan.result(dry_run=job.dry_run) for plan in plans}
    with transaction.atomic():
        moved = catalogs_lock_and_check(plans, policy_moved=policy_moved) if plans and not job.dry_run else set()
        applied = [plan for plan in plans if plan.node.pk not in moved]
        if applied and not job.dry_run:
            if hooks.writing:
                hooks.writing(applied)
            catalogs_write(applied)
            generations_record(job=job, plans=applied)
        fields = progress(len(applied))
        if hooks.progressed:
            hooks.progressed(fields)
        job_progress(job=job, **fields)
        audit_records(node_event(job=job, plan=plan, result=results[plan.node.pk]) for plan in applied)
        if applied and not job.dry_run:
            job_test_pause("swapped")
    summaries = {plan.node.pk: bulk_node_summary(results[plan.node.pk]) for plan in applied}
    return summaries, [plan for plan in plans if plan.node.pk in moved]


def _bulk_one(*, job: Job, plan: ReregisterPlan, progress: dict, hooks: BulkHooks) -> BulkNode:
    """A node its batch left out (it moved meanwhile, or the batch failed): planned again on its own.

    The same capacity read (read again when past BULK_READING_MAX_AGE), the policy in force now and
    the node's rows as they are now; a node that moves again before this commits fails with
    CATALOG_CHANGED.
    """
    node = plan.node
    node.refresh_from_db()
    fresh = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
    seen, read_at = plan.seen, plan.read_at
    if _too_old(read_at):
        seen, read_at = (
            node_capacity_read(grid=get_grid(), node_id=node.grid_id, job=job, announce=False),
            timezone.now(),
        )
    plan = reregister_plan(
        node=node,
        slices=fresh,
        policy=policy_for_node(node),  # the policy in force now: an edit since the batch's plan counts
        seen=seen,
        read_at=read_at,
        deploying=deploying_slices([node.pk]).get(node.pk, set()),
        held=held_slices([node.pk], now=timezone.now()).get(node.pk, set()),
    )
    if hooks.planned:
        hooks.planned(node)
    return bulk_node_summary(reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=False, progress=progress))
