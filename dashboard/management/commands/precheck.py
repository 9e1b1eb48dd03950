"""manage.py precheck NODE_ID [--json]: which free slices can really be placed now.

manage.py precheck NODE_ID --job [--wait] [--timeout S] [--json]: the same check as a job on the
Celery worker (audited, on the Jobs page, like the node page's Precheck button). Exit status with
--job: 0 queued, already active or succeeded; 1 the job failed; 3 --wait gave up (it keeps running).
"""

import json

from django.core.management.base import CommandError

from dashboard.capacity import format_size
from dashboard.catalogs.services.precheck import PrecheckReport, precheck_run
from dashboard.grid.types import GridError
from dashboard.jobs.kinds import job_describe
from dashboard.jobs.results import PrecheckResult
from dashboard.jobs.services.jobs import JobError, job_request, job_wait
from dashboard.management.cli import (
    EXIT_REFUSED,
    ProductCommand,
    grid_id,
    refused,
    registered_node,
    timeout_argument,
    usage_error,
)
from dashboard.models import Job, Node

JOB_FAILED = EXIT_REFUSED
STILL_RUNNING = 3


class Command(ProductCommand):
    help = (
        "Read a node's live capacity from the grid and say, for each free slice, whether it can be placed now "
        "(with the numbers). Stores the node's used capacity and placeable/phantom counts; never changes the catalog."
    )

    exit_statuses = ProductCommand.exit_statuses | {3: "--wait gave up; the job keeps running"}

    def figures_stored_here(self, options: dict) -> bool:
        return not options.get("job")  # a job's figures are the worker's, stored under its settings

    def add_arguments(self, parser):
        parser.add_argument("node_id", type=grid_id, help="the grid's node id")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON")
        parser.add_argument(
            "--job", action="store_true", help="run it as a job on the worker (audited, on the Jobs page)"
        )
        parser.add_argument("--wait", action="store_true", help="with --job: wait for the job and print its report")
        timeout_argument(parser, default=120.0)

    def handle(self, *args, node_id, as_json, job, wait, timeout, **options):
        if wait and not job:
            raise usage_error("--wait only goes with --job (without --job the check runs here and now)")
        if not timeout > 0:
            raise usage_error(f"--timeout must be more than 0 seconds, not {timeout}")
        node = registered_node(node_id)
        if job:
            return self._as_job(node, wait=wait, timeout=timeout, as_json=as_json)
        try:
            report = precheck_run(node=node)
        except GridError as exc:
            raise refused(f"grid: {exc} (nothing was recorded)") from None
        self.stdout.write(json.dumps(report.as_dict(), indent=2) if as_json else report_text(report))

    def _as_job(self, node: Node, *, wait: bool, timeout: float, as_json: bool) -> None:
        try:
            request = job_request(kind=Job.Kind.PRECHECK, node=node, source=Job.Source.COMMAND)
        except JobError as exc:
            raise refused(str(exc)) from None
        queued = request.job
        if not as_json:
            verb = "queued" if request.created else "already running"
            kind = "" if queued.kind == Job.Kind.PRECHECK else f", a {queued.get_kind_display().lower()}"
            self.stdout.write(f"{verb}: job #{queued.pk} (node {node.grid_id}{kind}, {queued.state})")
        finished = job_wait(job_id=queued.pk, timeout=timeout) if wait else queued
        outcome = {
            "status": "timeout" if wait and finished.is_active else finished.state,
            "job": finished.pk,
            "created": request.created,
            "kind": finished.kind,
            "node_id": node.grid_id,
            "error": finished.error or None,
        }
        if finished.kind == Job.Kind.PRECHECK:
            outcome |= {k: v for k, v in finished.result.items() if k not in outcome}
        if as_json:
            self.stdout.write(json.dumps(outcome, indent=2))
        elif wait and not finished.is_active:
            self.stdout.write(job_report_text(finished))
        if wait and finished.is_active:
            raise CommandError(
                f"job #{finished.pk} is still {finished.state} after {timeout:g} s; it keeps running",
                returncode=STILL_RUNNING,
            )
        if finished.state == Job.State.FAILED:
            raise CommandError(f"job #{finished.pk} failed: {finished.error}", returncode=JOB_FAILED)


def job_report_text(job: Job) -> str:
    """A finished precheck job's typed result (job_results.PrecheckResult) in the same words as report_text."""
    if job.state == Job.State.FAILED:
        return f"job #{job.pk}: failed: {job.error}"
    r = job.outcome
    if not isinstance(r, PrecheckResult):
        return f"job #{job.pk}: {job_describe(job, numbered=False)} {job.state}"
    lines = [
        f"job #{job.pk}: node {r.node_id} ({r.status}), policy {r.policy.name} v{r.policy.version}",
        f"  free slices: {r.free_slices}   placeable now: {r.placeable_now}   phantom slices: {len(r.phantom_slices)}",
    ]
    if r.away:  # one line, not one PHANTOM row per slice: the node is the reason
        lines.append(f"  {r.away_words}")
    else:
        for v in r.verdicts:
            lines.append(f"  slice {v.slice:>3} {'ok     ' if v.fits else 'PHANTOM'} {v.words}")
    lines.append(r.sentence())
    return "\n".join(lines)


def report_text(report: PrecheckReport) -> str:
    p = report.precheck
    used, total = report.capacity.used, report.capacity.total
    lines = [
        f"node {report.node_id} ({report.capacity.status}), policy {report.policy.name} v{report.policy.version}",
        f"  memory used {format_size(used.mru)} of {format_size(total.mru)}; "
        f"disk used {format_size(used.sru)} of {format_size(total.sru)}",
        f"  free slices: {p.free_slices}   placeable now: {p.placeable_now}   phantom slices: {len(p.phantom_slices)}",
    ]
    if not report.away:  # an away node is said in one line (report.words), not one row per slice
        for v in p.verdicts:
            mark = "ok     " if v.verdict.fits else "PHANTOM"
            lines.append(f"  slice {v.index:>3} {mark} {v.verdict.words}")
    lines.append(report.words)
    if report.counters_words:
        lines.append(report.counters_words)
    if report.pools_words:
        lines.append(f"  pools answer not taken: {report.pools_words}")
    return "\n".join(lines)
