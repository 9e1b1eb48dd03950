"""manage.py node_reregister NODE_ID [--dry-run] [--wait] [--timeout S] [--json]
manage.py node_reregister --stale [--farm-id N] [--dry-run] [--wait] [--timeout S] [--json]

Queues the same job as the Re-register button (source "command"), so the worker does the work
and the audit trail shows who asked. Exit status: 0 queued / already active / succeeded;
1 the job failed; 2 nothing was queued (unknown node, bad arguments); 3 --wait gave up before
the job ended (it keeps running).
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from dashboard.capacity import format_size
from dashboard.job_kinds import job_describe
from dashboard.job_results import BulkResult, ReregisterResult, SliceItem
from dashboard.management.cli import EXIT_REFUSED, EXIT_USAGE, ProductCommand, grid_id, not_registered, refused
from dashboard.models import Job, Node
from dashboard.services.jobs import JobError, job_request, job_wait

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
        parser.add_argument(
            "--timeout",
            type=float,
            default=600.0,
            metavar="S",
            help="with --wait: give up after S seconds (default 600)",
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the outcome as JSON")

    def handle(self, *args, node_id, stale, farm_id, dry_run, wait, timeout, as_json, **options):
        if stale == (node_id is not None):
            raise CommandError("give either a NODE_ID or --stale", returncode=COULD_NOT_RUN)
        if farm_id is not None and not stale:
            raise CommandError("--farm-id only goes with --stale", returncode=COULD_NOT_RUN)
        if farm_id is not None and farm_id < 0:
            raise CommandError(f"--farm-id must be zero or more, not {farm_id}", returncode=COULD_NOT_RUN)
        if not timeout > 0:
            raise CommandError(f"--timeout must be more than 0 seconds, not {timeout}", returncode=COULD_NOT_RUN)

        try:
            if stale:
                request = job_request(
                    kind=Job.Kind.BULK_REREGISTER, farm_id=farm_id, source=Job.Source.COMMAND, dry_run=dry_run
                )
            else:
                node = Node.objects.filter(grid_id=node_id).first()
                if node is None:
                    raise not_registered(node_id)
                request = job_request(kind=Job.Kind.REREGISTER, node=node, source=Job.Source.COMMAND, dry_run=dry_run)
        except JobError as exc:
            raise refused(str(exc)) from None

        job = request.job
        # A dry run is asked for its plan: printing only "queued" would leave the person to look it up.
        wait = wait or dry_run
        if not as_json:
            if request.created:
                self.stdout.write(f"queued: job #{job.pk} ({job_describe(job, numbered=False)})")
            else:
                self.stdout.write(f"already running: job #{job.pk} ({job_describe(job, numbered=False)}, {job.state})")
                if job.dry_run != dry_run:
                    self.stdout.write("  note: that job's dry run setting differs from what you asked")
        if not wait:
            if as_json:
                self.stdout.write(json.dumps(_outcome(job, created=request.created), indent=2))
            return

        job = self._follow(job, timeout=timeout, as_json=as_json)
        if job.is_active:
            if as_json:
                self.stdout.write(json.dumps(_outcome(job, created=request.created, status="timeout"), indent=2))
            raise CommandError(
                f"job #{job.pk} is still {job.state} after {timeout:g} s ({job.step or 'no step yet'}); "
                "it keeps running: see the Jobs page or run this command again with --wait",
                returncode=STILL_RUNNING,
            )
        if as_json:
            self.stdout.write(json.dumps(_outcome(job, created=request.created), indent=2))
        else:
            self.stdout.write(_result_text(job))
        if job.state == Job.State.FAILED:
            raise CommandError(f"job #{job.pk} failed: {job.error}", returncode=JOB_FAILED)

    def _follow(self, job: Job, *, timeout: float, as_json: bool) -> Job:
        def show(row: Job) -> None:
            if not as_json and row.step:
                progress = f" ({row.progress_done}/{row.progress_total})" if row.progress_total else ""
                self.stdout.write(f"  {row.step}{progress}")

        try:
            return job_wait(job_id=job.pk, timeout=timeout, poll=POLL_EVERY, on_step=show)
        except KeyboardInterrupt:
            raise CommandError(f"stopped waiting; job #{job.pk} keeps running", returncode=STILL_RUNNING) from None


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
    """The finished job in lines, from its typed result (dashboard.job_results)."""
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
