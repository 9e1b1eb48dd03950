"""The bench's fleets: what `make bench` measures must be the fleet it claims to be."""

from collections import defaultdict

import pytest

from bench import seed


def test_it_seeds_about_six_legacy_slices_per_node():
    specs = seed.fleet_specs(400)
    slices = [seed.legacy_carve(spec).slices for spec in specs]
    assert 5.5 <= sum(slices) / len(slices) <= 6.5


def test_it_seeds_deployed_vms_only_on_nodes_that_are_up():
    assert all(spec.status == "up" for spec in seed.fleet_specs(1000) if spec.deployed)


@pytest.mark.django_db(transaction=True)
def test_it_fills_the_database_with_every_catalog_stale():
    from dashboard.figures.selectors.fleet import fleet_overview
    from dashboard.models import Deployment, Node, Slice

    specs = seed.fleet_specs(60)
    figures = seed.database_seed(specs, defaultdict(lambda: "1-1-bench"))
    totals = fleet_overview().totals
    assert (Node.objects.count(), totals.stale) == (60, 60)
    assert figures["slices"] == Slice.objects.count() == sum(seed.legacy_carve(s).slices for s in specs)
    assert Deployment.objects.filter(state="failed", cause="memory").count() == 12


@pytest.mark.django_db(transaction=True)
def test_it_empties_the_tables_before_seeding_again():
    from dashboard.models import Node

    seed.database_seed(seed.fleet_specs(30), defaultdict(lambda: "1-1-bench"))
    seed.database_seed(seed.fleet_specs(10), defaultdict(lambda: "1-1-bench"))
    assert list(Node.objects.values_list("grid_id", flat=True)) == list(range(1, 11))


def test_it_puts_the_nodes_and_vms_on_the_simulated_grid(tmp_path):
    from sim.grid import SimulatedGrid

    grid = SimulatedGrid(tmp_path / "sim.sqlite3")
    specs = seed.fleet_specs(16)
    workloads, timings = seed.simulator_seed(grid, specs)
    assert grid.node_ids() == list(range(1, 17))
    assert len(grid.vms(16)) == 2 and timings["vms"] == len(workloads) == 5
