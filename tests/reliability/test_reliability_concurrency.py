"""20 admins click at the same instant on each of 10 nodes, through the real views: one job per node.

Each clicking thread has its own test Client (its own session) and, being a thread, its own
PostgreSQL connection, so the race is the one the web server has: 20 transactions inserting a
Job for the same node, of which the partial unique index lets exactly one through.
"""

import random
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from dashboard import capacity
from dashboard.models import AuditEvent, Job, Node

# Long: part of `make test` and `make reliability`, not of the quick loop (`make check`).
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GiB = capacity.GiB
CLICKS = 20
NODES = 10
ACTIONS = ["node-reregister", "node-preview", "node-precheck"]


@pytest.fixture
def ten_nodes(sim_node):
    return [
        sim_node(100 + n, cru=8, mru=16 * GiB, sru=500 * GiB, farm_id=1, policy_name="legacy") for n in range(NODES)
    ]


@pytest.fixture
def clickers(role_user, broker_purged):
    """CLICKS logged-in admin clients; the broker is emptied again afterwards (no worker takes these jobs)."""
    clients = []
    for n in range(CLICKS):
        client = Client()
        client.force_login(role_user("admins", username=f"admin{n}", password=None))  # no hashing: force_login
        clients.append(client)
    yield clients
    broker_purged.control.purge()


def click_together(clients, plan) -> list[tuple[int, int, str]]:
    """plan[i] is the list of (node_id, url name) client i clicks, each step started by all at once."""
    barrier = threading.Barrier(len(clients))
    answers: list[tuple[int, int, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(client, steps):
        try:
            for node_id, action in steps:
                barrier.wait(timeout=60)
                response = client.post(
                    reverse(action, args=[node_id]),
                    **({"HTTP_HX_REQUEST": "true"} if action == "node-precheck" else {}),
                )
                with lock:
                    answers.append(
                        (node_id, response.status_code, response.get("Location", "") or response.content.decode())
                    )
        except BaseException as exc:  # a thread's exception would otherwise vanish
            errors.append(exc)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(c, steps)) for c, steps in zip(clients, plan, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return answers


def jobs_by_node() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for job_pk, node_id in Job.objects.values_list("pk", "node__grid_id"):
        found.setdefault(node_id, []).append(job_pk)
    return found


def test_it_starts_exactly_one_job_per_node_from_20_simultaneous_clicks_on_each(ten_nodes, clickers):
    plan = [[(node.grid_id, "node-reregister") for node in ten_nodes] for _ in clickers]
    answers = click_together(clickers, plan)
    jobs = jobs_by_node()
    assert {node_id: len(pks) for node_id, pks in jobs.items()} == {n.grid_id: 1 for n in ten_nodes}
    assert sorted((node_id, status, where) for node_id, status, where in answers) == sorted(
        (n.grid_id, 302, reverse("job", args=[jobs[n.grid_id][0]])) for n in ten_nodes for _ in range(CLICKS)
    )


def test_it_starts_one_job_per_node_when_different_actions_race_across_nodes(ten_nodes, clickers):
    shuffle = random.Random(1774)
    plan = []
    for _ in clickers:
        steps = [(node.grid_id, shuffle.choice(ACTIONS)) for node in ten_nodes]
        shuffle.shuffle(steps)
        plan.append(steps)
    answers = click_together(clickers, plan)
    assert {node_id: len(pks) for node_id, pks in jobs_by_node().items()} == {n.grid_id: 1 for n in ten_nodes}
    assert {status for _, status, _ in answers} <= {200, 302} and len(answers) == CLICKS * NODES


def test_it_audits_one_request_and_19_refusals_per_node(ten_nodes, clickers):
    click_together(clickers, [[(node.grid_id, "node-reregister") for node in ten_nodes] for _ in clickers])
    actions = sorted(
        AuditEvent.objects.filter(node__in=Node.objects.all(), job__isnull=False).values_list("action", flat=True)
    )
    assert actions.count("job.requested") == NODES and actions.count("job.already-active") == NODES * (CLICKS - 1)
