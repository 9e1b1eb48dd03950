"""The fleet overview: totals, the nodes table, filters, CSV export and the bulk re-register."""

import csv
import io

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import capacity
from dashboard.models import Job
from dashboard.views import fleet

GiB = capacity.GiB
HTMX = {"HTTP_HX_REQUEST": "true"}


def node_ids(response) -> list[int]:
    return [row.node_id for row in response.context["page"]]


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("fleet"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_shows_the_fleet_totals_first(support_client, small_fleet):
    response = support_client.get(reverse("fleet"))
    content = response.content.decode()
    assert response.context["fleet"].totals.nodes == 3
    assert content.index("Stale catalogs") < content.index('id="fleet-table"')


@pytest.mark.django_db
def test_it_lists_every_node_with_its_gap(support_client, small_fleet):
    response = support_client.get(reverse("fleet"))
    assert node_ids(response) == [20, 21, 1774]
    assert b"7 \xe2\x86\x92 6" in response.content  # node 1774: "7 → 6"


@pytest.mark.django_db
def test_it_refuses_a_post(support_client):
    assert support_client.post(reverse("fleet")).status_code == 405


@pytest.mark.django_db
def test_it_filters_by_farm(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"farm": 1})) == [20, 21]


@pytest.mark.django_db
def test_it_filters_by_status(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"status": "down"})) == [21]


@pytest.mark.django_db
def test_it_filters_stale_catalogs(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"stale": "yes"})) == [1774]


@pytest.mark.django_db
def test_it_searches_by_node_id(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"q": "1774"})) == [1774]


@pytest.mark.django_db
def test_it_searches_by_farm_name(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"q": "freefarm"})) == [20, 21]


@pytest.mark.django_db
def test_it_searches_by_farm_id(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"q": "4242"})) == [1774]


@pytest.mark.django_db
def test_it_answers_a_search_that_matches_nothing_with_an_empty_table(support_client, small_fleet):
    response = support_client.get(reverse("fleet"), {"q": "drop table"})
    assert response.status_code == 200
    assert b"No node matches these filters." in response.content


@pytest.mark.django_db
def test_it_sorts_by_node_id_descending(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"sort": "-node_id"})) == [1774, 21, 20]


@pytest.mark.django_db
def test_it_pages_the_table(support_client, small_fleet, monkeypatch):
    monkeypatch.setattr(fleet, "NODES_PER_PAGE", 2)
    assert node_ids(support_client.get(reverse("fleet"), {"page": 2})) == [1774]


@pytest.mark.django_db
def test_it_answers_htmx_with_the_results_alone(support_client, small_fleet):
    response = support_client.get(reverse("fleet"), {"farm": 1}, **HTMX)
    assert response.content.lstrip().startswith(b'<div id="fleet-results"')


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/?format=csv&farm=1", "/export.csv?farm=1"])
def test_it_exports_the_filtered_set_as_csv(support_client, small_fleet, url):
    response = support_client.get(url)
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert response["Content-Type"].startswith("text/csv")
    assert [row["node_id"] for row in rows] == ["20", "21"]


@pytest.mark.django_db
def test_it_exports_the_gap_and_staleness(support_client, small_fleet):
    rows = list(csv.DictReader(io.StringIO(support_client.get("/export.csv?q=1774").content.decode())))
    assert (rows[0]["nominal"], rows[0]["deployable"], rows[0]["gap"], rows[0]["stale"]) == ("7", "6", "1", "yes")


@pytest.mark.django_db
def test_it_quotes_text_a_spreadsheet_would_run_as_a_formula(support_client, sim_node):
    sim_node(30, cru=4, mru=8 * GiB, sru=250 * GiB, farm_id=9, farm_name='=HYPERLINK("x")')
    rows = list(csv.DictReader(io.StringIO(support_client.get("/export.csv").content.decode())))
    assert rows[0]["farm_name"].startswith("'=")


@pytest.mark.django_db
def test_it_refuses_to_export_with_a_bad_filter(support_client):
    response = support_client.get("/export.csv?farm=minus-one")
    assert response.status_code == 400
    assert b"Cannot export" in response.content


@pytest.mark.django_db
def test_it_offers_the_bulk_reregister_to_admins(admins_client, small_fleet):
    assert b"Re-register stale nodes" in admins_client.get(reverse("fleet")).content


