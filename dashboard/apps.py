from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Slice catalog"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the login signal that starts a session's clocks (dashboard.views.middleware.SessionExpiry).
        # The slice audit checks a node whose used capacity moved with no outcome reported (an orphan
        # or a foreign VM), so it is found within a watch interval, not at the next nightly audit.
        from dashboard import checks  # noqa: F401  (the squashes' database check)
        from dashboard.capacity.node_events import USED_MOVED, node_events_subscribe
        from dashboard.catalogs.services.catalog_audit import audit_on_used_moved
        from dashboard.views import middleware  # noqa: F401

        node_events_subscribe(USED_MOVED, audit_on_used_moved)
