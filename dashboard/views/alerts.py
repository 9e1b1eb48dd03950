"""Alerts in the pages: the strip on every page (for users who may view alerts), the alerts page with the
details and the acknowledge buttons, and an admin's acknowledgement."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from dashboard.alerts.selectors.alerts import alerts_banner, alerts_firing, alerts_resolved
from dashboard.alerts.services.alerts import AlertError, alert_acknowledge, alert_limits
from dashboard.models import Alert
from dashboard.views.action import action


def banner(request) -> dict:
    """Context processor: `alert_banner`, read only when a template asks (templates call callables).

    Pages that do not render base.html, the API and /metrics pay nothing.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def firing():
        if not user.has_perm("dashboard.view_alert"):
            return []
        return alerts_banner(now=timezone.now(), limits=alert_limits())

    return {"alert_banner": firing}


@login_required
@permission_required("dashboard.view_alert", raise_exception=True)
@require_GET
def alert_list(request):
    """Every firing alert, worst first, with its details (and, for admins, its acknowledge button);
    then the recently resolved ones."""
    firing = alerts_firing(now=timezone.now(), limits=alert_limits())
    context = {"section": "alerts", "firing": firing, "resolved": alerts_resolved()}
    return render(request, "dashboard/alerts.html", context)


@action("dashboard.acknowledge_alert")
def acknowledge(request, alert_id: int):
    alert = get_object_or_404(Alert, pk=alert_id)
    try:
        if alert_acknowledge(alert=alert, by=request.user, source="web"):
            messages.success(request, f"Acknowledged: {alert.title} ({alert.subject}).")
        else:
            messages.info(request, f"{alert.title} ({alert.subject}) was acknowledged already.")
    except AlertError as exc:
        messages.info(request, str(exc))
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect(back)
    return redirect("fleet")
