"""manage.py node_reregister NODE_ID [--dry-run] [--wait] [--timeout S] [--json]
manage.py node_reregister --stale [--farm-id N] [--dry-run] [--wait] [--timeout S] [--json]
    [--waves] [--canary-farm F | --canary-share PCT] [--batch-size N] [--budget N]
manage.py node_reregister --job J (--approve | --resume | --stop | --rollback [--rollback-node NODE_ID])

Queues the same job as the Re-register button (source "command"), so the worker does the work
and the audit trail shows who asked. Exit status: 0 queued / already active / succeeded;
1 the job failed; 2 nothing was queued (unknown node, bad arguments); 3 --wait gave up before
the job ended (it keeps running).
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from dashboard.capacity import format_size
from dashboard.catalogs.services.reregister.rollback import rollback_job_active, run_node_rollback, run_rollback
from dashboard.catalogs.services.reregister.waves import bulk_request, wave_run_resume, wave_run_stop
from dashboard.jobs.kinds import job_describe
from dashboard.jobs.results import BulkResult, ReregisterResult, SliceItem
from dashboard.jobs.services.jobs import JobError, JobRequest, job_request, job_wait
from dashboard.management.cli import (
    EXIT_REFUSED,
    EXIT_USAGE,
    ProductCommand,
    grid_id,
    refused,
    registered_node,
    timeout_argument,
)
from dashboard.models import Job, WaveRun

JOB_FAILED = EXIT_REFUSED
COULD_NOT_RUN = EXIT_USAGE
STILL_RUNNING = 3
POLL_EVERY = 0.5


class Command(ProductCommand):
    help = (
        "Re-carve a node's slice catalog with its effective policy (rented and deployed slices are kept as they "
        "are), or with --stale every node whose catalog is stale. Runs as a job on the Celery worker; --wait "
        "follows it and prints the result; --dry-run always waits for its plan and prints it."
    )
    exit_statuses = {
        0: "queued, already active or succeeded",
        EXIT_REFUSED: "the job failed, or could not be queued",
        EXIT_USAGE: "the command line is wrong (unknown node, clashing flags); nothing was queued",
        3: "--wait gave up; the job keeps running",
    }

    def add_arguments(self, parser):
        parser.add_argument("node_id", type=grid_id, nargs="?", help="the grid's node id")
        parser.add_argument("--stale", action="store_true", help="re-register every node whose catalog is stale")
        parser.add_argument("--farm-id", type=int, help="with --stale: only this farm's nodes")
        parser.add_argument(
            "--dry-run", action="store_true", help="compute and print the change (waiting for it); change nothing"
        )
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends and print its result")
        timeout_argument(parser, default=600.0)
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the outcome as JSON")
        waves = parser.add_argument_group("waves (with --stale; any of them asks for waves)")
        waves.add_argument("--waves", action="store_true", help="run in waves with the WAVES_* settings' defaults")
        waves.add_argument("--canary-farm", type=int, metavar="F", help="the canary is this farm's stale nodes")
        waves.add_argument(
            "--canary-share", type=int, metavar="PCT", help="the canary is PCT%% of the stale nodes (0: no canary)"
        )
        waves.add_argument("--batch-size", type=int, metavar="N", help="N nodes a batch after the canary")
        waves.add_argument(
            "--budget", type=int, metavar="N", help="pause when refusals and failures since it started pass N"
        )
        steer = parser.add_argument_group("steering a run in waves, or rolling a job back")
        steer.add_argument("--job", type=int, metavar="J", help="the bulk (or single) re-register job to act on")
        for flag, words in (
            ("--approve", "approve it (a second admin's approval is a signed-in admin's; the command line cannot)"),
            ("--resume", "resume it when paused"),
            ("--stop", "stop it after the batch in hand"),
            ("--rollback", "roll back every node it re-registered (or --rollback-node's) while nothing changed hands"),
        ):
            steer.add_argument(flag, action="store_true", help=words)
        steer.add_argument("--rollback-node", type=grid_id, metavar="NODE_ID", help="with --rollback: only this node")

    def handle(self, *args, node_id, stale, farm_id, dry_run, wait, timeout, as_json, **options):
        if options["job"] is not None:
            return self._steer(options, as_json=as_json)
        waves = {
            key: options[key]
            for key in ("canary_farm", "canary_share", "batch_size", "budget")
            if options[key] is not None
        } | ({"waves": True} if options["waves"] else {})
        _check_arguments(node_id=node_id, stale=stale, farm_id=farm_id, timeout=timeout, waves=waves)
        request = _request(node_id=node_id, stale=stale, farm_id=farm_id, dry_run=dry_run, waves=waves)
        job = request.job
        if not as_json:
            self._say_queued(request, dry_run=dry_run)
        # A dry run is asked for its plan: printing only "queued" would leave the person to look it up.
        if not (wait or dry_run):
            if as_json:
                self.stdout.write(json.dumps(_outcome(job, created=request.created), indent=2))
            return
        job = self._follow(job, timeout=timeout, as_json=as_json)
        self._say_finished(job, created=request.created, timeout=timeout, as_json=as_json)

    def _say_queued(self, request: JobRequest, *, dry_run: bool) -> None:
        job = request.job
        if request.created:
            self.stdout.write(f"queued: job #{job.pk} ({job_describe(job, numbered=False)})")
        else:
            self.stdout.write(f"already running: job #{job.pk} ({job_describe(job, numbered=False)}, {job.state})")
            if job.dry_run != dry_run:
                self.stdout.write("  note: that job's dry run setting differs from what you asked")

    def _say_finished(self, job: Job, *, created: bool, timeout: float, as_json: bool) -> None:
        """The followed job's outcome; the exit status says whether it ended, and how."""
        if job.is_active:
            if as_json:
                self.stdout.write(json.dumps(_outcome(job, created=created, status="timeout"), indent=2))
            raise CommandError(
                f"job #{job.pk} is still {job.state} after {timeout:g} s ({job.step or 'no step yet'}); "
                "it keeps running: see the Jobs page or run this command again with --wait",
                returncode=STILL_RUNNING,
            )
        if as_json:
            self.stdout.write(json.dumps(_outcome(job, created=created), indent=2))
        else:
            self.stdout.write(_result_text(job))
        if job.state == Job.State.FAILED:
            raise CommandError(f"job #{job.pk} failed: {job.error}", returncode=JOB_FAILED)

    def _steer(self, options, *, as_json: bool) -> None:
        """--job J with one action: the same services as the job page's buttons, audited as the command line."""
        actions = [name for name in ("approve", "resume", "stop", "rollback") if options[name]]
        if len(actions) != 1:
            raise CommandError(
                "--job takes exactly one of --approve, --resume, --stop, --rollback", returncode=COULD_NOT_RUN
            )
        job = Job.objects.filter(pk=options["job"]).first()
        if job is None:
            raise CommandError(f"there is no job #{options['job']}", returncode=COULD_NOT_RUN)
        action = actions[0]
        try:
            if action == "rollback":
                said = _rollback(job, node_id=options["rollback_node"])
            else:
                wave = WaveRun.objects.filter(job=job).first()
                if wave is None:
                    raise JobError(f"job #{job.pk} does not run in waves")
                if action == "approve":
                    raise JobError("a second admin approves a run on its job page (the command line is nobody)")
                {"resume": wave_run_resume, "stop": wave_run_stop}[action](wave=wave, by=None, source="command")
                said = {"resume": "resumed", "stop": "stopping after the batch in hand"}[action]
        except JobError as exc:
            raise refused(str(exc)) from None
        self.stdout.write(
            json.dumps({"job": job.pk, "action": action, "said": said}) if as_json else f"job #{job.pk}: {said}"
        )

    def _follow(self, job: Job, *, timeout: float, as_json: bool) -> Job:
        def show(row: Job) -> None:
            if not as_json and row.step:
                progress = f" ({row.progress_done}/{row.progress_total})" if row.progress_total else ""
                self.stdout.write(f"  {row.step}{progress}")

        try:
            return job_wait(job_id=job.pk, timeout=timeout, poll=POLL_EVERY, on_step=show)
        except KeyboardInterrupt:
            raise CommandError(f"stopped waiting; job #{job.pk} keeps running", returncode=STILL_RUNNING) from None


