"""dashboard.alerts.rules: the alert rules as tables of plain rows (no database)."""

from datetime import UTC, datetime, timedelta

import pytest

from dashboard.alerts import rules
from dashboard.alerts.rules import Figures, JobActivity, Limits, NodeReading

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LIMITS = Limits(
    stale_catalog_after=timedelta(hours=24),
    failed_spike=5,
    failed_window=timedelta(minutes=15),
    queued_without_worker_after=timedelta(minutes=5),
    heartbeat_timeout=timedelta(seconds=120),
    reading_max_age=timedelta(hours=24),
)


def node(node_id=1774, *, farm_id=1, status="up", reasons=None, stale=False, stale_since=None, seen_at=NOW):
    return NodeReading(node_id, farm_id, status, reasons or {}, stale, stale_since, seen_at)


def ago(**delta) -> datetime:
    return NOW - timedelta(**delta)


@pytest.mark.parametrize(
    "nodes, expected",
    [
        ([], []),
        ([node(reasons={"memory": 3})], [("farm 1", "Farm 1 offers 3 phantom slices on 1 up node (memory 3)")]),
        # Down and standby are the node being away: its status says so, no alert about the catalog.
        ([node(status="down", reasons={"memory": 3}), node(2, status="standby", reasons={"standby": 7})], []),
        ([node(reasons={"down": 7})], []),
        ([node(reasons={"memory": 0, "disk": 0})], []),
        (
            [
                node(1, reasons={"memory": 1}),
                node(2, reasons={"disk": 2, "pool": 1}),
                node(3, farm_id=9, reasons={"pool": 4}),
            ],
            [
                ("farm 1", "Farm 1 offers 4 phantom slices on 2 up nodes (memory 1, disk 2, pool 1)"),
                ("farm 9", "Farm 9 offers 4 phantom slices on 1 up node (pool 4)"),
            ],
        ),
    ],
)
def test_it_fires_one_phantom_alert_per_farm_for_up_nodes(nodes, expected):
    found = rules.phantom_slices(Figures(now=NOW, nodes=nodes), LIMITS)
    assert [(c.subject, c.summary) for c in found] == expected


def test_it_names_the_worst_nodes_first_and_counts_the_rest():
    nodes = [node(n, reasons={"memory": n}) for n in range(1, 13)]
    (condition,) = rules.phantom_slices(Figures(now=NOW, nodes=nodes), LIMITS)
    assert condition.detail.startswith("Offered but not placeable by the last live reading: node 12 (12), node 11 (11)")
    assert "and 2 more. Re-register" in condition.detail


@pytest.mark.parametrize(
    "nodes, fires",
    [
        ([node(stale=True, stale_since=ago(hours=25))], True),
        ([node(stale=True, stale_since=ago(hours=24))], True),
        ([node(stale=True, stale_since=ago(hours=23))], False),
        ([node(stale=False, stale_since=ago(days=9))], False),
        ([node(stale=True, stale_since=None)], False),
    ],
)
def test_it_fires_for_catalogs_stale_longer_than_the_limit(nodes, fires):
    assert bool(rules.stale_catalogs(Figures(now=NOW, nodes=nodes), LIMITS)) is fires


def test_it_says_how_many_catalogs_are_stale_and_since_when():
    nodes = [node(1, stale=True, stale_since=ago(days=3)), node(2, stale=True, stale_since=ago(days=2))]
    (condition,) = rules.stale_catalogs(Figures(now=NOW, nodes=nodes), LIMITS)
    assert condition.summary == "2 nodes have had a stale catalog for over 1 day"
    assert condition.detail.startswith("Stale since 2026-04-28 12:00 UTC at the latest: node 1, node 2.")


@pytest.mark.parametrize(
    "failures, expected",
    [
        ([], []),
        ([rules.FailureCount("memory", 4)], []),
        ([rules.FailureCount("memory", 5)], ["memory"]),
        (
            [rules.FailureCount("memory", 9), rules.FailureCount("disk", 2), rules.FailureCount("", 6)],
            ["unknown", "memory"],
        ),
    ],
)
def test_it_fires_per_cause_for_a_spike_of_failures(failures, expected):
    found = rules.failed_deployments(Figures(now=NOW, failures=failures), LIMITS)
    assert sorted(c.subject for c in found) == sorted(expected)


