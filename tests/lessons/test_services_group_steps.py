"""lessons.services.group_steps: a real PostgreSQL deadlock's loser runs again; a group step waits for the commit."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.figures.services.figures import nodes_lock
from dashboard.lessons.services.group_steps import (
    LockConflict,
    group_step_after,
    group_steps_after,
    lock_conflicts_retried,
)
from dashboard.models import Node
from tests.pg_deadlocks import pg_deadlocks

GiB = capacity.GiB


def _two_nodes(sim_node):
    return [sim_node(5100 + n, cru=4, mru=8 * GiB, sru=200 * GiB, policy_name="legacy").pk for n in range(2)]


def _crossed(first: int, second: int, barrier: threading.Barrier, tries: list) -> None:
    """Lock `first`, wait for the other thread to lock its own, then lock `second`: a deadlock, once."""

    def work():
        with transaction.atomic():
            tries.append(first)
            nodes_lock([first])
            if len(tries) <= 2:  # the first round meets in the middle; a retry finds the way clear
                barrier.wait(timeout=30)
            nodes_lock([second])

    try:
        lock_conflicts_retried(work, what="crossed locks")
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_loser_of_a_real_deadlock_runs_again_and_both_finish(sim_node):
    a, b = _two_nodes(sim_node)
    barrier, tries, errors = threading.Barrier(2), [], []

    def run(first, second):
        try:
            _crossed(first, second, barrier, tries)
        except BaseException as exc:
            errors.append(exc)

    before = pg_deadlocks()
    threads = [threading.Thread(target=run, args=pair) for pair in ((a, b), (b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(tries) == 3  # two met in a deadlock, PostgreSQL rolled one back, it ran again
    assert pg_deadlocks() - before == 1  # PostgreSQL's own count of it (the concurrent reports' test reads it)


class _Deadlocked(Exception):
    pass


def test_a_conflict_that_never_clears_is_a_lock_conflict_not_a_crash(monkeypatch):
    import psycopg
    from django.db import OperationalError

    monkeypatch.setattr("dashboard.lessons.services.group_steps.time.sleep", lambda _s: None)
    calls = []

    def always():
        calls.append(1)
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.errors.DeadlockDetected as exc:
            raise OperationalError("deadlock detected") from exc

    with pytest.raises(LockConflict, match="lock conflict"):
        lock_conflicts_retried(always, what="the report")
    assert len(calls) == 4


def test_another_database_error_is_not_retried():
    from django.db import OperationalError

    calls = []

    def broken():
        calls.append(1)
        raise OperationalError("connection refused")

    with pytest.raises(OperationalError):
        lock_conflicts_retried(broken, what="the report")
    assert calls == [1]


@pytest.mark.django_db
def test_a_group_step_runs_after_the_block_once_per_key():
    ran = []
    with group_steps_after():
        with group_steps_after():  # an inner block leaves them to the outer one
            group_step_after(("refit", "v1"), lambda: ran.append("first"))
            group_step_after(("refit", "v1"), lambda: ran.append("second"))
        assert ran == []
    assert ran == ["second"]


@pytest.mark.django_db
def test_a_block_that_fails_runs_no_step():
    ran = []
    with pytest.raises(_Deadlocked), group_steps_after():
        group_step_after(("refit", "v1"), lambda: ran.append(1))
        raise _Deadlocked
    assert ran == []


@pytest.mark.django_db
def test_a_deadlocked_api_write_answers_503_not_500(sim_node, api_call, api_token, monkeypatch):
    import psycopg
    from django.db import OperationalError

    from dashboard.deployments.services.outcomes import record

    monkeypatch.setattr("dashboard.lessons.services.group_steps.time.sleep", lambda _s: None)

    def deadlocked(*_args, **_kwargs):
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.errors.DeadlockDetected as exc:
            raise OperationalError("deadlock detected") from exc

    sim_node(5200, cru=4, mru=8 * GiB, sru=200 * GiB, policy_name="legacy")
    monkeypatch.setattr(record, "_record", deadlocked)
    body = {"node_id": 5200, "slice_index": 0, "marketplace_id": "m-1", "outcome": "deployed"}
    body["at"] = (timezone.now() - dt.timedelta(seconds=5)).isoformat()
    response = api_call("post", "/api/v1/deployments", api_token("report"), json=body)
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert Node.objects.get(grid_id=5200).deployments.count() == 0
