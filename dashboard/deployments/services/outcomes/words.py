"""The sentences of reported outcomes: why a report was refused, what a repeat is, who holds a slice."""

from __future__ import annotations

from datetime import UTC, datetime

from dashboard.capacity.outcomes import Refusal, Report
from dashboard.models import Deployment, Node

# The state each outcome leaves the record in.
STATE_OF = {
    "deployed": Deployment.State.DEPLOYED,
    "failed": Deployment.State.FAILED,
    "released": Deployment.State.DELETED,
}


def refusal_words(
    refusal: Refusal,
    *,
    node: Node,
    slice_index: int,
    marketplace_id: str,
    report: Report,
    at: datetime,
    existing: Deployment | None,
    holder_words: str,
    slice_created: datetime | None,
    last_move: datetime | None,
) -> str:
    where = f"slice {slice_index} of node {node.grid_id}"
    if refusal == Refusal.HELD and holder_words.startswith("hold #"):
        return (
            f"{where} is held by {holder_words}; {marketplace_id!r} cannot be {report} on it. Wait for the hold "
            f"to end (released, or expired), or place {marketplace_id!r} on another slice"
        )
    if refusal == Refusal.HELD:
        return (
            f"{where} is held by {holder_words}; {marketplace_id!r} cannot be {report} on it. Report that one "
            f"released first (or, if the marketplace never placed {marketplace_id!r} there, check its own records)"
        )
    if refusal == Refusal.UNKNOWN_ID:
        live = f"its live deployment is {holder_words}" if holder_words else "it has no live deployment"
        return (
            f"the dashboard has no record of {marketplace_id!r}, so it cannot release {where}: {live}. A release "
            f"names the deployment reported as deployed there"
        )
    if refusal == Refusal.TOO_OLD:
        follows = "its deploy" if existing is not None else "the slice's last move"
        return (
            f"{report} of {marketplace_id!r} at {when(at)} is older than {follows} at {when(last_move)}: nothing was "
            f"changed (a report cannot undo the order of what happened; check the marketplace's clock and order)"
        )
    if refusal == Refusal.BEFORE_SLICE:
        return (
            f"{report} of {marketplace_id!r} at {when(at)} is dated before {where} existed (made "
            f"{when(slice_created)}): it cannot be about this slice; nothing was recorded"
        )
    return (
        f"marketplace id {marketplace_id!r} is recorded as {existing.state}; it cannot become {report} "
        f"(a deployment goes deployed -> released once, a failure stays failed: a new attempt takes a new id)"
    )


def repeat_words(existing: Deployment, report: Report) -> str:
    if existing.state == STATE_OF[report]:
        return f"already recorded: {existing.marketplace_id!r} is {existing.state}; nothing was written"
    return (
        f"already recorded: {existing.marketplace_id!r} was deployed, then released at {when(existing.finished_at)}; "
        f"nothing was written"
    )


def holder_words(live: Deployment) -> str:
    name = repr(live.marketplace_id) if live.marketplace_id else f"#{live.pk} (the dashboard's own)"
    return f"deployment {name} (deployed {when(live.started_at)})"


def when(at: datetime | None) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if at is not None else "never"
