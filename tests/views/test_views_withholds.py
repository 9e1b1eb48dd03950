"""The withhold panel on the node page and the farm's form: admins withhold and release, support reads."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.deployments.services.outcomes import deployment_outcome_record
from dashboard.models import AuditEvent, Node, NodeWithhold, Slice
from dashboard.nodes.services.withholds import node_withhold
from tests.factories import node_1774, sim_node_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(sim_node):
    return sim_node_1774(sim_node)


def test_an_admin_withholds_a_node_with_a_reason(admins_client, node):
    response = admins_client.post(reverse("node-withhold", args=[1774]), {"reason": "disk swap"})
    assert response.status_code == 302
    window = NodeWithhold.objects.get()
    assert (window.reason, window.created_by.username, Node.objects.get(pk=node.pk).withheld_reason) == (
        "disk swap",
        "ada",
        "disk swap",
    )


def test_an_htmx_withhold_swaps_the_panel_and_refreshes_the_catalog(admins_client, node):
    response = admins_client.post(
        reverse("node-withhold", args=[1774]), {"reason": "disk swap"}, HTTP_HX_REQUEST="true"
    )
    text = response.content.decode()
    assert (response.status_code, "catalog-changed" in response["HX-Trigger"]) == (200, True)
    assert 'id="withheld-reason">disk swap<' in text


def test_the_form_says_why_a_window_is_refused_and_writes_nothing(admins_client, node):
    response = admins_client.post(
        reverse("node-withhold", args=[1774]),
        {"reason": "disk swap", "starts_at": "2027-06-02T10:00", "ends_at": "2027-06-01T10:00"},
        HTTP_HX_REQUEST="true",
    )
    assert "ends (2027-06-01 10:00 UTC) before it starts" in response.content.decode()
    assert not NodeWithhold.objects.exists()


def test_the_form_times_are_utc(admins_client, node):
    admins_client.post(
        reverse("node-withhold", args=[1774]),
        {"reason": "disk swap", "starts_at": "2027-06-01T10:00", "ends_at": "2027-06-01T12:00"},
    )
    window = NodeWithhold.objects.get()
    assert window.starts_at == dt.datetime(2027, 6, 1, 10, 0, tzinfo=dt.UTC)


def test_support_sees_the_reason_and_no_form(support_client, node):
    node_withhold(nodes=[node], reason="disk swap")
    text = support_client.get(reverse("node", args=[1774])).content.decode()
    assert 'id="withheld-reason">disk swap<' in text
    assert 'id="withhold-form"' not in text and 'id="withheld-badge"' in text


def test_support_cannot_withhold(support_client, node):
    response = support_client.post(reverse("node-withhold", args=[1774]), {"reason": "disk swap"})
    assert (response.status_code, NodeWithhold.objects.count()) == (403, 0)


def test_support_cannot_release(support_client, node):
    node_withhold(nodes=[node], reason="disk swap")
    response = support_client.post(reverse("node-withhold-release", args=[1774]))
    assert (response.status_code, Node.objects.get(pk=node.pk).withheld_reason) == (403, "disk swap")


def test_withhold_is_post_only(admins_client, node):
    assert admins_client.get(reverse("node-withhold", args=[1774])).status_code == 405


def test_the_panel_needs_a_login(client, node):
    response = client.get(reverse("node-withhold-panel", args=[1774]), HTTP_HX_REQUEST="true")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_an_admin_releases_and_it_is_audited(admins_client, node):
    node_withhold(nodes=[node], reason="disk swap")
    admins_client.post(reverse("node-withhold-release", args=[1774]))
    assert Node.objects.get(pk=node.pk).withheld_reason == ""
    assert AuditEvent.objects.get(action="node withhold released").actor.username == "ada"


def test_a_quarantine_shows_its_failures_and_an_admin_lifts_it(admins_client, node, settings):
    settings.QUARANTINE_AFTER_FAILURES = 2
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    for i in range(2):
        deployment_outcome_record(
            node_id=1774,
            slice_index=1,
            marketplace_id=f"q-{i}",
            outcome="failed",
            error="vm deployment entered error state",
            at=timezone.now(),
        )
    text = admins_client.get(reverse("node", args=[1774])).content.decode()
    assert "the 2 failures that caused it" in text and "(q-1)" in text and 'id="quarantine-lift"' in text
    admins_client.post(reverse("node-withhold-release", args=[1774]), {"source": "quarantine"})
    assert AuditEvent.objects.get(action="quarantine lifted").actor.username == "ada"


def test_an_admin_withholds_a_whole_farm_from_its_page(admins_client, sim_node):
    sim_node_1774(sim_node)
    sim_node(1775, **node_1774())
    sim_node(1776, **node_1774(farm_id=77))
    page = admins_client.get(reverse("fleet") + "?farm=4242").content.decode()
    assert 'id="farm-withhold"' in page
    admins_client.post(reverse("farm-withhold", args=[4242]), {"reason": "farm power work"})
    withheld = dict(Node.objects.values_list("grid_id", "withheld_reason"))
    assert withheld == {1774: "farm power work", 1775: "farm power work", 1776: ""}


def test_support_sees_no_farm_form(support_client, node):
    assert 'id="farm-withhold"' not in support_client.get(reverse("fleet") + "?farm=4242").content.decode()


def test_the_csv_counts_the_withheld_slices(support_client, node):
    node_withhold(nodes=[node], reason="disk swap")
    lines = support_client.get(reverse("fleet-export")).content.decode().splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    assert int(row[header.index("phantom_withheld")]) == Node.objects.get(pk=node.pk).slices_free


def test_the_api_s_node_says_it_is_withheld_and_why(api_call, api_token, node):
    node_withhold(nodes=[node], reason="disk swap")
    body = api_call("get", "/api/v1/nodes/1774", api_token("read", role="support")).json()
    figures = body["figures"]
    assert (figures["placeable_now"], figures["phantom_by_reason"], figures["closure"]) == (
        0,
        {"withheld": Node.objects.get(pk=node.pk).slices_free},
        "withheld",
    )
    assert "is withheld (disk swap, until released)" in figures["closure_words"]


def test_no_release_is_offered_once_every_window_is_over(admins_client, node):
    node_withhold(nodes=[node], reason="disk swap")
    admins_client.post(reverse("node-withhold-release", args=[1774]))
    text = admins_client.get(reverse("node", args=[1774])).content.decode()
    assert 'id="withhold-release"' not in text and "released" in text and 'id="withhold-form"' in text
