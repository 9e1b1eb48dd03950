"""manage.py node_register: register a node and carve its catalog.

    manage.py node_register 1774 --cru 8 --mru 31GiB --sru 931.5GiB --farm-id 1 [--farm-name X]
                            [--pools ...] [--policy NAME] [--status up] [--by USERNAME] [--json]

    manage.py node_register 1774 [--policy NAME] [--by USERNAME] [--json]

    manage.py node_register 1774 --pools 465.75GiB 465.75GiB [--by USERNAME]
        (a registered node: an operator's report of its SSD pools, kept as nodes.services.pools keeps them)

    manage.py node_register --farm-id 4242 [--farm-id ...] [--status up] [--policy NAME] [--dry-run]
                            [--max-new-nodes N] [--json]

Without the capacity flags the node is read from the configured grid (GRID_BACKEND): its
total, farm, status, dedication, SSD pools (the simulated node answers them, the Grid Proxy does
not) and live used capacity.

With --farm-id and no node id, whole farms are added from the grid (nodes.services.onboarding):
read a page at a time, new nodes registered, known ones refreshed, one commit per page.
Run it again after a failure to finish the rest: nothing is carved twice. A run registers at most
ONBOARD_MAX_NEW_NODES new nodes; past it, it stops before the page that would pass it (nothing of
that page written): see how many with --dry-run, then confirm that number with --max-new-nodes N.
"""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core import checks
from django.core.management.base import CommandError

from dashboard import capacity
from dashboard.grid import get_grid
from dashboard.grid.budget import background
from dashboard.grid.types import GridError, NodeCapacity
from dashboard.management.cli import ProductCommand
from dashboard.management.commands.carve import (
    USAGE_ERROR,
    add_capacity_arguments,
    capacity_flags_given,
    capacity_from_flags,
    pools_from_flag,
)
from dashboard.models import INTEGER_MAX, Node
from dashboard.nodes.services.onboarding import OnboardError, OnboardRequest, OnboardStopped, grid_onboard
from dashboard.nodes.services.pools import PoolsError, pools_report, pools_words
from dashboard.nodes.services.registration import (
    CatalogError,
    NodeAlreadyRegistered,
    node_register,
    node_register_from_grid,
)


@dataclass(frozen=True)
class NodeFacts:
    """A node given by hand on the command line (a node read from the grid is its NodeCapacity)."""

    total: capacity.Resources
    pools: list[int] | None
    farm_id: int
    farm_name: str = ""
    twin_id: int | None = None
    status: str = Node.Status.UNKNOWN
    dedicated: bool = False


