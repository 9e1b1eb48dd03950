"""The naive baseline: a plain Django admin node list with the overview's columns, row by row.

What a first version would do with the public services: per row, the node's policy and
its slices, then catalog_is_stale. The project's own admin (dashboard/admin.py) is already
optimised (it asks the fleet selector once per page), so both are measured.
"""

from __future__ import annotations

from django.contrib import admin

from dashboard.models import Node, Slice
from dashboard.policies.selectors.policy_book import catalog_is_stale, node_carve, policy_for_node

naive_site = admin.AdminSite(name="bench_naive_admin")


class NaiveNodeAdmin(admin.ModelAdmin):
    list_display = ("grid_id", "farm", "status", "nominal_vs_deployable", "free", "phantom", "stale", "seen_at")
    list_filter = ("status", "farm_id", "dedicated")
    search_fields = ("=grid_id", "farm_name")
    ordering = ("grid_id",)

    def _figures(self, obj: Node) -> dict:
        # Once per row (not per column): the straightforward version, not a strawman.
        if not hasattr(obj, "_bench_figures"):
            policy = policy_for_node(obj)
            slices = list(obj.slices.all())
            occupied = [s.size.resources for s in slices if s.is_occupied]
            free = [s.size for s in slices if s.state == Slice.State.FREE]
            carve = node_carve(obj, policy, occupied=occupied)
            stale, _reason = catalog_is_stale(obj, policy, occupied=occupied, free=free, carve=carve)
            obj._bench_figures = {"nominal": len(slices), "deployable": carve.slices, "free": len(free), "stale": stale}
        return obj._bench_figures

    @admin.display(description="farm")
    def farm(self, obj: Node) -> str:
        return f"{obj.farm_id} {obj.farm_name}".strip()

    @admin.display(description="nominal → deployable")
    def nominal_vs_deployable(self, obj: Node) -> str:
        figures = self._figures(obj)
        return f"{figures['nominal']} → {figures['deployable']}"

    @admin.display(description="free")
    def free(self, obj: Node) -> int:
        return self._figures(obj)["free"]

    @admin.display(description="phantom", empty_value="unknown")
    def phantom(self, obj: Node) -> int | None:
        return obj.phantom_slices

    @admin.display(description="stale", boolean=True)
    def stale(self, obj: Node) -> bool:
        return self._figures(obj)["stale"]


naive_site.register(Node, NaiveNodeAdmin)
