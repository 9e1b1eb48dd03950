"""A farm whose free public IPv4s run out within ALERT_IPS_RUN_OUT_DAYS on the trend of its stored readings
alerts, routed to the farm's owner (ALERT_FARM_URLS). The clock is fixed; the readings are stored as the
fleet watch stores them (nodes.services.farm_ips), one a day.
"""

from datetime import UTC, datetime, timedelta

import pytest

from dashboard.alerts import rules
from dashboard.alerts.services.alerts import alerts_evaluate
from dashboard.grid.types import FarmPublicIps, PublicIp
from dashboard.models import Alert, FarmIps
from dashboard.nodes.services.farm_ips import FREE_READING_EVERY, farm_ips_store
from tests.alert_receiver import AlertReceiver

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
FARM = 77
TOTAL = 12


def store(free: int, at: datetime) -> None:
    ips = tuple(PublicIp(f"185.0.0.{i}/24", "185.0.0.254", 0 if i < free else 9000 + i) for i in range(TOTAL))
    farm_ips_store(farm=FarmPublicIps(FARM, "ipfarm", ips), read_at=at)


@pytest.fixture
def farm_owner(settings):
    """The farm's owner's route alone: a loopback webhook as ALERT_FARM_URLS' route of farm 77."""
    receiver = AlertReceiver()
    settings.ALERT_URLS = []
    settings.ALERT_FARM_URLS = {FARM: [receiver.url]}
    settings.ALERT_IPS_RUN_OUT_DAYS = 7.0
    yield receiver
    receiver.close()


def ips_alerts() -> list[Alert]:
    return list(Alert.objects.filter(rule=rules.IPS_RUNNING_OUT, state=Alert.State.FIRING))


def test_free_ips_falling_alert_the_farms_owner_with_the_days_left(farm_owner):
    for days_ago, free in ((4, 10), (3, 8), (2, 6), (1, 4), (0, 2)):
        store(free, NOW - timedelta(days=days_ago))
    alerts_evaluate(now=NOW)
    # By hand: 2 IPs fewer each day, 2 free now, so none free in 1 day, within the 7 days' limit.
    (alert,) = ips_alerts()
    assert alert.subject == f"farm {FARM}"
    assert alert.summary == "Farm 77 (ipfarm): free public IPv4s falling by 2.0 a day; none free in about 1 day"
    assert [m["title"] for m in farm_owner.messages] == ["[firing] A farm's public IPv4s running out: farm 77"]


def test_free_ips_flat_alert_nobody(farm_owner):
    for days_ago in (4, 3, 2, 1, 0):
        store(5, NOW - timedelta(days=days_ago))
    alerts_evaluate(now=NOW)
    assert ips_alerts() == [] and farm_owner.messages == []


def test_a_slow_fall_past_the_limit_alerts_nobody(farm_owner):
    # 1 IP fewer every 2 days, 10 free now: 20 days left, past the 7 days' limit.
    for days_ago, free in ((8, 14), (6, 13), (4, 12), (2, 11), (0, 10)):
        store(free, NOW - timedelta(days=days_ago))
    alerts_evaluate(now=NOW)
    assert ips_alerts() == []


def test_one_reading_is_no_trend(farm_owner):
    store(0, NOW)
    alerts_evaluate(now=NOW)
    assert ips_alerts() == []


@pytest.mark.slow
def test_the_readings_kept_stay_bounded_and_recent():
    start = NOW - timedelta(days=20)
    for step in range(20 * 24):  # a reading every hour for 20 days
        store(TOTAL - step % 3, start + timedelta(hours=step))
    readings = FarmIps.objects.get(farm_id=FARM).free_readings
    times = [datetime.fromisoformat(t) for t, _n in readings]
    # 14 days of points at least 6 hours (less one reading's hour) apart, and the latest.
    assert len(readings) <= 14 * 24 // 6 * 2 and len(readings) >= 14 * 24 // 6
    assert times[0] >= times[-1] - timedelta(days=14) and times == sorted(times)
    assert all(b - a >= FREE_READING_EVERY - timedelta(hours=1) for a, b in zip(times[:-2], times[1:-1], strict=True))
