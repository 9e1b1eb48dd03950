"""Withholding nodes: maintenance windows an operator asks for, quarantines failures start, releases.

A window (NodeWithhold) takes a node's free slices off offer from `starts_at` until `ends_at` (None:
until released); rented and deployed slices are untouched. What every figure reads is the node row:
`Node.withheld_reason` and `withheld_until`, the window in force copied there by `withhold_sync` in
the transaction that made or released a window, with the node's figures refreshed at once. A window
also opens and ends by itself, with no write: the beat's `withhold_edges` (every WITHHOLD_EDGES_EVERY
seconds) finds the nodes whose row no longer says what the table says at `now` and syncs them, so the
stored figures follow a window's edges within one beat, with one query for the whole fleet when
nothing changed.

Quarantine (`quarantine_consider`, called when a failure is recorded): QUARANTINE_AFTER_FAILURES
failures of cause unknown or validation within QUARANTINE_WINDOW withhold the node for
QUARANTINE_FIRST_HOURS, doubling for each quarantine of the node in the 30 days before, capped at
QUARANTINE_MAX_HOURS. Memory and disk refusals teach lessons (lessons.services.observations), never quarantine.
Failures counted for one quarantine never count again (only those after it started).
Every window made or released is audited.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity.outcomes import moment_problem
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.text import char_is_hidden, text_problem
from dashboard.models import AuditEvent, Deployment, Node, NodeWithhold
from dashboard.nodes.selectors.withholds import in_force, nodes_marked_withheld, not_over, open_at

# The closure detail (Node.closure_detail, 200 characters) holds the reason and "until ...".
REASON_MAX = 160
# The causes that quarantine: the node failed and nobody can say why (or refused what ZOS validates).
QUARANTINE_CAUSES = (Deployment.Cause.UNKNOWN, Deployment.Cause.VALIDATION)
# A quarantine repeats (and lasts twice as long) when the node had one this recently.
QUARANTINE_REPEAT_WITHIN = timedelta(days=30)


class WithholdError(ValueError):
    """A withhold that cannot be made or released; the message says why. Nothing is written."""

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


def when_words(at: datetime | None) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if at is not None else "released"


def withheld_words(reason: str, until: datetime | None) -> str:
    """The phantom reason's detail: "withheld: disk swap, until 2026-12-01 18:00 UTC"."""
    return f"withheld: {reason}, until {when_words(until) if until else 'released'}"


# How far ahead a maintenance window may be planned: a year and a day (a yearly swap, planned early).
# One rule for every door (the API's WindowTime, the page's form, node_withhold): window_checked.
WINDOW_AHEAD = timedelta(days=366)


def window_checked(name: str, at: datetime | None, *, now: datetime) -> datetime | None:
    """A window's edge (`from` or `until`) as every door takes it, in UTC; WithholdError naming it."""
    if at is None:
        return None
    if timezone.is_naive(at):
        raise WithholdError(f"--{name} {at.isoformat()} has no time zone; add one (e.g. +00:00 or Z)", field=name)
    past = timedelta(days=settings.REPORT_MAX_AGE_DAYS)
    problem = moment_problem(at, now=now, past=past, future=WINDOW_AHEAD, planned=True)
    if problem:
        raise WithholdError(f"{name} {at.isoformat()} cannot be taken: {problem}", field=name)
    return at.astimezone(UTC)


