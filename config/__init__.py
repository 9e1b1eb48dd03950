"""How the process starts: settings, URLs, the Celery and WSGI applications, environment parsing,
the embedded PostgreSQL and the log filters. The product itself lives in dashboard/.

The Celery application is imported here so that `celery -A config` finds it and Django loads it
at start-up (the `@shared_task`s of dashboard/tasks.py bind to it)."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
