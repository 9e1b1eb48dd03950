"""Thirty memory refusals on nodes of one build at once, holds and releases beside them (issue 44, MEDIUM 5).

A report locks its node; the build's lesson then reaches every node of the build. Done in one
transaction that was two locks in two orders, and PostgreSQL answered DeadlockDetected (16 of 30 as
500s). Now a report that teaches takes its build's turn before its node (lessons.services.group_steps.group_turn)
and keeps it until its refit has run, so the reports of one build run one after another.

Here every request goes through the real API in its own thread, so its own PostgreSQL connection, all
released at once. What they leave is compared, every figure, with the same requests run one by one in the
order the build's turns were taken, on a twin world (same sizes, same numbers): the result is one serial
run's (probe answers sent at once too). The lesson itself depends on the order readings came in (each is
judged and bounded by the line of its moment, lessons.services.lesson_evidence), so against the requests one by
one in the order they were sent only the order-free facts are compared (slices, holds, deployments,
observations, who got a lesson). Past a token's or a build's bound, reports at once get exactly their 429s.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from dashboard import capacity
from dashboard.deployments.services.outcomes import deployment_outcome_record
from dashboard.figures.services.figures import FIGURE_FIELDS, figures_refresh
from dashboard.lessons.selectors.odds import vm_odds_now
from dashboard.models import AuditEvent, Deployment, Hold, MemoryLesson, Node, Observation, Slice
from tests.pg_deadlocks import pg_deadlocks

# Fifty-five threads against a live server and two serial runs: about 100 s, so `make test` runs it, not the quick loop
# (tests/lessons/test_services_group_steps.py keeps a real two-thread deadlock and its retry there).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

GiB, MiB = capacity.GiB, capacity.MiB
BUILD = "v3.14.0-sim"
SIZES = (13 * GiB, 21 * GiB, 31 * GiB)  # legacy carve: 3, 5 and 7 slices of 4 GiB
REFUSING = 15  # nodes, two refusals each: 30
RELEASING = 5  # nodes with two VMs released and three slices held each


def _world(sim_node, base: int) -> tuple[list[Node], list[Node]]:
    """Refusing nodes full but for their last slice, releasing nodes with two VMs, all of BUILD; their
    last reading counts the VMs (a reading after the deploys)."""
    refusing = [
        sim_node(base + i, cru=8, mru=SIZES[i % 3], sru=1000 * GiB, farm_id=base, policy_name="legacy")
        for i in range(REFUSING)
    ]
    releasing = [
        sim_node(base + 50 + i, cru=8, mru=31 * GiB, sru=1000 * GiB, farm_id=base, policy_name="legacy")
        for i in range(RELEASING)
    ]
    nodes = refusing + releasing
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(zos_version=BUILD)
    Slice.objects.filter(node__in=nodes).update(created_at=timezone.now() - dt.timedelta(days=1))
    at = timezone.now() - dt.timedelta(minutes=1)
    for node in refusing:
        for index in range(_slices(node) - 1):
            _report(node, index, f"vm-{node.grid_id}-{index}", "deployed", at)
    for node in releasing:
        for index in (0, 1):
            _report(node, index, f"vm-{node.grid_id}-{index}", "deployed", at)
    for node in nodes:
        vms = node.slices.filter(state=Slice.State.DEPLOYED).count()
        Node.objects.filter(pk=node.pk).update(used_mru=capacity.zos_reserve_mru(node.total_mru) + vms * 4 * GiB)
    return refusing, releasing


def _slices(node: Node) -> int:
    return node.slices.count()


def _report(node, index, marketplace_id, outcome, at, error=""):
    deployment_outcome_record(
        node_id=node.grid_id,
        slice_index=index,
        marketplace_id=marketplace_id,
        outcome=outcome,
        error=error,
        at=at,
        source="api",
    )


def _refusal_error(node: Node, n: int) -> str:
    """ZOS's words for the last slice: the host used a little more than counted, as a node of the build does."""
    node.refresh_from_db()
    vms = _slices(node) - 1
    hidden = 256 * MiB + vms * (512 * MiB + (node.grid_id % 50 % 7) * 16 * MiB)
    usable = node.total_mru - node.used_mru - hidden
    assert 0 < usable < 4 * GiB
    return f"failed to satisfy required capacity: cannot fulfil required memory size {4 * GiB} bytes out of usable {usable} bytes"


