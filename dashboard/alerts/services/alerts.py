"""Alerts: record what the rules say (firing/resolved, one row per rule and subject), tell it once,
and let an admin acknowledge it.

A message goes out when a row's state differs from the state last told (`notified_state`): once
when a rule starts firing, once when it resolves, never while it keeps firing. The delivery is
claimed with a conditional update first, so two evaluations at once cannot both send it; a
delivery that fails gives the claim back and is tried again at the next evaluation. A rule that
fires and resolves before anything was told sends nothing.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.alerts import rules
from dashboard.alerts.deliver import alert_send
from dashboard.alerts.selectors.alerts import alert_figures
from dashboard.models import Alert
from dashboard.nodes.reading_age import reading_untrusted_after

log = logging.getLogger(__name__)

SUMMARY_LENGTH = Alert._meta.get_field("summary").max_length


@dataclass
class Evaluation:
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    delivered: int = 0
    undelivered: int = 0


def alert_limits() -> rules.Limits:
    """The rules' limits, as configured (README "Configuration", ALERT_*)."""
    return rules.Limits(
        stale_catalog_after=timedelta(seconds=settings.ALERT_STALE_CATALOG_AFTER),
        failed_spike=settings.ALERT_FAILED_SPIKE,
        failed_window=timedelta(seconds=settings.ALERT_FAILED_WINDOW),
        queued_without_worker_after=timedelta(seconds=settings.ALERT_QUEUED_WITHOUT_WORKER),
        heartbeat_timeout=timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT),
        reading_max_age=reading_untrusted_after(),
        node_down_after=timedelta(seconds=settings.ALERT_NODE_DOWN_AFTER),
        wake_after=timedelta(seconds=settings.ALERT_WAKE_AFTER),
        hardware_changed_for=timedelta(seconds=settings.ALERT_HARDWARE_CHANGED_FOR),
        run_out_days=settings.ALERT_RUN_OUT_DAYS,
        ips_run_out_days=settings.ALERT_IPS_RUN_OUT_DAYS,
    )


def alert_urls(subject: str) -> list[str]:
    """Where an alert about `subject` goes: every ALERT_URLS, and for "farm N" also ALERT_FARM_URLS' routes of farm N."""
    urls = list(settings.ALERT_URLS)
    if subject.startswith("farm "):
        farm = subject.removeprefix("farm ")
        if farm.isdigit():
            urls.extend(u for u in settings.ALERT_FARM_URLS.get(int(farm), []) if u not in urls)
    return urls


def alerts_evaluate(*, now: datetime | None = None, deliver: bool = True) -> Evaluation:
    """Evaluate every rule against the stored figures, record the changes, then deliver them."""
    now = now or timezone.now()
    limits = alert_limits()
    holding = rules.conditions(alert_figures(now=now, limits=limits), limits)
    evaluation = alerts_record(conditions=holding, now=now)
    if deliver:
        delivered, undelivered = alerts_deliver(now=now)
        evaluation.delivered, evaluation.undelivered = delivered, undelivered
    return evaluation


def alerts_record(*, conditions: list[rules.Condition], now: datetime) -> Evaluation:
    """Firing rows for the conditions that hold, resolved rows for the firing ones that no longer do."""
    evaluation = Evaluation()
    holding = {(c.rule, c.subject): c for c in conditions}
    with transaction.atomic():
        rows = {(a.rule, a.subject): a for a in Alert.objects.select_for_update()}
        for key, condition in holding.items():
            summary = condition.summary[:SUMMARY_LENGTH]
            row = rows.get(key)
            if row is None:
                row = Alert.objects.create(
                    rule=condition.rule,
                    subject=condition.subject,
                    state=Alert.State.FIRING,
                    since=now,
                    summary=summary,
                    detail=condition.detail,
                    evaluated_at=now,
                )
                evaluation.fired.append(row)
            elif row.state == Alert.State.RESOLVED:
                row.state, row.since, row.summary, row.detail, row.evaluated_at = (
                    Alert.State.FIRING,
                    now,
                    summary,
                    condition.detail,
                    now,
                )
                # A new episode: the last one's acknowledgement does not carry over.
                row.acknowledged_by, row.acknowledged_at = None, None
                row.save()
                evaluation.fired.append(row)
            else:
                # Still firing: keep the words current (the banner shows them), tell nobody.
                Alert.objects.filter(pk=row.pk).update(summary=summary, detail=condition.detail, evaluated_at=now)
        for key, row in rows.items():
            if row.state == Alert.State.FIRING and key not in holding:
                row.state, row.since, row.evaluated_at = Alert.State.RESOLVED, now, now
                row.save(update_fields=["state", "since", "evaluated_at"])
                evaluation.resolved.append(row)
        for row in evaluation.fired + evaluation.resolved:
            audit_record(
                source="beat",
                action=f"alert.{row.state}",
                message=f"{row.title}: {row.summary}",
                detail={"alert": row.pk, "rule": row.rule, "subject": row.subject},
            )
    for row in evaluation.fired:
        log.warning("alert firing: %s (%s): %s", row.rule, row.subject, row.summary)
    for row in evaluation.resolved:
        log.info("alert resolved: %s (%s)", row.rule, row.subject)
    return evaluation