def test_a_failure_spike_says_how_many_in_which_window_and_what_to_do():
    (condition,) = rules.failed_deployments(Figures(now=NOW, failures=[rules.FailureCount("memory", 7)]), LIMITS)
    assert condition.summary == "7 deployments failed for memory in the last 15 min (limit 5)"
    assert "re-register or precheck them" in condition.detail


@pytest.mark.parametrize(
    "jobs, fires",
    [
        (JobActivity(), False),
        # A queued job younger than the limit: a worker may simply be about to take it.
        (JobActivity(oldest_queued_at=ago(minutes=4), queued=1), False),
        (JobActivity(oldest_queued_at=ago(minutes=6), queued=1), True),
        # A worker busy with a long job (live heartbeat) is alive; the queued job waits its turn.
        (JobActivity(oldest_queued_at=ago(minutes=30), queued=1, freshest_heartbeat_at=ago(seconds=30)), False),
        # The reaper's own limit: a heartbeat this old is a dead worker.
        (JobActivity(oldest_queued_at=ago(minutes=30), queued=1, freshest_heartbeat_at=ago(seconds=120)), True),
    ],
)
def test_it_fires_when_jobs_wait_and_no_worker_beats(jobs, fires):
    assert bool(rules.no_worker(Figures(now=NOW, jobs=jobs), LIMITS)) is fires


def test_no_worker_says_what_waits_and_how_to_start_one():
    jobs = JobActivity(oldest_queued_at=ago(minutes=7), oldest_queued_kind="reregister", queued=2)
    (condition,) = rules.no_worker(Figures(now=NOW, jobs=jobs), LIMITS)
    assert condition.summary == "No worker is running: 2 jobs queued, the oldest (reregister) for 7 min"
    assert "no job is running" in condition.detail and "celery -A config worker" in condition.detail


@pytest.mark.parametrize(
    "nodes, expected",
    [
        ([node(seen_at=ago(hours=23))], None),
        ([node(seen_at=None)], None),
        ([node(seen_at=ago(hours=25))], "The capacity readings of 1 node are older than 1 day"),
        (
            [node(1, seen_at=ago(days=2)), node(2, seen_at=ago(days=3))],
            "The capacity readings of 2 nodes are older than 1 day",
        ),
    ],
)
def test_it_fires_for_readings_older_than_the_limit(nodes, expected):
    found = rules.old_readings(Figures(now=NOW, nodes=nodes), LIMITS)
    assert (found[0].summary if found else None) == expected


def test_every_rule_has_a_title_and_all_are_evaluated():
    figures = Figures(
        now=NOW,
        nodes=[
            node(reasons={"memory": 1}, stale=True, stale_since=ago(days=2), seen_at=ago(days=2)),
            NodeReading(2, 1, "down", down_since=ago(hours=2), total_changed_at=ago(hours=1)),
            NodeReading(3, 1, "standby", wake_asked_since=ago(hours=1)),
            NodeReading(4, 1, "up", closure="rent-grace", closure_detail="90311"),
        ],
        jobs=JobActivity(oldest_queued_at=ago(hours=1), queued=1),
        failures=[rules.FailureCount("disk", 5)],
        trends=[rules.SlicesTrend("fleet", free_now=20, per_day=-4.0, days_left=5.0)],
        farm_ips=[rules.FarmIpsTrend(1, "", free_now=2, per_day=-1.0, days_left=2.0)],
        unreadable=2,
        unreadable_words="2 node(s) could not be read: 8204: node 8204: features is an object",
        reports_refused=[rules.ReportsRefused("token abcd1234…", refused=3, last_at=ago(minutes=5))],
    )
    found = rules.conditions(figures, LIMITS)
    assert sorted(c.rule for c in found) == sorted(rules.RULES) and set(rules.TITLES) == set(rules.RULES)


