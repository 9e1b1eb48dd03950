"""/api/v1/probes: the nodes whose memory a probe would teach the most, with the probe to send.

GET reads the list and writes nothing (a link prefetched, a dashboard polling it, a read token). POST takes
it to send: the same list, each node kept as proposed (lessons.services.lesson_evidence.probes_proposed), so
a probe's refusal reported there within PROBE_WINDOW_HOURS counts as a probe, the product's own question
answered. A token that reports the probes takes them: a read token only reads.
"""

from __future__ import annotations

from ninja import Field, Query, Router, Schema

from dashboard.api.auth import READ, REPORT
from dashboard.api.placement_schemas import ProbesOut
from dashboard.api.schemas import ERRORS
from dashboard.api.writes import api_write
from dashboard.lessons.selectors.probes import Probe, probes_to_send
from dashboard.lessons.services.lesson_evidence import probes_proposed

router = Router(tags=["deployments"])


class ProbesIn(Schema):
    limit: int = Field(20, ge=1, le=100, description="at most this many probes (a node each, the most uncertain first)")


@router.get(
    "/probes",
    auth=READ,
    response={200: ProbesOut, **ERRORS},
    summary="Nodes whose memory a probe would teach the most (a VM ZOS always refuses); reads only",
)
def probes(request, query: Query[ProbesIn]):
    """The list, read: nothing is kept. To send the probes, take the list with POST /api/v1/probes: a probe
    counts as one only on a node the product proposed (or one placement wants read now)."""
    return _probes_out(probes_to_send(limit=query.limit))


@router.post(
    "/probes",
    auth=REPORT,
    response={200: ProbesOut, **ERRORS},
    summary="Take the probes to send: the same list, each node kept as proposed for PROBE_WINDOW_HOURS",
)
def probes_take(request, query: Query[ProbesIn]):
    """Send each probe's VM to its node: ZOS refuses it, and the refusal, reported with POST
    /api/v1/deployments (outcome failed, probe true), teaches the node's group without a buyer's
    deployment failing. It counts as no failure. Each node listed is kept as proposed: a probe reported
    there within PROBE_WINDOW_HOURS counts as a probe; elsewhere it is taken as a plain report. Taking the
    list twice keeps it twice, and changes nothing else."""
    with api_write("probes.take", request):
        listed = probes_to_send(limit=query.limit)
        probes_proposed([p.node_id for p in listed], token=request.auth)
    return _probes_out(listed)


def _probes_out(listed: list[Probe]) -> dict:
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
