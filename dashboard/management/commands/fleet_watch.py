"""manage.py fleet_watch [--here | --wait [--timeout S]] [--json]

Asks for the same fleet watch the beat asks for every FLEET_WATCH_EVERY seconds (source "command"):
every registered node read again from the grid, a page at a time. By default the job is queued for
the worker; --wait follows it; --here claims and runs it in this process (no worker needed). A watch
still running makes this one a skipped job that says so. Exit status: 0 queued, skipped or
succeeded; 1 the job failed; 2 nothing was asked (bad arguments); 3 --wait gave up (it keeps running).
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from dashboard.jobs.kinds import job_describe
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_wait
from dashboard.management.cli import EXIT_REFUSED, EXIT_USAGE, ProductCommand
from dashboard.models import Job
from dashboard.nodes.services.watch import fleet_watch_request

JOB_FAILED = EXIT_REFUSED
COULD_NOT_RUN = EXIT_USAGE
STILL_RUNNING = 3


class Command(ProductCommand):
    help = (
        "Read every registered node from the grid again (the fleet watch). Queued for the worker by default; "
        "--here runs it in this process, --wait follows the queued job."
    )
    exit_statuses = {
        0: "queued, skipped or succeeded",
        EXIT_REFUSED: "the watch failed",
        EXIT_USAGE: "the command line is wrong (nothing was done)",
        3: "--wait gave up; the job keeps running",
    }

    def figures_stored_here(self, options: dict) -> bool:
        return bool(options.get("here"))

    def add_arguments(self, parser):
        parser.add_argument("--here", action="store_true", help="run the watch in this process, now")
        parser.add_argument("--wait", action="store_true", help="follow the queued job until it ends")
        parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="with --wait (default 600)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the outcome as JSON")

    def handle(self, *args, here, wait, timeout, as_json, **options):
        if here and wait:
            raise CommandError("--here already waits: give one of --here and --wait", returncode=COULD_NOT_RUN)
        if not timeout > 0:
            raise CommandError(f"--timeout must be more than 0 seconds, not {timeout}", returncode=COULD_NOT_RUN)
        job = fleet_watch_request(source=Job.Source.COMMAND)
        if job.is_active and here:
            claimed = job_claim(job_id=job.pk)
            if claimed is not None:
                job_execute(job=claimed)
            job = job_wait(job_id=job.pk, timeout=timeout)
        elif job.is_active and wait:
            job = job_wait(job_id=job.pk, timeout=timeout)
        job.refresh_from_db()
        outcome = job.outcome
        if as_json:
            self.stdout.write(
                json.dumps(
                    {"job": job.pk, "state": job.state, "error": job.error, "result": job.result}, sort_keys=True
                )
            )
        else:
            words = outcome.sentence() if outcome is not None else job.error or job.step
            self.stdout.write(f"{job_describe(job)}: {job.state}: {words}")
        if job.state == Job.State.FAILED:
            raise CommandError(job.error or "the fleet watch failed", returncode=JOB_FAILED)
        if job.is_active and (wait or here):
            raise CommandError(f"job #{job.pk} is still {job.state}; it keeps running", returncode=STILL_RUNNING)
