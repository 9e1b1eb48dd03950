from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.selectors.fleet import fleet_overview


@login_required
@require_GET
def overview(request):
    return render(request, "dashboard/fleet.html", {"fleet": fleet_overview()})
