"""manage.py precheck NODE_ID [--json]: which free slices can really be placed now."""

import json

from django.core.management.base import BaseCommand, CommandError

from dashboard.capacity import format_size
from dashboard.grid.types import GridError
from dashboard.models import Node
from dashboard.services.deploy import PrecheckReport, precheck_run


class Command(BaseCommand):
    help = (
        "Read a node's live capacity from the grid and say, for each free slice, whether it can be placed now "
        "(with the numbers). Stores the node's used capacity and placeable/phantom counts; never changes the catalog."
    )

    def add_arguments(self, parser):
        parser.add_argument("node_id", type=int, help="the grid's node id")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON")

    def handle(self, *args, node_id, as_json, **options):
        node = node_or_error(node_id)
        try:
            report = precheck_run(node=node)
        except GridError as exc:
            raise CommandError(f"grid: {exc} (nothing was recorded)") from None
        self.stdout.write(json.dumps(report.as_dict(), indent=2) if as_json else report_text(report))


def node_or_error(node_id: int) -> Node:
    node = Node.objects.filter(node_id=node_id).first()
    if node is None:
        raise CommandError(f"node {node_id} is not registered; run manage.py node_register {node_id}")
    return node


def report_text(report: PrecheckReport) -> str:
    p = report.precheck
    used, total = report.capacity.used, report.capacity.total
    lines = [
        f"node {report.node_id} ({report.capacity.status}), policy {report.policy.name} v{report.policy.version}",
        f"  memory used {format_size(used.mru)} of {format_size(total.mru)}; "
        f"disk used {format_size(used.sru)} of {format_size(total.sru)}",
        f"  free slices: {p.free_slices}   placeable now: {p.placeable_now}   phantom slices: {len(p.phantom_slices)}",
    ]
    for v in p.verdicts:
        mark = "ok     " if v.verdict.fits else "PHANTOM"
        lines.append(f"  slice {v.index:>3} {mark} {v.verdict.words}")
    lines.append(report.words)
    return "\n".join(lines)
