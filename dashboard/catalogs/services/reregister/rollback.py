"""Each node's previous catalog generation, kept by a re-register, and the rollback that puts it back.

`generations_record` runs inside the re-register's own transaction, after the new catalog is
written: one CatalogGeneration per node with its carve columns and slices before, what was removed
and added, and every slice's state right after. A rollback (`node_rollback`, or `run_rollback` for
every node of a job) is allowed while none of the node's slices changed hands since: a slice rented,
deployed or released since the re-register (or a deploy started on one, or an added slice under a
live hold, promised to a buyer) blocks that node's rollback, said plainly. It removes only the slices the re-register added (free by that check) and puts back
the free slices it removed, at their indices and sizes; occupied slices are never touched.

From the pages and the API the whole run's rollback is a job (`run_rollback_request`, run by a
worker through `run_rollback_job`), one active per run; a node's rollback stays in the request.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.deployments.selectors.holds import live_holds
from dashboard.figures.services.node_writes import node_writes
from dashboard.jobs.results import RunRollbackResult
from dashboard.jobs.services.jobs import JobError, JobRequest, job_beating, job_progress, job_request, job_succeed
from dashboard.models import CatalogGeneration, Deployment, Hold, Job, Node, Slice, WaveRun

CARVE_COLUMNS = (
    "carved_policy_name",
    "carved_policy_version",
    "carved_slice_sru",
    "carved_deployable",
    "carved_pools_known",
)
# Deployments that mean a slice changed hands (a failed or refused attempt placed nothing).
HANDS_STATES = (Deployment.State.DEPLOYING, Deployment.State.DEPLOYED, Deployment.State.DELETED)


class RollbackRefused(JobError):
    """A rollback that cannot be done; the message says why, for the admin."""


def generations_record(*, job: Job, plans) -> None:
    """The applied plans' nodes as they were (unsaved plans' Node objects hold the old carve columns)."""
    rows = []
    for plan in plans:
        removed = {s.pk for s in plan.removed}
        after = {str(key[0]): key[4] for pk, key in plan.snapshot.items() if pk not in removed}
        after.update({str(s.index): s.state for s in plan.added})
        rows.append(
            CatalogGeneration(
                node_id=plan.node.pk,
                job=job,
                before={column: getattr(plan.node, column) for column in CARVE_COLUMNS}
                | {"catalog_generation": plan.generation},
                slices_before=[
                    dict(zip(("index", "cru", "mru", "sru", "state"), key, strict=True))
                    for key in sorted(plan.snapshot.values())
                ],
                removed=[{"index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru} for s in plan.removed],
                added_indices=sorted(s.index for s in plan.added),
                slices_after=after,
                generation_after=plan.generation + (1 if plan.changes_slices else 0),
            )
        )
    CatalogGeneration.objects.bulk_create(rows)


def changed_hands(generation: CatalogGeneration, *, node: Node, slices: list[Slice]) -> str | None:
    """Why this node cannot be rolled back now, in words; None when nothing changed hands since."""
    gid = node.grid_id
    if generation.rolled_back_at is not None:
        return f"node {gid} was already rolled back at {generation.rolled_back_at:%Y-%m-%d %H:%M:%S} UTC"
    if node.catalog_generation != generation.generation_after:
        return (
            f"node {gid}'s catalog changed again since this re-register (generation {generation.generation_after} "
            f"-> {node.catalog_generation}): roll back the later change first"
        )
    now = {str(s.index): s.state for s in slices}
    moves = []
    for index in sorted(set(now) | set(generation.slices_after), key=int):
        was, is_ = generation.slices_after.get(index), now.get(index)
        if was != is_:
            moves.append(f"slice {index} {_move_words(was, is_)}")
    if moves:
        return f"node {gid} cannot be rolled back: since the re-register {', '.join(moves)}"
    deploy = (
        Deployment.objects.filter(node=node, started_at__gte=generation.at, state__in=HANDS_STATES)
        .order_by("started_at")
        .first()
    )
    if deploy is not None:
        return (
            f"node {gid} cannot be rolled back: slice {deploy.slice_index} was deployed at "
            f"{deploy.started_at:%Y-%m-%d %H:%M:%S} UTC, after the re-register ({deploy.get_state_display().lower()})"
        )
    # The rollback deletes the slices the re-register added: one a buyer holds now was promised to them
    # (the re-register kept the slices held before it, so only an added one can be). Judged now, under
    # the node's lock, which hold_create takes too: a hold asked after the rollback finds no slice.
    hold = (
        live_holds(timezone.now())
        .filter(node=node, slice_index__in=generation.added_indices)
        .order_by("slice_index")
        .first()
    )
    if hold is not None:
        return (
            f"node {gid} cannot be rolled back: slice {hold.slice_index}, added by the re-register, is held for "
            f"{hold.marketplace_id!r} until {hold.expires_at:%Y-%m-%d %H:%M:%S} UTC (hold #{hold.pk}); release the "
            "hold or wait for it to end, then roll back"
        )
    return None


def _move_words(was: str | None, now: str | None) -> str:
    if was is None:
        return f"appeared ({now})"
    if now is None:
        return f"was removed (it was {was})"
    if now in Slice.OCCUPIED_STATES and was not in Slice.OCCUPIED_STATES:
        return f"was {now} ({was} -> {now})"
    if was in Slice.OCCUPIED_STATES and now not in Slice.OCCUPIED_STATES:
        return f"was released ({was} -> {now})"
    return f"changed hands ({was} -> {now})"


def node_rollback(*, generation: CatalogGeneration, by=None, source: str = "web") -> dict:
    """Put one node's catalog back as it was before the generation's re-register, in one transaction.

    RollbackRefused (nothing written) when anything changed hands since. Returns what it did.
    """
    with transaction.atomic():
        generation = CatalogGeneration.objects.select_for_update().get(pk=generation.pk)
        with node_writes([generation.node_id]):  # the generation's row first, then its node
            node = Node.objects.get(pk=generation.node_id)
            slices = list(Slice.objects.select_for_update().filter(node=node).order_by("index"))
            problem = changed_hands(generation, node=node, slices=slices)
            if problem:
                raise RollbackRefused(problem)
            added = [s.pk for s in slices if s.index in set(generation.added_indices)]
            if added:
                Deployment.objects.filter(slice_id__in=added).update(slice=None)
                # Only expired holds can be open here (changed_hands refused a live one): ended at their expiry.
                Hold.objects.filter(slice_id__in=added, ended_at__isnull=True).update(
                    ended_at=F("expires_at"), end=Hold.End.EXPIRED
                )
                Slice.objects.filter(pk__in=added).delete()
            new_generation = node.catalog_generation + 1
            Slice.objects.bulk_create(
                Slice(node=node, index=r["index"], cru=r["cru"], mru=r["mru"], sru=r["sru"], generation=new_generation)
                for r in generation.removed
            )
            for column in CARVE_COLUMNS:
                setattr(node, column, generation.before[column])
            node.catalog_generation = new_generation
            node.save(update_fields=[*CARVE_COLUMNS, "catalog_generation", "updated_at"])
            generation.rolled_back_at, generation.rolled_back_by = timezone.now(), by
            generation.save(update_fields=["rolled_back_at", "rolled_back_by"])
            kept = sum(1 for s in slices if s.is_occupied)
            done = {"node_id": node.grid_id, "removed": len(added), "restored": len(generation.removed), "kept": kept}
            audit_record(
                actor=by,
                source=source,
                action="job.node-rolled-back",
                node=node,
                job_id=generation.job_id,
                message=(
                    f"node {node.grid_id} rolled back to its catalog before job #{generation.job_id} "
                    f"(policy {generation.before['carved_policy_name']} v{generation.before['carved_policy_version']}): "
                    f"{len(added)} slice(s) removed, {len(generation.removed)} put back, {kept} occupied kept"
                ),
                detail=done,
            )
    return done


class RollbackNotKept(JobError):
    """The job kept no catalog of that node (it did not re-register it)."""


def run_node_rollback(*, job: Job, node_id: int, by=None, source: str = "web") -> dict:
    """Roll one node of a run back: the one way the API, the job page and the command do it.

    RollbackNotKept when the job kept no catalog of the node; RollbackRefused (nothing written) while the
    run is active, once the node was rolled back, or when anything changed hands since (node_rollback).
    """
    kept = CatalogGeneration.objects.filter(job=job, node__grid_id=node_id)
    # The one still to roll back, else the last one, whose rollback node_rollback refuses saying when it was.
    generation = kept.filter(rolled_back_at__isnull=True).order_by("-pk").first() or kept.order_by("-pk").first()
    if generation is None:
        raise RollbackNotKept(f"job #{job.pk} kept no catalog of node {node_id} to roll back")
    if job.is_active:
        raise RollbackRefused(f"job #{job.pk} is still {job.state}: stop it first, then roll its nodes back")
    return node_rollback(generation=generation, by=by, source=source)


def run_rollback(
    *,
    job: Job,
    by=None,
    source: str = "web",
    on_node: Callable[[int, int, int], None] | None = None,
    finished: Callable[[dict], None] | None = None,
) -> dict:
    """Roll back every node the job re-registered, each in its own transaction; the blocked ones are said why.

    Refused while the job is active. Returns (and keeps on its WaveRun, when it has one)
    {"rolled_back": [node ids], "blocked": {node id: why}}. `on_node(done, total, blocked)` is called
    after each node (a rollback job's progress); `finished(summary)` inside the last transaction, with the
    WaveRun's summary and the audit event (a rollback job's result lands with them, or neither does).
    """
    job.refresh_from_db()
    if job.is_active:
        raise RollbackRefused(f"job #{job.pk} is still {job.state}: stop it first, then roll it back")
    generations = list(
        CatalogGeneration.objects.filter(job=job, rolled_back_at__isnull=True).select_related("node").order_by("pk")
    )
    if not generations:
        raise RollbackRefused(f"job #{job.pk} has no re-registered node left to roll back")
    rolled, blocked = [], {}
    for done, generation in enumerate(generations, start=1):
        try:
            node_rollback(generation=generation, by=by, source=source)
            rolled.append(generation.node.grid_id)
        except RollbackRefused as exc:
            blocked[str(generation.node.grid_id)] = str(exc)
        if on_node is not None:
            on_node(done, len(generations), len(blocked))
    summary = {
        "at": timezone.now().isoformat(),
        "by": by.get_username() if by is not None else "the command line",
        "rolled_back": rolled,
        "blocked": blocked,
    }
    with transaction.atomic():
        WaveRun.objects.filter(job=job).update(rollback=summary)
        audit_record(
            actor=by,
            source=source,
            action="job.run-rolled-back",
            job=job,
            message=f"job #{job.pk} rolled back: {len(rolled)} node(s) rolled back, {len(blocked)} blocked",
            detail=summary,
        )
        if finished is not None:
            finished(summary)
    return summary


# --- the whole run's rollback as a job (a worker runs it: thousands of nodes outlast a request) -----------


def rollback_job_active(job: Job) -> Job | None:
    """The rollback job of this re-register's run that is queued or running, if one is."""
    return (
        Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK, parameters__job_id=job.pk, state__in=Job.ACTIVE_STATES)
        .select_related("node", "requested_by", "requested_token")
        .first()
    )


