"""Issue 45: nodes that look free but where a deploy may fail, named with their reason on the fleet page, its
CSV, the API and placement (capacity.warnings, the seam beside the closures): a zos-cache below a full VM's
image (zos#2147), and contracts in their grace period still holding capacity (read by the slice audit)."""

import csv
import io

import pytest
from django.urls import reverse

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.capacity.warnings import WARNING_REASONS, WarningFacts, WarningReason, node_warnings
from dashboard.models import Node
from tests.factories import node_1774

pytestmark = pytest.mark.django_db


def test_a_cache_below_the_image_is_warned_of_and_one_at_or_above_it_is_not():
    small = node_warnings(WarningFacts(cache_quota=5 * GiB, full_vm_image=10 * GiB))
    assert [(w.key, w.detail) for w in small] == [("cache-small", "5 GiB < 10 GiB")]
    assert node_warnings(WarningFacts(cache_quota=10 * GiB, full_vm_image=10 * GiB)) == ()
    assert node_warnings(WarningFacts(cache_quota=5 * GiB, full_vm_image=0)) == ()  # not judged
    assert node_warnings(WarningFacts(cache_quota=None, full_vm_image=10 * GiB)) == ()  # not known: not said


def test_contracts_in_grace_are_warned_of_with_their_count():
    (warning,) = node_warnings(WarningFacts(grace_contracts=2))
    assert warning.key == "grace-contracts" and warning.words.startswith("2 of its contracts are in their grace")


@pytest.fixture
def small_cache(sim_node):
    """Node 1774 whose pools told a 5 GiB zos-cache (its first quota, before any growth)."""
    sim_node(1774, **node_1774(), policy_name="zos")
    Node.objects.filter(grid_id=1774).update(zos_cache_sru=5 * GiB)
    return Node.objects.get(grid_id=1774)


def test_the_fleet_page_csv_and_api_name_the_warning_with_its_reason(small_cache, support_client, api_call, api_token):
    page = support_client.get(reverse("fleet")).content.decode()
    assert 'data-warning="cache-small"' in page and "zos-cache below a full VM&#x27;s image" in page
    rows = list(csv.DictReader(io.StringIO(support_client.get(reverse("fleet-export")).content.decode())))
    assert rows[0]["warnings"] == "cache-small: 5 GiB < 10 GiB"
    (row,) = api_call("get", "/api/v1/nodes", api_token("read")).json()["nodes"]
    assert [w["key"] for w in row["warnings"]] == ["cache-small"]
    figures = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["figures"]
    assert "disk quota exceeded" in figures["warnings"][0]["words"]
    node_page = support_client.get(reverse("node", args=[1774])).content.decode()
    assert "It looks free, but a deploy may fail:" in node_page


def test_placement_names_the_warning_and_the_largest_disk_on_its_best_nodes(small_cache, api_call, api_token):
    answer = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=4 * GiB, sru=100 * GiB).json()
    (best,) = answer["best"]
    assert [w["key"] for w in best["warnings"]] == ["cache-small"]
    room = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["room"]["disk"]
    assert best["largest_disk"] == room["largest_disk"]  # one figure, said one way (the slice's own size)


def test_a_warning_added_to_the_seam_shows_everywhere_with_no_other_edit(sim_node, support_client, monkeypatch):
    """The seam, as docs/closures.md describes it for closures: one entry, shown on every page."""
    sim_node(1774, **node_1774(), policy_name="zos")
    monkeypatch.setitem(
        WARNING_REASONS,
        "test-only",
        WarningReason("test-only", "a reason a test made", "has {detail}", lambda facts: "a made-up reason"),
    )
    page = support_client.get(reverse("fleet")).content.decode()
    assert 'data-warning="test-only"' in page and "a reason a test made" in page


@pytest.mark.parametrize("closure", [c for c in capacity.CLOSURE_REASONS])
def test_every_closure_is_named_on_the_fleet_page_with_its_reason(sim_node, support_client, closure):
    """Generic: a closure added through capacity.closures (wt43b's no zos-cache) shows by its own words."""
    sim_node(1774, **node_1774(), policy_name="zos")
    Node.objects.filter(grid_id=1774).update(closure=closure, closure_detail="")
    page = support_client.get(reverse("fleet")).content.decode()
    assert f'data-closure="{closure}"' in page or closure in ("down", "standby")
    assert capacity.CLOSURE_REASONS[closure].label.split(" (")[0] in page.replace("&#x27;", "'")


def test_the_audit_stores_contracts_in_grace_and_the_fleet_warns_of_them(sim_node, settings, support_client):
    from dashboard.catalogs.selectors.catalog_audit import Pace
    from dashboard.catalogs.services.catalog_audit import catalog_audit_here
    from dashboard.deployments.services.deploy import slice_deploy

    settings.MARKETPLACE_TWIN_ID = (7,)
    sim_node.grid.deployer_twin = 7
    node = sim_node(1774, **node_1774(), policy_name="zos")
    sim_node.grid.rent(1774, 7)
    slice_deploy(node=node, slice_index=0, grid=sim_node.grid)
    sim_node.grid.rent_state(1774, "GracePeriod")
    catalog_audit_here(fix=False, grid=sim_node.grid, pace=Pace(rate=1000.0, sleep=lambda _s: None))
    stored = Node.objects.get(grid_id=1774)
    assert (stored.grace_contracts, stored.contracts_read_at is not None) == (1, True)
    assert 'data-warning="grace-contracts"' in support_client.get(reverse("fleet")).content.decode()
