"""The refusal page: what the account may not do, and whom to ask."""

from django.conf import settings
from django.shortcuts import render

# Any one of these lets an account read something here; an account with none is in no group.
READ_PERMISSIONS = ("dashboard.view_node", "dashboard.view_deployment", "dashboard.view_job", "dashboard.view_policy")


def permission_denied(request, exception=None):
    user = request.user
    can_read = user.is_authenticated and any(user.has_perm(p) for p in READ_PERMISSIONS)
    context = {"can_read": can_read, "access_contact": settings.ACCESS_REQUEST_CONTACT}
    return render(request, "403.html", context, status=403)
