"""/api/v1/holds: one free slice held for one buyer; exactly one winner; bad input writes nothing."""

import datetime as dt
import threading

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from dashboard.deployments.services.holds import HoldConflict, hold_create
from dashboard.models import AuditEvent, Hold, Slice
from tests.factories import sim_node_1774

URL = "/api/v1/holds"


@pytest.fixture
def node_1774(sim_node):
    return sim_node_1774(sim_node)


def body(**fields):
    return {"node_id": 1774, "slice_index": 5, "ttl_seconds": 600, "marketplace_id": "contract-1", **fields}


@pytest.mark.django_db
def test_it_holds_a_free_slice_and_answers_201(node_1774, api_call, api_token):
    response = api_call("post", URL, api_token("report"), json=body())
    answer = response.json()
    assert response.status_code == 201
    assert (answer["node_id"], answer["slice_index"], answer["marketplace_id"], answer["state"]) == (
        1774,
        5,
        "contract-1",
        "live",
    )
    assert dt.datetime.fromisoformat(answer["expires_at"]) - dt.datetime.fromisoformat(answer["created_at"]) == (
        dt.timedelta(seconds=600)
    )


@pytest.mark.django_db
def test_it_audits_the_hold_with_the_buyer(node_1774, api_call, api_token):
    api_call("post", URL, api_token("report"), json=body())
    event = AuditEvent.objects.get(action="hold.made")
    assert (event.node_id, event.detail["marketplace_id"], event.detail["slice"]) == (node_1774.pk, "contract-1", 5)


@pytest.mark.django_db
def test_a_second_buyer_gets_a_409_naming_the_hold(node_1774, api_call, api_token):
    token = api_token("report")
    api_call("post", URL, token, json=body())
    response = api_call("post", URL, token, json=body(marketplace_id="contract-2"))
    assert response.status_code == 409
    assert "'contract-1'" in response.json()["detail"] and response.json()["field"] == "slice_index"


@pytest.mark.django_db
def test_a_deployed_slice_cannot_be_held(sim_node, api_call, api_token):
    sim_node_1774(sim_node, deployed=(0,))
    response = api_call("post", URL, api_token("report"), json=body(slice_index=0))
    assert response.status_code == 409
    assert "deployed, not free" in response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"node_id": 999999}, "node_id"),
        ({"slice_index": 42}, "slice_index"),
        ({"ttl_seconds": 0}, "ttl_seconds"),
        ({"ttl_seconds": 1801}, "ttl_seconds"),
        ({"ttl_seconds": -5}, "ttl_seconds"),
        ({"marketplace_id": "  "}, "marketplace_id"),
        ({"marketplace_id": "a\x00b"}, "marketplace_id"),
        ({"ttl_seconds": "soon"}, "ttl_seconds"),
        ({"ttl_seconds": True}, "ttl_seconds"),
        ({"slice_index": False}, "slice_index"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(node_1774, api_call, api_token, fields, field):
    token = api_token("report")
    audited = AuditEvent.objects.count()
    response = api_call("post", URL, token, json=body(**fields))
    assert (response.status_code, response.json()["field"]) == (400, field)
    assert (Hold.objects.count(), AuditEvent.objects.count()) == (0, audited)


@pytest.mark.django_db
def test_the_cap_is_the_setting(node_1774, api_call, api_token, settings):
    settings.HOLD_MAX_TTL = 60
    response = api_call("post", URL, api_token("report"), json=body(ttl_seconds=61))
    assert response.status_code == 400 and "HOLD_MAX_TTL" in response.json()["detail"]


@pytest.mark.django_db
def test_a_read_token_cannot_hold(node_1774, api_call, api_token):
    response = api_call("post", URL, api_token("read"), json=body())
    assert response.status_code == 403
    assert not Hold.objects.exists()


@pytest.mark.django_db
def test_delete_releases_and_the_slice_can_be_held_again(node_1774, api_call, api_token):
    token = api_token("report")
    hold_id = api_call("post", URL, token, json=body()).json()["id"]
    released = api_call("delete", f"{URL}/{hold_id}", token)
    again = api_call("post", URL, token, json=body(marketplace_id="contract-2"))
    assert (released.status_code, released.json()["state"], again.status_code) == (200, "released", 201)
    assert AuditEvent.objects.filter(action="hold.released").count() == 1


@pytest.mark.django_db
def test_delete_of_an_ended_or_unknown_hold_is_refused(node_1774, api_call, api_token):
    token = api_token("report")
    hold_id = api_call("post", URL, token, json=body()).json()["id"]
    api_call("delete", f"{URL}/{hold_id}", token)
    assert api_call("delete", f"{URL}/{hold_id}", token).status_code == 409
    assert api_call("delete", f"{URL}/987654", token).status_code == 404


@pytest.mark.django_db
def test_get_lists_the_live_holds_only(node_1774, api_call, api_token):
    now = timezone.now()
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="live-one", source="command")
    hold_create(
        node_id=1774,
        slice_index=4,
        ttl_seconds=60,
        marketplace_id="gone",
        source="command",
        now=now - dt.timedelta(hours=1),
    )
    answer = api_call("get", URL, api_token("read")).json()
    assert [h["marketplace_id"] for h in answer["holds"]] == ["live-one"]
    assert (answer["count"], answer["pages"]) == (1, 1)


