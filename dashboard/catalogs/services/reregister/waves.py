"""Re-registers in waves: a canary first, then batches, pausing itself past a budget; an admin steers it.

A bulk re-register asked with waves (job parameters, dashboard.jobs.kinds.bulk_reregister) has a
WaveRun beside its job. The bulk run (catalogs.services.reregister.bulk) takes its nodes in the order
`wave_order` gives and calls `waves_between` after every batch it commits:

- the refusals (deployments failed or refused on the run's re-carved nodes since it started) and
  the failures (nodes it could not re-register) are counted; past the budget (counted again from
  each resume) the run pauses itself;
- while paused the worker waits, beating the job's heartbeat, for an admin to resume or stop it
  (at most WAVES_PAUSE_LIMIT seconds, then it stops itself);
- Stop ends the run after the batch in hand: every batch is one transaction, so each node is
  entirely old or entirely new, and the nodes not reached are untouched (still stale).

A run over BULK_APPROVAL_OVER stale nodes is queued without its message until a second admin (not
the one who asked) approves it (`wave_run_approve`). Every admin action is audited; the state moves
by conditional updates, so two clicks and the worker never undo each other.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.catalogs.services.reregister.stale import stale_node_pks
from dashboard.catalogs.services.waves_ended import wave_entries_ended
from dashboard.jobs.services.jobs import JobError, JobRequest, job_enqueue, job_progress, job_request
from dashboard.models import CatalogGeneration, Deployment, Job, Node, WaveRun

log = logging.getLogger(__name__)

# How often a paused run looks at its WaveRun (and beats the job's heartbeat).
PAUSED_POLL = 0.5
REFUSED_STATES = (Deployment.State.FAILED, Deployment.State.REFUSED)


class WaveRefused(JobError):
    """An admin action on a wave run that cannot be done now (said why)."""


# --- the order (pure) -----------------------------------------------------------------------


def wave_order(
    stale: list[int],
    farm_of: dict[int, int],
    *,
    canary_farm: int | None,
    canary_share: int,
    batch_size: int,
) -> list[tuple[str, list[int]]]:
    """The waves, in order: [(label, node pks)]; the canary first, then batches of batch_size.

    The canary is the stale nodes of `canary_farm` when one is named (none stale there: no canary),
    else `canary_share` percent of the stale nodes (at least one), taken evenly across the list so a
    canary is not one farm's nodes only; 0 percent is no canary.
    """
    canary: list[int] = []
    if canary_farm is not None:
        canary = [pk for pk in stale if farm_of.get(pk) == canary_farm]
        label = f"canary: farm {canary_farm}"
    elif canary_share > 0 and stale:
        count = max(1, math.ceil(len(stale) * canary_share / 100))
        canary = [stale[(i * len(stale)) // count] for i in range(count)]
        label = f"canary: {canary_share}% of the stale nodes"
    taken = set(canary)
    rest = [pk for pk in stale if pk not in taken]
    waves = [(label, canary)] if canary else []
    for number, start in enumerate(range(0, len(rest), batch_size), start=1):
        waves.append((f"batch {number}", rest[start : start + batch_size]))
    return waves


# --- requesting -----------------------------------------------------------------------------


def bulk_request(
    *, farm_id: int | None = None, by=None, source: str = "web", dry_run: bool = False, parameters: dict | None = None
) -> JobRequest:
    """Ask for a bulk re-register: with waves when the parameters say so, held for a second admin's
    approval when it would take more than BULK_APPROVAL_OVER stale nodes (never a dry run).

    The job, its WaveRun and the audit event are one transaction; a held job's message is sent only
    when it is approved. Bad parameters raise JobError and write nothing.
    """
    kind = Job.Kind.BULK_REREGISTER
    over = settings.BULK_APPROVAL_OVER
    stale = len(stale_node_pks(farm_id=farm_id)) if over and not dry_run else 0
    held = bool(over) and stale > over
    with transaction.atomic():
        requested = job_request(
            kind=kind,
            farm_id=farm_id,
            by=by,
            source=source,
            dry_run=dry_run,
            parameters=parameters,
            enqueue=not held,
        )
        job = requested.job
        if not requested.created:
            return requested
        asked = job.asked
        if (asked.in_waves or held) and not dry_run:
            wave = WaveRun.objects.create(
                job=job,
                state=WaveRun.State.AWAITING_APPROVAL if held else WaveRun.State.RUNNING,
                canary_farm=asked.canary_farm,
                canary_share=asked.canary_share if asked.canary_share is not None else settings.WAVES_CANARY_SHARE,
                batch_size=asked.batch_size or settings.WAVES_BATCH,
                budget=asked.budget if asked.budget is not None else settings.WAVES_BUDGET,
                stale_at_request=stale,
            )
            if not asked.in_waves:  # held only: it runs as one plain bulk run once approved
                wave.canary_share, wave.budget = 0, 1_000_000
                wave.save(update_fields=["canary_share", "budget"])
            if held:
                job.step = f"waiting for a second admin's approval ({stale} stale nodes, over {over})"
                job.save(update_fields=["step"])
    return requested


# --- what the run calls between its batches ---------------------------------------------------


def wave_run_of(job: Job) -> WaveRun | None:
    return WaveRun.objects.filter(job=job).first()


def waves_started(wave: WaveRun, waves: list[tuple[str, list[int]]]) -> None:
    wave.waves = [
        {"label": label, "nodes": len(pks), "done": 0, "failed": 0, "state": "pending"} for label, pks in waves
    ]
    WaveRun.objects.filter(pk=wave.pk).update(waves=wave.waves)


def waves_between(
    *,
    job: Job,
    wave: WaveRun,
    number: int,
    done: int,
    failed: int,
    finished: bool,
    failures: int,
    paused: Callable[[WaveRun], None] | None = None,
) -> bool:
    """After a batch of wave `number` was committed: count, pause past the budget, wait; False: stop now.

    `done` and `failed` are this wave's nodes so far, `finished` whether the wave is over, and
    `failures` the run's failed nodes so far. `paused` (BulkHooks.paused) is called in place of each
    wait while paused: the seam a test's admin acts through.
    """
    entry = wave.waves[number]
    entry.update(done=done, failed=failed, state="done" if finished else "running")
    refusals = (
        Deployment.objects.filter(
            node__catalog_generations__job=job, started_at__gte=job.started_at, state__in=REFUSED_STATES
        )
        .distinct()
        .count()
    )
    WaveRun.objects.filter(pk=wave.pk).update(waves=wave.waves, refusals=refusals, failures=failures)
    wave.refresh_from_db()
    if wave.state == WaveRun.State.STOPPING:
        return False
    spent = wave.spent - wave.spent_at_resume
    if spent > wave.budget:
        reason = (
            f"paused itself: {wave.refusals} refusal(s) and {wave.failures} failure(s) since it started"
            + (f" ({spent} since it was resumed)" if wave.spent_at_resume else "")
            + f", over its budget of {wave.budget}; resume or stop it"
        )
        if WaveRun.objects.filter(pk=wave.pk, state=WaveRun.State.RUNNING).update(
            state=WaveRun.State.PAUSED, paused_reason=reason, paused_at=timezone.now()
        ):
            audit_record(source=job.source, action="waves.paused", job=job, message=f"job #{job.pk} {reason}")
        return _paused_wait(job=job, wave=wave, reason=reason, paused=paused)
    return True


def _paused_wait(*, job: Job, wave: WaveRun, reason: str, paused: Callable[[WaveRun], None] | None) -> bool:
    """Wait while paused, beating the heartbeat; True when resumed, False when stopped (or past the limit)."""
    step = f"paused after {sum(w['done'] for w in wave.waves)} nodes: {reason}"
    waited_from = time.monotonic()
    while True:
        wave.refresh_from_db()
        if wave.state == WaveRun.State.RUNNING:
            job_progress(job=job, step="resumed")
            return True
        if wave.state != WaveRun.State.PAUSED:
            return False
        if time.monotonic() - waited_from > settings.WAVES_PAUSE_LIMIT:
            words = f"nobody resumed it within {settings.WAVES_PAUSE_LIMIT} s: it stopped itself"
            if WaveRun.objects.filter(pk=wave.pk, state=WaveRun.State.PAUSED).update(
                state=WaveRun.State.STOPPING, paused_reason=f"{reason}; {words}"
            ):
                audit_record(source=job.source, action="waves.stopped", job=job, message=f"job #{job.pk}: {words}")
            return False
        job_progress(job=job, step=step)
        if paused is not None:
            paused(wave)
        else:
            time.sleep(PAUSED_POLL)


def waves_run(run, stale: list[int]) -> bool:
    """A bulk run (catalogs.services.reregister.bulk's _BulkRun) in waves: each wave in batches of at most BULK_CHUNK, the
    budget and the admin's Stop looked at after every committed batch; True when it stopped early."""
    wave = wave_run_of(run.job)
    if wave.state in (WaveRun.State.STOPPING, WaveRun.State.STOPPED):
        return True  # stopped before a worker died and the run was taken over: nothing more to do
    farm_of = (
        dict(Node.objects.filter(pk__in=stale).values_list("pk", "farm_id")) if wave.canary_farm is not None else {}
    )
    waves = wave_order(
        stale, farm_of, canary_farm=wave.canary_farm, canary_share=wave.canary_share, batch_size=wave.batch_size
    )
    waves_started(wave, waves)
    for number, (_label, pks) in enumerate(waves):
        failed_before = run.result.failed
        for start in range(0, len(pks), run.limits.chunk):
            run.batch(pks[start : start + run.limits.chunk])
            done = min(start + run.limits.chunk, len(pks))
            if run.hooks.batch_done:
                run.hooks.batch_done(run.done)
            go_on = waves_between(
                job=run.job,
                wave=wave,
                number=number,
                done=done,
                failed=run.result.failed - failed_before,
                finished=done == len(pks),
                failures=run.result.failed,
                paused=run.hooks.paused,
            )
            if not go_on:
                return True
    return False


def waves_finished(*, job: Job, stopped: bool) -> str | None:
    """The run's last word on its WaveRun (inside the job's last transaction); a note when it stopped."""
    wave = wave_run_of(job)
    if wave is None:
        return None
    if not stopped:
        WaveRun.objects.filter(pk=wave.pk).update(state=WaveRun.State.DONE)
        return None
    WaveRun.objects.filter(pk=wave.pk).update(state=WaveRun.State.STOPPED, waves=wave_entries_ended(wave.waves))
    who = wave.stopped_by.get_username() if wave.stopped_by_id else "itself"
    left = sum(w["nodes"] - w["done"] for w in wave.waves)
    return f"stopped by {who} after the batch in hand; {left} node(s) not reached are untouched (still stale)"


# --- what an admin does ----------------------------------------------------------------------


def wave_run_resume(*, wave: WaveRun, by, source: str = "web") -> None:
    with transaction.atomic():
        locked = WaveRun.objects.select_for_update().get(pk=wave.pk)
        if locked.state != WaveRun.State.PAUSED:
            raise WaveRefused(f"job #{locked.job_id} is not paused ({locked.get_state_display().lower()})")
        locked.state, locked.spent_at_resume = WaveRun.State.RUNNING, locked.spent
        locked.save(update_fields=["state", "spent_at_resume", "updated_at"])
        _audit(locked, by=by, source=source, action="waves.resumed", words=f"resumed after {locked.spent} spent")


def wave_run_stop(*, wave: WaveRun, by, source: str = "web") -> None:
    """Stop after the batch in hand (a run waiting for approval is refused: it never started)."""
    with transaction.atomic():
        locked = WaveRun.objects.select_for_update().select_related("job").get(pk=wave.pk)
        if locked.state == WaveRun.State.AWAITING_APPROVAL:
            _close_unapproved(locked, by=by, source=source)
            return
        if locked.state not in (WaveRun.State.RUNNING, WaveRun.State.PAUSED):
            raise WaveRefused(f"job #{locked.job_id} is not running ({locked.get_state_display().lower()})")
        locked.state, locked.stopped_by = WaveRun.State.STOPPING, by
        locked.save(update_fields=["state", "stopped_by", "updated_at"])
        _audit(locked, by=by, source=source, action="waves.stopped", words="asked to stop after the batch in hand")


def wave_run_approve(*, wave: WaveRun, by, source: str = "web") -> None:
    """A second admin's approval: not the one who asked; the job's message is sent on commit."""
    with transaction.atomic():
        locked = WaveRun.objects.select_for_update().select_related("job").get(pk=wave.pk)
        if locked.state != WaveRun.State.AWAITING_APPROVAL:
            raise WaveRefused(f"job #{locked.job_id} is not waiting for an approval")
        if by is None:
            raise WaveRefused("a run is approved by a signed-in admin")
        if locked.job.requested_by_id == by.pk:
            raise WaveRefused("a second admin must approve it: not the one who asked for it")
        locked.state, locked.approved_by, locked.approved_at = WaveRun.State.RUNNING, by, timezone.now()
        locked.save(update_fields=["state", "approved_by", "approved_at", "updated_at"])
        Job.objects.filter(pk=locked.job_id, state=Job.State.QUEUED).update(step="approved; waiting for a worker")
        _audit(locked, by=by, source=source, action="waves.approved", words="approved")
        transaction.on_commit(partial(job_enqueue, locked.job_id))


def _close_unapproved(wave: WaveRun, *, by, source: str) -> None:
    from dashboard.jobs.services.jobs import job_close

    job_close(
        wave.job,
        state=Job.State.FAILED,
        error=f"stopped before it started by {by.get_username() if by else 'the system'}: it was never approved",
        from_states=(Job.State.QUEUED,),
    )
    WaveRun.objects.filter(pk=wave.pk).update(state=WaveRun.State.STOPPED, stopped_by=by)
    _audit(wave, by=by, source=source, action="waves.stopped", words="stopped before it was approved")


def _audit(wave: WaveRun, *, by, source: str, action: str, words: str) -> None:
    who = by.get_username() if by is not None else "the command line"
    audit_record(
        actor=by,
        source=source,
        action=action,
        job_id=wave.job_id,
        message=f"bulk re-register job #{wave.job_id}: {words} by {who}",
        detail={"state": wave.state, "refusals": wave.refusals, "failures": wave.failures, "budget": wave.budget},
    )


def generations_of(job: Job):
    return CatalogGeneration.objects.filter(job=job)
