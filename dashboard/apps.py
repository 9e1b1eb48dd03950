from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Slice catalog"
    default_auto_field = "django.db.models.BigAutoField"