# --- the node rules, from the events the readings showed ----------------------------------------


@pytest.mark.parametrize(
    ("down_since", "fires"),
    [(ago(minutes=31), True), (ago(minutes=29), False), (None, False)],
)
def test_a_node_down_past_the_limit_alerts_its_farm(down_since, fires):
    found = rules.nodes_down(Figures(now=NOW, nodes=[NodeReading(7, 42, "down", down_since=down_since)]), LIMITS)
    assert [(c.subject, c.summary) for c in found] == (
        [("farm 42", "Farm 42: 1 node down for over 30 min")] if fires else []
    )


def test_a_standby_node_is_not_down():
    found = rules.nodes_down(Figures(now=NOW, nodes=[NodeReading(7, 42, "standby", down_since=ago(days=1))]), LIMITS)
    assert found == []


@pytest.mark.parametrize(("asked", "fires"), [(ago(minutes=11), True), (ago(minutes=9), False), (None, False)])
def test_a_wake_that_did_not_happen_past_the_limit_alerts(asked, fires):
    found = rules.wakes_not_happened(
        Figures(now=NOW, nodes=[NodeReading(7, 42, "standby", wake_asked_since=asked)]), LIMITS
    )
    assert len(found) == (1 if fires else 0)
    if fires:
        assert "node 7" in found[0].detail and found[0].subject == "farm 42"


@pytest.mark.parametrize(("changed", "fires"), [(ago(hours=23), True), (ago(hours=25), False), (None, False)])
def test_a_recent_hardware_change_alerts_until_the_window_passes(changed, fires):
    found = rules.hardware_changed(Figures(now=NOW, nodes=[NodeReading(7, 42, "up", total_changed_at=changed)]), LIMITS)
    assert len(found) == (1 if fires else 0)


@pytest.mark.parametrize(
    ("trend", "expected"),
    [
        (
            rules.SlicesTrend("fleet", 50, -5.0, 10.0),
            "The fleet: free deployable slices falling by 5.0 a day; none left in about 10 days",
        ),
        (
            rules.SlicesTrend("farm 42", 0, -2.0, 0.0),
            "Farm 42: free deployable slices falling by 2.0 a day; none are left now",
        ),
        (rules.SlicesTrend("fleet", 500, -5.0, 100.0), None),
        (rules.SlicesTrend("fleet", 500, 3.0, None), None),
        (rules.SlicesTrend("fleet", 500, None, None), None),
    ],
)
def test_free_slices_running_out_within_the_limit_alert(trend, expected):
    found = rules.slices_running_out(Figures(now=NOW, trends=[trend]), LIMITS)
    assert (found[0].summary if found else None) == expected


def test_rent_dark_names_our_rent_in_grace_and_ended_rents_on_dedicated_nodes():
    figures = Figures(
        now=NOW,
        nodes=[
            NodeReading(4, 1, "up", closure="rent-grace", closure_detail="90311"),
            NodeReading(5, 1, "up", closure="needs-rent", rent_ended_at=ago(hours=1)),
            NodeReading(6, 1, "up", closure="needs-rent"),  # never rented by us: not dark, just not ours
            NodeReading(7, 2, "up", closure="rented", closure_detail="42"),
        ],
    )
    (found,) = rules.rent_dark(figures, LIMITS)
    assert (found.subject, found.summary) == ("farm 1", "Farm 1: 2 nodes dark with the marketplace's rent contract")
    assert "node 4 (rent contract 90311 in grace)" in found.detail and "node 5 (rent ended" in found.detail


def test_nodes_that_could_not_be_read_fire_with_the_reason_and_say_their_readings_are_kept():
    assert rules.nodes_unreadable(Figures(now=NOW), LIMITS) == []
    words = "200 node(s) could not be read: 8204: node 8204: features is an object"
    (condition,) = rules.nodes_unreadable(Figures(now=NOW, unreadable=200, unreadable_words=words), LIMITS)
    assert condition.summary == "200 nodes could not be read at the last reading"
    assert "features is an object" in condition.detail and "not overwritten" in condition.detail