@pytest.mark.django_db
def test_an_expired_hold_is_free_at_once_with_no_worker(node_1774):
    made = timezone.now().replace(microsecond=0)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=60, marketplace_id="first", source="command", now=made)
    with pytest.raises(HoldConflict):
        hold_create(
            node_id=1774,
            slice_index=5,
            ttl_seconds=60,
            marketplace_id="second",
            source="command",
            now=made + dt.timedelta(seconds=59),
        )
    later = made + dt.timedelta(seconds=60)
    assert not Hold.objects.live(later).exists()
    second = hold_create(
        node_id=1774, slice_index=5, ttl_seconds=60, marketplace_id="second", source="command", now=later
    )
    assert list(Hold.objects.order_by("pk").values_list("end", flat=True)) == ["expired", ""]
    assert second.marketplace_id == "second"


@pytest.mark.django_db(transaction=True)
def test_twenty_buyers_at_once_one_201_nineteen_409(sim_node, api_token):
    sim_node_1774(sim_node)
    secret = api_token("report")
    buyers = 20
    barrier = threading.Barrier(buyers)
    statuses: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def buy(n: int):
        try:
            client = Client()
            barrier.wait(timeout=60)
            response = client.post(
                URL,
                body(marketplace_id=f"buyer-{n}"),
                content_type="application/json",
                headers={"Authorization": f"Bearer {secret}"},
            )
            with lock:
                statuses.append(response.status_code)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=buy, args=(n,)) for n in range(buyers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(statuses) == [201] + [409] * 19
    assert Hold.objects.count() == 1
    assert Slice.objects.get(node__grid_id=1774, index=5).state == "free"  # held, not taken


def report(api_call, token, **fields):
    at = (timezone.now() - dt.timedelta(seconds=5)).isoformat()
    sent = {"node_id": 1774, "slice_index": 5, "marketplace_id": "contract-1", "outcome": "deployed", "at": at}
    return api_call("post", "/api/v1/deployments", token, json={**sent, **fields})


@pytest.fixture
def old_slices(node_1774):
    Slice.objects.filter(node=node_1774).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node_1774


@pytest.mark.django_db
def test_a_deployed_report_of_the_same_id_turns_the_hold_into_the_deployment(old_slices, api_call, api_token):
    token = api_token("report")
    api_call("post", URL, token, json=body())
    response = report(api_call, token)
    assert response.status_code == 201
    assert Slice.objects.get(node=old_slices, index=5).state == "deployed"
    assert list(Hold.objects.values_list("end", flat=True)) == ["deployed"]
    assert AuditEvent.objects.get(action="hold.deployed").detail["marketplace_id"] == "contract-1"


@pytest.mark.django_db
def test_a_deployed_report_of_another_id_on_a_held_slice_is_a_409_naming_the_hold(old_slices, api_call, api_token):
    token = api_token("report")
    hold_id = api_call("post", URL, token, json=body()).json()["id"]
    response = report(api_call, token, marketplace_id="intruder")
    assert response.status_code == 409
    assert f"hold #{hold_id}" in response.json()["detail"] and "'contract-1'" in response.json()["detail"]
    assert Slice.objects.get(node=old_slices, index=5).state == "free"
    assert list(Hold.objects.values_list("end", flat=True)) == [""]


@pytest.mark.django_db
def test_the_node_page_shows_the_hold_with_the_buyer_and_expiry_to_support(node_1774, client, role_user):
    hold = hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="contract-9", source="command")
    client.force_login(role_user("support", password=None))
    page = client.get("/nodes/1774/").content.decode()
    assert 'data-held-by="contract-9"' in page
    assert f"until {hold.expires_at:%Y-%m-%d %H:%M:%S} UTC" in page
    assert 'data-free="6" data-held="1"' in page  # 7 legacy slices: 6 on offer


