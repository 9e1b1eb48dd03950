"""The Celery application. Tasks live in dashboard/tasks.py; settings are the CELERY_* ones."""

import logging
import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dashboard"])


def embedded_worker_as_root() -> bool:
    """The embedded default's worker (Celery's filesystem broker), started by root.

    `make run` starts the worker as whoever ran it, and in a container that is root: switching to
    another user would need one that owns var/, which a fresh clone does not have. Celery's
    multi-line warning says nothing such a person can act on, so it is replaced by one line
    (`_say_why_root`); a worker on any other broker, production's, keeps Celery's warning."""
    broker = os.environ.get("CELERY_BROKER_URL", "filesystem://")
    return broker.startswith("filesystem://") and hasattr(os, "geteuid") and os.geteuid() == 0


if embedded_worker_as_root():
    warnings.filterwarnings("ignore", category=SecurityWarning)


@worker_ready.connect
def _say_why_root(**_):
    if embedded_worker_as_root():
        logging.getLogger(__name__).info(
            "the demo worker runs as root because make run was started as root; in production run the "
            "worker as its own unprivileged user (docs/production.md)"
        )
