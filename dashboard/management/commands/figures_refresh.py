"""manage.py figures_refresh: recompute the catalog figures kept on every node's row.

    manage.py figures_refresh [--check]

The services keep them current; this is for rows changed by hand (SQL, a restore).
--check changes nothing and exits 1 when a node's stored figures are not what they should be.
"""

from __future__ import annotations

from dataclasses import astuple

from django.core.management.base import CommandError

from dashboard.figures.node_figures import FIGURE_FIELDS
from dashboard.figures.services.figures import figures_compute, figures_refresh_all
from dashboard.figures.services.figures_settings import (
    figures_settings_differ,
    figures_settings_store,
    figures_settings_words,
)
from dashboard.management.cli import ProductCommand
from dashboard.models import Node


class Command(ProductCommand):
    help = "Recompute the slice counts, deployable slices and stale verdict stored on every node."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any node is out of date")

    def handle(self, *args, check: bool, **options):
        if not check:
            differ = figures_settings_differ()
            changed = figures_refresh_all()
            # Every node's figures were just stored under this process's settings: they are now the stored ones.
            figures_settings_store()
            self.stdout.write(f"{changed} of {Node.objects.count()} node(s) had out-of-date figures; now current")
            if differ:
                self.stdout.write(f"stored under {figures_settings_words()} (the figures' settings until now differed)")
            return
        stored = {pk: values for pk, *values in Node.objects.values_list("pk", *FIGURE_FIELDS)}
        wrong = _wrong(stored)
        if wrong:
            shown = ", ".join(str(n) for n in wrong[:20]) + (" ..." if len(wrong) > 20 else "")
            raise CommandError(f"{len(wrong)} node(s) have out-of-date figures: {shown}; run manage.py figures_refresh")
        self.stdout.write(f"all {len(stored)} node(s) have current figures")


def _wrong(stored: dict[int, list]) -> list[int]:
    computed = figures_compute(Node.objects.all())
    node_ids = dict(Node.objects.values_list("pk", "grid_id"))
    return sorted(node_ids[pk] for pk, figures in computed.items() if list(astuple(figures)) != stored[pk])
