"""Issue 27: the rent contract read from the Grid Proxy's real shapes, a rent going to grace or ending is
a node event (the watch sees it, the stored figures follow) and an alert (the catalog goes dark)."""

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts import rules
from dashboard.alerts.selectors.alerts import alert_figures
from dashboard.alerts.services.alerts import alert_limits
from dashboard.capacity import node_events
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.proxy.parse import parse_node
from dashboard.models import Node, NodeEvent
from dashboard.nodes.services.watch import fleet_watch
from sim.grid import serve_simulator
from tests.factories import node_1774
from tests.gridproxy_canned import sample, start_canned_proxy

pytestmark = pytest.mark.django_db
OURS = 7


def test_the_node_payload_says_its_rent_contract_and_dedicated_farm():
    live = parse_node(sample("node-1774-rented.json"))
    assert (live.rented_by_twin_id, live.rent_contract_id, live.in_dedicated_farm, live.extra_fee) == (
        4721,
        90311,
        True,
        0,
    )


def test_the_client_reads_the_rent_contract_in_the_real_shape():
    canned, server = start_canned_proxy()
    canned.answer("/contracts", sample("contracts-rent-node-1774.json"))
    try:
        with GridProxyClient(canned.url, retries=0, deadline=5.0) as client:
            contract = client.rent_contract(1774)
    finally:
        server.shutdown()
        server.server_close()
    assert (contract.contract_id, contract.twin_id, contract.state, contract.type) == (
        90311,
        4721,
        "GracePeriod",
        "rent",
    )
    assert "node_id=1774&type=rent&state=Created%2CGracePeriod" in canned.queries[-1]


