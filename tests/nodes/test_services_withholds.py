"""nodes.services.withholds: maintenance windows made, released, opened and ended by themselves; quarantine."""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.deployments.services.outcomes import deployment_outcome_record
from dashboard.models import AuditEvent, Deployment, Node, NodeWithhold, Slice
from dashboard.nodes.services.withholds import (
    WithholdError,
    node_withhold,
    quarantine_consider,
    withhold_edges,
    withhold_release,
)
from tests.factories import sim_node_1774
from tests.support import wait_until

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
UNKNOWN_ERROR = "vm deployment entered error state"


@pytest.fixture
def node(sim_node):
    return sim_node_1774(sim_node)


def row(node):
    return Node.objects.get(pk=node.pk)


def test_it_withholds_a_node_at_once_with_its_reason(node):
    node_withhold(nodes=[node], reason="disk swap", ends_at=NOW + dt.timedelta(hours=6), now=NOW)
    assert (row(node).withheld_reason, row(node).withheld_until) == ("disk swap", NOW + dt.timedelta(hours=6))


def test_it_audits_a_withhold(node):
    node_withhold(nodes=[node], reason="disk swap", now=NOW, via="command")
    event = AuditEvent.objects.get(action="node withheld")
    assert (event.node_id, event.source, "disk swap" in event.message) == (node.pk, "command", True)


def test_a_future_window_withholds_nothing_yet(node):
    node_withhold(nodes=[node], reason="disk swap", starts_at=NOW + dt.timedelta(hours=1), now=NOW)
    assert row(node).withheld_reason == ""


def test_a_window_opens_and_ends_by_itself(node):
    """No write between: only the beat's edges at a later `now` (fixed, never slept)."""
    starts, ends = NOW + dt.timedelta(hours=1), NOW + dt.timedelta(hours=3)
    node_withhold(nodes=[node], reason="disk swap", starts_at=starts, ends_at=ends, now=NOW)
    free = row(node).slices_free
    assert withhold_edges(now=NOW + dt.timedelta(minutes=30)) == []
    assert withhold_edges(now=starts + dt.timedelta(seconds=1)) == [node.pk]
    opened = row(node)
    assert (opened.withheld_reason, opened.withheld_until) == ("disk swap", ends)
    assert withhold_edges(now=starts + dt.timedelta(minutes=2)) == []  # nothing changed: nothing written
    assert withhold_edges(now=ends) == [node.pk]
    closed = row(node)
    assert (closed.withheld_reason, closed.withheld_until, closed.slices_free) == ("", None, free)


def test_a_window_that_ends_before_it_starts_is_refused(node):
    with pytest.raises(WithholdError, match="before it starts"):
        node_withhold(nodes=[node], reason="x", starts_at=NOW, ends_at=NOW - dt.timedelta(minutes=1), now=NOW)
    assert not NodeWithhold.objects.exists()


def test_a_window_already_over_is_refused(node):
    with pytest.raises(WithholdError, match="ended already"):
        node_withhold(
            nodes=[node],
            reason="x",
            starts_at=NOW - dt.timedelta(hours=2),
            ends_at=NOW - dt.timedelta(hours=1),
            now=NOW,
        )


@pytest.mark.parametrize("reason", ["", "   ", "two\nlines", "x" * 161, "nul\x00"])
def test_a_bad_reason_is_refused_and_nothing_written(node, reason):
    with pytest.raises(WithholdError):
        node_withhold(nodes=[node], reason=reason, now=NOW)
    assert (NodeWithhold.objects.count(), AuditEvent.objects.filter(action="node withheld").count()) == (0, 0)


def test_a_release_ends_the_window_and_is_audited(node, role_user):
    admin = role_user("admins")
    node_withhold(nodes=[node], reason="disk swap", now=NOW)
    withhold_release(node=node, by=admin, now=NOW + dt.timedelta(minutes=5))
    window = NodeWithhold.objects.get()
    assert (row(node).withheld_reason, window.released_by, window.is_open(NOW + dt.timedelta(hours=1))) == (
        "",
        admin,
        False,
    )
    assert AuditEvent.objects.filter(action="node withhold released", actor=admin).count() == 1


def test_releasing_a_node_not_withheld_is_refused(node):
    with pytest.raises(WithholdError, match="not withheld"):
        withhold_release(node=node, now=NOW)


def test_the_longest_open_window_is_the_one_in_force(node):
    node_withhold(nodes=[node], reason="short", ends_at=NOW + dt.timedelta(hours=1), now=NOW)
    node_withhold(nodes=[node], reason="long", ends_at=NOW + dt.timedelta(hours=5), now=NOW)
    assert row(node).withheld_reason == "long"
    withhold_edges(now=NOW + dt.timedelta(hours=2))
    assert row(node).withheld_reason == "long"


