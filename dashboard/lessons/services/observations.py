"""What ZOS's refusals teach about a node: observations_learn, observations_clear.

A real node tells its hidden memory use in one place only: a memory refusal's "usable"
figure (docs/domain.md, "What the node's statistics really say"); and a disk refusal where
the accounting had room says no single pool had that much. Each such refusal, seen by
`slice_deploy` or reported by another program, is kept as an Observation with its evidence.
The node's disk lesson (`Node.pool_room_below`) is distilled from its live ones; memory is
learnt per ZOS build across the fleet (lessons.services.memory_model), so one node's refusal reaches
the precheck, the carve and the stale check of every node of its build at once.

Observations age (OBSERVATION_MAX_AGE_DAYS, default 30): an old one no longer counts but
stays on file. An admin may clear them (audited), e.g. after the node's hardware changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity.lessons import zos_build_key
from dashboard.figures.services.node_writes import node_writes
from dashboard.lessons.services.group_steps import group_step_after, group_steps_after
from dashboard.lessons.services.lesson_evidence import memory_judged, node_readings_apply, observation_admit, vouched_by
from dashboard.lessons.services.memory_model import (
    memory_group_turn,
    memory_model_refit,
    observation_max_age,
)
from dashboard.models import ApiToken, CapacitySample, Deployment, Node, Observation, Slice


@dataclass(frozen=True)
class Refusal:
    """One ZOS refusal with what was known when it happened."""

    raw_error: str
    cause: str  # Deployment.Cause: memory or disk teach something, the rest nothing
    needed_bytes: int | None  # the memory or disk size ZOS could not fulfil
    usable_bytes: int | None  # ZOS's "usable" figure in a memory refusal
    total: capacity.Resources  # the node's total then
    used: capacity.Resources  # the accounted use then (workloads + reserve), as the grid reported it
    vm_count: int  # VMs running then
    data_disk: int  # the refused VM's data disk
    rootfs: int  # and its rootfs


def deployment_refusal(deployment: Deployment, *, total: capacity.Resources, used: capacity.Resources) -> Refusal:
    """The refusal a failed deployment records, with the reading that stands for its moment."""
    return Refusal(
        raw_error=deployment.raw_error,
        cause=deployment.cause,
        needed_bytes=deployment.needed_bytes,
        usable_bytes=deployment.usable_bytes,
        total=total,
        used=used,
        vm_count=running_vms(deployment.node),
        data_disk=deployment.sru,
        rootfs=capacity.zos_rootfs(deployment.cru, deployment.mru),
    )


def refusal_lesson(refusal: Refusal) -> dict | None:
    """What this refusal teaches, as Observation fields; None when it teaches nothing."""
    lesson = capacity.refusal_lesson(
        cause=refusal.cause,
        needed=refusal.needed_bytes,
        usable=refusal.usable_bytes,
        total=refusal.total,
        used=refusal.used,
        vm_count=refusal.vm_count,
        data_disk=refusal.data_disk,
        rootfs=refusal.rootfs,
    )
    if lesson is None:
        return None
    if lesson.kind == "memory":
        return {
            "kind": Observation.Kind.MEMORY,
            "total_mru": refusal.total.mru,
            "accounted_mru": refusal.used.mru,
            "usable_mru": refusal.usable_bytes,
            "hidden_mru_per_vm": lesson.hidden_mru_per_vm,
            # The SSD accounted then: with the figures above, the reading calibration fits (capacity.refusal_reading).
            "used_sru": refusal.used.sru,
        }
    return {"kind": Observation.Kind.DISK, "disk_size": lesson.disk_size, "used_sru": lesson.used_sru}


def _memory_judged(refusal: Refusal, *, build: str):
    """Whether a memory refusal's `usable` is believable (lessons.services.lesson_evidence.memory_judged)."""
    return memory_judged(
        build=build,
        total_mru=refusal.total.mru,
        usable_mru=refusal.usable_bytes,
        accounted_mru=refusal.used.mru,
        vms=refusal.vm_count,
    )