@pytest.mark.django_db
def test_the_node_api_counts_a_held_slice_apart_until_it_expires(node_1774, api_call, api_token):
    made = timezone.now() - dt.timedelta(seconds=30)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="a", source="command", now=made)
    hold_create(node_id=1774, slice_index=4, ttl_seconds=10, marketplace_id="b", source="command", now=made)
    figures = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["figures"]
    assert (figures["free"], figures["held"]) == (6, 1)


@pytest.mark.django_db
def test_the_precheck_refuses_a_slice_held_for_another_buyer(node_1774, api_call, api_token):
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="first", source="command")
    token = api_token("precheck")
    other = api_call("post", "/api/v1/nodes/1774/precheck", token, json={"slice_index": 5, "marketplace_id": "second"})
    anonymous = api_call("post", "/api/v1/nodes/1774/precheck", token, json={"slice_index": 5})
    holder = api_call("post", "/api/v1/nodes/1774/precheck", token, json={"slice_index": 5, "marketplace_id": "first"})
    assert (other.status_code, anonymous.status_code, holder.status_code) == (409, 409, 200)
    assert "'first'" in other.json()["detail"]
    assert holder.json()["held_slices"][0]["marketplace_id"] == "first"


def test_a_slice_of_a_closed_node_cannot_be_held(api_call, api_token, sim_node):
    """A withheld node offers nothing: a hold there is a 409 saying why, and nothing is written."""
    from dashboard.models import Hold, Node
    from dashboard.nodes.services.withholds import node_withhold
    from tests.factories import sim_node_1774

    sim_node_1774(sim_node)
    node_withhold(nodes=[Node.objects.get(grid_id=1774)], reason="disk swap", via="command")
    body = {"node_id": 1774, "slice_index": 5, "ttl_seconds": 60, "marketplace_id": "c-9"}
    answer = api_call("post", "/api/v1/holds", api_token("report"), json=body)
    assert answer.status_code == 409, answer.content
    assert "withheld" in answer.json()["detail"] and "disk swap" in answer.json()["detail"]
    assert not Hold.objects.exists()


@pytest.mark.django_db
def test_another_users_report_token_cannot_end_a_buyers_hold(node_1774, api_call, api_token, role_user):
    mine = api_token("report")
    made = api_call("post", URL, mine, json=body()).json()
    stranger = api_token("report", user=role_user("admins", username="other-market"))
    response = api_call("delete", f"{URL}/{made['id']}", stranger)
    assert response.status_code == 403 and "only that token, or an admin's act token" in response.json()["detail"]
    assert Hold.objects.get().ended_at is None
    assert api_call("delete", f"{URL}/{made['id']}", mine).status_code == 200


@pytest.mark.django_db
def test_the_holds_list_is_paged_with_a_count_and_never_stops_silently(node_1774, api_call, api_token):
    for index in range(3):
        hold_create(node_id=1774, slice_index=index, ttl_seconds=600, marketplace_id=f"b-{index}", source="command")
    token = api_token("read")
    first = api_call("get", URL, token, per_page=2).json()
    second = api_call("get", URL, token, per_page=2, page=2).json()
    assert (first["count"], first["pages"], len(first["holds"]), len(second["holds"])) == (3, 2, 2, 1)
