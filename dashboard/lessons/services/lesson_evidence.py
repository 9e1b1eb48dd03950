"""How far a memory reading is believed before it reaches other nodes (issue 44).

A reported `usable` figure is judged against what is known of its node then (capacity.plausible): one far
outside is kept on file but held aside (Observation.standing "held", with why). A plausible one changes
its node alone ("node") until a second independent source agrees (capacity.corroborate.second_source:
another node, another account, a probe the product proposed and saw answered, the dashboard's own
deploy); then both reach the group's fit ("group"), each moved no further than the line's doubt
(`group_actual_mru`). `node_readings_apply` writes a node's own readings onto it (the more cautious of
them and the group's figure), never onto another.

Reports that teach are bounded in time per token and per build, counted from the observations they left
(as quarantine counts one account's reports, nodes.services.withholds): `lesson_reports_admit` raises
LessonReportsBounded past the bound, which the API answers with 429 and the alert rule tells.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity.corroborate import Witness, admitted_point, group_expects, second_source
from dashboard.capacity.lessons import zos_build_key
from dashboard.capacity.plausible import Judgement, usable_judged
from dashboard.figures.services.node_writes import figures_follow, node_writes
from dashboard.grid.classify import classify
from dashboard.lessons.selectors.lessons import memory_observations_live, memory_points_live
from dashboard.lessons.selectors.odds import fleet_wide_apart, own_prior, per_vm_prior, probe_wanted
from dashboard.lessons.services.memory_model import (
    LESSON_COLUMNS,
    build_node_pks,
    lesson_current,
    memory_group_turn,
    memory_model_apply,
    memory_model_refit,
    memory_points,
)
from dashboard.models import ApiToken, Deployment, MemoryLesson, Node, Observation, ProbeProposal, Slice
from dashboard.rows import rows_update

DASHBOARD = "the dashboard"
PROPOSED_PROBE = "a proposed probe"


def vouched_by(*, source: str, by=None) -> str:
    """Who vouches for a reading: a proposed probe, the reporting account (a report), or else the
    dashboard's own deploy (slice_deploy, whichever door started it)."""
    if source == "probe":
        return PROPOSED_PROBE
    if source == "reported":
        user = actor_of(by)
        return f"account {user.pk}" if user is not None else "an unnamed reporter"
    return DASHBOARD


def _point(o: Observation, *, actual: int | None = None) -> capacity.MemoryPoint:
    return capacity.MemoryPoint(
        node=o.node_id,
        total_mru=o.total_mru,
        vms=o.vm_count,
        vm_mru=max(o.accounted_mru - capacity.zos_reserve_mru(o.total_mru), 0),
        actual_mru=actual if actual is not None else o.total_mru - o.usable_mru,
    )


def _expected(build: str, *, vms: int, total_mru: int, judging: bool = False) -> capacity.plausible.Expected:
    lesson = lesson_current(build)
    return group_expects(
        lesson.fit() if lesson is not None else None,
        vms=vms,
        total_mru=total_mru,
        own_prior_mru=own_prior(build),
        per_vm_prior_mru=per_vm_prior(build),
        **({"per_vm_prior_sd": 0} if judging else {}),
    )


def memory_judged(*, build: str, total_mru: int, usable_mru: int, accounted_mru: int, vms: int) -> Judgement:
    """Whether a memory refusal's `usable` is believable on its node now (capacity.plausible)."""
    vm_mru = max(accounted_mru - capacity.zos_reserve_mru(total_mru), 0)
    expected = _expected(build, vms=vms, total_mru=total_mru, judging=True)
    return usable_judged(total_mru=total_mru, usable_mru=usable_mru, vm_mru=vm_mru, vms=vms, expected=expected)


def _witness(o: Observation) -> Witness:
    return Witness(observation=o.pk, node=o.node_id, vouched_by=o.vouched_by, point=_point(o))


