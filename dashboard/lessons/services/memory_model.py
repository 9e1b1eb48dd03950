"""The fleet's memory lessons: one node's refusal teaches every node of its ZOS build at once.

Each memory Observation (lessons.services.observations) is a point of its build's line, actual use
beyond the VMs' memory = ZOS's own use + VMs x the per-VM overhead (capacity.overhead). After
each one the build's points are fitted again (`memory_model_refit`), the fit kept as a
MemoryLesson (the history: the newest not reverted decides), and written onto every node of the
group (`Node.zos_own_mru`, `hidden_mru_per_vm`, `memory_lesson`, `memory_lesson_scope`) with
their figures refreshed in the same transaction: the precheck, placeable now, placement and the
carve read those columns. A catalog made stale by a lesson (more slices than it can hold) shows
in the stale check and is re-carved through the bulk re-register in waves, as any stale catalog.

The group is the node's ZOS version (`zos_build_key`), or one fleet-wide group when it is not
known. An admin may revert a lesson (`memory_lesson_revert`, audited): the observations it added
are cleared and the lesson before it decides again.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity.lessons import zos_build_key
from dashboard.figures.services.node_writes import figures_follow, node_writes
from dashboard.lessons.selectors.lessons import memory_points_live
from dashboard.lessons.selectors.odds import (
    accepted_by_build,
    beliefs_for,
    fleet_wide_apart,
    lesson_fits,
    own_prior,
)
from dashboard.lessons.services.group_steps import group_turn
from dashboard.models import MemoryLesson, Node, Observation, Slice
from dashboard.rows import rows_update


def observation_max_age() -> timedelta:
    """How long an observation counts (OBSERVATION_MAX_AGE_DAYS, default 30); it stays on file after."""
    return timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS)


def _margin_sd() -> float:
    return settings.MEMORY_MODEL_MARGIN_SD


def memory_points(build: str, *, now: datetime | None = None) -> tuple[list[capacity.MemoryPoint], list[int]]:
    """The build's live memory observations as points of its line, and their ids."""
    now = now or timezone.now()
    rows = (
        memory_points_live(build, now=now)
        .filter(standing=Observation.Standing.GROUP)  # corroborated or applied (lessons.services.lesson_evidence)
        .order_by("pk")
        .values_list("pk", "node_id", "total_mru", "accounted_mru", "usable_mru", "vm_count", "group_actual_mru")
    )
    points, ids = [], []
    for pk, node, total, accounted, usable, vms, bounded in rows:
        points.append(
            capacity.MemoryPoint(
                node=node,
                total_mru=total,
                vms=vms,
                vm_mru=max(accounted - capacity.zos_reserve_mru(total), 0),
                actual_mru=total - usable if bounded is None else bounded,
            )
        )
        ids.append(pk)
    return points, ids


def lesson_current(build: str) -> MemoryLesson | None:
    """The lesson that decides the group's memory now: its newest not reverted."""
    return MemoryLesson.objects.filter(build=build, reverted_at__isnull=True).order_by("-learnt_at", "-pk").first()


def memory_model_refit(
    *, build: str, trigger: Node | None = None, source: str = "deploy", by=None
) -> MemoryLesson | None:
    """Fit the group's points again, keep the fit as its lesson, and apply it to every node of the
    group. The lesson now deciding (None when the group has no observation). Call in a transaction.

    Refits of one build take turns (the build's advisory lock, held to the commit): each reads the points
    the one before committed, so the last lesson counts them all, as if the reports came one by one.
    Call it holding no node lock (lessons.services.group_steps): it locks the group's nodes after this one."""
    _group_lock(build)
    points, ids = memory_points(build)
    current = lesson_current(build)
    if current is not None and sorted(current.observation_ids) == ids:
        lesson = current  # nothing new (e.g. a revert brought the one before back)
    elif not points:
        # Its observations expired or were dropped: the lesson goes with them (issue 44).
        lesson = None
        if current is not None:
            _lesson_ended(current, trigger=trigger, source=source, by=by)
    else:
        lesson = _lesson_learnt(build, points, ids, trigger=trigger)
        audit_record(
            actor=by,
            source=source,
            action="memory_lesson.learnt",
            node=trigger,
            message=f"{group_words(build)}: {lesson_words(lesson)}",
            detail={"lesson": lesson.pk, "build": build, "observations": ids, "taught_by": _taught_by(ids)},
        )
    memory_model_apply(build=build, lesson=lesson)
    return lesson


