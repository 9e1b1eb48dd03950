"""A page of new nodes is inserted with its figures (figures.services.figures_new): the same figures the database
path computes (figures.services.figures.figures_compute reads the rows and slices back) for every kind of node."""

from dataclasses import replace

import pytest
from django.db import transaction
from django.utils import timezone

from dashboard.capacity import GiB, Resources
from dashboard.figures.services.figures import FIGURE_FIELDS, figures_compute, figures_refresh
from dashboard.models import Node
from dashboard.nodes.services.registration import node_register_from_grid
from dashboard.nodes.services.registration_page import nodes_register_from_grid

# (node id, add_node options, what the page's reading says beside them)
SHAPES = [
    (1, {"cru": 8, "mru": 31 * GiB, "sru": int(931.5 * GiB)}, {}),
    (2, {"cru": 16, "mru": 62 * GiB, "sru": 2 * int(931.5 * GiB)}, {"pools_sru": (int(931.5 * GiB),) * 2}),
    (3, {"cru": 4, "mru": 15 * GiB, "sru": 476 * GiB, "status": "down"}, {}),
    (4, {"cru": 8, "mru": 31 * GiB, "sru": 500 * GiB, "light": True}, {"light": True}),
    (5, {"cru": 2, "mru": 8 * GiB, "sru": 100 * GiB}, {}),  # the legacy policy's 4 vCPUs: no slice fits
    (6, {"cru": 8, "mru": 31 * GiB, "sru": 500 * GiB}, {"rented_by_twin_id": 77, "rent_contract_id": 9}),
    (7, {"cru": 8, "mru": 31 * GiB, "sru": 500 * GiB}, {"in_dedicated_farm": True, "extra_fee": 5}),
    (
        8,
        {"cru": 8, "mru": 31 * GiB, "sru": 500 * GiB, "status": "standby"},
        {"used": Resources(cru=2, mru=9 * GiB, sru=80 * GiB)},
    ),
    (
        9,
        {"cru": 12, "mru": 46 * GiB, "sru": 900 * GiB},
        {"pools_sru": (400 * GiB, 500 * GiB), "zos_cache_sru": 30 * GiB},
    ),
]


@pytest.fixture
def lives(sim_node):
    for node_id, options, _said in SHAPES:
        sim_node(node_id, register=False, farm_id=4242, **options)
    grid = sim_node.grid
    return [replace(grid.node(node_id), **said) for node_id, _options, said in SHAPES]


def stored(pks) -> dict[int, tuple]:
    return {row[0]: row[1:] for row in Node.objects.filter(pk__in=pks).values_list("pk", *FIGURE_FIELDS)}


@pytest.mark.django_db
@pytest.mark.parametrize("policy", [None, "legacy"])
def test_the_figures_a_page_is_inserted_with_are_those_its_rows_give(lives, policy):
    with transaction.atomic():
        nodes, refused = nodes_register_from_grid(lives=lives, read_at=timezone.now(), policy_name=policy)
    pks = [node.pk for node in nodes]

    computed = figures_compute(Node.objects.filter(pk__in=pks))
    assert refused == [] and len(pks) == len(SHAPES)
    assert stored(pks) == {pk: tuple(getattr(f, name) for name in FIGURE_FIELDS) for pk, f in computed.items()}
    assert figures_refresh(pks) == 0  # nothing left for the database path to change


@pytest.mark.django_db
def test_a_page_stores_the_figures_one_by_one_registration_stores(lives):
    now = timezone.now()
    with transaction.atomic():
        together, _ = nodes_register_from_grid(lives=lives, read_at=now, policy_name="legacy")
    by_page = {node.grid_id: stored([node.pk])[node.pk] for node in together}
    Node.objects.all().delete()

    alone = [node_register_from_grid(live=live, read_at=now, policy_name="legacy", ask_rmb=False) for live in lives]
    one_by_one = {node.grid_id: stored([node.pk])[node.pk] for node in alone}

    assert by_page == one_by_one
    # The shapes reach the figures' branches: open and closed nodes, shapes judged on the reading apart.
    assert {row[FIGURE_FIELDS.index("closure")] for row in by_page.values()} == {"", "down", "standby"}
    assert len({row[FIGURE_FIELDS.index("pools_shape")] for row in by_page.values()}) >= 6


@pytest.mark.django_db
def test_a_page_registered_under_a_fleet_lesson_takes_it_with_its_figures(lives):
    from dashboard.models import MemoryLesson

    # The fleet's group (no build told yet, as every node of a page is): a VM hides 1 GiB beyond its size.
    MemoryLesson.objects.create(build="", per_vm_mru=GiB, points=3, nodes=2, learnt_at=timezone.now())
    with transaction.atomic():
        nodes, _ = nodes_register_from_grid(lives=lives, read_at=timezone.now(), policy_name="legacy")
    pks = [node.pk for node in nodes]

    assert set(Node.objects.filter(pk__in=pks).values_list("memory_lesson_scope", "hidden_mru_per_vm")) == {
        ("fleet", GiB)
    }
    assert figures_refresh(pks) == 0
