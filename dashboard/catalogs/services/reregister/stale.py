"""Which nodes a bulk re-register takes (the stale ones), and which slices have a deploy in flight or a live hold."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from dashboard.capacity.outcomes import DEPLOY_IN_FLIGHT
from dashboard.deployments.selectors.holds import live_holds
from dashboard.figures.services.figures import figures_compute
from dashboard.models import Deployment, Node, Slice

# Finding the stale nodes computes this many nodes' figures at a time (~1.3 MiB at 1,000).
STALE_SCAN_CHUNK = 1000


def stale_node_pks(*, farm_id: int | None = None) -> list[int]:
    """Primary keys of nodes whose stored catalog differs from what their effective policy carves,
    farm by farm (farm id, then node id), so that a bulk run's pages each hold one farm's nodes.

    Computed from the slices and policies now (figures_compute), not from the stored figures, in
    STALE_SCAN_CHUNK nodes at a time (three queries each) so the worker's memory does not grow
    with the fleet.

    It reads nothing from the grid, on purpose: staleness is a question about the catalog and the
    policy, and the carve it compares with needs only the node's stored total and pools (which
    the onboarding's and every precheck's paged or single reads keep current), not its live
    `used`. A grid read here would cost a page per 100 nodes to answer a question that does not
    depend on it; the bulk run then reads each stale node's page anyway before it plans, and a
    node that turns out current on that reading is counted "already up to date".
    """
    nodes = Node.objects.order_by("farm_id", "grid_id")
    if farm_id is not None:
        nodes = nodes.filter(farm_id=farm_id)
    pks = list(nodes.values_list("pk", flat=True))
    stale = []
    for start in range(0, len(pks), STALE_SCAN_CHUNK):
        chunk = pks[start : start + STALE_SCAN_CHUNK]
        figures = figures_compute(Node.objects.filter(pk__in=chunk))
        stale.extend(pk for pk in chunk if pk in figures and figures[pk].stale)
    return stale


def deploying_slices(node_pks: list[int]) -> dict[int, set[int]]:
    """Node pk -> pks of its slices with a deploy in flight (a "deploying" Deployment younger than
    capacity.outcomes.DEPLOY_IN_FLIGHT; an older one is a process that died and the slice is free again)."""
    rows = Deployment.objects.filter(
        node_id__in=node_pks,
        state=Deployment.State.DEPLOYING,
        started_at__gte=timezone.now() - DEPLOY_IN_FLIGHT,
        slice__isnull=False,
    ).values_list("node_id", "slice_id")
    by_node: dict[int, set[int]] = {}
    for node_pk, slice_pk in rows:
        by_node.setdefault(node_pk, set()).add(slice_pk)
    return by_node


def held_slices(node_pks: list[int], *, now: datetime) -> dict[int, set[int]]:
    """Node pk -> pks of its free slices under a hold live at `now` (deployments.selectors.holds.live_holds: an
    expired or released hold protects nothing, and none needs a worker to end it first)."""
    rows = live_holds(now).filter(node_id__in=node_pks).values_list("node_id", "slice_id")
    by_node: dict[int, set[int]] = {}
    for node_pk, slice_pk in rows:
        by_node.setdefault(node_pk, set()).add(slice_pk)
    return by_node


def slices_by_node(node_pks: list[int]) -> dict[int, list[Slice]]:
    by_node: dict[int, list[Slice]] = {}
    for s in Slice.objects.filter(node_id__in=node_pks).order_by("node_id", "index"):
        by_node.setdefault(s.node_id, []).append(s)
    return by_node


def stale_again_count(*, handled: list[int], failed: int) -> int:
    """Of the nodes a bulk run handled, how many it wrote that are stale again at its end.

    A policy edit committed after a batch (it waits for the batch's commit) finds that batch's nodes
    carved by the old version: stale again (its figures say so: the edit rewrote them). The run's
    failed nodes are stale still, not again. Read from the stored figures.
    """
    still = sum(
        Node.objects.filter(pk__in=handled[start : start + STALE_SCAN_CHUNK], stale=True).count()
        for start in range(0, len(handled), STALE_SCAN_CHUNK)
    )
    return max(still - failed, 0)
