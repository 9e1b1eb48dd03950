"""A probe's refusal, reported like any outcome (POST /api/v1/deployments, outcome failed, probe true).

A probe (lessons.selectors.probes) is a VM larger than the node's memory, which ZOS always refuses; its
`usable` figure teaches the node's memory. It is kept as a deployment in the state "probed", which
no failure count reads (the failed-deployments page, /metrics, the alerts, quarantine), with ZOS's
words and numbers, and learnt from through the one observation writer as any reported refusal.
Idempotent on the marketplace id, as every report.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of
from dashboard.capacity.lessons import zos_build_key
from dashboard.capacity.outcomes import Move
from dashboard.deployments.services.outcomes.checks import OutcomeConflict, OutcomeError, outcome_checked
from dashboard.deployments.services.outcomes.record import OutcomeRecorded
from dashboard.deployments.services.outcomes.seen import capacity_last_read
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.classify import classify
from dashboard.lessons.services.group_steps import group_steps_after, lock_conflicts_retried
from dashboard.lessons.services.lesson_evidence import probe_proposed
from dashboard.lessons.services.memory_model import memory_group_turn
from dashboard.lessons.services.observations import deployment_refusal, observations_learn, standing_words
from dashboard.models import Deployment, Node


def probe_outcome_record(
    *,
    node_id: int,
    marketplace_id: str,
    outcome: str,
    error: str,
    at: datetime,
    by=None,
    source: str = "api",
    now: datetime | None = None,
    token=None,
) -> OutcomeRecorded:
    """Record a probe's refusal and learn from it; OutcomeError (nothing written) for anything else. It
    counts as a probe (the product's own question answered, lessons.services.lesson_evidence) only on a node the
    probe list proposed within PROBE_WINDOW_HOURS; elsewhere it is taken as a plain report."""
    marketplace_id, at = outcome_checked(
        node_id=node_id,
        slice_index=0,
        marketplace_id=marketplace_id,
        outcome=outcome,
        error=error,
        at=at,
        workload_id="",
        now=now or timezone.now(),
    )
    if outcome != "failed":
        raise OutcomeError("a probe is always refused by ZOS: report it with outcome failed", field="outcome")
    diagnosis = classify(error)
    if diagnosis.cause != Deployment.Cause.MEMORY or diagnosis.usable_bytes is None:
        raise OutcomeError(
            "a probe's error must be ZOS's memory refusal with its numbers (cannot fulfil required memory size N "
            "bytes out of usable M bytes)",
            field="error",
        )
    node = Node.objects.filter(grid_id=node_id).first()
    if node is None:
        raise OutcomeError(f"node {node_id} is not registered with the dashboard", field="node_id")
    # What the probe teaches the node's build runs after its transaction (lessons.services.group_steps).
    with group_steps_after():
        memory_group_turn(zos_build_key(node.zos_version))  # before its node: reports of a build take turns
        return lock_conflicts_retried(
            lambda: _probe_recorded(
                node,
                node_id=node_id,
                marketplace_id=marketplace_id,
                error=error,
                diagnosis=diagnosis,
                at=at,
                by=by,
                token=token,
            ),
            what=f"the probe report of {marketplace_id!r}",
        )


def _probe_recorded(node: Node, *, node_id, marketplace_id, error, diagnosis, at, by, token) -> OutcomeRecorded:
    with node_writes([node.pk], refresh=False):  # what it teaches stores the figures (lessons.services.observations)
        node.refresh_from_db()
        existing = Deployment.objects.filter(marketplace_id=marketplace_id).first()
        if existing is not None:
            if existing.state == Deployment.State.PROBED and existing.node_id == node.pk:
                return OutcomeRecorded(
                    existing, created=False, changed=False, move=Move.REPEAT, words="already recorded"
                )
            raise OutcomeConflict(
                f"marketplace id {marketplace_id!r} is already deployment {existing.pk} ({existing.state}), not a probe "
                f"of node {node_id}",
                field="marketplace_id",
            )
        deployment = Deployment.objects.create(
            node=node,
            slice=None,
            slice_index=0,  # a probe is no slice of the catalog
            cru=1,
            mru=diagnosis.needed_bytes or node.total_mru,
            sru=0,
            state=Deployment.State.PROBED,
            raw_error=error,
            cause=Deployment.Cause.MEMORY,
            needed_bytes=diagnosis.needed_bytes,
            usable_bytes=diagnosis.usable_bytes,
            marketplace_id=marketplace_id,
            capacity_seen=capacity_last_read(node),
            requested_by=actor_of(by),
            finished_at=at,
        )
        Deployment.objects.filter(pk=deployment.pk).update(started_at=at)
        proposed = probe_proposed(node, at=at)
        learnt = None
        if node.used is not None:
            refusal = deployment_refusal(deployment, total=node.total, used=node.used)
            source = "probe" if proposed else "reported"
            learnt = observations_learn(
                node=node, refusal=refusal, deployment=deployment, source=source, at=at, by=by, token=token
            )
    words = _probe_words(node_id, learnt=learnt, proposed=proposed)
    deployment.refresh_from_db()
    return OutcomeRecorded(deployment, created=True, changed=True, move=Move.RECORD, words=words)


def _probe_words(node_id: int, *, learnt, proposed: bool) -> str:
    words = (
        f"probe of node {node_id} recorded (no failure): ZOS's usable figure taught its memory"
        if learnt is not None
        else f"probe of node {node_id} recorded (no failure): it taught nothing ZOS's count did not say"
    )
    if not proposed:
        words += (
            f"; the probe list did not propose node {node_id} within {settings.PROBE_WINDOW_HOURS} h, so it is "
            "taken as a plain report, not as the product's own question answered"
        )
    return words + (f"; {standing_words(learnt)}" if learnt is not None else "")