def _requests(refusing, releasing) -> list[tuple[str, dict]]:
    """The 55 calls: 30 refusals, 10 releases, 15 holds."""
    at = (timezone.now() - dt.timedelta(seconds=5)).isoformat()
    calls = []
    for node in refusing:
        last = _slices(node) - 1
        for n in (1, 2):
            body = {"node_id": node.grid_id, "slice_index": last, "marketplace_id": f"refused-{node.grid_id}-{n}"}
            calls.append(
                ("/api/v1/deployments", body | {"outcome": "failed", "error": _refusal_error(node, n), "at": at})
            )
    for node in releasing:
        for index in (0, 1):
            body = {"node_id": node.grid_id, "slice_index": index, "marketplace_id": f"vm-{node.grid_id}-{index}"}
            calls.append(("/api/v1/deployments", body | {"outcome": "released", "at": at}))
        for index in (3, 4, 5):
            body = {"node_id": node.grid_id, "slice_index": index, "marketplace_id": f"hold-{node.grid_id}-{index}"}
            calls.append(("/api/v1/holds", body | {"ttl_seconds": 600}))
    return calls


def _one_by_one(calls, secrets) -> list[int]:
    """Each call in turn; call n with secrets[n] (or cycling through them, as _all_at_once does)."""
    client = Client()
    statuses = []
    for n, (url, body) in enumerate(calls):
        headers = {"Authorization": f"Bearer {secrets[n % len(secrets)]}"}
        statuses.append(client.post(url, body, content_type="application/json", headers=headers).status_code)
    return statuses


def _all_at_once(calls, secrets) -> list[int]:
    """Each call in its own thread (its own connection), all released by one barrier."""
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = [0] * len(calls)
    errors: list[BaseException] = []

    def call(n: int, url: str, body: dict):
        try:
            client = Client()
            headers = {"Authorization": f"Bearer {secrets[n % len(secrets)]}"}
            barrier.wait(timeout=60)
            statuses[n] = client.post(url, body, content_type="application/json", headers=headers).status_code
        except BaseException as exc:  # a thread's exception would otherwise vanish
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(n, url, body)) for n, (url, body) in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    return statuses


def _figures(nodes: list[Node], base: int) -> dict:
    """Every figure the calls can move, by the node's place in its world (grid id less the world's base)."""
    by_place = {}
    for node in Node.objects.filter(pk__in=[n.pk for n in nodes]).order_by("grid_id"):
        by_place[node.grid_id - base] = {
            **{field: getattr(node, field) for field in FIGURE_FIELDS},
            "hidden_mru_per_vm": node.hidden_mru_per_vm,
            "zos_own_mru": node.zos_own_mru,
            "memory_lesson_scope": node.memory_lesson_scope,
            "has_lesson": node.memory_lesson_id is not None,
            "odds_of_one_more": vm_odds_now(node, mru=4 * GiB),
            "slices": list(node.slices.order_by("index").values_list("index", "state")),
            "holds": sorted(Hold.objects.live(timezone.now()).filter(node=node).values_list("slice_index", flat=True)),
            "deployments": sorted(node.deployments.values_list("slice_index", "state", "cause")),
            "deployment_odds": sorted(
                (_unplaced(mid, node), odds) for mid, odds in node.deployments.values_list("marketplace_id", "odds")
            ),
            "observations": Observation.objects.filter(node=node, cleared_at__isnull=True).count(),
            "readings": sorted(
                (_unplaced(mid, node), *rest)
                for mid, *rest in Observation.objects.filter(node=node, cleared_at__isnull=True).values_list(
                    "deployment__marketplace_id", "standing", "hidden_mru_per_vm", "group_actual_mru", "held_why"
                )
            ),
        }
    lessons = MemoryLesson.objects.filter(build=BUILD).order_by("learnt_at", "pk")
    lesson = MemoryLesson.objects.filter(build=BUILD, reverted_at__isnull=True).order_by("-learnt_at", "-pk").first()
    fields = ("own_mru", "per_vm_mru", "own_sd", "per_vm_sd", "spread_mru", "line_sd", "points", "nodes", "on_prior")
    return {
        "nodes": by_place,
        "lesson": {f: getattr(lesson, f) for f in fields} | {"learnt_from": [g - base for g in lesson.learnt_from]},
        "lessons_learnt": lessons.count(),
    }


