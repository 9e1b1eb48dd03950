"""Issue 45, defect 8: words that contradict on one screen, each said once and true."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.models import Node
from dashboard.nodes.services.withholds import WithholdError, node_withhold
from tests.factories import node_1774

pytestmark = pytest.mark.django_db


def test_turned_away_deployments_are_not_said_as_part_of_the_refused(legacy_fleet, support_client):
    from dashboard.models import Deployment

    (node,) = legacy_fleet(1)
    common = {"node": node, "slice_index": 0, "cru": 1, "mru": 1, "sru": 1, "cause": "node-offline"}
    Deployment.objects.create(state="failed", **common)
    Deployment.objects.create(state="refused", **common)
    page = support_client.get(reverse("node", args=[node.grid_id])).content.decode()
    assert "1 refused by ZOS" in page and "(1 turned away" not in page
    assert "besides, 1 turned away by the precheck, never sent to the grid" in page


def test_withheld_slices_are_not_offered_ones_zos_would_refuse(sim_node, support_client):
    node = sim_node(1774, **node_1774(), policy_name="zos")
    node_withhold(nodes=[Node.objects.get(pk=node.pk)], reason="disk swap", via="cli")
    page = support_client.get(reverse("node", args=[1774])).content.decode()
    card = page[page.index('id="phantom-card"') :].split("</div>")[0]
    assert "offered" not in card and "free, none placeable: withheld (maintenance or quarantine)" in card
    fleet = support_client.get(reverse("fleet")).content.decode()
    assert "would be refused</span>" not in fleet


def test_a_fitting_slice_says_fits_once(sim_node, support_client):
    sim_node(1774, **node_1774(), policy_name="zos")
    page = support_client.get(reverse("node", args=[1774])).content.decode()
    assert "✓ fits" not in page and "fits: needs" in page
    answer = support_client.get(reverse("placement"), {"cru": 1, "mru": "4GiB", "sru": "100GiB"}).content.decode()
    assert "✓ fits" not in answer and "fits fits" not in answer and "fits: needs" in answer


def test_the_proxys_dedicated_flag_is_not_called_no_contracts(sim_node, support_client):
    sim_node(1774, **node_1774(), policy_name="zos")
    events = support_client.get(reverse("node-events", args=[1774])).content.decode()
    assert "No contracts" not in events and 'The proxy\'s "dedicated" flag' in events


def test_a_maintenance_end_a_year_ahead_is_not_refused_for_being_in_the_future(sim_node):
    node = sim_node(1774, **node_1774(), policy_name="zos")
    with pytest.raises(WithholdError) as refused:
        node_withhold(
            nodes=[Node.objects.get(pk=node.pk)], reason="swap", ends_at=timezone.now() + timedelta(days=400), via="cli"
        )
    assert "in the future" not in str(refused.value)
    assert "the furthest a window may be planned" in str(refused.value)