def _check_arguments(*, node_id: int | None, stale: bool, farm_id: int | None, timeout: float, waves: dict) -> None:
    """Refuse a command line that clashes, before anything is queued."""
    if waves and not stale:
        raise CommandError("the waves flags only go with --stale", returncode=COULD_NOT_RUN)
    if "canary_farm" in waves and "canary_share" in waves:
        raise CommandError("give --canary-farm or --canary-share, not both", returncode=COULD_NOT_RUN)
    if stale == (node_id is not None):
        raise CommandError("give either a NODE_ID or --stale", returncode=COULD_NOT_RUN)
    if farm_id is not None and not stale:
        raise CommandError("--farm-id only goes with --stale", returncode=COULD_NOT_RUN)
    if farm_id is not None and farm_id < 0:
        raise CommandError(f"--farm-id must be zero or more, not {farm_id}", returncode=COULD_NOT_RUN)
    if not timeout > 0:
        raise CommandError(f"--timeout must be more than 0 seconds, not {timeout}", returncode=COULD_NOT_RUN)


def _request(*, node_id: int | None, stale: bool, farm_id: int | None, dry_run: bool, waves: dict) -> JobRequest:
    """The bulk (--stale) or single re-register job asked for: queued, or the one already active."""
    try:
        if stale:
            return bulk_request(farm_id=farm_id, source=Job.Source.COMMAND, dry_run=dry_run, parameters=waves or None)
        node = registered_node(node_id)
        return job_request(kind=Job.Kind.REREGISTER, node=node, source=Job.Source.COMMAND, dry_run=dry_run)
    except JobError as exc:
        raise refused(str(exc)) from None


