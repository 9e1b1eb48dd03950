"""Reconciliation: the catalog, the grid's `used` and the refusals' lessons, side by side, flagged past a tolerance."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.capacity import PROFILES, GiB
from dashboard.lessons.selectors.reconcile import node_reconcile
from dashboard.models import Node, Observation, Slice

ZOS = PROFILES["zos"]
NOW = timezone.now()
TOTAL_MRU, TOTAL_SRU = 31 * GiB, int(931.5 * GiB)
RESERVE_MRU = TOTAL_MRU // 10  # max(10%, 2 GiB)
VM = dict(cru=1, mru=4 * GiB, sru=151 * GiB)
VM_SRU = 151 * GiB + 500 * 1024**2  # data disk + 500 MiB rootfs (cu = 1 * 4 // 8 = 0)


def node(*, used_mru, used_sru, hidden=0, read_ago=timedelta(minutes=3)) -> Node:
    return Node(
        grid_id=1774,
        farm_id=1,
        total_cru=8,
        total_mru=TOTAL_MRU,
        total_sru=TOTAL_SRU,
        used_mru=used_mru,
        used_sru=used_sru,
        hidden_mru_per_vm=hidden,
        seen_at=NOW - read_ago,
        prechecked_at=NOW - read_ago,
    )


def deployed(count: int) -> list[Slice]:
    return [Slice(index=i, state=Slice.State.DEPLOYED, **VM) for i in range(count)]


def reconcile(n: Node, *, vms: int = 0, observations=()):
    rows = node_reconcile(node=n, policy=ZOS, occupied=deployed(vms), observations=list(observations), now=NOW).rows
    return {row.resource: row for row in rows}


@pytest.mark.parametrize(
    "vms_on_grid, vms_in_catalog, memory_agrees, words",
    [
        (2, 2, True, None),
        (0, 0, True, None),
        (3, 1, False, "the grid counts 8 GiB more memory in use than the catalog"),
        (0, 2, False, "the grid counts 8 GiB less memory in use than the catalog"),
    ],
)
def test_it_compares_the_catalog_with_the_grid(vms_on_grid, vms_in_catalog, memory_agrees, words):
    n = node(used_mru=RESERVE_MRU + vms_on_grid * 4 * GiB, used_sru=20 * GiB + vms_on_grid * VM_SRU)
    memory = reconcile(n, vms=vms_in_catalog)["mru"]
    assert memory.agrees is memory_agrees
    assert words is None or memory.disagreements[0].startswith(words)


def test_it_puts_the_catalogs_figure_where_the_grids_would_be_on_a_node_the_catalog_describes_fully():
    rows = reconcile(node(used_mru=RESERVE_MRU + 4 * GiB, used_sru=20 * GiB + VM_SRU), vms=1)
    assert (rows["mru"].catalog, rows["sru"].catalog) == (rows["mru"].grid, rows["sru"].grid)


def test_it_flags_hidden_memory_learnt_from_refusals_beyond_the_tolerance():
    seen = Observation(kind=Observation.Kind.MEMORY, seen_at=NOW - timedelta(days=1), vm_count=3, raw_error="…")
    n = node(used_mru=RESERVE_MRU + 12 * GiB, used_sru=20 * GiB + 3 * VM_SRU, hidden=1 * GiB)
    memory = reconcile(n, vms=3, observations=[seen])["mru"]
    assert (memory.learnt, memory.learnt_at) == (RESERVE_MRU + 15 * GiB, seen.seen_at)
    assert memory.disagreements == (
        "the host really uses about 3 GiB more memory than the grid accounts (learnt from refusals): "
        "slices that look placeable may be refused",
    )


def test_it_keeps_a_difference_within_the_tolerance_setting(settings):
    settings.RECONCILE_TOLERANCE_PERCENT = 30
    assert reconcile(node(used_mru=RESERVE_MRU + 8 * GiB, used_sru=20 * GiB), vms=0)["mru"].agrees


def test_it_shows_the_ssd_in_use_at_the_latest_disk_refusal():
    seen = Observation(
        kind=Observation.Kind.DISK, seen_at=NOW, vm_count=1, raw_error="…", disk_size=500 * GiB, used_sru=600 * GiB
    )
    ssd = reconcile(node(used_mru=RESERVE_MRU, used_sru=20 * GiB), observations=[seen])["sru"]
    assert ssd.learnt == 600 * GiB and "500 GiB disk" in ssd.learnt_words


def test_it_says_the_grids_figures_are_uncertain_past_the_reading_age(settings):
    settings.READING_MAX_AGE_MINUTES = 60
    n = node(used_mru=RESERVE_MRU, used_sru=20 * GiB, read_ago=timedelta(hours=3))
    assert node_reconcile(node=n, policy=ZOS, occupied=[], observations=[], now=NOW).grid_uncertain


def test_it_has_nothing_from_the_grid_on_a_node_never_read():
    n = node(used_mru=None, used_sru=None)
    assert reconcile(n)["mru"].grid is None and reconcile(n)["mru"].agrees


@pytest.mark.django_db
def test_the_node_page_shows_the_three_side_by_side_and_the_disagreement(support_client, sim_node):
    from dashboard.capacity import SliceSize

    sim_node(1774, cru=8, mru=TOTAL_MRU, sru=TOTAL_SRU, farm_id=1)
    sim_node.grid.deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB), name="outside-the-catalog")
    from dashboard.catalogs.services.precheck import precheck_run

    precheck_run(node=Node.objects.get(grid_id=1774))
    content = support_client.get(reverse("node", args=[1774])).content.decode()
    assert 'id="reconciliation"' in content and 'data-resource="mru" data-agrees="no"' in content
    assert "The grid counts 4 GiB more memory in use than the catalog" in content
