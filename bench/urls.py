"""The dashboard's URLs plus the naive admin baseline, served only inside the bench process."""

from django.urls import path

from bench.naive_admin import naive_site
from config.urls import urlpatterns as dashboard_urlpatterns

urlpatterns = [
    path("bench-naive-admin/", naive_site.urls),
    *dashboard_urlpatterns,
]
