"""A held slice is not free on any page, total, export or metric; an expired one is free at once, no worker."""

import csv
import datetime as dt
import io

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboard.deployments.services.holds import hold_create
from dashboard.figures.selectors.fleet import FleetFilters, fleet_page
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import FarmTotals, FarmTotalsChanged
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def held_1774(sim_node):
    """Node 1774 (7 free legacy slices) with one live hold (slice 5) and one expired an hour ago (slice 4)."""
    node = sim_node_1774(sim_node)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="live", source="command")
    hold_create(
        node_id=1774,
        slice_index=4,
        ttl_seconds=60,
        marketplace_id="expired",
        source="command",
        now=timezone.now() - dt.timedelta(hours=1),
    )
    return node


def test_the_fleet_rows_and_totals_leave_the_live_hold_out(held_1774):
    page = fleet_page()
    row = page.rows[0]
    assert (row.free, row.held) == (6, 1)
    assert (page.totals.free, page.totals.held) == (6, 1)


def test_filtered_totals_leave_it_out_too(held_1774):
    totals = fleet_page(filters=FleetFilters(search="mitana")).totals
    assert (totals.free, totals.held) == (6, 1)


def test_the_kept_farm_totals_are_untouched_and_the_reader_takes_the_hold_off(held_1774):
    farm_totals_refresh()  # kept: counts the held slice as free (a hold is not kept; it ends by itself)
    assert not FarmTotalsChanged.objects.exists()
    assert FarmTotals.objects.get(farm_id=4242).free == 7
    assert fleet_page(per_page=1).totals.free == 6


def test_the_fleet_api_says_free_and_held(held_1774, api_call, api_token):
    totals = api_call("get", "/api/v1/fleet", api_token("read")).json()
    assert (totals["free"], totals["held"]) == (6, 1)


def test_the_fleet_page_shows_the_held_slices(held_1774, support_client):
    page = support_client.get("/").content.decode()
    assert 'data-held="1"' in page


def test_the_csv_export_counts_the_hold_apart(held_1774, admins_client):
    rows = list(csv.DictReader(io.StringIO(admins_client.get("/", {"format": "csv"}).content.decode())))
    assert (rows[0]["free"], rows[0]["held"]) == ("6", "1")


def test_metrics_say_free_on_offer_and_held(held_1774, client, settings):
    settings.METRICS_TOKEN = "metrics-token-for-the-tests-1774"
    response = client.get("/metrics", headers={"Authorization": "Bearer metrics-token-for-the-tests-1774"})
    samples = {s.name: s.value for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}
    assert (samples["slicedash_fleet_slices_free"], samples["slicedash_fleet_slices_held"]) == (6, 1)


def test_a_released_hold_is_free_at_once(held_1774, api_call, api_token):
    from dashboard.models import Hold

    hold = Hold.objects.get(marketplace_id="live")
    api_call("delete", f"/api/v1/holds/{hold.pk}", api_token("report,act"))
    assert (fleet_page().totals.free, fleet_page().totals.held) == (7, 0)


def test_the_map_cell_leaves_the_held_slice_out_of_free(held_1774, support_client):
    farm_totals_refresh()
    first = support_client.get("/map/").content.decode()
    assert "6 free" in first and "1 held for a buyer" in first


def test_the_map_shows_the_slice_free_again_once_the_hold_is_released(held_1774, support_client):
    # A release writes no node, so the farm's kept cells would still say held: they are kept under the
    # farm's live holds too, and the release gives the farm a new key.
    from dashboard.deployments.services.holds import hold_release
    from dashboard.models import Hold

    farm_totals_refresh()
    support_client.get("/map/")
    hold_release(hold_id=Hold.objects.get(marketplace_id="live").pk, source="command")
    again = support_client.get("/map/").content.decode()
    assert "7 free" in again and "held for a buyer" not in again


def _figures(row) -> tuple:
    return (row.free, row.placeable_now, row.phantom, row.held)


def test_a_held_slice_is_neither_placeable_nor_phantom_and_the_figures_still_add_up(held_1774, support_client):
    """Issue 24: held is not free anywhere. 1774's legacy catalog: 7 free, the 7th refused for memory (6
    placeable, 1 phantom, as ZOS's arithmetic says: tests/capacity/test_capacity.py). One live hold on a placeable
    slice: 6 on offer, 5 placeable, still 1 phantom, on the row, the totals, the farm's and the node page."""
    page = fleet_page()
    assert _figures(page.rows[0]) == (6, 5, 1, 1)
    totals = page.totals
    assert (totals.free, totals.placeable_now, totals.phantom, totals.held) == (6, 5, 1, 1)
    assert totals.free == totals.placeable_now + totals.phantom
    farm_totals_refresh()
    farm = fleet_page(per_page=1).totals  # read from the kept farm totals
    assert (farm.free, farm.placeable_now, farm.phantom) == (6, 5, 1)
    node_page = support_client.get("/nodes/1774/").content.decode()
    assert 'data-free="6"' in node_page and 'data-placeable="5"' in node_page and 'data-phantom="1"' in node_page


