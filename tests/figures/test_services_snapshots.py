"""Capacity over time: snapshots of the stored figures, a fixed number of statements, thinned to a bound."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.figures.selectors.history import capacity_history, trend_of
from dashboard.figures.services.snapshots import snapshot_take, snapshots_thin
from dashboard.models import FiguresSnapshot, Node, SnapshotFigures


def _row(scope: str, subject: int) -> SnapshotFigures:
    return SnapshotFigures.objects.get(scope=scope, subject=subject)


@pytest.mark.django_db
def test_it_copies_each_nodes_stored_figures_with_the_phantom_slices_by_reason(legacy_fleet):
    legacy_fleet(3)
    Node.objects.filter(grid_id=2).update(placeable_now=1, phantom_slices=3, phantom_reasons={"memory": 2, "pool": 1})
    snapshot_take()
    node = Node.objects.get(grid_id=2)
    row = _row("node", 2)
    assert (row.nominal, row.deployable, row.free, row.placeable, row.phantom) == (
        node.slices_free + node.slices_rented + node.slices_deployed + node.slices_failed,
        node.deployable,
        node.slices_free,
        1,
        3,
    )
    assert (row.phantom_memory, row.phantom_pool, row.phantom_disk) == (2, 1, 0)


@pytest.mark.django_db
def test_the_farm_and_fleet_rows_add_up_the_nodes(legacy_fleet):
    legacy_fleet(2, farm_id=7)
    legacy_fleet(3, first=10, farm_id=8)
    snapshot_take()
    nodes = SnapshotFigures.objects.filter(scope="node")
    assert _row("farm", 8).nodes == 3 and _row("fleet", 0).nodes == 5
    assert _row("fleet", 0).deployable == nodes.aggregate(n=Sum("deployable"))["n"]
    assert _row("farm", 7).free == nodes.filter(subject__in=[1, 2]).aggregate(n=Sum("free"))["n"]


@pytest.mark.django_db
def test_free_deployable_is_deployable_less_the_occupied_slices(legacy_fleet):
    legacy_fleet(1)
    Node.objects.update(deployable=5, slices_rented=1, slices_deployed=1)
    snapshot_take()
    assert _row("node", 1).free_deployable == 3


@pytest.mark.django_db
def test_an_empty_fleet_gets_a_row_of_zeros():
    snapshot_take()
    assert (_row("fleet", 0).nodes, _row("fleet", 0).deployable) == (0, 0)


@pytest.mark.django_db
def test_a_snapshot_is_the_same_few_statements_whatever_the_fleet_size(legacy_fleet):
    legacy_fleet(2)
    with CaptureQueriesContext(connection) as small:
        snapshot_take()
    legacy_fleet(40, first=100, farm_id=3)
    with CaptureQueriesContext(connection) as large:
        snapshot_take()
    assert len(small) == len(large) <= 6


def _snapshots_at(ages: list[timedelta], now) -> None:
    for age in ages:
        FiguresSnapshot.objects.create(at=now - age, trigger="beat")


@pytest.mark.django_db
def test_thinning_keeps_one_per_5_minutes_for_2_days_then_hourly_then_daily_then_nothing():
    now = timezone.now().replace(hour=12, minute=32, second=0, microsecond=0)
    # Recent: 3 in one 5-minute bucket. Hourly tier: 4 in one hour of 5 days ago. Daily tier: 3 in one day. Too old: 1.
    _snapshots_at([timedelta(minutes=m) for m in (0, 1, 2)], now)
    _snapshots_at([timedelta(days=5, minutes=m) for m in (1, 10, 20, 25)], now)
    _snapshots_at([timedelta(days=100, hours=h) for h in (0, 2, 4)], now)
    _snapshots_at([timedelta(days=400)], now)
    deleted = snapshots_thin(now=now)
    assert (deleted, FiguresSnapshot.objects.count()) == (2 + 3 + 2 + 1, 3)


@pytest.mark.django_db
def test_thinning_keeps_the_newest_of_each_bucket_and_deletes_its_rows(legacy_fleet):
    legacy_fleet(2)
    # A fixed half past: both snapshots fall in one hour of the hourly tier, whatever the hour of the run.
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    old = snapshot_take(now=now - timedelta(days=5, minutes=2))
    new = snapshot_take(now=now - timedelta(days=5, minutes=1))
    assert old.at.hour == new.at.hour
    snapshots_thin(now=now)
    assert list(FiguresSnapshot.objects.values_list("pk", flat=True)) == [new.pk]
    assert set(SnapshotFigures.objects.values_list("snapshot_id", flat=True)) == {new.pk}


@pytest.mark.django_db
def test_the_history_is_one_query_and_draws_each_figure(legacy_fleet):
    legacy_fleet(3)
    now = timezone.now()
    for hours in (48, 24, 0):
        snapshot_take(now=now - timedelta(hours=hours))
    with CaptureQueriesContext(connection) as queries:
        history = capacity_history(scope="fleet", subject=0, now=now)
    assert len(queries) == 1
    assert history.snapshots == 3
    assert [line.figure for line in history.sparklines] == ["free_deployable", "deployable", "placeable", "phantom"]
    assert len(history.sparklines[0].points.split()) == 3


def test_the_trend_says_how_fast_free_slices_fall_and_when_none_are_left():
    now = timezone.now()
    times = [now - timedelta(days=d) for d in (4, 3, 2, 1, 0)]
    trend = trend_of(times, [100, 90, 80, 70, 60])
    assert trend.words == "Free deployable slices falling by 10.0 a day; none left in about 6 days."
    assert "Least-squares" in trend.method and "5 snapshots" in trend.method


def test_the_trend_says_so_when_the_history_is_too_short():
    now = timezone.now()
    assert trend_of([now], [5]).words.startswith("Not enough history")
    assert trend_of([now - timedelta(minutes=10), now], [5, 4]).days_left is None


def test_a_flat_or_rising_series_is_said_as_such():
    now = timezone.now()
    times = [now - timedelta(days=d) for d in (2, 1, 0)]
    assert trend_of(times, [10, 10, 10]).words == "Free deployable slices steady."
    assert trend_of(times, [10, 12, 14]).words == "Free deployable slices rising by 2.0 a day."


@pytest.mark.django_db
def test_the_beat_takes_a_snapshot_every_snapshot_every_seconds(settings, legacy_fleet):
    from dashboard.tasks import figures_snapshot

    legacy_fleet(1)
    assert settings.CELERY_BEAT_SCHEDULE["snapshot-figures"]["task"] == "dashboard.figures_snapshot"
    figures_snapshot()
    assert FiguresSnapshot.objects.get().trigger == "beat"


@pytest.mark.django_db
def test_a_finished_job_leaves_a_snapshot_of_what_it_changed(legacy_fleet):
    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job
    from dashboard.tasks import job_run

    nodes = legacy_fleet(2)
    job = job_request(kind=Job.Kind.REREGISTER, node=nodes[0], source="command").job
    job_run(job.pk)
    snapshot = FiguresSnapshot.objects.get()
    assert snapshot.trigger == f"job {job.pk}"
    assert _row("node", 1).deployable == Node.objects.get(grid_id=1).deployable


def test_issue_45_a_trend_is_said_from_the_first_hour_by_the_hour():
    """Two snapshots 30 minutes apart (a fresh make run: one at start, one after the first job) already say
    a trend, an hour at a time, and say the history is short; the run-out alert does not act on it."""
    now = timezone.now()
    trend = trend_of([now - timedelta(minutes=30), now], [100, 97])
    assert trend.words == (
        "Free deployable slices falling by 6.0 an hour over the last 30 minutes "
        "(a short history: it firms up as snapshots gather); none left in about 16 hours."
    )
    assert (trend.per_day, trend.days_left) == (None, None)


def test_issue_45_within_the_first_day_the_trend_is_by_the_hour_and_the_alert_may_act():
    now = timezone.now()
    trend = trend_of([now - timedelta(hours=3), now], [100, 94])
    assert trend.words.startswith("Free deployable slices falling by 2.0 an hour over the last 3 hours")
    assert round(trend.per_day) == -48 and round(trend.days_left * 24) == 47
