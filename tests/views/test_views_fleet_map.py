"""/map/: the fleet map page, with the table's filters and permissions."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import capacity
from dashboard.models import Node
from tests.support import farm_cell_node_ids as node_ids

GiB = capacity.GiB
URL = reverse("fleet-map")


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_refuses_a_user_in_no_group(nogroup_client, small_fleet):
    response = nogroup_client.get(URL)
    assert response.status_code == 403
    assert b"1774" not in response.content


@pytest.mark.django_db
def test_it_refuses_a_post(support_client):
    assert support_client.post(URL).status_code == 405


@pytest.mark.django_db
def test_it_shows_every_node_as_a_link_to_its_page(support_client, small_fleet):
    content = support_client.get(URL).content.decode()
    for node_id in (20, 21, 1774):
        assert f'href="/nodes/{node_id}/" data-node="{node_id}"' in content


@pytest.mark.django_db
def test_it_takes_the_tables_filters(support_client, small_fleet):
    response = support_client.get(URL, {"q": "freefarm", "status": "down"})
    assert [node_id for farm in response.context["map"].farms for node_id in node_ids(farm)] == [21]


@pytest.mark.django_db
def test_it_answers_a_bad_filter_with_a_400_that_says_why(support_client, small_fleet):
    response = support_client.get(URL, {"farm": "x"})
    assert response.status_code == 400
    assert b"Nothing is shown until the filter is fixed." in response.content


@pytest.mark.django_db
def test_the_map_and_the_table_link_to_each_other_with_the_same_filters(support_client, small_fleet):
    assert (
        b'href="/map/?q=freefarm&amp;status=up"'
        in support_client.get(reverse("fleet"), {"q": "freefarm", "status": "up", "sort": "-gap"}).content
    )
    assert b'href="/?q=freefarm&amp;status=up"' in support_client.get(URL, {"q": "freefarm", "status": "up"}).content


@pytest.mark.django_db
def test_it_renders_in_a_constant_number_of_queries(support_client, small_fleet):
    with CaptureQueriesContext(connection) as before:
        support_client.get(URL)
    Node.objects.bulk_create(
        Node(
            grid_id=10_000 + i,
            farm_id=i % 7,
            total_cru=8,
            total_mru=16 * GiB,
            total_sru=465 * GiB,
            carved_policy_name="zos",
        )
        for i in range(300)
    )
    with CaptureQueriesContext(connection) as after:
        response = support_client.get(URL)
    assert len(after) == len(before)
    assert response.context["map"].nodes == 303
