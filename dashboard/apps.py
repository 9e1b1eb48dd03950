from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Slice catalog"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the login signal that starts a session's clocks (dashboard.middleware.SessionExpiry).
        from dashboard import middleware  # noqa: F401
