"""manage.py node_withhold: take a node's (or a farm's) free slices off offer for a while, with a reason.

    manage.py node_withhold NODE --reason TEXT [--from ISO] [--until ISO]
    manage.py node_withhold --farm-id F --reason TEXT [--from ISO] [--until ISO]
    manage.py node_withhold NODE --release

Without --until the window lasts until released; a --from in the future withholds ahead of time.
--release ends the node's windows open or to come, a quarantine's included (audited).
"""

from __future__ import annotations

import argparse
from datetime import datetime

from dashboard.management.cli import ProductCommand, grid_id, refused, registered_node, usage_error
from dashboard.models import Node
from dashboard.nodes.services.withholds import WithholdError, node_withhold, withhold_release


def _moment(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (e.g. 2026-12-01T18:00Z)") from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add one (e.g. Z or +01:00)")
    return at


class Command(ProductCommand):
    help = "Withhold a node's (or a farm's) free slices with a reason, from now or later, until a time or released."

    stores_figures = True

    def add_arguments(self, parser):
        parser.add_argument("node", nargs="?", type=grid_id, help="the grid's node id")
        parser.add_argument("--farm-id", type=grid_id, help="withhold every registered node of this farm")
        parser.add_argument("--reason", help="why (shown on every page beside the node, e.g. 'disk swap')")
        parser.add_argument("--from", dest="starts_at", type=_moment, help="start (ISO 8601 with a zone); default now")
        parser.add_argument(
            "--until", dest="ends_at", type=_moment, help="end (ISO 8601 with a zone); default: released"
        )
        parser.add_argument("--release", action="store_true", help="end the node's windows open or to come")

    def handle(self, *args, node, farm_id, reason, starts_at, ends_at, release, **options):
        if release:
            if node is None or farm_id is not None or reason or starts_at or ends_at:
                raise usage_error("--release takes a NODE and nothing else")
            try:
                done = withhold_release(node=registered_node(node), via="command")
            except WithholdError as exc:
                raise refused(str(exc)) from None
            self.stdout.write(done.words)
            return
        if (node is None) == (farm_id is None):
            raise usage_error("give a NODE or --farm-id F (one of them)")
        if not reason:
            raise usage_error("--reason TEXT is needed: say why the node is withheld")
        if node is not None:
            nodes = [registered_node(node)]
        else:
            nodes = list(Node.objects.filter(farm_id=farm_id).order_by("grid_id"))
            if not nodes:
                raise usage_error(f"farm {farm_id} has no registered node")
        try:
            done = node_withhold(nodes=nodes, reason=reason, starts_at=starts_at, ends_at=ends_at, via="command")
        except WithholdError as exc:
            raise usage_error(str(exc)) from None
        self.stdout.write(done.words)
