"""Nodes whose answer could not be read at the last fleet-wide reading: the one figure the fleet page,
/metrics and the alert all say ("N nodes could not be read: ...").

The last finished fleet watch (or onboarding, if newer) decides: its result keeps how many entries the
grid sent that the parser refused and the first few reasons. A refused node keeps its stored reading, so
without this figure nothing would show that the grid's answers no longer read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.models import Job

# The kinds that read many nodes at once and keep what they refused in their result.
READERS = {Job.Kind.FLEET_WATCH: ("refused_total", "refused"), Job.Kind.ONBOARD: ("skipped_total", "skipped")}
SHOWN = 3


@dataclass(frozen=True)
class Unreadable:
    """How many nodes the last reading refused, the first reasons ([label, why]), which job, when."""

    count: int
    reasons: tuple[tuple[str, str], ...]
    job_id: int
    kind: str
    at: datetime

    def words(self) -> str:
        shown = "; ".join(f"{label}: {why}" for label, why in self.reasons[:SHOWN])
        more = f" (and {self.count - SHOWN} more)" if self.count > SHOWN else ""
        return f"{self.count} node(s) could not be read: {shown}{more}"


def last_unreadable() -> Unreadable | None:
    """The newest finished fleet watch or onboarding's refusals; None when it refused nothing (or none ran)."""
    job = (
        Job.objects.filter(kind__in=list(READERS), state__in=[Job.State.SUCCEEDED, Job.State.FAILED])
        .exclude(finished_at=None)
        .order_by("-finished_at", "-pk")
        .values("pk", "kind", "finished_at", "result")
        .first()
    )
    if job is None:
        return None
    total_key, list_key = READERS[job["kind"]]
    result = job["result"] or {}
    count = result.get(total_key) or 0
    if not isinstance(count, int) or count <= 0:
        return None
    reasons = tuple(
        (str(entry[0]), str(entry[1]))
        for entry in (result.get(list_key) or [])
        if isinstance(entry, list | tuple) and len(entry) == 2
    )
    return Unreadable(count=count, reasons=reasons, job_id=job["pk"], kind=job["kind"], at=job["finished_at"])


__all__ = ["Unreadable", "last_unreadable"]