def _unplaced(marketplace_id: str, node: Node) -> str:
    """A marketplace id without its node's grid id (_requests puts it in), the same in every world."""
    return marketplace_id.replace(f"-{node.grid_id}-", "-")


def _world_dropped(nodes: list[Node]) -> None:
    """The world leaves no trace the next one could learn from (own_prior reads other lessons)."""
    Hold.objects.filter(node__in=nodes).delete()
    Observation.objects.filter(node__in=nodes).delete()
    Deployment.objects.filter(node__in=nodes).delete()
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(memory_lesson=None)
    MemoryLesson.objects.all().delete()
    Node.objects.filter(pk__in=[n.pk for n in nodes]).delete()


def _served_order(calls) -> list[int]:
    """The calls' places in the order the database took them: each call's own audit event (its report or
    hold, by marketplace id), numbered as written. A report that teaches writes it in its build's turn."""
    written = {}
    events = AuditEvent.objects.filter(
        action__in=["deployment.reported-failed", "deployment.reported-released", "hold.made"]
    )
    for pk, marketplace_id in events.values_list("pk", "detail__marketplace_id"):
        written[marketplace_id] = pk
    ids = [body["marketplace_id"] for _url, body in calls]
    assert all(i in written for i in ids), "every call wrote its event"
    return sorted(range(len(calls)), key=lambda n: written[ids[n]])


def _differences(one: dict, other: dict) -> list[tuple]:
    """(node's place, figure, one's, other's) for each figure that differs, then the lessons'."""
    found = [
        (place, field, value, other["nodes"][place][field])
        for place, row in one["nodes"].items()
        for field, value in row.items()
        if other["nodes"][place][field] != value
    ]
    return found + [(None, k, one[k], other[k]) for k in ("lesson", "lessons_learnt") if one[k] != other[k]]


ORDER_FREE = ("slices", "holds", "deployments", "observations", "has_lesson", "memory_lesson_scope")


def test_thirty_refusals_of_one_build_at_once_end_as_one_serial_run(sim_node, api_token, broker_purged, caplog):
    secrets = [api_token("report", name=f"marketplace-{n}") for n in range(5)]

    refusing, releasing = _world(sim_node, 4300)
    calls = _requests(refusing, releasing)
    deadlocks = pg_deadlocks()
    with caplog.at_level(logging.WARNING, logger="dashboard.lessons.services.group_steps"):
        statuses = _all_at_once(calls, secrets)
    together = _figures(refusing + releasing, 4300)
    served = _served_order(calls)
    pks = [n.pk for n in refusing + releasing]
    with transaction.atomic():
        stale = figures_refresh(pks)  # computed again from what is stored
    _world_dropped(refusing + releasing)

    # The same calls one by one, in the order the database served them at once (the same token each).
    refusing, releasing = _world(sim_node, 4100)
    again = _requests(refusing, releasing)
    replayed = _one_by_one([again[n] for n in served], [secrets[n % len(secrets)] for n in served])
    in_turn = _figures(refusing + releasing, 4100)
    _world_dropped(refusing + releasing)

    # And one by one in the order they were sent.
    refusing, releasing = _world(sim_node, 4500)
    serial_statuses = _one_by_one(_requests(refusing, releasing), secrets)
    serial = _figures(refusing + releasing, 4500)

    assert 500 not in statuses, Counter(statuses)
    assert pg_deadlocks() - deadlocks == 0  # none at all, not some retried
    assert [r.message for r in caplog.records] == []  # no lock conflict retried, no group step failed
    assert sorted(set(statuses)) == [200, 201]
    assert statuses == serial_statuses  # every call answered as it was one by one
    assert [statuses[n] for n in served] == replayed
    # Every figure, every reading's standing, every lesson is one serial run's: the order the turns were taken.
    assert _differences(together, in_turn) == []
    assert stale == 0  # no figure left stale by the race
    # What does not hang on the order of readings is the same as one by one in the order sent.
    assert {place: {f: row[f] for f in ORDER_FREE} for place, row in together["nodes"].items()} == {
        place: {f: row[f] for f in ORDER_FREE} for place, row in serial["nodes"].items()
    }