def alerts_deliver(*, now: datetime | None = None) -> tuple[int, int]:
    """Tell every state change not told yet; returns (delivered, not delivered)."""
    now = now or timezone.now()
    delivered = undelivered = 0
    for row in Alert.objects.exclude(notified_state=F("state")).order_by("since", "pk"):
        told_before = row.notified_state
        claim = Alert.objects.filter(pk=row.pk, state=row.state, notified_state=told_before)
        if row.state == Alert.State.RESOLVED and told_before == "":
            # It fired and resolved between two deliveries: nobody was told it started.
            claim.update(notified_state=row.state)
            continue
        urls = alert_urls(row.subject)
        if not urls:
            continue
        if not claim.update(notified_state=row.state, last_notified_at=now):
            continue  # another evaluation took it
        told = dict(row.told_urls or {})
        errors = []
        # Each route on its own: one that is down is tried again alone, the others told once.
        for url in urls:
            if told.get(url_key(url)) == row.state:
                continue
            result = alert_send(
                urls=[url],
                title=alert_title(row),
                body=alert_body(row),
                firing=row.state == Alert.State.FIRING,
                deadline=settings.ALERT_DELIVERY_DEADLINE,
                source=url_source(url),
            )
            if result.delivered:
                told[url_key(url)] = row.state
            else:
                errors.append(result.error)
        Alert.objects.filter(pk=row.pk).update(told_urls=told)
        if not errors:
            delivered += 1
            continue
        undelivered += 1
        Alert.objects.filter(pk=row.pk, notified_state=row.state, last_notified_at=now).update(
            notified_state=told_before, last_notified_at=row.last_notified_at
        )
        log.warning(
            "alert %s (%s) not delivered to %d route(s), tried again alone at the next evaluation: %s",
            row.rule,
            row.subject,
            len(errors),
            "; ".join(errors),
        )
    return delivered, undelivered


def url_key(url: str) -> str:
    """A route's key in Alert.told_urls: its URL's digest (the URL itself often holds a secret)."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def url_source(url: str) -> str:
    """The setting a route comes from, for the words of a failed delivery."""
    farms = [farm for farm, urls in settings.ALERT_FARM_URLS.items() if url in urls]
    return f"ALERT_FARM_URLS (farm {farms[0]})" if farms and url not in settings.ALERT_URLS else "ALERT_URLS"


def alert_title(alert: Alert) -> str:
    return f"[{alert.state}] {alert.title}: {alert.subject}"


def alert_body(alert: Alert) -> str:
    if alert.state == Alert.State.FIRING:
        return f"{alert.summary}\n{alert.detail}\nFiring since {alert.since:%Y-%m-%d %H:%M:%S} UTC."
    return f"Resolved at {alert.since:%Y-%m-%d %H:%M:%S} UTC. It was: {alert.summary}"


class AlertError(ValueError):
    pass


def alert_acknowledge(*, alert: Alert, by, source: str = "web") -> bool:
    """Mark a firing alert as seen by `by`; False when it was acknowledged already. Audited.

    AlertError for a resolved alert: there is nothing left to acknowledge.
    """
    now = timezone.now()
    with transaction.atomic():
        changed = Alert.objects.filter(Q(acknowledged_at__isnull=True), pk=alert.pk, state=Alert.State.FIRING).update(
            acknowledged_by=by, acknowledged_at=now
        )
        if not changed:
            alert.refresh_from_db()
            if alert.state != Alert.State.FIRING:
                raise AlertError(f"{alert.title} ({alert.subject}) has resolved; there is nothing to acknowledge")
            return False
        alert.refresh_from_db()
        audit_record(
            actor=by,
            source=source,
            action="alert.acknowledged",
            message=f"acknowledged {alert.title}: {alert.summary}",
            detail={"alert": alert.pk, "rule": alert.rule, "subject": alert.subject},
        )
    return True
