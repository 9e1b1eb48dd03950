"""/placement/: where a slice of one size can go instead, for admins and support staff alike."""

import pytest
from django.urls import reverse

from dashboard import capacity

GiB = capacity.GiB
URL = reverse("placement")
USUAL = {"cru": 1, "mru": "4GiB", "sru": "151GiB"}


@pytest.fixture
def three_nodes(sim_node):
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", policy_name="legacy")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, farm_name="freefarm")
    sim_node(21, cru=4, mru=8 * GiB, sru=250 * GiB, farm_id=1, status="down")


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(URL, USUAL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_refuses_a_user_in_no_group(nogroup_client, three_nodes):
    response = nogroup_client.get(URL, USUAL)
    assert response.status_code == 403
    assert b"1774" not in response.content


@pytest.mark.django_db
def test_it_refuses_a_post(support_client):
    assert support_client.post(URL, USUAL).status_code == 405


@pytest.mark.django_db
def test_it_shows_the_empty_form_first(support_client):
    response = support_client.get(URL)
    assert response.status_code == 200
    assert response.context["answer"] is None


@pytest.mark.django_db
def test_it_answers_support_staff_with_the_hosts_the_blocks_and_the_best_nodes(support_client, three_nodes):
    response = support_client.get(URL, USUAL)
    answer = response.context["answer"]
    assert (answer.nodes, answer.can_host, answer.blocked["down"]) == (3, 2, 1)
    assert [v.node_id for v in answer.best] == [1774, 20]  # most memory left first
    assert b'data-block="down" data-count="1"' in response.content


@pytest.mark.django_db
def test_it_answers_admins_too(admins_client, three_nodes):
    assert admins_client.get(URL, USUAL).context["answer"].nodes == 3


@pytest.mark.django_db
def test_it_takes_sizes_in_bytes_as_a_failed_deployments_link_gives_them(support_client, three_nodes):
    response = support_client.get(URL, {"cru": 1, "mru": 4 * GiB, "sru": 151 * GiB, "failed_on": 1774})
    assert response.context["answer"].size == capacity.SliceSize(cru=1, mru=4 * GiB, sru=151 * GiB)
    assert b"as failed on" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"mru": "lots"}, b"memory"),
        ({"mru": "4GB"}, b"GiB"),
        ({"mru": "100MiB"}, b"Memory must be between 250 MiB"),
        ({"sru": "-1"}, b"data disk"),
        ({"cru": "0"}, b"greater than or equal to 1"),
        ({"cru": ""}, b"required"),
    ],
)
def test_it_refuses_a_size_it_cannot_read_with_a_400_that_says_why(support_client, three_nodes, changes, words):
    response = support_client.get(URL, {**USUAL, **changes})
    assert response.status_code == 400
    assert words in response.content
    assert response.context["answer"] is None


@pytest.mark.django_db
def test_it_reads_the_fleet_in_a_constant_number_of_queries(support_client, three_nodes, sim_node):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as before:
        support_client.get(URL, USUAL)
    for node_id in range(100, 110):
        sim_node(node_id, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    with CaptureQueriesContext(connection) as after:
        support_client.get(URL, USUAL)
    assert len(after) == len(before)


@pytest.mark.django_db
def test_each_failed_deployment_links_to_where_it_can_go_instead(support_client, failed_on_1774):
    response = support_client.get(reverse("deployments-failed"))
    d = failed_on_1774
    assert f"{URL}?cru={d.cru}&amp;mru={d.mru}&amp;sru={d.sru}&amp;failed_on=1774".encode() in response.content


@pytest.mark.django_db
def test_the_fleet_page_links_to_it(support_client):
    assert URL.encode() in support_client.get(reverse("fleet")).content


@pytest.mark.django_db
def test_it_shows_a_size_given_in_bytes_as_people_write_it(support_client, three_nodes):
    response = support_client.get(URL, {"cru": 1, "mru": 4 * GiB, "sru": 151 * GiB + 1})
    assert b'value="4GiB"' in response.content
    assert f'value="{151 * GiB + 1}"'.encode() in response.content


@pytest.mark.django_db
def test_issue_45_the_page_shows_each_best_nodes_odds_and_takes_min_odds_as_the_api_does(
    support_client, three_nodes, api_call, api_token
):
    asked = {"cru": 1, "mru": "4GiB", "sru": "100GiB"}
    page = support_client.get(reverse("placement"), asked).content.decode()
    assert 'name="min_odds"' in page and '<th class="num">Odds</th>' in page
    assert 'data-odds="1.0"' in page or 'data-odds="1"' in page  # nothing taught: sure everywhere
    api = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=4 * GiB, sru=100 * GiB, min_odds=1.0)
    strict = support_client.get(reverse("placement"), {**asked, "min_odds": "1.0"}).content.decode()
    assert f'data-limit="min_odds" data-count="{api.json()["limited"]["min_odds"]}"' in strict
    assert support_client.get(reverse("placement"), {**asked, "min_odds": "1.5"}).status_code == 400
