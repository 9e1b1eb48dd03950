"""The nodes whose memory a probe would teach the most (GET /api/v1/probes).

A probe is a VM larger than the node's memory: ZOS always refuses it, and its refusal's `usable`
figure tells the node's actual use (docs/zos.md), so it teaches without a buyer's deployment
failing. It teaches only where actual exceeds ZOS's count, which hidden use does with VMs running:
an empty node's refusal says nothing ZOS's count did not. So the candidates are up, read nodes
with VMs, scored by what the model does not know of their memory where they run: a group (ZOS
version) with no lesson, a lesson whose refusals are all at one VM count (ZOS's own use a prior),
or a node far from its group's points; one node per group, the one that would teach it most.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from dashboard.capacity.overhead import PROBE_BEYOND_MRU, probe_need
from dashboard.models import MemoryLesson, Node, Observation


@dataclass(frozen=True)
class Probe:
    node_id: int
    farm_id: int
    zos_version: str
    running: int
    unknown_mru: int  # the standard deviation of the node's memory use the model has now, bytes
    why: str
    cru: int = 1
    mru: int = 0  # the probe VM's memory: more than the node's
    sru: int = 0


def probes_to_send(*, limit: int = 20) -> list[Probe]:
    """At most `limit` probes, one per group, the most uncertain first."""
    latest: dict[str, MemoryLesson] = {}
    for lesson in MemoryLesson.objects.filter(reverted_at__isnull=True).order_by("-learnt_at", "-pk"):
        latest.setdefault(lesson.build, lesson)
    fits = {build: lesson.fit() for build, lesson in latest.items()}
    # A node whose own reading waits for a second source (services.lesson_evidence) cannot be its own
    # second source: a probe there teaches its group nothing until another node speaks.
    waiting = Observation.objects.filter(
        kind=Observation.Kind.MEMORY,
        standing=Observation.Standing.NODE,
        cleared_at__isnull=True,
        seen_at__gte=timezone.now() - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS),
    ).values("node_id")
    rows = (
        Node.objects.filter(status=Node.Status.UP, used_mru__isnull=False)
        .filter(closure="")
        .exclude(pk__in=waiting)
        .values_list("pk", "grid_id", "farm_id", "zos_version", "total_mru", "slices_rented", "slices_deployed")
    )
    best: dict[str, Probe] = {}
    for pk, grid_id, farm_id, version, total_mru, rented, deployed in rows:
        running = rented + deployed
        if not running:
            continue  # an empty node's refusal tells nothing ZOS's count did not
        build = (version or "").strip()
        unknown, why = probe_need(fits.get(build), build=build, running=running, node=pk)
        probe = Probe(
            node_id=grid_id,
            farm_id=farm_id,
            zos_version=build,
            running=running,
            unknown_mru=round(unknown),
            why=why,
            mru=total_mru + PROBE_BEYOND_MRU,
        )
        if build not in best or probe.unknown_mru > best[build].unknown_mru:
            best[build] = probe
    return sorted(best.values(), key=lambda p: (-p.unknown_mru, p.node_id))[:limit]
