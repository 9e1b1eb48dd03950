"""Each node's previous catalog generation, kept by a re-register, and the rollback that puts it back.

`generations_record` runs inside the re-register's own transaction, after the new catalog is
written: one CatalogGeneration per node with its carve columns and slices before, what was removed
and added, and every slice's state right after. A rollback (`node_rollback`, or `run_rollback` for
every node of a job) is allowed while none of the node's slices changed hands since: a slice rented,
deployed or released since the re-register (or a deploy started on one, or an added slice under a
live hold, promised to a buyer) blocks that node's rollback, said plainly. It removes only the slices the re-register added (free by that check) and puts back
the free slices it removed, at their indices and sizes; occupied slices are never touched.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from dashboard.models import AuditEvent, CatalogGeneration, Deployment, Hold, Job, Node, Slice, WaveRun
from dashboard.selectors.holds import live_holds
from dashboard.services.figures import figures_refresh
from dashboard.services.jobs import JobError

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
        node = Node.objects.select_for_update().get(pk=generation.node_id)
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
        figures_refresh([node.pk], locked=True)
        generation.rolled_back_at, generation.rolled_back_by = timezone.now(), by
        generation.save(update_fields=["rolled_back_at", "rolled_back_by"])
        kept = sum(1 for s in slices if s.is_occupied)
        done = {"node_id": node.grid_id, "removed": len(added), "restored": len(generation.removed), "kept": kept}
        AuditEvent.objects.create(
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


def run_rollback(*, job: Job, by=None, source: str = "web") -> dict:
    """Roll back every node the job re-registered, each in its own transaction; the blocked ones are said why.

    Refused while the job is active. Returns (and keeps on its WaveRun, when it has one)
    {"rolled_back": [node ids], "blocked": {node id: why}}.
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
    for generation in generations:
        try:
            node_rollback(generation=generation, by=by, source=source)
            rolled.append(generation.node.grid_id)
        except RollbackRefused as exc:
            blocked[str(generation.node.grid_id)] = str(exc)
    summary = {
        "at": timezone.now().isoformat(),
        "by": by.get_username() if by is not None else "the command line",
        "rolled_back": rolled,
        "blocked": blocked,
    }
    WaveRun.objects.filter(job=job).update(rollback=summary)
    AuditEvent.objects.create(
        actor=by,
        source=source,
        action="job.run-rolled-back",
        job=job,
        message=f"job #{job.pk} rolled back: {len(rolled)} node(s) rolled back, {len(blocked)} blocked",
        detail=summary,
    )
    return summary