def _refusal_sample_store(*, node: Node, refusal: Refusal, at: datetime) -> None:
    """Keep a believable memory refusal that taught nothing as a capacity sample for calibration."""
    # Still a reading of what the host used (no hidden use): calibration fits it. One that taught something
    # is its Observation alone, which calibration reads as well: a refusal is never kept twice. Dated by the
    # refusal. A figure held aside calibrates nothing (the callers judge it first): the fleet's pooled and
    # median per-VM overhead read every sample, so one forged report would move them.
    reading = capacity.refusal_reading(
        vm_count=refusal.vm_count,
        total_mru=refusal.total.mru,
        accounted_mru=refusal.used.mru,
        usable_mru=refusal.usable_bytes,
        used_sru=refusal.used.sru,
    )
    sample = CapacitySample.objects.create(
        node=node,
        source="refusal",
        total_mru=refusal.total.mru,
        total_sru=refusal.total.sru,
        **reading._asdict(),
    )
    CapacitySample.objects.filter(pk=sample.pk).update(at=at)  # `at` is auto_now_add


def observations_learn(
    *,
    node: Node,
    refusal: Refusal,
    deployment: Deployment | None = None,
    source: str = "deploy",
    at: datetime | None = None,
    by=None,
    token: ApiToken | None = None,
) -> Observation | None:
    """Keep what `refusal` teaches about `node` and apply it to the node's figures at once.

    `at` is when ZOS refused (default: now): the observation is dated by it and ages from it, so an
    old refusal reported late teaches only what is still young enough to count. A memory reading is
    believed in proportion to its evidence (lessons.services.lesson_evidence): held aside when implausible, its
    node's alone until a second source agrees. `by` and `token` (who reported it) are named in the audit
    trail. Returns the new Observation, or None when the refusal teaches nothing.
    """
    at = at or timezone.now()
    build = zos_build_key(node.zos_version)
    lesson = refusal_lesson(refusal)
    if lesson is None:
        # Nothing hidden: still a reading of what the host used, when believable.
        if refusal.cause == Deployment.Cause.MEMORY and refusal.usable_bytes is not None:
            if _memory_judged(refusal, build=build).plausible:
                _refusal_sample_store(node=node, refusal=refusal, at=at)
        return None
    user = actor_of(by)
    with group_steps_after():  # the build's refit after this commits
        # Judged and stored in the build's turn (a report holds it already): readings one after another.
        memory_group_turn(build)
        standing = _standing(lesson, refusal, build=build)
        observation = _observation_stored(
            node,
            refusal,
            lesson | standing,
            build=build,
            deployment=deployment,
            source=source,
            at=at,
            by=user,
            token=token,
        )
    return observation


def _observation_stored(
    node: Node, refusal: Refusal, fields: dict, *, build: str, deployment, source: str, at, by, token
) -> Observation:
    """The reading kept, offered to its group (a second source) and applied to its node, audited."""
    with node_writes([node.pk], refresh=False):  # node_lessons_apply stores the figures
        observation = Observation.objects.create(
            node=node,
            seen_at=at,
            source=source,
            deployment=deployment,
            raw_error=refusal.raw_error,
            vm_count=refusal.vm_count,
            zos_build=build,
            vouched_by=vouched_by(source=source, by=by),
            reported_by=by,
            token=token,
            **fields,
        )
        agreeing = observation_admit(observation)
        node_lessons_apply(node, source=source, by=by)
        _learnt_audit(observation, agreeing, by=by, token=token, source=source)
    return observation


def _standing(lesson: dict, refusal: Refusal, *, build: str) -> dict:
    """How far a new reading is believed at first (lessons.services.lesson_evidence): a disk bound is its node's
    anyway; a memory reading is held aside when implausible, else its node's until a second source agrees."""
    if lesson["kind"] != Observation.Kind.MEMORY:
        return {"standing": Observation.Standing.GROUP}
    judged = _memory_judged(refusal, build=build)
    held = Observation.Standing.HELD
    return {"standing": Observation.Standing.NODE if judged.plausible else held, "held_why": judged.why}


def _learnt_audit(observation: Observation, agreeing: Observation | None, *, by, token, source: str) -> None:
    """The trail names who reported it (user and token) and, when it reached its group, who agreed."""
    node = observation.node
    audit_record(
        actor=by,
        source=source,
        action="observation.learnt" if observation.standing != Observation.Standing.HELD else "observation.held",
        node=node,
        message=f"node {node.grid_id}: {observation_words(observation)}; {standing_words(observation, agreeing)}"
        + (f" (reported with token {token.prefix}…)" if token else ""),
        detail={
            "observation": observation.pk,
            "kind": observation.kind,
            "deployment": observation.deployment_id,
            "standing": observation.standing,
            "held_why": observation.held_why,
            "token": token.prefix if token else None,
            "vouched_by": observation.vouched_by,
            "corroborated_by": agreeing.pk if agreeing else None,
            "corroborating_actor": agreeing.reported_by_id if agreeing else None,
        },
    )