def _lesson_ended(current: MemoryLesson, *, trigger: Node | None, source: str, by) -> None:
    MemoryLesson.objects.filter(pk=current.pk).update(reverted_at=timezone.now())
    audit_record(
        actor=by,
        source=source,
        action="memory_lesson.ended",
        node=trigger,
        message=f"{group_words(current.build)}: lesson {current.pk} ended, no observation that taught it counts now",
        detail={"lesson": current.pk, "build": current.build},
    )


def _lesson_learnt(
    build: str, points: list[capacity.MemoryPoint], ids: list[int], *, trigger: Node | None
) -> MemoryLesson:
    """The group's points fitted (capacity.overhead, within the bounds its accepted deployments set), kept."""
    taken = capacity.tightest(accepted_by_build([build]).get(build, []))
    fit = capacity.overhead_fit(points, prior_own_mru=own_prior(build), bounds=taken)
    node_ids = sorted({p.node for p in points})
    return MemoryLesson.objects.create(
        build=build,
        **MemoryLesson.fit_columns(fit),
        observation_ids=ids,
        learnt_from=list(Node.objects.filter(pk__in=node_ids).order_by("grid_id").values_list("grid_id", flat=True)),
        learnt_at=timezone.now(),
        trigger_node=trigger,
    )


def _group_key(build: str) -> str:
    return f"memory-group:{build}"


def _group_lock(build: str) -> None:
    """The build's advisory lock to the transaction's end (reentrant: a report holding its turn passes)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [_group_key(build)])


def memory_group_turn(build: str) -> None:
    """Wait for the build's turn before locking any node: reports that teach one build, and its refits, run
    one after another, each seeing the lesson the one before left (lessons.services.group_steps.group_turn)."""
    group_turn(_group_key(build))


def accepted_seen(node: Node, *, slice_pk: int, mru: int, vouched_by: str) -> dict:
    """What a deployment ZOS took tells of its build's line, for its row's capacity_seen: the VMs the
    catalog had running on the node besides it and the room beyond their memory (total - theirs - its
    own), and who vouches for it (lessons.services.lesson_evidence.vouched_by). ZOS took it, so actual
    beyond those VMs' memory was at most that room (capacity.hidden). VMs the catalog does not know only
    make the true count and memory larger, so the bound still holds."""
    running = (
        Slice.objects.filter(node=node, state__in=Slice.OCCUPIED_STATES)
        .exclude(pk=slice_pk)
        .aggregate(n=Count("pk"), mru=Sum("mru"))
    )
    return {
        "vms": running["n"],
        "room_mru": node.total_mru - mru - int(running["mru"] or 0),
        "zos_build": zos_build_key(node.zos_version),
        "vouched_by": vouched_by,
    }


def memory_model_accepted(*, node: Node, deployment_pk: int, seen: dict) -> int:
    """A deployment ZOS took on the node (its accepted_seen in its row): where it moved its group's bound
    at its VM count (capacity.tightest: the tightest bound another source agrees with), the group's belief
    moved, and the figures of the group's other nodes are refreshed (their odds may have risen); how many
    changed. Call in a transaction, after the deployment's row is written."""
    build = seen.get("zos_build", "")
    key = (node.memory_lesson_id, "") if node.memory_lesson_id is not None else (None, build)
    if not isinstance(beliefs_for([key])[key], capacity.HiddenUse):
        return 0
    fit = lesson_fits([node.memory_lesson_id]).get(node.memory_lesson_id)
    residuals = fit.residuals if fit is not None else None
    before = capacity.tightest(accepted_by_build([build], besides=deployment_pk).get(build, []), residuals)
    after = capacity.tightest(accepted_by_build([build]).get(build, []), residuals)
    if before == after:  # it may agree with a bound at another count and bring that one in
        return 0
    if node.memory_lesson_id is not None:
        group = Node.objects.filter(memory_lesson_id=node.memory_lesson_id)
    else:
        group = Node.objects.filter(zos_version__in=_versions(build), memory_lesson__isnull=True)
    return figures_follow(list(group.exclude(pk=node.pk).values_list("pk", flat=True)))


