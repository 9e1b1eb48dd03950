"""The probes page: the nodes whose memory a probe would teach the most, with the VM to send (the same
lessons.selectors.probes the API's GET /api/v1/probes reads)."""

from django.contrib.auth.decorators import login_required, permission_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.lessons.selectors.probes import probes_to_send
from dashboard.lessons.services.lesson_evidence import probes_proposed

PROBES_SHOWN = 20


@login_required
@require_GET
@permission_required("dashboard.view_node", raise_exception=True)
def probe_list(request):
    listed = probes_to_send(limit=PROBES_SHOWN)
    # Proposed by the product: a probe reported on one of these within its window counts as a probe.
    probes_proposed([p.node_id for p in listed], token=None)
    return render(request, "dashboard/probes.html", {"section": "failed", "probes": listed})