class Command(ProductCommand):
    help = (
        "Register a node and carve its slice catalog with its effective policy (or --policy). "
        "Without --cru/--mru/--sru the node is read from the configured grid."
    )

    # Every system check but the URL configuration's: those import the whole web side (views, the API),
    # half a second of CPU of the command's start-up (issue 43); the web process and `manage.py check` run them.
    requires_system_checks = sorted(tag for tag in checks.registry.registry.tags_available() if tag != checks.Tags.urls)

    def figures_stored_here(self, options: dict) -> bool:
        return not options.get("dry_run")

    def add_arguments(self, parser):
        parser.add_argument("node_id", nargs="?", help="the grid's node id (none: add the farms of --farm-id)")
        add_capacity_arguments(parser)
        parser.add_argument(
            "--farm-id",
            dest="farm_id",
            metavar="N",
            action="append",
            help="the node's farm id; without a node id, a farm to add from the grid (repeatable)",
        )
        parser.add_argument("--farm-name", dest="farm_name", default="", metavar="NAME")
        parser.add_argument("--twin-id", dest="twin_id", metavar="N")
        parser.add_argument(
            "--status", choices=Node.Status.values, default=None, help="as the grid says; unknown when given by hand"
        )
        parser.add_argument("--dedicated", action="store_true")
        parser.add_argument(
            "--policy", metavar="NAME", help="a stored policy or profile; default: the node's effective one"
        )
        parser.add_argument("--by", metavar="USERNAME", help="the dashboard user to record as having registered it")
        parser.add_argument(
            "--dry-run", action="store_true", help="with farms: say what would be registered, change nothing"
        )
        parser.add_argument(
            "--max-new-nodes",
            dest="max_new_nodes",
            metavar="N",
            help="with farms: register up to N new nodes, past ONBOARD_MAX_NEW_NODES (the number a --dry-run gave)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        if options["node_id"] is None:
            return self._farms(options)
        if options["dry_run"] or options["max_new_nodes"]:
            raise CommandError(
                "--dry-run and --max-new-nodes: only when adding farms (--farm-id without a node id)",
                returncode=USAGE_ERROR,
            )
        if options["farm_id"] and len(options["farm_id"]) > 1:
            raise CommandError("one --farm-id for a node given by hand", returncode=USAGE_ERROR)
        options["farm_id"] = options["farm_id"][0] if options["farm_id"] else None
        node_id = _whole(options["node_id"], what="node id", minimum=1)
        by = _user(options["by"]) if options["by"] else None
        origin = f"{getpass.getuser()}@{socket.gethostname()}"
        pools_alone = options.get("pools") and not any(options.get(f) for f in ("cru", "mru", "sru"))
        known = Node.objects.filter(grid_id=node_id).first() if pools_alone else None
        if known is not None:
            self._report_pools(known, options, by=by, origin=origin)
            return
        try:
            if capacity_flags_given(options):
                facts = _facts_from_flags(options)
                node = node_register(
                    node_id=node_id,
                    total=facts.total,
                    farm_id=facts.farm_id,
                    farm_name=facts.farm_name,
                    twin_id=facts.twin_id,
                    status=facts.status,
                    dedicated=facts.dedicated,
                    pools=facts.pools,
                    policy_name=options["policy"],
                    by=by,
                    source="command",
                    origin=origin,
                    refuse_no_node=True,
                )
            else:
                node = node_register_from_grid(
                    live=_read_from_grid(node_id, options),
                    policy_name=options["policy"],
                    by=by,
                    source="command",
                    origin=origin,
                    refuse_no_node=True,
                )
        except NodeAlreadyRegistered as exc:
            raise CommandError(str(exc)) from None
        except (CatalogError, capacity.CapacityError) as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from None
        summary = _summary(node)
        if options["json"]:
            self.stdout.write(json.dumps(summary, sort_keys=True))
        else:
            self.stdout.write(_words(summary))

    def _report_pools(self, node: Node, options: dict, *, by, origin: str) -> None:
        """A registered node and --pools alone: an operator's report of its SSD pools (zos.storage.pools sizes)."""
        try:
            sizes = pools_from_flag(options["pools"]) or []
        except capacity.CapacityError as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from None
        entries = [{"name": f"operator-{i}", "type": "ssd", "size": size, "used": 0} for i, size in enumerate(sizes)]
        try:
            pools_report(node=node, pools=entries, source="operator", by=by, origin=origin)
        except PoolsError as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from None
        node.refresh_from_db()
        words = "stale: re-register it for the larger disks" if node.stale else "current"
        self.stdout.write(f"node {node.grid_id}: SSD pools {pools_words(sizes)} reported; its catalog is {words}")

    def _farms(self, options: dict) -> None:
        if not options["farm_id"]:
            raise CommandError("give a node id, or --farm-id to add whole farms from the grid", returncode=USAGE_ERROR)
        if capacity_flags_given(options) or options["dedicated"] or options["farm_name"] or options["twin_id"]:
            raise CommandError(
                "farms are read from the grid: --cru, --mru, --sru, --pools, --farm-name, --twin-id "
                "and --dedicated are for one node given by hand",
                returncode=USAGE_ERROR,
            )
        try:
            request = OnboardRequest(
                farm_ids=tuple(_whole(f, what="--farm-id", minimum=1) for f in options["farm_id"]),
                status=options["status"],
                policy=options["policy"],
                dry_run=options["dry_run"],
                max_new_nodes=(
                    _whole(options["max_new_nodes"], what="--max-new-nodes", minimum=1)
                    if options["max_new_nodes"]
                    else None
                ),
            )
        except OnboardError as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from None
        by = _user(options["by"]) if options["by"] else None

        def progress(result, what: str) -> None:
            refused = f", {result.skipped_total} could not be read" if result.skipped_total else ""
            self.stderr.write(f"{what}: {result.nodes_read} node(s) so far{refused}")

        try:
            # Background work, as the onboarding job kind is declared (jobs/kinds/onboard.py): its pages leave the
            # request budget's reserve (GRID_RATE_RESERVE) to interactive requests, a precheck's click.
            with background():
                result = grid_onboard(
                    request=request,
                    grid=get_grid(),
                    by=by,
                    source="command",
                    progress=progress,
                    origin=f"{getpass.getuser()}@{socket.gethostname()}",
                )
        except OnboardStopped as stopped:
            self._onboarded(stopped.result, options)
            raise CommandError(f"grid: {stopped.result.stopped}") from None
        self._onboarded(result, options)

    def _onboarded(self, result, options: dict) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(result.stored(), sort_keys=True))
            return
        self.stdout.write(result.words())
        for label, reason in result.skipped:
            self.stdout.write(f"  could not read {label}: {reason}")
        for node_id, why in result.left_out:
            self.stdout.write(f"  left out node {node_id}: {why}")


