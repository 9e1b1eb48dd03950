"""An admin's word on a memory reading: apply one waiting for its second source (or held aside) to its
group, or drop it (issue 44). Both audited; the node's and the group's figures follow in the same
transaction (lessons.services.observations.node_lessons_apply)."""

from __future__ import annotations

from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.figures.services.node_writes import node_writes
from dashboard.lessons.services.group_steps import group_steps_after
from dashboard.lessons.services.memory_model import memory_group_turn
from dashboard.lessons.services.observations import node_lessons_apply, observation_words
from dashboard.models import Observation

REVIEWED = (Observation.Standing.NODE, Observation.Standing.HELD)


class LessonReviewError(ValueError):
    """The observation is no longer waiting (applied, dropped or expired since the page was read)."""


def _reviewed(observation: Observation) -> Observation:
    """The reading read again under its node's lock (node_lessons_apply stores the figures)."""
    fresh = Observation.objects.select_related("node").get(pk=observation.pk)
    if fresh.kind != Observation.Kind.MEMORY or fresh.cleared_at is not None or fresh.standing not in REVIEWED:
        raise LessonReviewError(f"observation {fresh.pk} of node {fresh.node.grid_id} is not waiting any more")
    return fresh


def observation_apply(*, observation: Observation, by, source: str = "web") -> Observation:
    """Apply the reading to its group as told (the admin vouches for it): the group is fitted again."""

    def applied(o: Observation) -> tuple[str, dict]:
        was = o.get_standing_display().lower()
        Observation.objects.filter(pk=o.pk).update(standing=Observation.Standing.GROUP, group_actual_mru=None)
        return f"applied to its group by hand (it was {was})", {"held_why": o.held_why}

    return _review(observation, action="observation.applied", change=applied, by=by, source=source)


def observation_drop(*, observation: Observation, by, source: str = "web") -> Observation:
    """Drop the reading: it no longer counts anywhere, and what it changed goes back."""

    def dropped(o: Observation) -> tuple[str, dict]:
        Observation.objects.filter(pk=o.pk).update(cleared_at=timezone.now(), cleared_by=by)
        return f"dropped ({o.get_standing_display().lower()})", {}

    return _review(observation, action="observation.dropped", change=dropped, by=by, source=source)


def _review(observation: Observation, *, action: str, change, by, source: str) -> Observation:
    """One admin's word on a waiting reading, in the build's turn (as a report that teaches it) and one
    transaction: `change` writes it and says what it did; the audit event and the node's lessons follow;
    the build's refit runs after the commit."""
    with group_steps_after():
        memory_group_turn(observation.zos_build)
        with node_writes([observation.node_id], refresh=False):
            o = _reviewed(observation)
            did, detail = change(o)
            audit_record(
                actor=by,
                source=source,
                action=action,
                node=o.node,
                message=f"node {o.node.grid_id}: observation {o.pk} {did}: {observation_words(o)}",
                detail={"observation": o.pk, "was": o.standing, "build": o.zos_build, **detail},
            )
            node_lessons_apply(o.node, source=source, by=by)
    o.refresh_from_db()
    return o
