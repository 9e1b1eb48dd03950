"""Filters on the console log: one line for what is routine, the full story for what is not.

- A 403 is an answer, not a fault: Django's `django.request` logger records a refused permission
  with its traceback (58 of them in one operator's trial); it becomes one line saying who asked for
  what. 500s keep their tracebacks.
- kombu warns "No hostname was supplied" for every connection to Celery's filesystem transport (the
  embedded broker has no host by nature), so every `node_reregister` printed it.
"""

from __future__ import annotations

import logging


class ForbiddenOnOneLine(logging.Filter):
    """`django.request`'s 403 records: no traceback, the user and the path on one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) != 403:
            return True
        request = getattr(record, "request", None)
        user = getattr(request, "user", None)
        who = user.get_username() if user is not None and user.is_authenticated else "anonymous"
        method = getattr(request, "method", "?")
        path = getattr(request, "path", "?")
        record.msg, record.args = "403 forbidden: %s %s by %s", (method, path, who)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class NoHostnameNoise(logging.Filter):
    """Drops kombu's hostname warning, which the filesystem transport always raises."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No hostname was supplied.")
