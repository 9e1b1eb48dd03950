from django.apps import AppConfig


class SimConfig(AppConfig):
    """Only its management commands: `simgrid`, `simulate_traffic`, `demo_fleet`."""

    name = "sim"