def test_rented_and_deployed_slices_are_untouched(sim_node):
    node = sim_node_1774(sim_node, deployed=(0,))
    before = dict(Slice.objects.filter(node=node).values_list("index", "state"))
    node_withhold(nodes=[node], reason="disk swap", now=NOW)
    assert dict(Slice.objects.filter(node=node).values_list("index", "state")) == before


# --- quarantine ---------------------------------------------------------------------------


def report_failure(i, *, error=UNKNOWN_ERROR, at=None):
    return deployment_outcome_record(
        node_id=1774,
        slice_index=1 + i % 5,
        marketplace_id=f"q-{i}",
        outcome="failed",
        error=error,
        at=at or timezone.now(),
    )


@pytest.fixture
def reported(node, settings):
    """Node 1774 with its slices made a day ago (a report dated before its slice is refused)."""
    settings.QUARANTINE_AFTER_FAILURES = 3
    settings.QUARANTINE_WINDOW = 3600
    settings.QUARANTINE_FIRST_HOURS = 6
    settings.QUARANTINE_MAX_HOURS = 20
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node


def test_k_unknown_failures_quarantine_the_node(reported):
    for i in range(3):
        report_failure(i)
    window = NodeWithhold.objects.get()
    hours = (window.ends_at - window.starts_at) / dt.timedelta(hours=1)
    assert (window.source, hours, len(window.failures), row(reported).withheld_reason) == (
        "quarantine",
        6,
        3,
        window.reason,
    )


def test_the_quarantine_keeps_the_failures_that_caused_it(reported):
    ids = [report_failure(i).deployment.pk for i in range(3)]
    assert NodeWithhold.objects.get().failures == ids


def test_fewer_than_k_failures_quarantine_nothing(reported):
    report_failure(0), report_failure(1)
    assert not NodeWithhold.objects.exists()


def test_memory_refusals_teach_and_never_quarantine(reported):
    memory = "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"
    for i in range(4):
        report_failure(i, error=memory)
    assert (NodeWithhold.objects.count(), Deployment.objects.filter(cause="memory").count()) == (0, 4)


def test_failures_older_than_the_window_do_not_count(reported):
    report_failure(0, at=timezone.now() - dt.timedelta(hours=3))
    report_failure(1), report_failure(2)
    assert not NodeWithhold.objects.exists()


def test_a_quarantine_is_audited_and_lifted_by_an_admin(reported, role_user):
    for i in range(3):
        report_failure(i)
    admin = role_user("admins")
    withhold_release(node=reported, by=admin, source=NodeWithhold.Source.QUARANTINE)
    assert (row(reported).withheld_reason, AuditEvent.objects.filter(action="node quarantined").count()) == ("", 1)
    assert AuditEvent.objects.filter(action="quarantine lifted", actor=admin).count() == 1


def test_a_repeat_quarantine_doubles_up_to_the_cap(reported, role_user):
    lengths = []
    for repeat in range(3):
        for i in range(3):
            report_failure(10 * repeat + i)
        window = NodeWithhold.objects.filter(source="quarantine").order_by("-pk").first()
        lengths.append((window.ends_at - window.starts_at) / dt.timedelta(hours=1))
        withhold_release(node=reported, source=NodeWithhold.Source.QUARANTINE)
    assert lengths == [6, 12, 20]


def test_failures_counted_once_do_not_quarantine_again(reported):
    for i in range(3):
        report_failure(i)
    withhold_release(node=reported, source=NodeWithhold.Source.QUARANTINE)
    quarantine_consider(node=reported)
    assert NodeWithhold.objects.count() == 1


def test_quarantine_off_with_zero_failures(reported, settings):
    settings.QUARANTINE_AFTER_FAILURES = 0
    for i in range(3):
        report_failure(i)
    assert not NodeWithhold.objects.exists()


# --- alerts muted, figures and precheck say why ------------------------------------------


def alert_nodes(now):
    from dashboard.alerts import rules
    from dashboard.alerts.selectors.alerts import alert_figures

    return alert_figures(now=now, limits=rules.Limits())


def test_a_withheld_node_s_alerts_are_muted(node):
    Node.objects.filter(pk=node.pk).update(status="down")
    assert [n.node_id for n in alert_nodes(timezone.now()).nodes] == [1774]
    node_withhold(nodes=[node], reason="disk swap")
    assert alert_nodes(timezone.now()).nodes == []


def test_a_withheld_node_s_failures_are_muted(reported):
    for i in range(2):
        report_failure(i)
    assert sum(f.deployments for f in alert_nodes(timezone.now()).failures) == 2
    node_withhold(nodes=[reported], reason="disk swap")
    assert alert_nodes(timezone.now()).failures == []


