"""A deployment ZOS refused is a failed deployment; one the precheck stopped was turned away before the
grid. Counted apart on the node page, in the API and by the alerts (issue 25: a standby node tried from
the CLI fired "failed for node-offline")."""

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.alerts import rules
from dashboard.alerts.selectors.alerts import alert_figures
from dashboard.models import Deployment
from dashboard.nodes.selectors.node import node_detail

LIMITS = rules.Limits(failed_spike=3)


def attempts(node, *, failed: int, turned_away: int) -> None:
    common = {"node": node, "slice_index": 0, "cru": 1, "mru": 1, "sru": 1, "cause": "node-offline"}
    for _ in range(failed):
        Deployment.objects.create(state="failed", **common)
    for _ in range(turned_away):
        Deployment.objects.create(state="refused", **common)


@pytest.mark.django_db
def test_precheck_refusals_fire_no_failed_deployments_alert(legacy_fleet):
    (node,) = legacy_fleet(1)
    attempts(node, failed=0, turned_away=5)
    figures = alert_figures(now=timezone.now(), limits=LIMITS)
    assert rules.failed_deployments(figures, LIMITS) == []


@pytest.mark.django_db
def test_refusals_by_zos_still_do(legacy_fleet):
    (node,) = legacy_fleet(1)
    attempts(node, failed=3, turned_away=5)
    (condition,) = rules.failed_deployments(alert_figures(now=timezone.now(), limits=LIMITS), LIMITS)
    assert condition.summary.startswith("3 deployments failed for node-offline")


@pytest.mark.django_db
def test_the_node_page_and_the_api_count_them_apart(legacy_fleet, support_client, api_call, api_token):
    (node,) = legacy_fleet(1)
    attempts(node, failed=2, turned_away=3)
    detail = node_detail(node_id=node.grid_id)
    assert (detail.failed_deployments, detail.turned_away_deployments) == (2, 3)
    page = support_client.get(reverse("node", args=[node.grid_id])).content.decode()
    assert "2 refused by ZOS" in page and "besides, 3 turned away by the precheck, never sent to the grid" in page
    body = api_call("get", f"/api/v1/nodes/{node.grid_id}", api_token()).json()
    assert (body["failed_deployments"], body["turned_away_deployments"]) == (2, 3)
