"""Issue 37, finding 4: a large fleet map sends each farm's counts, a farm's cells one click away;
and (issue 34) a node closed to us for another reason than down, standby or withheld has its own colour.

MAP_CELLS_INLINE_NODES is set below the fleet's size here, so three nodes stand for 10,000.
"""

import re

import pytest
from django.urls import reverse

from dashboard.figures.selectors.fleet_map import STATES, cell_label, cell_state

URL = reverse("fleet-map")


def cells(html: str) -> list[str]:
    return re.findall(r'<a class="cell [^>]*></a>', html)


@pytest.fixture
def collapsed(settings):
    settings.MAP_CELLS_INLINE_NODES = 2


@pytest.mark.django_db
def test_finding_4_a_large_map_sends_each_farms_counts_and_no_cell(support_client, small_fleet, collapsed):
    content = support_client.get(URL).content.decode()
    assert cells(content) == []
    assert '<span class="farm-count" data-state="down">' in content and "Show its 2 nodes" in content


@pytest.mark.django_db
def test_finding_4_a_farms_cells_load_on_demand_with_the_same_facts_as_before(
    settings,
    support_client,
    small_fleet,
):
    settings.MAP_CELLS_INLINE_NODES = 10_000
    before = cells(support_client.get(URL).content.decode())
    settings.MAP_CELLS_INLINE_NODES = 2
    page = support_client.get(URL).content.decode()
    links = dict(re.findall(r'id="farm-(\d+)-cells">.*?hx-get="([^"]+)"', page))
    opened = [
        support_client.get(links[farm].replace("&amp;", "&"), headers={"HX-Request": "true"}) for farm in ("1", "4242")
    ]
    assert all("<html" not in r.content.decode() for r in opened)
    assert [cell for r in opened for cell in cells(r.content.decode())] == before


@pytest.mark.django_db
def test_finding_4_without_javascript_a_farm_opens_as_the_map_of_that_farm(support_client, small_fleet, collapsed):
    page = support_client.get(URL).content.decode()
    href = re.search(r'id="farm-1-cells">.*?href="([^"]+)"', page).group(1).replace("&amp;", "&")
    farm_map = support_client.get(href).content.decode()
    assert "<html" in farm_map and [re.search(r'data-node="(\d+)"', c).group(1) for c in cells(farm_map)] == [
        "20",
        "21",
    ]


@pytest.mark.django_db
def test_finding_4_an_opened_farm_keeps_the_maps_other_filters(support_client, small_fleet, collapsed):
    page = support_client.get(URL, {"q": "a"}).content.decode()
    assert re.search(r'hx-get="/map/\?farm=\d+&amp;q=a"', page)


def test_issue_34_a_node_rented_by_another_twin_has_the_closed_colour_and_says_why():
    figures = ("up", 6, 0, 0, 0, 6, 0, 6, {"rented": 6}, False, "rented", "")
    state = cell_state(*figures)
    assert (state, "closed" in STATES) == ("closed", True)
    assert "none placeable: rented by another twin" in cell_label(20, 1, state, *figures)


def test_issue_45_defect_8_a_closure_is_said_once_in_a_cells_tooltip_with_no_literal_ellipsis():
    figures = ("up", 6, 0, 0, 0, 6, 0, 6, {"rented": 6}, False, "rented", "4711")
    label = cell_label(3150, 7, cell_state(*figures), *figures)
    assert (
        label
        == "Node 3150, farm 7, up: 6 → 6 slices; 6 free; none placeable: the node is rented by twin 4711, not by the marketplace"
    )
    withheld = ("up", 6, 0, 0, 0, 6, 0, 6, {"withheld": 6}, False, "withheld", "disk swap, until released")
    label = cell_label(1803, 7, cell_state(*withheld), *withheld)
    assert label.count("withheld") == 1 and "disk swap, until released" in label
    assert not any(words.endswith("...") or "..." in words for words in STATES.values())


def test_issue_34_down_standby_and_withheld_keep_their_own_colours():
    base = ("up", 6, 0, 0, 0, 6, 0, 6, {}, False)
    assert [cell_state(*base, closure) for closure in ("down", "standby", "withheld")] == [
        "down",
        "standby",
        "withheld",
    ]


@pytest.mark.django_db
def test_issue_34_the_legend_names_the_closed_colour(support_client, small_fleet):
    assert b'<li data-state="closed"' in support_client.get(URL).content