def reason_checked(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise WithholdError("a reason is needed: say why the node is withheld (e.g. 'disk swap')", field="reason")
    if len(text) > REASON_MAX:
        raise WithholdError(f"the reason has {len(text)} characters; at most {REASON_MAX}", field="reason")
    hidden = next((c for c in text if char_is_hidden(c) and c not in "\r\n\t"), None)
    problem = (
        "a line break or tab"
        if any(c in text for c in "\r\n\t")
        else f"a hidden or direction-changing character (U+{ord(hidden):04X})"
        if hidden
        else text_problem(text)
    )
    if problem:
        raise WithholdError(f"the reason contains {problem}; write it on one line of plain text", field="reason")
    return text


@dataclass(frozen=True)
class Withheld:
    windows: tuple[NodeWithhold, ...]
    words: str


def node_withhold(
    *,
    nodes: Iterable[Node],
    reason: str,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    by=None,
    via: str = "web",
    now: datetime | None = None,
) -> Withheld:
    """Withhold these nodes (one, or a farm's) from `starts_at` (now) until `ends_at` (None: until released).

    One transaction: the windows, the nodes' rows and figures, one audit event per node.
    """
    now = now or timezone.now()
    reason = reason_checked(reason)
    starts_at = window_checked("from", starts_at, now=now) or now
    ends_at = window_checked("until", ends_at, now=now)
    if ends_at is not None and ends_at <= starts_at:
        raise WithholdError(
            f"the window ends ({when_words(ends_at)}) before it starts ({when_words(starts_at)})", field="until"
        )
    if ends_at is not None and ends_at <= now:
        raise WithholdError(f"the window ended already ({when_words(ends_at)}); nothing to withhold", field="until")
    targets = sorted({n.pk: n for n in nodes}.values(), key=lambda n: n.pk)
    if not targets:
        raise WithholdError("no node to withhold", field="node")
    with node_writes([n.pk for n in targets], refresh=False):  # withhold_sync stores the figures
        windows = tuple(
            NodeWithhold.objects.create(
                node=n,
                reason=reason,
                starts_at=starts_at,
                ends_at=ends_at,
                source=NodeWithhold.Source.MANUAL,
                created_by=actor_of(by),
                created_via=via,
            )
            for n in targets
        )
        span = f"from {when_words(starts_at)} until {when_words(ends_at) if ends_at else 'released'}"
        for window in windows:
            audit_record(
                actor=actor_of(by),
                source=via,
                action="node withheld",
                node=window.node,
                message=f"node {window.node.grid_id} withheld {span}: {reason}",
                detail=_detail(window),
            )
        withhold_sync([n.pk for n in targets], now=now)
    ids = ", ".join(str(n.grid_id) for n in targets)
    words = f"node{'s' if len(targets) > 1 else ''} {ids} withheld {span}: {reason}"
    return Withheld(windows=windows, words=words)


def withhold_release(
    *, node: Node, by=None, via: str = "web", now: datetime | None = None, source: str | None = None
) -> Withheld:
    """End the node's windows open or to come (of `source` only, when given), audited; WithholdError if none."""
    now = now or timezone.now()
    with node_writes([node.pk], refresh=False):  # withhold_sync stores the figures
        windows = NodeWithhold.objects.select_for_update().filter(not_over(now), node=node)
        if source:
            windows = windows.filter(source=source)
        released = tuple(windows.order_by("pk"))
        if not released:
            what = "quarantined" if source == NodeWithhold.Source.QUARANTINE else "withheld"
            raise WithholdError(f"node {node.grid_id} is not {what} now, nor has a window to come", field="node")
        NodeWithhold.objects.filter(pk__in=[w.pk for w in released]).update(released_at=now, released_by=actor_of(by))
        for window in released:
            lifted = window.source == NodeWithhold.Source.QUARANTINE
            audit_record(
                actor=actor_of(by),
                source=via,
                action="quarantine lifted" if lifted else "node withhold released",
                node=node,
                message=f"node {node.grid_id}: {'quarantine lifted' if lifted else 'withhold released'} ({window.reason})",
                detail=_detail(window),
            )
        withhold_sync([node.pk], now=now)
    n = len(released)
    return Withheld(windows=released, words=f"node {node.grid_id}: {n} window{'s' if n > 1 else ''} released")


def withhold_sync(node_pks: Iterable[int], *, now: datetime) -> list[int]:
    """Copy the window in force at `now` onto these nodes' rows, refreshing the figures of those that
    changed (same transaction); the pks changed."""
    pks = sorted(set(node_pks))
    if not pks:
        return []
    with node_writes(pks) as writes:
        held = in_force(now=now, node_pks=pks)
        rows = Node.objects.filter(pk__in=pks).values_list("pk", "withheld_reason", "withheld_until")
        changed = []
        for pk, reason, until in rows:
            want = held.get(pk)
            want_reason, want_until = (want.reason, want.until) if want else ("", None)
            if (reason, until) != (want_reason, want_until):
                Node.objects.filter(pk=pk).update(withheld_reason=want_reason, withheld_until=want_until)
                changed.append(pk)
        writes.refresh_only(changed)
    return changed


def withhold_edges(*, now: datetime | None = None) -> list[int]:
    """The beat: nodes whose window opened or ended since the last run (their row disagrees with the
    table at `now`) synced; two queries when nothing changed."""
    now = now or timezone.now()
    held = in_force(now=now)
    marked = dict(nodes_marked_withheld().values_list("pk", "withheld_until"))
    stale = [pk for pk in held if pk not in marked or marked[pk] != held[pk].until]
    stale += [pk for pk in marked if pk not in held]
    # A node marked with the right end but another window's reason is synced by the write that changed it.
    return withhold_sync(stale, now=now) if stale else []


def quarantine_consider(*, node: Node, now: datetime | None = None) -> NodeWithhold | None:
    """After a failure was recorded on `node` (same transaction): quarantine it if its failures of cause
    unknown or validation within QUARANTINE_WINDOW reach QUARANTINE_AFTER_FAILURES; the window or None."""
    k = settings.QUARANTINE_AFTER_FAILURES
    if k <= 0:
        return None
    now = now or timezone.now()
    with node_writes([node.pk], refresh=False):  # withhold_sync stores the figures
        if NodeWithhold.objects.filter(open_at(now), node=node, source=NodeWithhold.Source.QUARANTINE).exists():
            return None
        since = now - timedelta(seconds=settings.QUARANTINE_WINDOW)
        earlier = _quarantines_recent(node, now=now)
        if earlier:
            since = max(since, max(earlier))  # a failure counted once never counts again
        failures = _quarantine_failures(node, since=since, now=now)
        if len(failures) < k:
            return None
        # Who says so: the dashboard's own deploys (no marketplace id), or each reporting account.
        sources = {
            (None, "the dashboard's own deploys") if not m else (u, f"account {name or 'unnamed'}")
            for _, _, m, u, name in failures
        }
        reporter = next(iter(sources))[0] if len(sources) == 1 and failures[0][2] else None
        if reporter is not None and _reports_bound_reached(reporter, node=node, now=now):
            return None
        repeat = len(earlier) + 1
        hours = min(settings.QUARANTINE_FIRST_HOURS * 2 ** (repeat - 1), settings.QUARANTINE_MAX_HOURS)
        causes = sorted({cause for _, cause, *_ in failures})
        window_words = _duration(settings.QUARANTINE_WINDOW)
        reason = (
            f"quarantine: {len(failures)} failures of cause {' or '.join(causes)} within {window_words}, "
            f"reported by {' and '.join(sorted(words for _, words in sources))}"
            f"{f' (repeat {repeat})' if repeat > 1 else ''}"
        )
        window = NodeWithhold.objects.create(
            node=node,
            reason=reason,
            starts_at=now,
            ends_at=now + timedelta(hours=hours),
            source=NodeWithhold.Source.QUARANTINE,
            created_via="auto",
            failures=[pk for pk, *_ in failures],
            repeat=repeat,
        )
        audit_record(
            source="auto",
            action="node quarantined",
            node=node,
            message=f"node {node.grid_id} quarantined for {hours} h, until {when_words(window.ends_at)}: {reason}",
            detail={**_detail(window), "reported_by": reporter},
        )
        withhold_sync([node.pk], now=now)
    return window


def _quarantines_recent(node: Node, *, now: datetime) -> list[datetime]:
    """When each of the node's quarantines within QUARANTINE_REPEAT_WITHIN started: they make a repeat."""
    return list(
        NodeWithhold.objects.filter(
            node=node, source=NodeWithhold.Source.QUARANTINE, starts_at__gte=now - QUARANTINE_REPEAT_WITHIN
        ).values_list("starts_at", flat=True)
    )


def _quarantine_failures(node: Node, *, since: datetime, now: datetime) -> list[tuple]:
    """The node's failures a quarantine counts, oldest first: (pk, cause, marketplace id, requester pk, name)."""
    return list(
        Deployment.objects.filter(
            node=node,
            state=Deployment.State.FAILED,
            cause__in=QUARANTINE_CAUSES,
            started_at__gt=since,
            started_at__lte=now,
        )
        .order_by("started_at", "pk")
        .values_list("pk", "cause", "marketplace_id", "requested_by_id", "requested_by__username")
    )


def _reports_bound_reached(reporter: int, *, node: Node, now: datetime) -> bool:
    """Whether one account's reports alone quarantined QUARANTINE_REPORTS_NODES_PER_DAY other nodes today."""
    bound = settings.QUARANTINE_REPORTS_NODES_PER_DAY
    others = (
        AuditEvent.objects.filter(
            action="node quarantined", detail__reported_by=reporter, at__gte=now - timedelta(days=1)
        )
        .exclude(node=node)
        .values("node")
        .distinct()
        .count()
    )
    return others >= bound


def _detail(window: NodeWithhold) -> dict:
    return {
        "window": window.pk,
        "source": window.source,
        "reason": window.reason,
        "from": window.starts_at.isoformat(),
        "until": window.ends_at.isoformat() if window.ends_at else None,
        "failures": list(window.failures),
        "repeat": window.repeat,
    }


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min"
