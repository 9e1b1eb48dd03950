"""Every API call that writes runs in one transaction with its answer: a failure rolls all of it back.

`with api_write("deployments.report", request): ...` holds the service call AND the answer built
from what it wrote (read back and validated against its schema). Whatever fails inside, a refusal
(4xx) or a bug (500), leaves the database as it was: no record committed behind an error, as a
report dated year 1 at +01:00 once was (stored, then unreadable).

The seam: `api_write_done` is sent inside the transaction, after the writes and the answer, just
before the commit. A receiver that raises stands for a failure at the last moment; the suite's
tests connect one to prove each write path rolls back (tests/api/test_api_writes.py). Nothing in the
product connects to it.

Authentication (and its last-used stamp) stays outside the transaction: a call that waits on the
grid must not hold the token's row locked meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction
from django.dispatch import Signal

from dashboard.lessons.services.group_steps import group_steps_after

# Sent with sender=<operation name> (a str: a receiver compares it by value), request=<the HttpRequest>,
# inside the call's transaction.
api_write_done = Signal()

# The operations that write, by the name each passes to api_write (tests read it to cover them all).
WRITE_OPERATIONS = (
    "deployments.report",
    "nodes.precheck",
    "nodes.reregister",
    "nodes.pools",
    "nodes.withhold",
    "nodes.withhold-release",
    "holds.create",
    "probes.take",
    "jobs.waves-approve",
    "jobs.waves-resume",
    "jobs.waves-stop",
    "jobs.rollback",
    "jobs.node-rollback",
)


@contextmanager
def api_write(operation: str, request) -> Iterator[None]:
    if operation not in WRITE_OPERATIONS:
        raise ValueError(f"unknown write operation {operation!r}; add it to WRITE_OPERATIONS")
    # A group's step (a build's memory lesson) runs after the commit, holding no node lock (lessons.services.group_steps).
    with group_steps_after(), transaction.atomic():
        yield
        api_write_done.send(sender=operation, request=request)