def run_rollback_request(*, job: Job, by=None, token=None, source: str = "web") -> JobRequest:
    """Ask a worker to roll the job's run back: the new rollback job, or the one already active for this run
    (created=False; never two at once, the constraint sees to it under a race).

    RollbackRefused (nothing written) while the job itself is active, or when none of its nodes is left
    to roll back.
    """
    job.refresh_from_db()
    if job.is_active:
        raise RollbackRefused(f"job #{job.pk} is still {job.state}: stop it first, then roll it back")
    active = rollback_job_active(job)
    if active is not None:
        return JobRequest(job=active, created=False)
    if not CatalogGeneration.objects.filter(job=job, rolled_back_at__isnull=True).exists():
        raise RollbackRefused(f"job #{job.pk} has no re-registered node left to roll back")
    return job_request(kind=Job.Kind.RUN_ROLLBACK, parameters={"job_id": job.pk}, by=by, token=token, source=source)


# A rollback job writes its progress at most this often (and after its last node): its heartbeat beats meanwhile.
PROGRESS_EVERY = 0.5


def run_rollback_job(*, job: Job, stop_on=()) -> RunRollbackResult:
    """The rollback job's runner: run_rollback over the named re-register job, its progress on the job's row.

    A redelivered or re-claimed job simply goes on: the nodes already rolled back are no longer kept,
    so no node is rolled back twice.
    """
    target = Job.objects.filter(pk=job.asked.job_id).first()
    if target is None:
        raise JobError(f"there is no job #{job.asked.job_id} to roll back")
    total = CatalogGeneration.objects.filter(job=target, rolled_back_at__isnull=True).count()
    job_progress(job=job, step=f"rolling back {total} node(s) of job #{target.pk}", done=0, total=total, failed=0)
    written = [time.monotonic()]

    def on_node(done: int, of: int, blocked: int) -> None:
        if done == of or time.monotonic() - written[0] >= PROGRESS_EVERY:
            job_progress(job=job, step=f"{done} of {of} nodes done", done=done, total=of, failed=blocked)
            written[0] = time.monotonic()

    result = RunRollbackResult(of_job=target.pk)

    def finished(summary: dict) -> None:
        result.nodes = len(summary["rolled_back"]) + len(summary["blocked"])
        result.rolled_back, result.blocked = summary["rolled_back"], summary["blocked"]
        result.words = (
            f"{len(result.rolled_back)} of {result.nodes} node(s) of job #{target.pk} rolled back, "
            f"{len(result.blocked)} left as they were"
        )
        job_succeed(job=job, result=result)

    with job_beating(job=job):
        run_rollback(job=target, by=job.requested_by, source=job.source, on_node=on_node, finished=finished)
    return result
