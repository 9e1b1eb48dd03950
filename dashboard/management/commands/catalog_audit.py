"""manage.py catalog_audit [--fix] [--json]: every slice marked rented or deployed against the node's live contracts.

Runs here and now (a job row like the worker's, on the Jobs and audit pages). Without --fix it is a
dry run and changes nothing. With --fix, the orphans and foreign VMs this very read found are fixed
(each in the audit trail); on the page an admin fixes what a dry run showed.
"""

import json

from django.core.management.base import CommandError

from dashboard.catalogs.services.catalog_audit import catalog_audit_here
from dashboard.jobs.results import CatalogAuditResult
from dashboard.jobs.services.jobs import JobError
from dashboard.management.cli import EXIT_USAGE, ProductCommand
from dashboard.models import Job

CLEAN, FAILED, FOUND, NOT_CHECKED = 0, 1, 3, 4


class Command(ProductCommand):
    help = (
        "Match every slice marked rented or deployed against its node's live contracts on the grid and the "
        "outcomes reported; list orphans (slice taken, VM gone), foreign VMs (running, unknown to the catalog), "
        "counts that disagree, and nodes not checked (the grid did not answer). A dry run unless --fix."
    )
    exit_statuses = {
        CLEAN: "every node checked and nothing left out of place (after --fix: all fixed)",
        FAILED: "the audit could not run (one already running, the database)",
        EXIT_USAGE: "the command line is wrong (nothing was done)",
        FOUND: "disagreements left as they are (a dry run, or ones no fix applies to)",
        NOT_CHECKED: f"some node was not checked (this wins over {FOUND})",
    }

    def figures_stored_here(self, options: dict) -> bool:
        return bool(options.get("fix"))

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="free orphan slices and count foreign VMs as occupied")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the result as JSON")

    def handle(self, *args, fix, as_json, **options):
        try:
            job = catalog_audit_here(fix=fix)
        except JobError as exc:
            raise CommandError(str(exc), returncode=FAILED) from None
        result = job.outcome
        if job.state != Job.State.SUCCEEDED or not isinstance(result, CatalogAuditResult):
            raise CommandError(f"job #{job.pk} failed: {job.error or 'no result'}", returncode=FAILED)
        fixed = set(result.fixed)
        left = [f for f in result.findings if f.kind != "not-checked" and f.key not in fixed]
        not_checked = [f for f in result.findings if f.kind == "not-checked"]
        if as_json:
            self.stdout.write(json.dumps({"job": job.pk, **result.stored()}, indent=2))
        else:
            for finding in result.findings:
                mark = "fixed: " if finding.key in fixed else ""
                since = f" (since {finding.since[:16].replace('T', ' ')} UTC)" if finding.since else ""
                self.stdout.write(f"{finding.kind:<12} {mark}{finding.words}{since}")
            for key, why in result.not_fixed:
                self.stdout.write(f"not fixed    {key}: {why}")
            self.stdout.write(f"job #{job.pk}: {result.words}")
        if not_checked:
            raise CommandError(f"{len(not_checked)} node(s) not checked; see above", returncode=NOT_CHECKED)
        if left:
            raise CommandError(f"{len(left)} disagreement(s) left as they are", returncode=FOUND)