def test_no_rent_contract_is_none():
    canned, server = start_canned_proxy()
    canned.answer("/contracts", [])
    try:
        with GridProxyClient(canned.url, retries=0, deadline=5.0) as client:
            assert client.rent_contract(1774) is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_simulated_proxy_answers_the_rent_contract_as_the_real_one(sim_node):
    sim_node.grid.add_node(1774, **node_1774())
    contract_id = sim_node.grid.rent(1774, OURS, state="GracePeriod")
    server = serve_simulator(sim_node.grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        with GridProxyClient(f"http://127.0.0.1:{server.server_address[1]}", retries=0, deadline=5.0) as client:
            node, rent = client.node(1774), client.rent_contract(1774)
    finally:
        server.shutdown()
        server.server_close()
    assert (node.rented_by_twin_id, node.rent_contract_id) == (OURS, contract_id)
    assert (rent.contract_id, rent.state) == (contract_id, "GracePeriod")


@pytest.fixture
def rented_by_us(sim_node, settings):
    """Node 1774 in a dedicated farm, rented by the marketplace, registered and read once by the watch."""
    settings.MARKETPLACE_TWIN_ID = (OURS,)
    sim_node.grid.farm_dedicated(4242)
    sim_node.grid.add_node(1774, **node_1774())
    contract_id = sim_node.grid.rent(1774, OURS)
    from dashboard.nodes.services.registration import node_register_from_grid

    node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")
    fleet_watch(grid=sim_node.grid)
    sim_node.contract_id = contract_id
    return sim_node


def _node() -> Node:
    return Node.objects.get(grid_id=1774)


def test_our_rented_node_offers_its_catalog(rented_by_us):
    assert (_node().placeable_now, _node().closure, _node().rent_state) == (6, "", "Created")


def test_our_rent_going_to_grace_is_an_event_and_darkens_the_catalog(rented_by_us):
    rented_by_us.grid.rent_state(1774, "GracePeriod")
    fleet_watch(grid=rented_by_us.grid)
    node = _node()
    assert (node.placeable_now, node.phantom_reasons, node.closure) == (0, {"rent-grace": 6}, "rent-grace")
    event = NodeEvent.objects.get(node=node, kind=node_events.RENT_GRACE)
    assert f"Rent contract {rented_by_us.contract_id}" in event.words


def test_the_grace_is_kept_by_a_reading_that_does_not_say_it(rented_by_us, settings):
    rented_by_us.grid.rent_state(1774, "GracePeriod")
    fleet_watch(grid=rented_by_us.grid)
    from dashboard.nodes.services.readings import LiveReading, readings_store

    readings_store([LiveReading.of(_node(), rented_by_us.grid.node(1774))])  # a page: no rent state in it
    assert _node().rent_state == "GracePeriod"


def test_paid_again_the_catalog_is_back(rented_by_us):
    rented_by_us.grid.rent_state(1774, "GracePeriod")
    fleet_watch(grid=rented_by_us.grid)
    rented_by_us.grid.rent_state(1774, "Created")
    fleet_watch(grid=rented_by_us.grid)
    assert (_node().placeable_now, _node().closure) == (6, "")
    assert NodeEvent.objects.filter(kind=node_events.RENT_PAID).count() == 1


def test_our_rent_ending_on_a_dedicated_node_is_an_event_and_the_node_needs_our_rent(rented_by_us):
    rented_by_us.grid.rent_end(1774)
    fleet_watch(grid=rented_by_us.grid)
    node = _node()
    assert (node.placeable_now, node.closure, node.rented_by_twin_id) == (0, "needs-rent", None)
    assert NodeEvent.objects.get(node=node, kind=node_events.RENT_ENDED).detail["twin_id"] == OURS


def _rent_dark() -> list[rules.Condition]:
    now = timezone.now()
    return rules.rent_dark(alert_figures(now=now, limits=alert_limits()), alert_limits())


def test_the_alert_fires_when_our_rent_goes_to_grace(rented_by_us):
    assert _rent_dark() == []
    rented_by_us.grid.rent_state(1774, "GracePeriod")
    fleet_watch(grid=rented_by_us.grid)
    (condition,) = _rent_dark()
    assert (condition.rule, condition.subject) == ("rent-dark", "farm 4242")
    assert f"rent contract {rented_by_us.contract_id} in grace" in condition.detail


def test_the_alert_fires_when_our_rent_ends_on_a_dedicated_node(rented_by_us):
    rented_by_us.grid.rent_end(1774)
    fleet_watch(grid=rented_by_us.grid)
    (condition,) = _rent_dark()
    assert "rent ended" in condition.detail


@pytest.mark.parametrize(
    ("before", "after", "kinds"),
    [
        ((None, None, ""), (7, 90, "Created"), ["rented"]),
        ((7, 90, "Created"), (7, 90, "GracePeriod"), ["rent-grace"]),
        ((7, 90, "GracePeriod"), (7, 90, "GracePeriod"), []),
        ((7, 90, "GracePeriod"), (7, 90, "Created"), ["rent-paid"]),
        ((7, 90, "Created"), (None, None, ""), ["rent-ended"]),
        ((7, 90, "Created"), (42, 91, "Created"), ["rent-ended", "rented"]),
        ((7, 90, "Created"), (7, 90, ""), []),  # a page that does not say the state is no change
    ],
)
def test_the_rent_changes_between_two_readings(before, after, kinds):
    def reading(rent):
        twin, contract, state = rent
        return node_events.Reading(
            status="up",
            total=(8, 1, 1, 0),
            used=(0, 0, 0, 0),
            rented_by_twin_id=twin,
            rent_contract_id=contract,
            rent_state=state,
        )

    assert [c.kind for c in node_events.reading_changes(reading(before), reading(after))] == kinds


def test_an_old_rent_end_on_an_open_node_is_no_alert(rented_by_us, settings):
    settings.MARKETPLACE_TWIN_ID = ()  # rent not judged: no closure, so nothing is dark
    rented_by_us.grid.rent_end(1774)
    fleet_watch(grid=rented_by_us.grid)
    assert _node().closure == "" and _rent_dark() == []
    assert timezone.now() - timedelta(minutes=1) < NodeEvent.objects.get(kind="rent-ended").at
