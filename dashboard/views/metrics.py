"""/metrics and /metrics/farms for Prometheus: the stored figures, behind the bearer token in METRICS_TOKEN.

404 when METRICS_TOKEN is unset (the endpoint does not exist then), 401 without the right token.
No session: a signed-in browser gets the 401 too.
"""

import hmac

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dashboard.views.metrics_collectors import farms_registry, registry


@require_GET
def metrics(request):
    """The fleet, jobs, failures, worker and grid requests: the same size whatever the fleet."""
    return _scrape(request, registry)


@require_GET
def metrics_farms(request):
    """The same figures per farm: 12 series a farm."""
    return _scrape(request, farms_registry)


def _scrape(request, which):
    expected = settings.METRICS_TOKEN
    if not expected:
        raise Http404("metrics are off: set METRICS_TOKEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        response = HttpResponse(
            "send METRICS_TOKEN as 'Authorization: Bearer <token>'\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(which), content_type=CONTENT_TYPE_LATEST)
