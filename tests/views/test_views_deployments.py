"""The failed deployments page: causes, raw ZOS errors, numbers, filters and the explain box."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import capacity
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.models import Deployment
from tests.factories import MEMORY_ERROR, failed_deployment, node_1774, sim_node_1774

GiB = capacity.GiB


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("deployments-failed"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_shows_the_failure_with_its_cause_and_raw_error(support_client, failed_on_1774):
    response = support_client.get(reverse("deployments-failed"))
    assert b'data-cause="memory"' in response.content
    assert b"cannot fulfil required memory size" in response.content


@pytest.mark.django_db
def test_it_shows_needed_against_usable_and_what_the_node_reported(support_client, failed_on_1774):
    content = support_client.get(reverse("deployments-failed")).content
    assert f"{failed_on_1774.needed_bytes:,} bytes".encode() in content
    assert b"used of 31 GiB" in content


@pytest.mark.django_db
def test_it_links_to_the_node(support_client, failed_on_1774):
    assert b'href="/nodes/1774/"' in support_client.get(reverse("deployments-failed")).content


@pytest.mark.django_db
def test_it_refuses_a_put_and_a_post_with_nothing_to_explain(support_client):
    assert support_client.put(reverse("deployments-failed")).status_code == 405
    assert support_client.post(reverse("deployments-failed")).status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "found"),
    [({"node": 1774}, 1), ({"node": 1}, 0), ({"farm": 4242}, 1), ({"cause": "memory"}, 1), ({"cause": "disk"}, 0)],
)
def test_it_filters_by_node_farm_and_cause(support_client, failed_on_1774, params, found):
    assert len(support_client.get(reverse("deployments-failed"), params).context["rows"]) == found


@pytest.mark.django_db
def test_it_filters_by_date(support_client, failed_on_1774):
    today = failed_on_1774.started_at.date()
    tomorrow = today + dt.timedelta(days=1)
    assert len(support_client.get(reverse("deployments-failed"), {"since": today, "until": today}).context["rows"]) == 1
    assert len(support_client.get(reverse("deployments-failed"), {"since": tomorrow}).context["rows"]) == 0


@pytest.mark.django_db
def test_it_answers_a_reversed_date_range_with_one_clear_error(support_client, failed_on_1774):
    response = support_client.get(reverse("deployments-failed"), {"since": "2025-02-01", "until": "2025-01-01"})
    assert response.status_code == 400
    assert b"The date range is reversed" in response.content


@pytest.mark.django_db
def test_it_explains_a_pasted_error_message(support_client):
    response = support_client.post(reverse("deployments-failed"), {"error": MEMORY_ERROR})
    assert response.context["diagnosis"].cause == "memory"
    assert b'id="diagnosis"' in response.content


@pytest.mark.django_db
def test_it_refuses_an_empty_error_to_explain(support_client):
    response = support_client.post(reverse("deployments-failed"), {"error": "   "})
    assert response.status_code == 400
    assert response.context["diagnosis"] is None


def _count_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_it_reads_many_failures_with_as_many_queries_as_one(support_client, failed_on_1774, sim_node):
    url = reverse("deployments-failed")
    one = _count_queries(support_client, url)
    for node_id in (31, 32, 33):
        node = sim_node(node_id, policy_name="legacy", **node_1774(farm_id=7))
        for index in range(5):
            failed_deployment(
                node, index=index, raw_error="not enough space left in pools of this type ssd", cause="disk"
            )
    assert _count_queries(support_client, url) == one


@pytest.mark.django_db
def test_it_shows_a_real_failure_from_the_simulated_grid(support_client, sim_node):
    """Filling the legacy catalog without the precheck: ZOS refuses the seventh slice, in its own words."""
    node = sim_node_1774(sim_node)
    for index in range(7):
        slice_deploy(node=node, slice_index=index, precheck=False, grid=sim_node.grid, source="command")
    failure = Deployment.objects.get(node=node, state=Deployment.State.FAILED)
    response = support_client.get(reverse("deployments-failed"), {"node": 1774})
    assert f'data-cause="{failure.cause}"'.encode() in response.content
    assert failure.raw_error[:60].encode() in response.content


def _cause_cell(content: bytes) -> str:
    body = content.decode()
    start = body.index('<td data-label="Cause" class="col-cause">')
    return body[start : body.index("</td>", start)]


@pytest.mark.django_db
def test_an_unknown_failure_is_advised_in_plain_words_with_the_engineer_detail_folded(support_client, failed_on_1774):
    failed_on_1774.delete()
    failed_deployment(failed_on_1774.node, index=5, raw_error="vm deployment entered error state", cause="unknown")
    cell = _cause_cell(support_client.get(reverse("deployments-failed")).content)
    words, folded = cell.split("<details", 1)
    assert "run the precheck on the node" in words and "Rust" not in words and "tfcmd" not in words
    assert "For an engineer" in folded and "tfcmd" in folded


@pytest.mark.django_db
def test_a_stale_nodes_advice_says_what_to_do_and_folds_why_it_is_stale(support_client, failed_on_1774):
    from dashboard.models import Node

    Node.objects.filter(pk=failed_on_1774.node.pk).update(
        stale=True, stale_reason="carved by legacy v1; zos v1 is in force"
    )
    cell = _cause_cell(support_client.get(reverse("deployments-failed")).content)
    words, folded = cell.split("<details", 1)
    assert "an admin should re-register the node" in words and "legacy v1" not in words
    assert "Stale catalog: carved by legacy v1" in folded


def test_the_explain_box_posts_so_no_pasted_error_lands_in_a_url(support_client):
    page = support_client.get(reverse("deployments-failed")).content.decode()
    assert '<form method="post" action="/deployments/failed/" class="explain">' in page
    # An error in the query is no longer explained (nor echoed back into a link).
    response = support_client.get(reverse("deployments-failed"), {"error": MEMORY_ERROR})
    assert response.context["diagnosis"] is None
