"""The jobs pages: the list, one job's page and the progress fragment the node page polls."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard import capacity
from dashboard.models import Job, Node

GiB = capacity.GiB


def make_node(node_id: int, **fields) -> Node:
    values = {
        "farm_id": 1,
        "total_cru": 8,
        "total_mru": 31 * GiB,
        "total_sru": 931 * GiB,
        "carved_policy_name": "zos",
        **fields,
    }
    return Node.objects.create(grid_id=node_id, **values)


def finished_reregister(node: Node, *, by=None) -> Job:
    now = timezone.now()
    return Job.objects.create(
        kind=Job.Kind.REREGISTER,
        node=node,
        requested_by=by,
        state=Job.State.SUCCEEDED,
        started_at=now - timezone.timedelta(seconds=3),
        finished_at=now,
        result={
            "dry_run": False,
            "before": {"slices": 7, "free": 6, "deployable": 6, "phantom": 1},
            "after": {"slices": 6, "free": 5, "deployable": 6, "phantom": 0},
            "removed": [{"index": i, "cru": 1, "mru": 4 * GiB, "sru": 133 * GiB, "state": "free"} for i in range(1, 7)],
            "added": [{"index": i, "cru": 1, "mru": 4 * GiB, "sru": 151 * GiB, "state": "free"} for i in range(7, 12)],
            "kept": [{"index": 0, "cru": 1, "mru": 4 * GiB, "sru": 133 * GiB, "state": "deployed"}],
            "notes": ["legacy slices replaced"],
        },
    )


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("jobs"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_lists_jobs_with_who_asked_and_the_result(support_client, role_user):
    finished_reregister(make_node(1774), by=role_user("admins", username="alice"))
    response = support_client.get(reverse("jobs"))
    assert response.status_code == 200
    assert b"alice" in response.content
    assert b"7 \xe2\x86\x92 6 slices" in response.content  # "7 → 6 slices"


@pytest.mark.django_db
def test_it_refuses_a_post_to_the_list(support_client):
    assert support_client.post(reverse("jobs")).status_code == 405


@pytest.mark.django_db
def test_it_filters_jobs_by_state(support_client):
    node = make_node(1774)
    finished_reregister(node)
    Job.objects.create(kind=Job.Kind.PRECHECK, node=make_node(42), state=Job.State.QUEUED)
    response = support_client.get(reverse("jobs"), {"state": "queued"})
    assert [job.kind for job in response.context["page"]] == ["precheck"]


@pytest.mark.django_db
def test_it_answers_a_bad_filter_with_one_clear_error(support_client):
    response = support_client.get(reverse("jobs"), {"state": "exploded"})
    assert response.status_code == 400
    assert b"Select a valid choice" in response.content


@pytest.mark.django_db
def test_it_shows_the_before_and_after_of_a_reregister(support_client):
    job = finished_reregister(make_node(1774))
    response = support_client.get(reverse("job", args=[job.pk]))
    assert response.status_code == 200
    assert b"Removed (6)" in response.content
    assert b"Added (5)" in response.content


@pytest.mark.django_db
def test_it_answers_404_for_a_job_that_does_not_exist(support_client):
    assert support_client.get(reverse("job", args=[999999])).status_code == 404


@pytest.mark.django_db
def test_it_keeps_polling_while_the_job_runs(support_client):
    job = Job.objects.create(
        kind=Job.Kind.REREGISTER,
        node=make_node(1774),
        state=Job.State.RUNNING,
        step="reading node 1774's live capacity",
        progress_total=3,
        progress_done=1,
    )
    response = support_client.get(reverse("job-progress", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert b'hx-trigger="every 1s"' in response.content
    assert b"reading node 1774&#x27;s live capacity" in response.content
    assert "HX-Trigger" not in response


@pytest.mark.django_db
def test_it_stops_polling_and_announces_the_new_catalog_when_the_job_ends(support_client):
    job = finished_reregister(make_node(1774))
    response = support_client.get(reverse("job-progress", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert b"hx-trigger" not in response.content
    assert "catalog-changed" in response["HX-Trigger"]


@pytest.mark.django_db
def test_it_renders_the_progress_fragment_without_the_page_around_it(support_client):
    job = finished_reregister(make_node(1774))
    response = support_client.get(reverse("job-progress", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert not response.content.lstrip().startswith(b"<!doctype")
    assert f'id="job-{job.pk}"'.encode() in response.content


@pytest.mark.django_db
def test_it_shows_why_a_job_failed(support_client):
    job = Job.objects.create(
        kind=Job.Kind.REREGISTER,
        node=make_node(1774),
        state=Job.State.FAILED,
        error="node 1774 is not reachable",
        finished_at=timezone.now(),
    )
    response = support_client.get(reverse("job", args=[job.pk]))
    assert b"node 1774 is not reachable" in response.content


def _count_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_it_lists_many_jobs_with_as_many_queries_as_a_few(support_client, role_user):
    users = [role_user("admins", username=f"admin{i}") for i in range(3)]
    for i in range(2):
        finished_reregister(make_node(100 + i), by=users[i])
    few = _count_queries(support_client, reverse("jobs"))
    for i in range(2, 40):
        finished_reregister(make_node(100 + i), by=users[i % 3])
    assert _count_queries(support_client, reverse("jobs")) == few


@pytest.mark.django_db
def test_it_refreshes_the_page_of_a_running_job_without_javascript(support_client):
    job = Job.objects.create(kind=Job.Kind.REREGISTER, node=make_node(1774), state=Job.State.RUNNING)
    assert b'<noscript><meta http-equiv="refresh"' in support_client.get(reverse("job", args=[job.pk])).content


@pytest.mark.django_db
def test_it_stops_refreshing_the_page_once_the_job_ended(support_client):
    job = finished_reregister(make_node(1774))
    assert b'http-equiv="refresh"' not in support_client.get(reverse("job", args=[job.pk])).content


@pytest.mark.django_db
def test_it_refuses_a_post_to_the_progress_fragment(support_client):
    job = finished_reregister(make_node(1774))
    assert support_client.post(reverse("job-progress", args=[job.pk])).status_code == 405


@pytest.mark.django_db
def test_it_shows_a_precheck_result_slice_by_slice(support_client):
    verdict = {"slice": 6, "fits": False, "words": "does not fit: memory: needs 4 GiB, 3.9 GiB available"}
    job = Job.objects.create(
        kind=Job.Kind.PRECHECK,
        node=make_node(1774),
        state=Job.State.SUCCEEDED,
        finished_at=timezone.now(),
        result={
            "free_slices": 1,
            "placeable_now": 0,
            "phantom_slices": [6],
            "verdicts": [verdict],
            "words": "node 1774: 0 of 1 free slices can be placed now; phantom: slice 6",
        },
    )
    content = support_client.get(reverse("job", args=[job.pk])).content
    assert b"Slice 6: does not fit: memory: needs 4 GiB" in content


@pytest.mark.django_db
def test_it_names_the_nodes_a_bulk_reregister_could_not_do(support_client):
    job = Job.objects.create(
        kind=Job.Kind.BULK_REREGISTER,
        state=Job.State.SUCCEEDED,
        finished_at=timezone.now(),
        result={
            "stale": 2,
            "reregistered": 1,
            "unchanged": 0,
            "nodes": [],
            "notes": [],
            "failures": [{"node_id": 3021, "error": "node 3021 is down"}],
            "words": "re-registered 1 of 2 stale node(s); 0 already up to date; 1 failed",
        },
    )
    content = support_client.get(reverse("job", args=[job.pk])).content
    assert b"node 3021</a>: node 3021 is down" in content


def finished_bulk(*, changed: int, sample: int = 100, failures: int = 0, failures_kept: int = 1000) -> Job:
    """A finished bulk job whose result is shaped as bulk_reregister writes it."""
    figures = {"slices": 3, "free": 3, "deployable": 3, "phantom": 0}
    node = {"node_id": 0, "changed": True, "before": figures, "after": figures, "removed": 3, "added": 3, "kept": 0}
    kept = min(failures, failures_kept)
    return Job.objects.create(
        kind=Job.Kind.BULK_REREGISTER,
        state=Job.State.SUCCEEDED,
        finished_at=timezone.now(),
        result={
            "dry_run": False,
            "farm_id": None,
            "stale": changed + failures,
            "seen": changed + failures,
            "reregistered": changed,
            "unchanged": 0,
            "failed": failures,
            "slices": {"removed": 3 * changed, "added": 3 * changed, "kept": 0},
            "fleet": {
                "before": {k: v * changed for k, v in figures.items()},
                "after": {k: v * changed for k, v in figures.items()},
            },
            "failures": [{"node_id": 50000 + i, "error": f"node {50000 + i} is down"} for i in range(kept)],
            "failures_more": failures - kept,
            "nodes": [node | {"node_id": 10000 + i} for i in range(min(changed, sample))],
            "nodes_total": changed,
            "nodes_truncated": changed > sample,
            "notes": [],
            "words": f"re-registered {changed} of {changed + failures} stale node(s); 0 already up to date; {failures} failed",
        },
    )


@pytest.mark.django_db
def test_it_shows_a_bulk_jobs_counts_and_totals(support_client):
    job = finished_bulk(changed=2000, sample=100, failures=3)
    content = support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "<dt>Re-carved</dt><dd>2,000</dd>" in content and "<dt>Failed</dt><dd>3</dd>" in content
    assert "6,000 / 6,000 / 0" in content  # slices removed / added / kept


@pytest.mark.django_db
def test_it_shows_the_sample_of_a_bulk_job_and_says_it_is_one(support_client):
    job = finished_bulk(changed=2000, sample=100)
    content = support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "showing 100 of 2,000; see each node's page" in content
    assert (content.count('href="/nodes/10'), "/nodes/10100/" in content) == (100, False)


@pytest.mark.django_db
def test_it_lists_every_kept_failure_of_a_bulk_job_and_counts_the_rest(support_client):
    job = finished_bulk(changed=10, failures=1003, failures_kept=1000)
    content = support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "Failed nodes (1003)" in content and "and 3 more, not listed" in content
    assert content.count("is down</li>") == 1000


@pytest.mark.django_db
def test_it_lists_jobs_without_reading_a_bulk_jobs_sample_or_failures(support_client):
    finished_bulk(changed=5000, sample=5000, failures=1000)
    response = support_client.get(reverse("jobs"))
    row = response.context["page"][0]
    assert "result" in row.get_deferred_fields() and not {"nodes", "failures"} & set(row.result_brief)
    assert b"Re-registered 5000 of 6000 stale node(s)" in response.content


@pytest.mark.django_db
def test_it_lists_jobs_with_the_same_queries_and_page_whatever_the_size_of_a_bulk_result(support_client):
    url = reverse("jobs")
    job = finished_bulk(changed=5, failures=1)
    few, small_page = _count_queries(support_client, url), len(support_client.get(url).content)
    job.result["nodes"] = job.result["nodes"] * 2000  # 10,000 nodes, as a result held before the cap
    job.save(update_fields=["result"])
    assert (_count_queries(support_client, url), len(support_client.get(url).content)) == (few, small_page)


@pytest.mark.django_db
def test_it_lists_a_bulk_job_in_the_history_of_each_node_it_recarved(support_client):
    from dashboard.models import AuditEvent

    node = make_node(1774)
    job = finished_bulk(changed=1)
    AuditEvent.objects.create(action="job.node-reregistered", node=node, job=job, message="re-register of node 1774")
    AuditEvent.objects.create(
        action="job.node-reregistered", node=make_node(42), job=finished_bulk(changed=1), message=""
    )
    response = support_client.get(reverse("node", args=[1774]))
    assert [j.pk for j in response.context["detail"].jobs] == [job.pk]


def finished_precheck_on(node: Node, status: str) -> Job:
    now = timezone.now()
    verdicts = [{"slice": i, "fits": False, "words": f"does not fit: the node is {status}"} for i in range(6)]
    return Job.objects.create(
        kind=Job.Kind.PRECHECK,
        node=node,
        state=Job.State.SUCCEEDED,
        started_at=now,
        finished_at=now,
        result={
            "node_id": node.grid_id,
            "status": status,
            "cause": "node-offline",
            "free_slices": 6,
            "placeable_now": 0,
            "phantom_slices": list(range(6)),
            "verdicts": verdicts,
            "words": "…",
        },
    )


@pytest.mark.django_db
def test_it_says_a_precheck_on_a_standby_node_in_one_line_without_succeeded(support_client):
    job = finished_precheck_on(make_node(3001, status="standby"), "standby")
    content = support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "node on standby: nothing placeable until woken" in content and "✓ Succeeded" not in content
    assert (
        "Node 3001 is on standby (switched off by its farm&#x27;s power manager): none of its 6 free slices" in content
    )
    assert "✕ phantom" not in content  # one line for the node, not one row per slice


@pytest.mark.django_db
def test_it_shows_a_precheck_on_a_down_node_as_a_warning_in_the_jobs_list_and_on_the_node_page(support_client):
    node = make_node(3002, status="down")
    finished_precheck_on(node, "down")
    assert "node down: nothing placeable until it is up" in support_client.get(reverse("jobs")).content.decode()
    assert (
        "node down: nothing placeable until it is up"
        in support_client.get(reverse("node", args=[3002])).content.decode()
    )


def test_the_pages_say_which_api_token_asked(support_client, role_user):
    from dashboard.access.services.tokens import api_token_create

    holder = role_user("admins", username="deployer-owner")
    token = api_token_create(user=holder, name="deployer", scopes="act").token
    job = finished_reregister(make_node(1774), by=holder)
    Job.objects.filter(pk=job.pk).update(requested_token=token, source=Job.Source.API)
    shown = f"deployer-owner, with token {token.prefix}… (deployer)"
    assert shown in support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert shown in support_client.get(reverse("jobs")).content.decode()


@pytest.mark.django_db
def test_issue_45_defect_5_the_list_says_what_a_fleet_watch_read_as_its_page_does(support_client):
    """A bulk job's `nodes` sample is left out of the list's brief results; a watch's `nodes` count is not."""
    from dashboard.jobs.results import WatchResult

    job = Job.objects.create(
        kind=Job.Kind.FLEET_WATCH,
        state=Job.State.SUCCEEDED,
        finished_at=timezone.now(),
        result=WatchResult(nodes=86, read=86, pages=1, requests=1).stored(),
    )
    listed = support_client.get(reverse("jobs")).content.decode()
    assert "Read 86 of 86 node(s)" in listed and "of 0 node" not in listed
    assert "Read 86 of 86 node(s)" in support_client.get(reverse("job", args=[job.pk])).content.decode()


@pytest.mark.django_db
def test_issue_45_defect_5_a_skipped_watch_says_why_in_the_list(support_client):
    from dashboard.jobs.results import WatchResult

    Job.objects.create(
        kind=Job.Kind.FLEET_WATCH,
        state=Job.State.SUCCEEDED,
        finished_at=timezone.now(),
        result=WatchResult(skipped="the previous watch was still running").stored(),
    )
    assert "Skipped: the previous watch was still running" in support_client.get(reverse("jobs")).content.decode()