def test_every_free_slice_is_phantom_for_the_withheld_reason(node):
    node_withhold(nodes=[node], reason="disk swap", ends_at=dt.datetime(2027, 6, 1, 18, tzinfo=dt.UTC))
    held = row(node)
    assert (held.placeable_now, held.phantom_reasons, held.closure) == (0, {"withheld": held.slices_free}, "withheld")
    assert held.closure_detail == "disk swap, until 2027-06-01 18:00 UTC"


def test_the_figures_follow_a_window_that_opens_and_ends_by_itself(node):
    before = (row(node).placeable_now, row(node).phantom_reasons)
    starts, ends = NOW + dt.timedelta(hours=1), NOW + dt.timedelta(hours=2)
    node_withhold(nodes=[node], reason="disk swap", starts_at=starts, ends_at=ends, now=NOW)
    assert (row(node).placeable_now, row(node).phantom_reasons) == before
    withhold_edges(now=starts)
    assert (row(node).placeable_now, row(node).phantom_reasons) == (0, {"withheld": row(node).slices_free})
    withhold_edges(now=ends)
    assert (row(node).placeable_now, row(node).phantom_reasons) == before


def test_the_precheck_says_the_node_is_withheld_and_why(node):
    from dashboard.nodes.selectors.node import node_detail

    node_withhold(nodes=[node], reason="disk swap")
    detail = node_detail(node_id=1774)
    assert "is withheld (disk swap, until released)" in detail.closure.sentence(free_slices=7, node_id=1774)


def test_the_dashboard_s_own_deploy_is_refused_on_a_withheld_node(node):
    from dashboard.deployments.services.deploy import slice_deploy

    node_withhold(nodes=[node], reason="disk swap")
    deployment = slice_deploy(node=row(node), slice_index=1, grid=None, source="command")
    assert (deployment.state, Slice.objects.get(node=node, index=1).state) == ("refused", "free")


@pytest.mark.parametrize("every_node", [False, True])
def test_placement_says_the_node_is_refused_because_it_is_withheld(node, every_node):
    from dashboard.capacity import GiB
    from dashboard.deployments.selectors.placement import placement_for

    size = dict(cru=1, mru=4 * GiB, sru=100 * GiB)
    assert placement_for(**size, every_node=every_node).can_host == 1
    node_withhold(nodes=[node], reason="disk swap")
    answer = placement_for(**size, every_node=every_node)
    assert (answer.can_host, answer.blocked["withheld"]) == (0, 1)
    if every_node:
        assert "is withheld (disk swap, until released)" in answer.verdicts[0].words


def test_the_beat_schedules_the_withhold_edges_task(settings):
    from dashboard.tasks import withhold_edges as task

    assert settings.CELERY_BEAT_SCHEDULE["withhold-edges"]["task"] == task.name


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_running_the_beat_s_task_opens_a_window_whose_start_came(sim_node, live_worker):
    """The window was made to start a moment ago with no write since: the task the beat sends opens it."""
    from dashboard.tasks import withhold_edges as task

    node = sim_node_1774(sim_node)
    # Made "two seconds ago" to start one second ago: the write saw it to come, nothing wrote since.
    made = timezone.now() - dt.timedelta(seconds=2)
    node_withhold(nodes=[node], reason="disk swap", starts_at=made + dt.timedelta(seconds=1), now=made)
    assert row(node).withheld_reason == ""
    task.delay()  # its result is not kept (ignore_result): the row says when it ran
    wait_until(lambda: row(node).withheld_reason, timeout=30, what="the worker to open the window")
    assert (row(node).withheld_reason, row(node).closure) == ("disk swap", "withheld")


def test_finding_6_one_accounts_reports_alone_quarantine_a_bounded_number_of_nodes(reported, sim_node, settings):
    from django.contrib.auth.models import User

    from dashboard.capacity import GiB

    settings.QUARANTINE_REPORTS_NODES_PER_DAY = 1
    other = sim_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB)
    Slice.objects.filter(node=other).update(created_at=timezone.now() - dt.timedelta(days=1))
    marketplace = User.objects.create(username="market")
    for grid_id in (1774, 2310):
        for i in range(3):
            deployment_outcome_record(
                node_id=grid_id,
                slice_index=1 + i,
                marketplace_id=f"r-{grid_id}-{i}",
                outcome="failed",
                error=UNKNOWN_ERROR,
                at=timezone.now(),
                by=marketplace,
            )
    quarantined = list(NodeWithhold.objects.values_list("node__grid_id", "reason"))
    assert [grid_id for grid_id, _ in quarantined] == [1774]
    assert "reported by account market" in quarantined[0][1]
