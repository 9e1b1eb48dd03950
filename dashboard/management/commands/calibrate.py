"""manage.py calibrate [NODE_ID] [--json]: real reserve and per-VM overhead against the policy."""

import json

from dashboard.management.cli import ProductCommand, grid_id, registered_node
from dashboard.policies.services.calibration import fleet_calibration, node_calibration


class Command(ProductCommand):
    help = (
        "Fit each node's capacity samples (taken after every deploy) to used = reserve + VMs + count x overhead, "
        "and flag nodes that really use more than their policy assumes. With NODE_ID, that node only. "
        "Needs samples at two or more different VM counts per node."
    )

    def add_arguments(self, parser):
        parser.add_argument("node_id", type=grid_id, nargs="?", help="the grid's node id (default: the whole fleet)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the result as JSON")

    def handle(self, *args, node_id, as_json, **options):
        if node_id is not None:
            node = registered_node(node_id)
            result = node_calibration(node)
            self.stdout.write(json.dumps(result.as_dict(), indent=2) if as_json else result.words)
            return
        fleet = fleet_calibration()
        if as_json:
            self.stdout.write(json.dumps(fleet.as_dict(), indent=2))
            return
        if not fleet.nodes:
            self.stdout.write("no capacity samples yet: they are taken after each successful deploy")
            return
        for calibration in fleet.nodes:
            line = calibration.words
            self.stdout.write(self.style.WARNING(line) if calibration.flagged else line)
        self.stdout.write(fleet.words)
