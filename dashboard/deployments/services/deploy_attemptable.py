"""Whether a deploy of a slice may be attempted now: the slice exists, is free, has no deploy of it in
flight and no buyer's hold. Checked before the grid is read, and again under the slice's lock."""

from __future__ import annotations

from django.utils import timezone

from dashboard.capacity.outcomes import DEPLOY_IN_FLIGHT
from dashboard.deployments.services.deploy_errors import SliceBusy, SliceNotFound, SliceNotFree
from dashboard.deployments.services.holds import hold_words
from dashboard.models import Deployment, Hold, Node, Slice

# A "deploying" row younger than this is taken to be a deploy still in flight; an older one is
# a process that died mid-deploy, and the slice may be tried again (the old row stays as it is).


def slice_attemptable(node: Node, slice_index: int) -> Slice:
    """The node's slice of this index, if it may be attempted now (else SliceNotFound, SliceNotFree, SliceBusy)."""
    try:
        slice_ = node.slices.get(index=slice_index)
    except Slice.DoesNotExist:
        indices = list(node.slices.order_by("index").values_list("index", flat=True))
        listed = ", ".join(str(i) for i in indices) if indices else "none"
        raise SliceNotFound(f"node {node.grid_id} has no slice {slice_index} (its slices: {listed})") from None
    slice_check_attemptable(node, slice_)
    return slice_


def slice_check_attemptable(node: Node, slice_: Slice) -> None:
    """SliceNotFree or SliceBusy unless the slice is free, with no deploy of it in flight and no live hold."""
    if slice_.state != Slice.State.FREE:
        raise SliceNotFree(
            f"slice {slice_.index} of node {node.grid_id} is {slice_.state}, not free; only free slices can be deployed"
        )
    in_flight = (
        Deployment.objects.filter(
            slice=slice_, state=Deployment.State.DEPLOYING, started_at__gte=timezone.now() - DEPLOY_IN_FLIGHT
        )
        .order_by("-started_at")
        .first()
    )
    if in_flight is not None:
        raise SliceBusy(
            f"slice {slice_.index} of node {node.grid_id} is being deployed already "
            f"(deployment {in_flight.pk}, started {in_flight.started_at:%H:%M:%S} UTC)"
        )
    now = timezone.now()
    hold = Hold.objects.live(now).filter(slice=slice_).select_related("node").first()
    if hold is not None:
        # Held for a buyer: their own deploy will come as a `deployed` report under the hold's id.
        raise SliceBusy(f"slice {slice_.index} of node {node.grid_id} is held: {hold_words(hold, now)}")