def standing_words(observation: Observation, agreeing: Observation | None = None) -> str:
    """How far the reading is believed, in plain words."""
    if observation.standing == Observation.Standing.HELD:
        return f"held aside, not applied: {observation.held_why}"
    if observation.standing == Observation.Standing.NODE:
        return "applied to this node alone until a second source (another node or account, a proposed probe) agrees"
    if agreeing is not None:
        node = agreeing.node.grid_id
        return f"corroborated by observation {agreeing.pk} (node {node}, {agreeing.vouched_by}): taught its group"
    return "taught its group"


def observations_clear(*, node: Node, by=None, source: str = "web") -> int:
    """Clear the node's live observations (audited); its lessons are recomputed. The count cleared."""
    builds = builds_taught(node)
    # The build's refit after this commits; node_lessons_apply stores the figures.
    with group_steps_after():
        # The turn of every build its readings taught, before its node, in one order: a clear changes what
        # those builds' reports are judged against, so it waits for theirs as they wait for each other.
        for build in sorted(builds):
            memory_group_turn(build)
        with node_writes([node.pk], refresh=False):
            cleared = Observation.objects.filter(node=node, cleared_at__isnull=True).update(
                cleared_at=timezone.now(), cleared_by=actor_of(by)
            )
            node_lessons_apply(node, source=source)
            audit_record(
                actor=by,
                source=source,
                action="observation.cleared",
                node=node,
                message=f"node {node.grid_id}: {cleared} observation(s) cleared; the node's figures no longer count them",
                detail={"cleared": cleared},
            )
    return cleared


def builds_taught(node: Node) -> set[str]:
    """The node's build and every build its memory observations taught (live, aged or cleared): the groups
    a change of its observations refits, and whose turns a clear waits for."""
    taught = Observation.objects.filter(node=node, kind=Observation.Kind.MEMORY).values_list("zos_build", flat=True)
    return {zos_build_key(node.zos_version)} | set(taught.distinct())


def observations_live(node: Node, *, now: datetime | None = None):
    """The node's observations that still count: not cleared and not older than the limit."""
    now = now or timezone.now()
    return Observation.objects.filter(node=node, cleared_at__isnull=True, seen_at__gte=now - observation_max_age())


def node_lessons_apply(node: Node, *, source: str = "deploy", by=None) -> None:
    """Distil the node's live observations onto its row and refresh its stored figures.

    The disk bound is the latest refusal's. Memory is its ZOS build's lesson (lessons.services.memory_model):
    the group's observations fitted again and applied to every node of the group, after the transaction
    that changed them (lessons.services.group_steps: the node is locked here, the group after it, in pk order).
    Call inside that transaction.
    """
    with node_writes([node.pk]):  # locked by its caller already
        live = list(observations_live(node).order_by("-seen_at", "-pk"))
        disk = next((o for o in live if o.kind == Observation.Kind.DISK), None)
        fields = {
            "pool_room_below": disk.disk_size if disk else None,
            "pool_room_below_used_sru": disk.used_sru if disk else None,
        }
        Node.objects.filter(pk=node.pk).update(**fields)
        for build in sorted(builds_taught(node)):
            group_step_after(
                ("memory refit", build), partial(_build_relearn, build=build, trigger=node, source=source, by=by)
            )
        node.refresh_from_db(
            fields=[*fields, "hidden_mru_per_vm", "zos_own_mru", "memory_lesson", "memory_lesson_scope"]
        )


def _build_relearn(*, build: str, trigger: Node, source: str, by) -> None:
    """The build's lesson fitted again, then each reading still waiting alone written onto its own node."""
    memory_model_refit(build=build, trigger=trigger, source=source, by=by)
    node_readings_apply(build=build)


def observation_words(observation: Observation) -> str:
    if observation.kind == Observation.Kind.MEMORY:
        really = observation.total_mru - observation.usable_mru
        return (
            f"ZOS said {capacity.format_size(observation.usable_mru)} usable: the host really used "
            f"{capacity.format_size(really)} where {capacity.format_size(observation.accounted_mru)} is accounted, "
            f"{capacity.format_size(observation.hidden_mru_per_vm)} hidden per VM over {observation.vm_count} VM(s)"
        )
    return (
        f"ZOS found no pool with room for a {capacity.format_size(observation.disk_size)} disk while the accounting "
        f"had room ({observation.vm_count} VM(s) running)"
    )


def running_vms(node: Node) -> int:
    """VMs the node runs by the catalog: its rented and deployed slices."""
    return node.slices.filter(state__in=Slice.OCCUPIED_STATES).count()