def _rollback(job: Job, *, node_id: int | None) -> str:
    if node_id is None:
        # The command rolls back in its own process (no request deadline here), but never beside a rollback job.
        if (active := rollback_job_active(job)) is not None:
            raise JobError(f"job #{job.pk} is being rolled back by job #{active.pk} ({active.state}); wait for it")
        summary = run_rollback(job=job, by=None, source="command")
        blocked = "".join(f"\n  {why}" for why in summary["blocked"].values())
        return f"{len(summary['rolled_back'])} node(s) rolled back, {len(summary['blocked'])} blocked{blocked}"
    done = run_node_rollback(job=job, node_id=node_id, by=None, source="command")
    return f"node {node_id} rolled back: {done['removed']} slice(s) removed, {done['restored']} put back, {done['kept']} occupied kept"


def _outcome(job: Job, *, created: bool, status: str | None = None) -> dict:
    outcome = {
        "status": status or job.state,
        "job": job.pk,
        "created": created,
        "kind": job.kind,
        "node_id": job.node.grid_id if job.node_id else None,
        "farm_id": job.farm_id,
        "dry_run": job.dry_run,
        "step": job.step,
        "error": job.error or None,
    }
    # The result's own keys (before, after, removed, added, kept, notes, failures...) at the top level.
    return outcome | {k: v for k, v in (job.result or {}).items() if k not in outcome}


def _slice_words(item: SliceItem) -> str:
    return f"slice {item.index}: {format_size(item.mru)} / {format_size(item.sru)} ({item.state})"


def _result_text(job: Job) -> str:
    """The finished job in lines, from its typed result (dashboard.jobs.results)."""
    took = f" in {job.duration.total_seconds():.1f} s" if job.duration else ""
    lines = [f"job #{job.pk}: {job_describe(job, numbered=False)} {job.state}{took}"]
    if job.state == Job.State.FAILED:
        lines.append(f"  reason: {job.error}")
    result = job.outcome
    if result is None:
        return "\n".join(lines)
    lines.append(f"  {result.sentence()}")
    if isinstance(result, ReregisterResult):
        for label, f in (("before", result.before), ("would be" if result.dry_run else "after", result.after)):
            lines.append(
                f"  {label + ':':<10} {f.slices} slices ({f.free} free, {f.deployable} deployable, "
                f"{'?' if f.placeable is None else f.placeable} placeable now, {f.phantom} phantom)"
            )
        for key in ("removed", "added", "kept"):
            items = getattr(result, key)
            lines.append(f"  {key} ({len(items)}){':' if items else ''}")
            lines.extend(f"    {_slice_words(item)}" for item in items)
    if isinstance(result, BulkResult):
        lines.extend(f"  node {f.node_id} failed: {f.error}" for f in result.failures)
        if result.failures_more:
            lines.append(f"  and {result.failures_more} more failed node(s), not listed")
    lines.extend(f"  note: {note}" for note in result.notes)
    return "\n".join(lines)