def memory_lessons_for_new(node_pks: list[int]) -> int:
    """Give nodes their group's lesson: newly registered ones (a node registered after it learnt), or
    ones whose version was just told (they leave the lesson of the group they were in, and take
    their new group's, or none). Call in a transaction."""
    rows = list(Node.objects.filter(pk__in=node_pks).values_list("zos_version", "memory_lesson_id"))
    holding = any(lesson_id is not None for _, lesson_id in rows)
    applied = 0
    for build in sorted({zos_build_key(version) for version, _ in rows}):
        lesson = lesson_current(build)
        if lesson is not None or holding:  # no lesson to give and none to take away: nothing to write
            applied += memory_model_apply(build=build, lesson=lesson, node_pks=node_pks)
    return applied


def memory_model_apply(*, build: str, lesson: MemoryLesson | None, node_pks: list[int] | None = None) -> int:
    """Write the group's lesson onto each of its nodes (or those of `node_pks`) and refresh the
    figures of those it changed."""
    # Probes read the fleet-wide group's nodes apart from its line: they share no build, it reaches none of them.
    fit = lesson.fit() if lesson is not None and (build or not fleet_wide_apart()) else None
    # Each observed node's own per-VM figure over its reserve (the largest it saw): where every point is at
    # one VM count, a node that refused itself keeps its own reading, exact on its own size; the hopeful
    # line (capacity.overhead) is for the group's other nodes.
    own_reading: dict[int, int] = {}
    for node_pk, per_vm in (
        Observation.objects.filter(pk__in=lesson.observation_ids).values_list("node_id", "hidden_mru_per_vm")
        if lesson
        else ()
    ):
        own_reading[node_pk] = max(own_reading.get(node_pk, 0), per_vm or 0)
    observed_nodes = set(own_reading)
    versions = _versions(build)
    # A node whose version moved it to another group since loses this group's lesson (its own
    # group's next refit, or memory_lessons_for_new, gives it that one).
    group = Node.objects.filter(Q(zos_version__in=versions) | Q(memory_lesson__build=build))
    if node_pks is not None:
        group = group.filter(pk__in=node_pks)
    nodes = group.annotate(carved=Count("slices", filter=~Q(slices__state=Slice.State.FAILED))).values_list(
        "pk", "zos_version", "hidden_mru_per_vm", "zos_own_mru", "memory_lesson_id", "memory_lesson_scope", "carved"
    )
    changed = []
    scope_of_group = "build" if build else "fleet"
    for pk, version, hidden, own, lesson_id, scope, carved in nodes:
        if fit is None or version not in versions:
            want = (0, None, None, "")
        else:
            observed = (
                capacity.Observed(hidden_mru_per_vm=own_reading[pk])
                if fit.on_prior and pk in own_reading
                else fit.observed_for(node=pk, vms=max(carved, 1), margin_sd=_margin_sd())
            )
            want = (
                observed.hidden_mru_per_vm,
                observed.zos_own_mru,
                lesson.pk,
                "own" if pk in observed_nodes else scope_of_group,
            )
        if want != (hidden, own, lesson_id, scope):
            changed.append((pk, want))
    if not changed:
        return 0
    with node_writes([pk for pk, _ in changed]):
        # One statement for the whole group: a lesson reaches thousands of nodes at once.
        rows_update(Node, LESSON_COLUMNS, [(pk, *want) for pk, want in changed], stamped=("updated_at",))
    return len(changed)


