"""The probes page: the nodes whose memory a probe would teach the most, with the VM to send (the same
lessons.selectors.probes the API's GET /api/v1/probes reads)."""

from django.shortcuts import render

from dashboard.lessons.selectors.probes import probes_to_send
from dashboard.lessons.services.lesson_evidence import probes_proposed
from dashboard.views.page import page

PROBES_SHOWN = 20


@page("dashboard.view_node")
def probe_list(request):
    listed = probes_to_send(limit=PROBES_SHOWN)
    # Proposed by the product: a probe reported on one of these within its window counts as a probe.
    probes_proposed([p.node_id for p in listed], token=None)
    return render(request, "dashboard/probes.html", {"section": "failed", "probes": listed})
