"""The probes page: the nodes whose memory a probe would teach the most, with the VM to send (the same
lessons.selectors.probes the API's GET /api/v1/probes reads)."""

from django.shortcuts import render

from dashboard.lessons.selectors.probes import probes_to_send
from dashboard.views.page import page

PROBES_SHOWN = 20


@page("dashboard.view_node")
def probe_list(request):
    # Read only: a page view keeps nothing. The program that sends the probes takes them with POST
    # /api/v1/probes, which keeps each node as proposed so its probe counts as one (api.probes).
    listed = probes_to_send(limit=PROBES_SHOWN)
    return render(request, "dashboard/probes.html", {"section": "failed", "probes": listed})
