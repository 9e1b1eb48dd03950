"""What a reported outcome must be before anything is read: its errors, its bounds, its checks.

Whole numbers a column holds (models.INTEGER_MAX), text without NUL, lone surrogates or control
characters (dashboard.grid.text, the grid's own rule), and a time within REPORT_MAX_AGE_DAYS back
and CLOCK_SKEW ahead of now, returned in UTC. The API's schemas check the same before the service
is called (api/inputs.py); the service checks again for every other caller.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

from dashboard.capacity.outcomes import Report, moment_problem
from dashboard.figures.closure import closure_of
from dashboard.grid.text import text_problem
from dashboard.models import INTEGER_MAX, Deployment, Node

OUTCOMES = tuple(Report)
# Clocks differ; a report from a little in the future is the marketplace's clock, not a lie.
CLOCK_SKEW = timedelta(minutes=5)
MAX_ERROR_TEXT = 64 * 1024
MARKETPLACE_ID_MAX = Deployment._meta.get_field("marketplace_id").max_length
WORKLOAD_ID_MAX = Deployment._meta.get_field("grid_workload_id").max_length


def report_max_age() -> timedelta:
    return timedelta(days=settings.REPORT_MAX_AGE_DAYS)


class OutcomeError(ValueError):
    """A report that cannot be recorded; `field` names the input at fault. Nothing was written."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class OutcomeConflict(OutcomeError):
    """The report contradicts what is recorded (another node or slice, a held slice, an impossible
    move, or a time before the move it would follow)."""


def _whole(value, *, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INTEGER_MAX:
        raise OutcomeError(f"{field} must be a whole number from 0 to {INTEGER_MAX}, not {value!r}", field=field)


def _text(value, *, field: str, limit: int, lines: bool = False) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise OutcomeError(f"{field} must be text of at most {limit:,} characters", field=field)
    problem = text_problem(value, allow_whitespace=lines)
    if problem:
        raise OutcomeError(f"{field} contains {problem}; send it without", field=field)
    return value


def outcome_checked(
    *, node_id, slice_index, marketplace_id, outcome, error, at, workload_id, now
) -> tuple[str, datetime]:
    _whole(node_id, field="node_id")
    _whole(slice_index, field="slice_index")
    marketplace_id = _text(marketplace_id or "", field="marketplace_id", limit=MARKETPLACE_ID_MAX).strip()
    if not marketplace_id:
        raise OutcomeError(
            f"marketplace_id must be the marketplace's deployment or contract id, 1 to {MARKETPLACE_ID_MAX} characters",
            field="marketplace_id",
        )
    if outcome not in OUTCOMES:
        raise OutcomeError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}", field="outcome")
    _text(error, field="error", limit=MAX_ERROR_TEXT, lines=True)
    _text(workload_id or "", field="workload_id", limit=WORKLOAD_ID_MAX)
    if not isinstance(at, datetime):
        raise OutcomeError("at must be a date and time with its UTC offset, e.g. 2026-05-01T12:00:00Z", field="at")
    problem = moment_problem(at, now=now, past=report_max_age(), future=CLOCK_SKEW)
    if problem:
        raise OutcomeError(
            f"at ({at.isoformat()}) cannot be recorded: {problem} (REPORT_MAX_AGE_DAYS={settings.REPORT_MAX_AGE_DAYS})",
            field="at",
        )
    return marketplace_id, at.astimezone(UTC)


# The closures under which tfchain takes no node contract from the marketplace's twin (_create_node_contract:
# NodeNotAvailableToDeploy): rented by another twin, or kept for a renter the marketplace is not.
CHAIN_REFUSES_OUR_CONTRACT = ("rented", "needs-rent")


def outcome_node(*, node_id: int, outcome: str) -> Node:
    """The reported node; OutcomeError when it is not registered, and OutcomeConflict for a `deployed`
    report on a node the chain takes no contract on from the marketplace's twin (as a hold there is
    refused, deployments.services.holds): no VM of the marketplace can run there. A `failed` report is taken."""
    node = Node.objects.filter(grid_id=node_id).first()
    if node is None:
        raise OutcomeError(f"node {node_id} is not registered with the dashboard", field="node_id")
    closed = closure_of(node) if outcome == Report.DEPLOYED else None
    if closed is not None and closed.key in CHAIN_REFUSES_OUR_CONTRACT:
        raise OutcomeConflict(
            f"node {node_id} {closed.what}: the chain takes no node contract on it from the marketplace's twin, "
            "so no VM of the marketplace runs there; check the report's node id",
            field="node_id",
        )
    return node