def observation_admit(observation: Observation, *, now: datetime | None = None) -> Observation | None:
    """The single door to the group's fit: a reading waiting on its node goes to the group once a second
    source agrees; both are admitted within the line's doubt. The agreeing observation (None: it waits).
    Call in the transaction that stored it, before the group is fitted again."""
    if observation.kind != Observation.Kind.MEMORY or observation.standing != Observation.Standing.NODE:
        return None
    now = now or timezone.now()
    others = list(
        memory_points_live(observation.zos_build, now=now)
        .filter(standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP])
        .exclude(pk=observation.pk)
        .order_by("seen_at", "pk")
    )

    def expects(point: capacity.MemoryPoint):
        return _expected(observation.zos_build, vms=point.vms, total_mru=point.total_mru)

    agreeing = second_source(_witness(observation), [_witness(o) for o in others], expects=expects)
    if agreeing is None:
        return None
    other = next(o for o in others if o.pk == agreeing.observation)
    for admitted in (other, observation):
        if admitted.standing == Observation.Standing.NODE:
            group_admit(admitted)
    return other


def group_admit(observation: Observation) -> None:
    """Admit one reading to its group's fit, within the doubt its line carries now."""
    point = _point(observation)
    expected = _expected(observation.zos_build, vms=point.vms, total_mru=point.total_mru)
    bounded = admitted_point(point, expected)
    observation.standing = Observation.Standing.GROUP
    observation.group_actual_mru = bounded.actual_mru if bounded is not point else None
    Observation.objects.filter(pk=observation.pk).update(
        standing=observation.standing, group_actual_mru=observation.group_actual_mru
    )


def node_readings_apply(*, build: str, now: datetime | None = None) -> int:
    """Write each node's own live readings onto it, waiting for a second source or admitted to the group: the
    more cautious of them (per VM over the reserve) and what the group gives the node now (a node's own
    readings decide its own figures: a deviant node keeps what it told, its group only what it shares).
    Call after the group's lesson was applied, in its transaction; the nodes changed."""
    changed = _node_readings_wanted(build=build, now=now or timezone.now())
    if changed:
        with node_writes([row[0] for row in changed]):
            rows_update(Node, LESSON_COLUMNS, changed, stamped=("updated_at",))
    return len(changed)


def _node_readings_wanted(*, build: str, now: datetime) -> list[tuple]:
    """The rows (LESSON_COLUMNS) of the nodes whose own reading is more cautious than what they carry."""
    readings: dict[int, int] = {}
    for node_pk, per_vm in (
        memory_points_live(build, now=now)
        .filter(standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP])
        .values_list("node_id", "hidden_mru_per_vm")
    ):
        readings[node_pk] = max(readings.get(node_pk, 0), per_vm)
    changed = []
    # The carved count in the same query (as memory_model_apply reads it): no query per node.
    rows = (
        Node.objects.filter(pk__in=readings)
        .annotate(carved=Count("slices", filter=~Q(slices__state=Slice.State.FAILED)))
        .values_list(
            "pk", "total_mru", "hidden_mru_per_vm", "zos_own_mru", "memory_lesson_id", "memory_lesson_scope", "carved"
        )
    )
    for pk, total, hidden, own, lesson_id, scope, carved in rows:
        group = capacity.Observed(hidden_mru_per_vm=hidden, zos_own_mru=own)
        mine = capacity.memory_more_cautious(group, readings[pk], running=carved, total_mru=total)
        if mine is not group:
            want = (mine.hidden_mru_per_vm, None, lesson_id, "own")
            if want != (hidden, own, lesson_id, scope):
                changed.append((pk, *want))
    return changed


def probe_proposed(node: Node, *, at: datetime) -> bool:
    """Whether the probe list proposed `node` within PROBE_WINDOW_HOURS before `at`, or placement asks for a
    probe there now (lessons.selectors.odds.probe_wanted)."""
    window = timedelta(hours=settings.PROBE_WINDOW_HOURS)
    listed = ProbeProposal.objects.filter(node=node, proposed_at__gte=at - window, proposed_at__lte=at).exists()
    return listed or probe_wanted(node)


def probes_proposed(node_ids: list[int], *, token: ApiToken | None, now: datetime | None = None) -> None:
    """Keep the nodes the probe list proposed now (their grid ids), so their probes count as probes."""
    now = now or timezone.now()
    pks = Node.objects.filter(grid_id__in=node_ids).values_list("pk", flat=True)
    ProbeProposal.objects.bulk_create([ProbeProposal(node_id=pk, proposed_at=now, token=token) for pk in pks])