@pytest.mark.django_db
def test_it_does_not_offer_the_bulk_reregister_to_support(support_client, small_fleet):
    assert b"Re-register stale nodes" not in support_client.get(reverse("fleet")).content


@pytest.mark.django_db
def test_it_asks_for_confirmation_with_the_number_of_stale_nodes(admins_client, small_fleet):
    response = admins_client.get(reverse("fleet-reregister-stale"))
    assert b"1 node will be re-registered" in response.content
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_it_lists_the_first_stale_nodes_and_counts_the_rest(admins_client, legacy_fleet, monkeypatch):
    monkeypatch.setattr(fleet, "STALE_LISTED", 2)
    legacy_fleet(5)
    content = admins_client.get(reverse("fleet-reregister-stale")).content.decode()
    assert "5 nodes will be re-registered" in content
    assert ">1</a>, <a" in content and ">2</a> and 3 more" in content and ">3</a>" not in content


@pytest.mark.django_db
def test_it_starts_the_bulk_job_on_confirmation(admins_client, small_fleet):
    response = admins_client.post(reverse("fleet-reregister-stale"))
    job = Job.objects.get()
    assert job.kind == "bulk-reregister"
    assert response["Location"] == reverse("job", args=[job.pk])


@pytest.mark.django_db
def test_it_shows_the_running_bulk_job_instead_of_starting_another(admins_client, small_fleet):
    admins_client.post(reverse("fleet-reregister-stale"))
    response = admins_client.post(reverse("fleet-reregister-stale"), follow=True)
    assert Job.objects.count() == 1
    assert b"Already running" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_refuses_the_bulk_reregister_to_support(support_client, small_fleet, method):
    assert getattr(support_client, method)(reverse("fleet-reregister-stale")).status_code == 403
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_it_refuses_another_method_on_the_bulk_reregister(admins_client):
    assert admins_client.put(reverse("fleet-reregister-stale")).status_code == 405


@pytest.mark.django_db
def test_it_refuses_the_bulk_reregister_without_the_csrf_token(role_user, small_fleet):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admins"))
    assert client.post(reverse("fleet-reregister-stale")).status_code == 403
    assert not Job.objects.exists()


def _count_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/", "/?stale=yes&sort=-gap", "/export.csv", "/fleet/reregister-stale/"])
def test_it_reads_a_larger_fleet_with_as_many_queries_as_a_small_one(admins_client, small_fleet, url):
    few = _count_queries(admins_client, url)
    for node_id in range(100, 115):
        small_fleet(
            node_id,
            cru=8,
            mru=16 * GiB,
            sru=465 * GiB,
            farm_id=1 + node_id % 3,
            policy_name="legacy" if node_id % 2 else None,
        )
    assert _count_queries(admins_client, url) == few


@pytest.mark.django_db
def test_it_refuses_a_post_to_the_export(support_client):
    assert support_client.post("/export.csv").status_code == 405


@pytest.mark.django_db
def test_it_shows_deployable_now_after_wake_and_blocked(support_client, small_fleet):
    small_fleet(30, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, farm_name="freefarm", status="standby")
    totals = support_client.get(reverse("fleet")).context["fleet"].totals
    content = support_client.get(reverse("fleet")).content.decode()
    assert totals.deployable_after_wake > 0 and totals.deployable_blocked > 0
    assert (
        f'data-tier="after-wake" title="On nodes on standby: the farm\'s power manager wakes them"><strong>{totals.deployable_after_wake}</strong> after wake</a>'
        in content
    )
    assert (
        f'data-tier="blocked" title="On nodes that are down"><strong>{totals.deployable_blocked}</strong> blocked</a>'
        in content
    )


@pytest.mark.django_db
def test_it_filters_by_tier(support_client, small_fleet):
    assert node_ids(support_client.get(reverse("fleet"), {"tier": "blocked"})) == [21]


@pytest.mark.django_db
def test_it_exports_each_nodes_tier(support_client, small_fleet):
    rows = list(csv.DictReader(io.StringIO(support_client.get("/export.csv").content.decode())))
    assert {row["node_id"]: row["tier"] for row in rows} == {"20": "now", "21": "blocked", "1774": "now"}