# The node columns a memory lesson writes (rows_update), here and in lessons.services.lesson_evidence.
LESSON_COLUMNS = (
    ("id", "bigint"),
    ("hidden_mru_per_vm", "bigint"),
    ("zos_own_mru", "bigint"),
    ("memory_lesson_id", "bigint"),
    ("memory_lesson_scope", "text"),
)


def build_node_pks(build: str) -> list[int]:
    """The nodes whose odds the build's belief judges: those of its versions and those holding its lesson."""
    group = Node.objects.filter(Q(zos_version__in=_versions(build)) | Q(memory_lesson__build=build))
    return list(group.values_list("pk", flat=True))


def _versions(build: str) -> list[str]:
    """The zos_version values stored for the group (a version may be stored with spaces around it)."""
    stored = Node.objects.order_by().values_list("zos_version", flat=True).distinct()
    return [v for v in stored if zos_build_key(v) == build] or [build]


def memory_lesson_revert(*, lesson: MemoryLesson, by=None, source: str = "web") -> MemoryLesson | None:
    """Revert a lesson (audited): the observations it added are cleared, and the group's lesson
    before it decides again. The lesson now deciding."""
    with transaction.atomic():
        _group_lock(lesson.build)  # before the lesson's row: a refit of the build holds it, then writes lessons
        lesson = MemoryLesson.objects.select_for_update().get(pk=lesson.pk)
        if lesson.reverted_at is not None:
            return lesson_current(lesson.build)
        before = (
            MemoryLesson.objects.filter(build=lesson.build, reverted_at__isnull=True, learnt_at__lte=lesson.learnt_at)
            .exclude(pk=lesson.pk)
            .order_by("-learnt_at", "-pk")
            .first()
        )
        added = set(lesson.observation_ids) - set(before.observation_ids if before else [])
        user = actor_of(by)
        now = timezone.now()
        cleared = Observation.objects.filter(pk__in=added, cleared_at__isnull=True).update(
            cleared_at=now, cleared_by=user
        )
        MemoryLesson.objects.filter(pk=lesson.pk).update(reverted_at=now, reverted_by=user)
        audit_record(
            actor=user,
            source=source,
            action="memory_lesson.reverted",
            node=lesson.trigger_node,
            message=(
                f"{group_words(lesson.build)}: lesson {lesson.pk} reverted, {cleared} observation(s) it added cleared; "
                + (f"lesson {before.pk} decides again" if before else "no lesson decides now")
            ),
            detail={"lesson": lesson.pk, "build": lesson.build, "cleared": sorted(added)},
        )
        return memory_model_refit(build=lesson.build, source=source)


def group_words(build: str) -> str:
    return f"ZOS {build}" if build else "the fleet (ZOS version unknown)"


def lesson_words(lesson: MemoryLesson) -> str:
    size = capacity.format_size
    nodes = ", ".join(str(n) for n in lesson.learnt_from[:5]) + ("…" if len(lesson.learnt_from) > 5 else "")
    if lesson.own_mru is None:
        what = f"{size(lesson.per_vm_mru)} hidden per VM beyond the reserve"
    elif lesson.on_prior:
        what = (
            f"each VM {size(lesson.per_vm_mru)} beyond its memory if ZOS uses {size(lesson.own_mru)} "
            f"(± {size(lesson.own_sd)}, a prior: every refusal at {lesson.mean_vms:.0f} VMs)"
        )
    else:
        what = (
            f"ZOS uses {size(lesson.own_mru)} (± {size(lesson.own_sd)}) and each VM "
            f"{size(lesson.per_vm_mru)} (± {size(round(math.hypot(lesson.per_vm_sd, lesson.per_vm_doubt)))}) "
            "beyond its memory"
        )
    return f"{what}, from {lesson.points} refusal(s) on node(s) {nodes}"


def _taught_by(ids: list[int]) -> list[dict]:
    """Who vouched for each observation a lesson rests on (the audit names every source)."""
    rows = Observation.objects.filter(pk__in=ids).values_list("pk", "vouched_by", "reported_by_id", "token__prefix")
    return [{"observation": pk, "vouched_by": v, "user": u, "token": t} for pk, v, u, t in sorted(rows)]