class LessonReportsBounded(Exception):
    """Too many reports that teach from one token, or on one build, within LESSON_REPORTS_WINDOW."""

    def __init__(self, message: str, *, retry_after: int, subject: str, node: Node | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.subject = subject
        self.node = node


def lesson_reports_admit(*, token: ApiToken | None, node: Node, now: datetime | None = None) -> None:
    """Raise LessonReportsBounded when this token's reports that taught, or those on the node's build, reached
    their bound within the window (counted from the observations they left); nothing is written.

    Counted in turns, so N reports at once past the bound get exactly their 429s: the caller holds the
    build's turn (memory_group_turn) and the token's lock is taken here, to the transaction's end, which
    stores the report's observation before the next report of the token counts."""
    now = now or timezone.now()
    window = timedelta(seconds=settings.LESSON_REPORTS_WINDOW)
    build = zos_build_key(node.zos_version)
    checks = []
    if token is not None and settings.LESSON_REPORTS_PER_TOKEN:
        _token_lock(token)
        checks.append(
            (f"token {token.prefix}…", Q(token=token), settings.LESSON_REPORTS_PER_TOKEN),
        )
    if settings.LESSON_REPORTS_PER_BUILD:
        checks.append((f"ZOS {build or '(version unknown)'}", Q(zos_build=build), settings.LESSON_REPORTS_PER_BUILD))
    for subject, where, limit in checks:
        rows = Observation.objects.filter(where, token__isnull=False, recorded_at__gte=now - window)
        count = rows.count()
        if count >= limit:
            oldest = rows.order_by("recorded_at").values_list("recorded_at", flat=True).first()
            retry = max(int(((oldest or now) + window - now).total_seconds()) + 1, 1)
            raise LessonReportsBounded(
                f"{subject} sent {count} reports that teach within {settings.LESSON_REPORTS_WINDOW} s (the bound "
                f"is {limit}): this one is refused, nothing was recorded; send it again in {retry} s",
                retry_after=retry,
                subject=subject,
                node=node,
            )


def _token_lock(token: ApiToken) -> None:
    """The token's reports that teach are counted one at a time (its reports may be on several builds)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"lesson-reports-token:{token.pk}"])


def lesson_reports_refused(*, error: LessonReportsBounded, token: ApiToken | None) -> None:
    """Record a refusal past the bound (after the report's transaction was rolled back); the alert reads it."""
    node = error.node
    audit_record(
        actor=token.user if token is not None else None,
        source="api",
        action="observation.refused",
        node=node,
        message=f"node {node.grid_id}: a report refused past its bound: {error}",
        detail={"subject": error.subject, "token": token.prefix if token else None, "retry_after": error.retry_after},
    )


def report_teaches(*, outcome: str, error: str, probe: bool) -> bool:
    """Whether a report would teach a lesson (a probe, or a memory or disk refusal): those are bounded."""
    if probe:
        return True
    return outcome == "failed" and classify(error or "").cause in ("memory", "disk")


def lesson_reports_checked(*, node_id, marketplace_id: str, outcome: str, error: str, probe: bool, token) -> None:
    """The API door's check before a report is recorded, in the report's transaction and collecting block
    (lessons.services.group_steps): the build's turn is taken first, so the count and the report are one step.
    Past its bound LessonReportsBounded is raised (a 429; the door audits it with lesson_reports_refused
    once the transaction is rolled back). A repeat of a recorded id is never refused."""
    if not report_teaches(outcome=outcome, error=error, probe=probe):
        return
    node = Node.objects.filter(grid_id=node_id).first() if isinstance(node_id, int) else None
    if node is None:
        return
    memory_group_turn(zos_build_key(node.zos_version))
    if Deployment.objects.filter(marketplace_id=(marketplace_id or "").strip()).exists():
        return
    lesson_reports_admit(token=token, node=node)


def memory_lessons_follow(*, now: datetime | None = None) -> list[str]:
    """Lessons never outlive the observations that taught them (issue 44), and none is left behind them: each
    group whose lesson does not rest on exactly its live points (one aged past OBSERVATION_MAX_AGE_DAYS,
    cleared or dropped; or one whose refit after its report failed, lessons.services.group_steps), whose node still
    carries its own reading none of its live observations tells, or whose waiting reading its node does not
    carry yet, is fitted again (or its lesson ended), and its nodes' figures follow. The beat runs it
    (MEMORY_LESSONS_FOLLOW_EVERY); the groups refitted."""
    now = now or timezone.now()
    stale = _lessons_behind(now=now) | _own_readings_gone(now=now) | _readings_unapplied(now=now)
    for build in sorted(stale):
        with transaction.atomic():
            memory_model_refit(build=build, source="beat")
            node_readings_apply(build=build, now=now)
    for build in sorted((_accepted_moved(now=now) | _probes_read(now=now)) - stale):  # a refit refreshed its nodes
        with transaction.atomic():
            memory_group_turn(build)
            if not build and _fleet_wide_line_held():  # its probes read its nodes apart: its line leaves them
                memory_model_apply(build=build, lesson=lesson_current(build))
                node_readings_apply(build=build, now=now)
            figures_follow(build_node_pks(build))
    return sorted(stale)


def _fleet_wide_line_held() -> bool:
    """Whether nodes hold the fleet-wide group's lesson though probes read its nodes apart (fleet_wide_apart)."""
    return Node.objects.filter(memory_lesson__build="").exists() and fleet_wide_apart()


def _probes_read(*, now: datetime) -> set[str]:
    """Builds a proposed probe read since the last follow (or whose probe's reading aged past
    OBSERVATION_MAX_AGE_DAYS): how their unread nodes may differ moved (lessons.selectors.odds.unread_differs),
    and with it those nodes' odds. Twice the follow's period back, as `_accepted_moved`."""
    window = timedelta(seconds=2 * settings.MEMORY_LESSONS_FOLLOW_EVERY)
    aged = now - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS)
    read = Q(seen_at__gte=now - window) | Q(seen_at__gte=aged - window, seen_at__lt=aged)
    builds = (
        Observation.objects.filter(read, kind=Observation.Kind.MEMORY, source="probe")
        .order_by()
        .values_list("zos_build", flat=True)
        .distinct()
    )
    return set(builds)


def _accepted_moved(*, now: datetime) -> set[str]:
    """Builds whose deployments ZOS took changed since the last follow, so their nodes' odds may have: one
    taken (its group step may have failed once its report had committed, lessons.services.group_steps) or one aged
    past OBSERVATION_MAX_AGE_DAYS (its bound no longer counts, lessons.selectors.odds.accepted_by_build). Twice the
    follow's period back, so a late beat misses none."""
    window = timedelta(seconds=2 * settings.MEMORY_LESSONS_FOLLOW_EVERY)
    aged = now - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS)
    moved = Q(started_at__gte=now - window) | Q(started_at__gte=aged - window, started_at__lt=aged)
    builds = (
        Deployment.objects.filter(
            moved,
            state__in=(Deployment.State.DEPLOYED, Deployment.State.DELETED),
            capacity_seen__has_key="room_mru",
        )
        .annotate(build=KeyTextTransform("zos_build", "capacity_seen"))
        .order_by()
        .values_list("build", flat=True)
        .distinct()
    )
    return {build for build in builds if build}