def _refusals_past_the_bound(refusing: list[Node]) -> list[tuple[str, dict]]:
    """One refusal on each node (its last slice), sent at once."""
    at = (timezone.now() - dt.timedelta(seconds=5)).isoformat()
    return [
        (
            "/api/v1/deployments",
            {
                "node_id": node.grid_id,
                "slice_index": _slices(node) - 1,
                "marketplace_id": f"bounded-{node.grid_id}",
                "outcome": "failed",
                "error": _refusal_error(node, 1),
                "at": at,
            },
        )
        for node in refusing
    ]


def test_reports_past_a_tokens_bound_at_once_get_exactly_their_429s(sim_node, api_token, settings):
    settings.LESSON_REPORTS_PER_TOKEN, settings.LESSON_REPORTS_PER_BUILD = 4, 0
    secret = api_token("report", name="marketplace")
    refusing, _releasing = _world(sim_node, 4700)
    sent = refusing[:10]
    # Two builds: the token's count, not the build's turn, is what keeps them apart.
    Node.objects.filter(pk__in=[n.pk for n in sent[::2]]).update(zos_version="v3.15.0-sim")

    statuses = _all_at_once(_refusals_past_the_bound(sent), [secret])

    assert Counter(statuses) == {201: 4, 429: 6}
    assert Observation.objects.filter(node__in=sent, token__isnull=False).count() == 4
    assert AuditEvent.objects.filter(action="observation.refused", node__in=sent).count() == 6


def test_reports_past_a_builds_bound_at_once_get_exactly_their_429s(sim_node, api_token, settings):
    settings.LESSON_REPORTS_PER_TOKEN, settings.LESSON_REPORTS_PER_BUILD = 0, 4
    secrets = [api_token("report", name=f"marketplace-{n}") for n in range(5)]
    refusing, _releasing = _world(sim_node, 4900)
    sent = refusing[:10]

    statuses = _all_at_once(_refusals_past_the_bound(sent), secrets)

    assert Counter(statuses) == {201: 4, 429: 6}
    assert Observation.objects.filter(node__in=sent, token__isnull=False).count() == 4


def _probes(refusing: list[Node]) -> list[tuple[str, dict]]:
    """A probe's answer from each node: a VM larger than the node, refused with the node's usable figure."""
    at = (timezone.now() - dt.timedelta(seconds=5)).isoformat()
    calls = []
    for node in refusing:
        usable = int(_refusal_error(node, 1).rsplit(" out of usable ", 1)[1].split()[0])
        error = (
            "failed to satisfy required capacity: cannot fulfil required memory size "
            f"{node.total_mru + 4 * GiB} bytes out of usable {usable} bytes"
        )
        body = {"node_id": node.grid_id, "marketplace_id": f"probe-{node.grid_id}-1", "outcome": "failed"}
        calls.append(("/api/v1/deployments", body | {"probe": True, "error": error, "at": at}))
    return calls


def test_probe_answers_of_one_build_at_once_end_as_one_serial_run(sim_node, api_token, caplog):
    secrets = [api_token("report", name=f"marketplace-{n}") for n in range(5)]
    refusing, releasing = _world(sim_node, 5300)
    calls = _probes(refusing)
    deadlocks = pg_deadlocks()
    with caplog.at_level(logging.WARNING, logger="dashboard.lessons.services.group_steps"):
        statuses = _all_at_once(calls, secrets)
    together = _figures(refusing + releasing, 5300)
    # The probes' records, numbered as written: each in its build's turn.
    ids = [body["marketplace_id"] for _url, body in calls]
    written = dict(Deployment.objects.filter(marketplace_id__in=ids).values_list("marketplace_id", "pk"))
    served = sorted(range(len(calls)), key=lambda n: written[ids[n]])
    _world_dropped(refusing + releasing)

    refusing, releasing = _world(sim_node, 5100)
    again = _probes(refusing)
    replayed = _one_by_one([again[n] for n in served], [secrets[n % len(secrets)] for n in served])

    assert Counter(statuses) == {201: len(calls)}
    assert pg_deadlocks() - deadlocks == 0
    assert [r.message for r in caplog.records] == []
    assert replayed == [201] * len(calls)
    assert _differences(together, _figures(refusing + releasing, 5100)) == []
