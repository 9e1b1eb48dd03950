"""GET /api/v1/probes: the nodes whose memory a probe would teach the most, with the probe to send."""

from __future__ import annotations

from ninja import Field, Query, Router, Schema

from dashboard.api.auth import READ
from dashboard.api.placement_schemas import ProbesOut
from dashboard.api.schemas import ERRORS
from dashboard.lessons.selectors.probes import probes_to_send
from dashboard.lessons.services.lesson_evidence import probes_proposed

router = Router(tags=["deployments"])


class ProbesIn(Schema):
    limit: int = Field(20, ge=1, le=100, description="at most this many probes (one per ZOS version)")


@router.get(
    "/probes",
    auth=READ,
    response={200: ProbesOut, **ERRORS},
    summary="Nodes whose memory a probe would teach the most (a VM ZOS always refuses)",
)
def probes(request, query: Query[ProbesIn]):
    """Send each probe's VM to its node: ZOS refuses it, and the refusal, reported with POST
    /api/v1/deployments (outcome failed, probe true), teaches the node's group without a buyer's
    deployment failing. It counts as no failure. Each node listed is kept as proposed: a probe reported
    there within PROBE_WINDOW_HOURS counts as a probe; elsewhere it is taken as a plain report."""
    listed = probes_to_send(limit=query.limit)
    # What the product proposed, and when: a probe reported there within its window counts as a probe.
    probes_proposed([p.node_id for p in listed], token=request.auth)
    return {
        "probes": [
            {
                "node_id": p.node_id,
                "farm_id": p.farm_id,
                "zos_version": p.zos_version,
                "running": p.running,
                "unknown_mru": p.unknown_mru,
                "why": p.why,
                "probe": {"cru": p.cru, "mru": p.mru, "sru": p.sru},
            }
            for p in listed
        ]
    }
