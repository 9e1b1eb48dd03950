"""/favicon.ico: browsers ask the site's root for it whatever a page links (the admin links none)."""

from django.shortcuts import redirect
from django.templatetags.static import static
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    # A redirect to the static file, so it is served (and fingerprinted) like every other asset.
    return redirect(static("dashboard/favicon.ico"))
