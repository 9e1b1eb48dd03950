"""Every kind of write a node row can get, for the tests that check a kept figure against a live one
(tests/figures/test_services_farm_totals.py, test_fleet_map_kept.py): `WRITES[name](grid, sim_node)`."""

from dataclasses import replace

from django.db import connection

from dashboard.capacity import GiB
from dashboard.figures.services.figures import figures_refresh
from dashboard.models import Node, Slice
from dashboard.nodes.services.readings import LiveReading, readings_store


def figures_service_written():
    node = Node.objects.filter(farm_id=1).order_by("pk").first()
    Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED)
    figures_refresh([node.pk])


def reading_written(grid):
    node = Node.objects.get(grid_id=20)
    live = grid.node(20)
    live = replace(live, status="standby", used=replace(live.used, mru=node.total_mru // 2))
    readings_store([LiveReading.of(node, live)])


def raw_sql_written():
    with connection.cursor() as cursor:
        cursor.execute("UPDATE dashboard_node SET stale = NOT stale WHERE farm_id = 1")


WRITES = {
    "a service (figures)": lambda grid, sim_node: figures_service_written(),
    "the reading writer": lambda grid, sim_node: reading_written(grid),
    "a queryset update": lambda grid, sim_node: Node.objects.filter(farm_id=2).update(status="down"),
    "raw SQL": lambda grid, sim_node: raw_sql_written(),
    "a delete": lambda grid, sim_node: Node.objects.filter(farm_id=2).order_by("pk").first().delete(),
    "a node moving farm": lambda grid, sim_node: Node.objects.filter(grid_id=1).update(farm_id=3),
    "a new node in a new farm": lambda grid, sim_node: sim_node(4343, cru=8, mru=31 * GiB, sru=500 * GiB, farm_id=4),
    "a farm emptied": lambda grid, sim_node: Node.objects.filter(farm_id=2).delete(),
}