def test_the_held_slice_is_placeable_again_the_moment_its_hold_ends(held_1774):
    later = timezone.now() + dt.timedelta(minutes=11)  # the live hold's 600 s are over
    from unittest import mock

    with mock.patch("django.utils.timezone.now", return_value=later):
        row = fleet_page().rows[0]
    assert _figures(row) == (7, 6, 1, 0)


def test_the_map_keeps_a_held_farm_and_shows_the_slice_free_once_the_hold_ends_by_time(held_1774, support_client):
    from unittest import mock

    from django.core.cache import caches

    from dashboard.figures.selectors.fleet_map import CACHE

    farm_totals_refresh()
    support_client.get("/map/")
    assert any("fleet-map:4242:" in key for key in caches[CACHE]._cache), "a held farm's cells are kept"
    later = timezone.now() + dt.timedelta(minutes=11)
    with mock.patch("django.utils.timezone.now", return_value=later):
        again = support_client.get("/map/").content.decode()
    assert "7 free" in again and "held for a buyer" not in again


def test_finding_4_a_held_slice_reads_held_in_the_nodes_catalog(held_1774, api_call, api_token):
    catalog = {s["index"]: s for s in api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["catalog"]}
    held = catalog[5]
    assert (held["state"], held["fits_now"], held["held_for"]) == ("held", None, "live")
    assert held["held_until"] is not None
    # The hold that ended by time is free again, with no worker; a program listing free slices skips 5.
    assert catalog[4]["state"] == "free" and catalog[4]["held_until"] is None
    assert sorted(i for i, s in catalog.items() if s["state"] == "free") == [0, 1, 2, 3, 4, 6]


def test_finding_4_only_a_token_whose_user_may_act_sees_the_buyer(held_1774, api_call, api_token):
    catalog = api_call("get", "/api/v1/nodes/1774", api_token("read", role="support")).json()["catalog"]
    assert [(s["state"], s["held_for"]) for s in catalog if s["index"] == 5] == [("held", None)]


def test_finding_4_a_held_slice_reads_held_on_the_node_page_as_in_the_api(
    held_1774, support_client, api_call, api_token
):
    """The node page's catalog says what the API's does (nodes.selectors.node.CatalogSlice, one rule): held, with
    its end, and not placeable now; the slice whose hold ended by time is free again."""
    import re

    page = support_client.get("/nodes/1774/").content.decode()
    rows = dict(re.findall(r'<tr data-slice="(\d+)" data-state="(\w+)"', page))
    api = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["catalog"]
    assert rows == {str(s["index"]): s["state"] for s in api}
    assert rows["5"] == "held" and rows["4"] == "free"
    row_5 = page[page.index('<tr data-slice="5"') :].split("</tr>", 1)[0]
    until = dt.datetime.fromisoformat(api[5]["held_until"].replace("Z", "+00:00"))
    assert f"until {until:%Y-%m-%d %H:%M:%S} UTC" in row_5
    assert "held for a buyer" in row_5 and "✓ yes" not in row_5


def test_finding_4_the_csv_says_until_when_the_nodes_held_slices_are_held(held_1774, admins_client):
    from dashboard.deployments.services.holds import hold_release
    from dashboard.models import Hold

    live = Hold.objects.live(timezone.now()).get(node__grid_id=1774)
    rows = list(csv.DictReader(io.StringIO(admins_client.get("/export.csv").content.decode())))
    assert (rows[0]["held"], rows[0]["held_until"]) == ("1", live.expires_at.isoformat())
    hold_release(hold_id=live.pk, source="command")
    rows = list(csv.DictReader(io.StringIO(admins_client.get("/export.csv").content.decode())))
    assert (rows[0]["held"], rows[0]["held_until"]) == ("0", "")


def test_issue_45_defect_4_the_map_cell_counts_a_held_slice_in_nominal(held_1774, support_client):
    """A hold takes a slice off offer, not out of the catalog: 7 → 6 as on every other view."""
    farm_totals_refresh()
    page = support_client.get("/map/").content.decode()
    assert "7 → 6 slices; 6 free" in page and "6 → 6 slices" not in page