# Facts the grid states itself; giving them by hand beside a grid read would be silently ignored.
_HAND_ONLY = ("farm_id", "farm_name", "twin_id", "status", "dedicated")


def _read_from_grid(node_id: int, options: dict) -> NodeCapacity:
    given = [f"--{name.replace('_', '-')}" for name in _HAND_ONLY if options.get(name)]
    if given:
        raise CommandError(
            f"{', '.join(given)}: only for a node given by hand (with --cru, --mru and --sru); "
            f"without them node {node_id} is read from the grid",
            returncode=USAGE_ERROR,
        )
    try:
        return get_grid().node(node_id)
    except GridError as exc:
        raise CommandError(f"grid: {exc}") from None


def _facts_from_flags(options: dict) -> NodeFacts:
    total, pools = capacity_from_flags(options)
    if options["farm_id"] is None:
        raise CommandError("give --farm-id for a node given by hand", returncode=USAGE_ERROR)
    twin_id = options["twin_id"]
    return NodeFacts(
        total=total,
        pools=pools,
        farm_id=_whole(options["farm_id"], what="--farm-id", minimum=0),
        farm_name=options["farm_name"],
        twin_id=_whole(twin_id, what="--twin-id", minimum=0) if twin_id is not None else None,
        status=options["status"] or Node.Status.UNKNOWN,
        dedicated=options["dedicated"],
    )


def _whole(text: str, *, what: str, minimum: int) -> int:
    raw = str(text).strip()
    if not raw.isascii() or not raw.isdigit() or not minimum <= int(raw) <= INTEGER_MAX:
        raise CommandError(
            f"{what}: {text!r} is not a whole number from {minimum} to {INTEGER_MAX}", returncode=USAGE_ERROR
        )
    return int(raw)


def _user(username: str):
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"--by: there is no user {username!r}", returncode=USAGE_ERROR) from None


def _summary(node: Node) -> dict:
    slices = list(node.slices.order_by("index").values("cru", "mru", "sru"))
    return {
        "node_id": node.grid_id,
        "farm_id": node.farm_id,
        "farm_name": node.farm_name,
        "status": node.status,
        "policy": node.carved_policy_name,
        "policy_version": node.carved_policy_version,
        "slices": len(slices),
        "slice": slices[0] if slices else None,
        "catalog_generation": node.catalog_generation,
        "total": node.total.as_dict(),
        "pools": node.pools_sru,
        "pools_source": node.pools_source,
        # What asking the node over RMB came to (words), "" when it was not asked.
        "pools_heard": getattr(node, "pools_heard_words", ""),
    }


def _words(summary: dict) -> str:
    head = f"registered node {summary['node_id']} (farm {summary['farm_id']}) with policy {summary['policy']} v{summary['policy_version']}"
    s = summary["slice"]
    heard = f"\n{summary['pools_heard']}" if summary.get("pools_heard") else ""
    if s is None:
        return f"{head}: no slice fits on it{heard}"
    size = f"{s['cru']} vCPU / {capacity.format_size(s['mru'])} / {capacity.format_size(s['sru'])} disk"
    return f"{head}: {summary['slices']} slice(s) of {size}{heard}"