def _lessons_behind(*, now: datetime) -> set[str]:
    """Groups whose lesson now (or its absence) does not rest on exactly their live points."""
    builds = set(MemoryLesson.objects.filter(reverted_at__isnull=True).values_list("build", flat=True))
    builds |= set(_live_any(now=now).filter(standing=Observation.Standing.GROUP).values_list("zos_build", flat=True))
    behind = set()
    for build in builds:
        lesson = lesson_current(build)
        if sorted(lesson.observation_ids if lesson is not None else []) != memory_points(build, now=now)[1]:
            behind.add(build)
    return behind


def _own_readings_gone(*, now: datetime) -> set[str]:
    """Groups with a node carrying its own reading while none of its observations is live."""
    live_nodes = set(_live_any(now=now).values_list("node_id", flat=True))
    own = Node.objects.filter(memory_lesson_scope="own").values_list("pk", "zos_version")
    return {zos_build_key(version) for pk, version in own if pk not in live_nodes}


def _readings_unapplied(*, now: datetime) -> set[str]:
    """Groups with a reading waiting on its node that the node does not carry (its step after the report failed)."""
    waiting = _live_any(now=now).filter(standing=Observation.Standing.NODE).values_list("zos_build", flat=True)
    return {build for build in set(waiting) if _node_readings_wanted(build=build, now=now)}


def _live_any(*, now: datetime):
    return memory_observations_live(now=now).filter(
        standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP]
    )
