"""Issue 22's numbered findings, one test each (or a few), reproduced as they were reported.

Each was written before its fix and failed then; the detailed rules live in their own modules
(tests/capacity/test_outcome_rules.py, test_api_door.py, test_api_writes.py, test_api_fuzz_fields.py,
test_grid_paging.py). These stay as the record: the exact report that corrupted the catalog, and what it
gets now. Finding 6's bulk re-register during a policy edit is in test_jobs_bulk_pages.py, its
credentials in GRID_PROXY_URL in test_grid_proxy_credentials.py; its two job findings (which token asked,
a dead worker's count) are another round's.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.models import Deployment, Node, Observation, Slice

pytestmark = pytest.mark.django_db
URL = "/api/v1/deployments"
MEMORY_ERROR = "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"


@pytest.fixture
def node_1774(sim_node):
    """Node 1774, legacy catalog; its slices made a day ago (a report may not be older than its slice)."""
    node = sim_node(1774, policy_name="legacy", cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node


@pytest.fixture
def report(api_call, api_token, django_capture_on_commit_callbacks):
    """report(marketplace_id, outcome, at=..., **fields) -> response (slice 2 of node 1774 by default)."""
    token = api_token("report")

    def send(marketplace_id: str, outcome: str, *, at: dt.datetime | str | None = None, **fields):
        when = at if at is not None else timezone.now() - dt.timedelta(minutes=1)
        body = {
            "node_id": 1774,
            "slice_index": 2,
            "marketplace_id": marketplace_id,
            "outcome": outcome,
            "at": when if isinstance(when, str) else when.isoformat(),
            **fields,
        }
        with django_capture_on_commit_callbacks(execute=False):
            return api_call("post", URL, token, json=body)

    return send


def minutes_ago(n: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(minutes=n)


# --- 1. a `released` with a marketplace id never seen frees another deployment's slice ----------


def test_1_a_release_by_an_unknown_id_is_refused_naming_the_live_one(report, node_1774):
    assert report("A", "deployed", at=minutes_ago(10)).status_code == 201
    refused = report("intruder", "released", at=minutes_ago(9))
    assert (refused.status_code, refused.json()["field"]) == (409, "marketplace_id")
    assert "'A'" in refused.json()["detail"]
    assert Slice.objects.get(node=node_1774, index=2).state == "deployed"
    assert not Deployment.objects.filter(marketplace_id="intruder").exists()


def test_1_a_second_deployment_on_a_held_slice_is_refused_naming_the_live_one(report, node_1774):
    report("A", "deployed", at=minutes_ago(10))
    report("intruder", "released", at=minutes_ago(9))
    third = report("third", "deployed", at=minutes_ago(8))
    assert third.status_code == 409 and "'A'" in third.json()["detail"]
    assert list(Deployment.objects.filter(state="deployed").values_list("marketplace_id", flat=True)) == ["A"]
    released = report("A", "released", at=minutes_ago(7))
    assert released.status_code == 200
    assert Slice.objects.get(node=node_1774, index=2).state == "free"


def test_1_the_database_refuses_two_live_deployments_of_one_slice(node_1774):
    slice_ = node_1774.slices.get(index=2)
    fields = {"node": node_1774, "slice": slice_, "slice_index": 2, "cru": 1, "mru": GiB, "sru": GiB}
    Deployment.objects.create(state="deployed", marketplace_id="A", **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Deployment.objects.create(state="deployed", marketplace_id="third", **fields)


# --- 2. a timestamp before year 1 in UTC poisons the listings -----------------------------------


@pytest.mark.parametrize(
    "at",
    ["0001-01-01T00:00:00+01:00", "0001-01-01T13:59:59+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00Z"],
)
def test_2_a_time_at_the_ends_of_the_calendar_is_refused_and_writes_nothing(report, node_1774, api_call, api_token, at):
    response = report("c-1", "failed", at=at, error=MEMORY_ERROR)
    assert (response.status_code, response.json()["field"]) == (400, "at")
    assert Deployment.objects.count() == 0
    assert api_call("get", URL, api_token("read")).status_code == 200


# --- 3. an old `at` teaches a fresh lesson; a release before its deploy is accepted --------------


def test_3_a_failure_dated_1970_is_refused(report, node_1774):
    response = report("c-1", "failed", at="1970-01-01T00:00:00Z", error=MEMORY_ERROR, slice_index=6)
    assert (response.status_code, response.json()["field"]) == (400, "at")
    assert (Deployment.objects.count(), Observation.objects.count()) == (0, 0)


def test_3_a_lesson_is_dated_by_its_refusal_and_ages_from_it(report, node_1774, settings):
    settings.OBSERVATION_MAX_AGE_DAYS = 5
    Node.objects.filter(pk=node_1774.pk).update(used_mru=3 * GiB)  # a reading the refusal can be read against
    at = timezone.now() - dt.timedelta(days=6)
    Slice.objects.filter(node=node_1774).update(created_at=at - dt.timedelta(days=1))  # older than the refusal
    response = report("c-1", "failed", at=at, error=MEMORY_ERROR, slice_index=6)
    assert response.status_code == 201
    observation = Observation.objects.get()
    assert observation.seen_at == at
    assert Node.objects.get(pk=node_1774.pk).hidden_mru_per_vm == 0  # aged out already: it counts for nothing


def test_3_a_release_dated_before_its_deploy_is_refused(report, node_1774):
    report("A", "deployed", at=minutes_ago(10))
    response = report("A", "released", at=minutes_ago(20))
    assert (response.status_code, response.json()["field"]) == (409, "at")
    assert Deployment.objects.get(marketplace_id="A").state == "deployed"
    assert Slice.objects.get(node=node_1774, index=2).state == "deployed"


# --- 4. paging never ends against a proxy that ignores `page` or invents new ids ----------------


def proxy_node(node_id: int, farm_id: int = 4242) -> dict:
    from tests.gridproxy_canned import sample

    entry = dict(sample("nodes-page.json")[0])
    entry.update(nodeId=node_id, farmId=farm_id, twinId=10_000 + node_id)
    return entry


@pytest.fixture
def hostile_proxy(settings):
    """hostile_proxy(body) -> the canned proxy answering GET /nodes with body(query); pages of 5."""
    from tests.gridproxy_canned import Answer, start_canned_proxy

    settings.GRID_PAGE_SIZE = 5
    servers = []

    def serve(body):
        canned, server = start_canned_proxy()
        canned.answer("/nodes", Answer(body=body))
        servers.append(server)
        return canned

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def onboard_farm(url: str):
    from dashboard.grid.proxy import GridProxyClient
    from dashboard.nodes.services.onboarding import OnboardRequest, OnboardStopped, grid_onboard

    try:
        return grid_onboard(request=OnboardRequest(farm_ids=(4242,)), grid=GridProxyClient(url, retries=0))
    except OnboardStopped as stopped:
        return stopped.result


def test_4_a_proxy_that_ignores_page_is_read_twice_and_no_more(hostile_proxy):
    canned = hostile_proxy(lambda query: [proxy_node(n) for n in range(1, 6)])
    result = onboard_farm(canned.url)
    assert canned.hits["/nodes"] == 2
    assert (result.finished, result.registered, Node.objects.count()) == (False, 5, 5)
    assert "page 2" in result.stopped and "\n" not in result.stopped


def test_4_a_proxy_that_invents_nodes_is_read_up_to_the_page_ceiling(hostile_proxy, settings):
    settings.GRID_MAX_PAGES = 4
    canned = hostile_proxy(lambda query: [proxy_node(int(query["page"]) * 100 + n) for n in range(5)])
    result = onboard_farm(canned.url)
    assert canned.hits["/nodes"] == 4
    assert (result.finished, result.registered, Node.objects.count()) == (False, 20, 20)
    assert "GRID_MAX_PAGES" in result.stopped


def test_4_an_onboarding_registers_no_more_new_nodes_than_allowed(hostile_proxy, settings):
    settings.ONBOARD_MAX_NEW_NODES = 12
    canned = hostile_proxy(lambda query: [proxy_node(int(query["page"]) * 100 + n) for n in range(5)])
    result = onboard_farm(canned.url)
    assert (result.finished, result.registered, Node.objects.count()) == (False, 10, 10)
    assert "ONBOARD_MAX_NEW_NODES" in result.stopped


# --- 5. 500s from input -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["marketplace_id", "workload_id"])
def test_5_a_nul_in_an_id_is_a_400_naming_the_field(report, node_1774, field):
    fields = {"marketplace_id": "c-1", "workload_id": "w-1", field: "c\x00-1"}
    response = report(fields.pop("marketplace_id"), "deployed", **fields)
    assert (response.status_code, response.json()["field"]) == (400, field)
    assert Deployment.objects.count() == 0


def test_5_a_huge_max_age_is_a_400(api_call, api_token, node_1774):
    token = api_token("precheck")
    response = api_call("post", "/api/v1/nodes/1774/precheck", token, json={"max_age_seconds": 10**14})
    assert (response.status_code, response.json()["field"]) == (400, "max_age_seconds")


def test_5_a_nul_in_the_search_is_a_400(api_call, api_token, node_1774):
    response = api_call("get", "/api/v1/nodes", api_token("read"), search="\x00")
    assert (response.status_code, response.json()["field"]) == (400, "search")


def test_5_a_body_over_the_upload_limit_gets_the_json_error_shape(api_call, api_token, node_1774, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api_call(
        "post", URL, api_token("report"), json={"marketplace_id": "c" * 2000, "node_id": 1774, "outcome": "failed"}
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert set(response.json()) >= {"detail", "field"} and "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]


# --- 6. the smaller ones ------------------------------------------------------------------------


def test_6_an_admin_cannot_mint_a_token_in_a_superusers_name(role_user, django_user_model):
    from dashboard.access.services.tokens import TokenError, api_token_create

    root = django_user_model.objects.create_superuser("root", password="not-a-real-password-1774")
    admin = role_user("admins", username="ada")
    with pytest.raises(TokenError) as refused:
        api_token_create(user=root, name="mine now", scopes="read", by=admin)
    assert refused.value.field == "user"
    assert api_token_create(user=admin, name="my own", scopes="read", by=admin).token.user == admin
    assert api_token_create(user=admin, name="from root", scopes="read", by=root).token.user == admin


def test_6_bidi_and_escape_characters_from_a_reported_error_are_shown_escaped(report, node_1774, support_client):
    error = f"{MEMORY_ERROR} \u202egnp.exe\u202c and \x1b[31mred"
    assert report("c-1", "failed", slice_index=6, error=error.replace("\x1b", "")).status_code == 201
    # An old row written before the door refused ESC: shown escaped all the same.
    Deployment.objects.filter(marketplace_id="c-1").update(raw_error=error)
    page = support_client.get("/deployments/failed/").content.decode()
    assert "\u202e" not in page and "\x1b" not in page
    assert "\\u202e" in page and "\\x1b" in page
