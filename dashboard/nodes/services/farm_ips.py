"""The farms' public IPv4s read from the grid and stored: the one writer of models.FarmIps.

Read where a deploy or a fleet watch needs them (one request a farm, GET /farms?farm_id=F, inside the
request budget like every other read); the bound they set is nodes.selectors.farm_ips's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from dashboard.grid import get_grid
from dashboard.grid.types import FarmPublicIps, Grid, GridError
from dashboard.models import FarmIps, Node

log = logging.getLogger(__name__)

# The free counts kept for the run-out alert's trend (models.FarmIps.free_readings): a point every this
# often within the trend's days, and the latest; about 60 points a farm whatever the watch's pace.
FREE_READING_EVERY = timedelta(hours=6)
FREE_READINGS_FOR = timedelta(days=14)


@dataclass
class FarmIpsRead:
    """What one refresh read: the farms stored, and those the grid failed with its words."""

    stored: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.stored) + len(self.failed)


def farm_ips_store(*, farm: FarmPublicIps, read_at: datetime | None = None) -> FarmIps:
    """Write what the grid said of the farm's IPs (every IP with its contract, 0 = free), and the free
    count among the readings the run-out alert's trend reads."""
    read_at = read_at or timezone.now()
    ips = [{"ip": ip.ip, "gateway": ip.gateway, "contract_id": ip.contract_id} for ip in farm.ips]
    before = FarmIps.objects.filter(farm_id=farm.farm_id).values_list("free_readings", flat=True).first() or []
    free = sum(1 for ip in ips if not ip["contract_id"])
    row, _ = FarmIps.objects.update_or_create(
        farm_id=farm.farm_id,
        defaults={
            "farm_name": farm.farm_name[:128],
            "ips": ips,
            "read_at": read_at,
            "free_readings": free_readings_kept(before, at=read_at, free=free),
        },
    )
    return row


def free_readings_kept(readings: list, *, at: datetime, free: int) -> list[list]:
    """The readings with this one: those older than FREE_READINGS_FOR dropped, and the latest replaced
    while the one before it is under FREE_READING_EVERY old, so points stay that far apart (the last aside)."""
    since = at - FREE_READINGS_FOR
    kept = [[t, n] for t, n in readings if since <= datetime.fromisoformat(t) < at]
    if len(kept) >= 2 and at - datetime.fromisoformat(kept[-2][0]) < FREE_READING_EVERY:
        kept.pop()
    return [*kept, [at.isoformat(), free]]


def farm_ips_refresh(*, farm_ids: Iterable[int], grid: Grid | None = None) -> FarmIpsRead:
    """Read each farm's IPs (one request each) and store them; a farm the grid fails keeps its last reading."""
    grid = grid or get_grid()
    result = FarmIpsRead()
    for farm_id in sorted(set(farm_ids)):
        try:
            farm = grid.farm_ips(farm_id)
        except GridError as exc:
            log.warning("farm %s: its public IPs were not read: %s", farm_id, exc)
            result.failed[farm_id] = str(exc)
            continue
        farm_ips_store(farm=farm)
        result.stored.append(farm_id)
    return result


# Farms read at once when a policy starts selling IPv4: a second of the request budget; the rest wait for the
# fleet watch, which reads the farms of every policy that sells it (nodes.selectors.farm_ips.farms_selling_ipv4).
FARMS_READ_AT_ONCE = 15


def farm_ips_read_for_nodes(node_pks: Iterable[int], *, grid: Grid | None = None) -> FarmIpsRead:
    """The farms of these nodes whose IPs were never read, read now (up to FARMS_READ_AT_ONCE): a policy
    that starts selling a public IPv4 must not offer "never read" for a whole watch interval."""
    farms = set(Node.objects.filter(pk__in=list(node_pks)).values_list("farm_id", flat=True))
    unread = sorted(farms - set(FarmIps.objects.filter(farm_id__in=farms).values_list("farm_id", flat=True)))
    return farm_ips_refresh(farm_ids=unread[:FARMS_READ_AT_ONCE], grid=grid)
