"""The nodes whose memory a probe would teach the most (GET /api/v1/probes).

A probe is a VM larger than the node's memory: ZOS always refuses it, and its refusal's `usable`
figure tells the node's actual use (docs/zos.md), so it teaches without a buyer's deployment
failing. It teaches only where actual exceeds ZOS's count, which hidden use does with VMs running:
an empty node's refusal says nothing ZOS's count did not. So the candidates are up, read nodes
with VMs, scored by what the model does not know of their memory where they run: a group (ZOS
version) with no lesson, a lesson whose refusals are all at one VM count (ZOS's own use a prior),
or a node far from its group's points, or a node never read where its group's nodes were seen to differ
(capacity.spread); every node a candidate, the most uncertain first.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from dashboard.capacity.overhead import PROBE_BEYOND_MRU, probe_need
from dashboard.capacity.spread import NOTHING_READ, Spread, probe_rank
from dashboard.lessons.selectors.lessons import memory_observations_live
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
    """At most `limit` probes: up nodes running VMs that no live reading tells yet, the most uncertain per
    slice they still offer first (capacity.probe_rank: a hidden use refuses the last slices first), what is
    not known including what the group's nodes read so far say of a use of a node's own (capacity.spread,
    capacity.probe_need). Every node is a candidate, not one per group: a node's own readings decide its own
    figures, and what one node tells says little of the next where nodes differ (issue 44's worlds)."""
    latest: dict[str, MemoryLesson] = {}
    for lesson in MemoryLesson.objects.filter(reverted_at__isnull=True).order_by("-learnt_at", "-pk"):
        latest.setdefault(lesson.build, lesson)
    fits = {build: lesson.fit() for build, lesson in latest.items()}
    read, spreads = _nodes_read()
    rows = (
        Node.objects.filter(status=Node.Status.UP, used_mru__isnull=False)
        .filter(closure="")
        .exclude(pk__in=read)
        .values_list(
            "pk", "grid_id", "farm_id", "zos_version", "total_mru", "slices_rented", "slices_deployed", "slices_free"
        )
    )
    listed: list[tuple[float, Probe]] = []
    for pk, grid_id, farm_id, version, total_mru, rented, deployed, free in rows:
        running = rented + deployed
        if not running:
            continue  # an empty node's refusal tells nothing ZOS's count did not
        build = (version or "").strip()
        spread = spreads.get(build, NOTHING_READ)
        unknown, why = probe_need(
            fits.get(build), build=build, running=running, node=pk, own_unknown_mru=spread.own_unknown_mru(running)
        )
        probe = Probe(
            node_id=grid_id,
            farm_id=farm_id,
            zos_version=build,
            running=running,
            unknown_mru=round(unknown),
            why=why,
            mru=total_mru + PROBE_BEYOND_MRU,
        )
        listed.append((probe_rank(unknown, free_slices=free), probe))
    ranked = sorted(listed, key=lambda ranked: (-ranked[0], ranked[1].node_id))
    return [probe for _rank, probe in ranked[:limit]]


def _nodes_read() -> tuple[set[int], dict[str, Spread]]:
    """The nodes a live memory reading tells (a probe there would tell it again), and per build its nodes
    read and those whose reading stayed their own (standing "node"), as capacity.Spread counts them."""
    rows = (
        memory_observations_live(now=timezone.now())
        .filter(standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP])
        .values_list("zos_build", "node_id", "standing")
        .distinct()
    )
    read: dict[str, set[int]] = {}
    own: dict[str, set[int]] = {}
    for build, node, standing in rows:
        read.setdefault(build, set()).add(node)
        if standing == Observation.Standing.NODE:
            own.setdefault(build, set()).add(node)
    spreads = {
        build: Spread(nodes_read=len(nodes), nodes_own=len(own.get(build, set()) & nodes))
        for build, nodes in read.items()
    }
    return set().union(*read.values()) if read else set(), spreads
