"""The odds a slice deploys at the first try now (capacity.odds), read from the stored lessons.

One door for every reader of odds: the stored figures (figures.services.figures: deployable and placeable
now count only slices at or above SLICE_MIN_ODDS), the node page and the API's catalog, placement,
and the calibration /metrics gives over the outcomes reported (`odds_calibration_now`).

What a node's odds are judged by (`beliefs_for`): its lesson's fit as a belief (capacity.fit_belief),
or, for a node whose ZOS version is known and whose build has no lesson, the build's prior
(capacity.build_prior: ZOS's own use and the per-VM overhead as the other builds measured them, else
the fixed priors), each weighted by the deployments ZOS took on the build (`accepted_by_build`). A
node of no known version and no lesson has none (odds 1 where the count allows): the fleet-wide
group holds nodes of any ZOS, including ones that hide nothing (a grid without an rmb-peer, the
simulated nodes of no build), and a prior there would withhold slices no refusal ever questioned.

A node no live reading tells with as many VMs as it runs (`vms_read`), in a group whose nodes proposed probes
read were seen to differ from its line (`unread_differs`), is judged by capacity.Unread: its group's belief, or
with the chance its group's nodes differed, a use of its own as they did (issue 44's worlds "wide" and "nodes").
Its last slices are then uncertain until a probe reads it, placement ranks a promised slice before them
(surest first) and asks for that probe first (capacity.probe_first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

from django.conf import settings
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    Q,
    Sum,
    TextField,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Floor, Least
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity.hidden import PER_VM_PRIOR_MRU, median_or
from dashboard.capacity.overhead import OWN_PRIOR_MRU, OWN_PRIOR_SD
from dashboard.lessons.selectors.lessons import memory_observations_live
from dashboard.models import Deployment, MemoryLesson, Node, Observation, Slice

CALIBRATION_BINS = 10  # as capacity.odds_calibration bins them


def lesson_fits(lesson_ids: Iterable[int | None]) -> dict[int, capacity.OverheadFit]:
    """Lesson pk -> its fit, for the lessons deciding some nodes' memory (one query; none for no lesson)."""
    ids = {pk for pk in lesson_ids if pk is not None}
    return {lesson.pk: lesson.fit() for lesson in MemoryLesson.objects.filter(pk__in=ids)} if ids else {}


def accepted_by_build(builds: Iterable[str], *, besides: int | None = None) -> dict[str, list[capacity.Accepted]]:
    """Build -> the deployments ZOS took there within OBSERVATION_MAX_AGE_DAYS, as bounds (the least room
    per node, who vouched for it and VM count: capacity.tightest takes the least another source agrees with).
    `besides`: a deployment left out. One grouped query."""
    builds = sorted({b for b in builds if b})
    if not builds:
        return {}
    seen = "capacity_seen"
    taken = _accepted_rows() if besides is None else _accepted_rows().exclude(pk=besides)
    rows = (
        taken.annotate(build=KeyTextTransform("zos_build", seen))
        .filter(build__in=builds)
        .annotate(
            vms=Cast(KeyTextTransform("vms", seen), IntegerField()),
            room=Cast(KeyTextTransform("room_mru", seen), BigIntegerField()),
            vouched=Coalesce(KeyTextTransform("vouched_by", seen), Value(""), output_field=TextField()),
        )
        .order_by()
        .values_list("build", "node_id", "vms", "vouched")
        .annotate(least=Min("room"))
    )
    accepted: dict[str, list[capacity.Accepted]] = {}
    for build, node, vms, vouched, least in rows:
        accepted.setdefault(build, []).append(capacity.Accepted(node=node, vms=vms, room_mru=least, vouched_by=vouched))
    return accepted


def _accepted_rows():
    """The deployments ZOS took within OBSERVATION_MAX_AGE_DAYS whose row says what that tells (accepted_seen)."""
    return Deployment.objects.filter(
        state__in=(Deployment.State.DEPLOYED, Deployment.State.DELETED),
        started_at__gte=timezone.now() - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS),
        capacity_seen__has_key="room_mru",
    )


def _latest_lessons(exclude: str | None) -> list[MemoryLesson]:
    latest: dict[str, MemoryLesson] = {}
    for lesson in (
        MemoryLesson.objects.filter(reverted_at__isnull=True).exclude(build=exclude).order_by("-learnt_at", "-pk")
    ):
        latest.setdefault(lesson.build, lesson)
    return list(latest.values())


def own_prior(build: str) -> int:
    """ZOS's own use for a group whose points cannot part it from the VMs' yet: the median of what the
    other groups' lines measured (ZOS's daemons differ little between builds), else the fixed prior."""
    return median_or(
        (
            lesson.own_mru
            for lesson in _latest_lessons(build)
            if lesson.own_mru is not None and lesson.own_sd < OWN_PRIOR_SD  # a line, not a prior again
        ),
        OWN_PRIOR_MRU,
    )


def per_vm_prior(build: str) -> int:
    """The per-VM overhead of a build never refused: the median the other groups' lines measured (not
    on a prior), else capacity.hidden's PER_VM_PRIOR_MRU."""
    return median_or(
        (lesson.per_vm_mru for lesson in _latest_lessons(build) if lesson.own_mru is not None and not lesson.on_prior),
        PER_VM_PRIOR_MRU,
    )


def beliefs_for(keys: Iterable[tuple]) -> dict[tuple, capacity.odds.Belief]:
    """(lesson id or None, build) -> what those nodes' odds are judged by (the module's words); a key with a
    third element (belief_key's `unread`) -> the same belief for a node no reading tells (capacity.Unread where
    its group's nodes probes read were seen to differ)."""
    keys = set(keys)
    unread = {key for key in keys if len(key) > 2}
    beliefs = _group_beliefs({key[:2] for key in keys})
    if unread:
        groups = _groups_of({key[:2] for key in unread})
        differs = unread_differs(set(groups.values()))
        for key in unread:
            beliefs[key] = capacity.unread_belief(beliefs[key[:2]], differs.get(groups[key[:2]]))
    return beliefs


def _groups_of(keys: Iterable[tuple[int | None, str]]) -> dict[tuple[int | None, str], str]:
    """(lesson id or None, build) -> the group (build) those nodes learn in: their lesson's, else their own."""
    keys = set(keys)
    builds_of = dict(
        MemoryLesson.objects.filter(pk__in=[lesson for lesson, _b in keys if lesson is not None]).values_list(
            "pk", "build"
        )
    )
    return {(lesson, build): builds_of.get(lesson, build) if lesson is not None else build for lesson, build in keys}


def _group_beliefs(keys: set[tuple[int | None, str]]) -> dict[tuple, capacity.odds.Belief]:
    fits = lesson_fits(lesson_id for lesson_id, _build in keys)
    builds_of = dict(MemoryLesson.objects.filter(pk__in=list(fits)).values_list("pk", "build")) if fits else {}
    wanted = {builds_of.get(lesson_id, build) if lesson_id else build for lesson_id, build in keys}
    accepted = accepted_by_build(wanted)
    # Only a fleet-wide lesson has a line to withhold (a node of no version and no lesson is judged by the count).
    apart = any(fits.get(lesson_id) and not builds_of.get(lesson_id) for lesson_id, _b in keys) and fleet_wide_apart()
    beliefs: dict[tuple[int | None, str], capacity.odds.Belief] = {}
    priors: dict[str, capacity.HiddenUse] = {}
    for lesson_id, build in keys:
        if apart and not (builds_of.get(lesson_id, build) if lesson_id else build):
            beliefs[lesson_id, build] = None  # ZOS's count: the fleet-wide line reaches none of its nodes
        elif lesson_id is not None and lesson_id in fits:
            fit = fits[lesson_id]
            taken = accepted.get(builds_of.get(lesson_id, build), [])
            beliefs[lesson_id, build] = capacity.fit_belief(fit, bounds=capacity.tightest(taken, fit.residuals)) or fit
        elif build:
            if build not in priors:
                priors[build] = capacity.build_prior(
                    own_mru=own_prior(build),
                    per_vm_mru=per_vm_prior(build),
                    bounds=capacity.tightest(accepted.get(build, [])),
                )
            beliefs[lesson_id, build] = priors[build]
        else:
            beliefs[lesson_id, build] = None
    return beliefs


def belief_key(lesson_id: int | None, zos_version: str | None, *, unread: bool = False) -> tuple:
    """The key of beliefs_for for a node: its lesson, or its build where it has none; `unread`: a node no live
    reading tells whose group may differ (unread_among)."""
    key = (lesson_id, "") if lesson_id is not None else (None, capacity.zos_build_key(zos_version))
    return (*key, "unread") if unread else key


def node_belief(node: Node) -> capacity.odds.Belief:
    """The belief the node's odds are judged by, with its rented and deployed slices running."""
    running = node.slices_rented + node.slices_deployed
    unread = node.pk in unread_among([(node.pk, node.memory_lesson_id, node.zos_version, running)])
    key = belief_key(node.memory_lesson_id, node.zos_version, unread=unread)
    return beliefs_for([key])[key]


def vms_read(pks: Iterable[int]) -> dict[int, int]:
    """Node (of `pks`) -> the most VMs it ran at a live memory reading of it, its node's or its group's (not
    one held aside); a node no such reading tells is left out. A reading tells the node's use with as many
    VMs as it ran then and no more: a use of its own grows with each VM, and ZOS's reserve hides it at first."""
    return dict(
        memory_observations_live(now=timezone.now())
        .filter(standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP], node_id__in=list(pks))
        .order_by()
        .values("node_id")
        .annotate(most=Max("vm_count"))
        .values_list("node_id", "most")
    )


def unread_differs(groups: Iterable[str]) -> dict[str, tuple[float, tuple[int, ...]]]:
    """Group (build) -> how a node of it no reading tells may differ (capacity.differs): from the nodes a
    proposed probe read (source "probe"), each one's most excess a VM over its group's line where it was read
    (capacity.excess_per_vm); only the groups where one was seen to differ. Only probes' readings count: a
    buyer's refusal finds the nodes that differ, a probe reads the node its list ranks. The fleet-wide group
    (no version told, "") is measured against its line, or, with none or once probes read its nodes apart from
    it (fleet_wide_apart), against ZOS's count: its nodes share no build, the count is all they surely share."""
    points = _probe_points(groups)
    found = {}
    fleet = points.pop("", None)
    if fleet is not None:
        line = _fleet_wide_lesson_fit()
        apart = line is None or capacity.read_apart(fleet, _expects(line))
        differs = _differs_from(fleet, _count_beyond if apart else _expects(line))
        if differs is not None:
            found[""] = differs
    if not points:
        return found
    # Against a prior (a build never refused: no lesson) every node of the build differs alike: a line first.
    latest = {lesson.build: lesson.pk for lesson in _latest_lessons(exclude=None) if lesson.build in points}
    points = {build: read for build, read in points.items() if build in latest}
    keys = {build: belief_key(latest[build], build) for build in points}
    beliefs = _group_beliefs(set(keys.values()))
    for build, read in points.items():
        differs = _differs_from(read, _expects(beliefs[keys[build]]))
        if differs is not None:
            found[build] = differs
    return found


def _probe_points(groups: Iterable[str]) -> dict[str, list[capacity.MemoryPoint]]:
    """Group -> the live readings proposed probes took of its nodes, as points (one query for all groups)."""
    groups = sorted(set(groups))
    if not groups:
        return {}
    rows = (
        memory_observations_live(now=timezone.now())
        .filter(
            source="probe",
            standing__in=[Observation.Standing.NODE, Observation.Standing.GROUP],
            zos_build__in=groups,
            total_mru__isnull=False,
            usable_mru__isnull=False,
            accounted_mru__isnull=False,
        )
        # Unordered: what is read of the points (each node's most excess, a set of nodes) does not hang on
        # their order, and Observation's own order joins every node to sort by its grid id.
        .order_by()
        .values_list("zos_build", "node_id", "total_mru", "accounted_mru", "usable_mru", "vm_count")
    )
    points: dict[str, list[capacity.MemoryPoint]] = {}
    for build, node, total, accounted, usable, vms in rows:
        vm_mru = max(accounted - capacity.zos_reserve_mru(total), 0)
        point = capacity.MemoryPoint(node=node, total_mru=total, vms=vms, vm_mru=vm_mru, actual_mru=total - usable)
        points.setdefault(build, []).append(point)
    return points


def _expects(belief: capacity.odds.Belief):
    """point -> the use beyond the VMs' memory `belief` expects where the point was read (None: nothing)."""
    return lambda p: capacity.expected_beyond(belief, vms=p.vms, total_mru=p.total_mru)


def _differs_from(read: list[capacity.MemoryPoint], expected_beyond) -> tuple[float, tuple[int, ...]] | None:
    """capacity.differs over the nodes read, each one's most excess a VM over `expected_beyond(point)`."""
    excess: dict[int, int] = {}
    for p in read:
        expected = expected_beyond(p)
        if expected is not None:
            excess[p.node] = max(excess.get(p.node, 0), capacity.excess_per_vm(p, expected))
    return capacity.differs(excess.values())


def _count_beyond(point: capacity.MemoryPoint) -> int:
    """What ZOS's count expects beyond the VMs' memory where `point` was read: the reserve."""
    return capacity.zos_reserve_mru(point.total_mru)


def _fleet_wide_lesson_fit() -> capacity.OverheadFit | None:
    lesson = MemoryLesson.objects.filter(build="", reverted_at__isnull=True).order_by("-learnt_at", "-pk").first()
    return lesson.fit() if lesson is not None else None


def fleet_wide_apart() -> bool:
    """Whether proposed probes read the fleet-wide group's nodes (no version told) apart from its line: two or
    more used less than it expects where they were read (capacity.read_apart). Its nodes share no build: its
    line then reaches none of them (memory_model_apply); each keeps its own readings, and one no reading tells is
    judged by capacity.Unread over ZOS's count (issue 44's world "nodes": the line the nodes that refused drew
    held every node back, a quarter of the memory unsold). Until then (no probes; or a grid without an rmb-peer
    whose nodes run one build, the probes then read on the line) its line protects them as before."""
    line = _fleet_wide_lesson_fit()
    return line is not None and capacity.read_apart(_probe_points([""]).get("", []), _expects(line))


def unread_among(nodes: Iterable[tuple[int, int | None, str | None, int]]) -> frozenset[int]:
    """Of these nodes (pk, memory lesson id, ZOS version, VMs running now), those judged as unread
    (capacity.Unread): no live reading tells them with as many VMs as they run (vms_read), and their group's
    nodes probes read were seen to differ (unread_differs)."""
    nodes = list(nodes)
    if not nodes:
        return frozenset()
    groups = _groups_of({belief_key(lesson, version) for _pk, lesson, version, _running in nodes})
    differs = unread_differs(set(groups.values()))
    if not differs:
        return frozenset()
    maybe = {pk: running for pk, lesson, version, running in nodes if groups[belief_key(lesson, version)] in differs}
    read = vms_read(maybe) if maybe else {}
    return frozenset(pk for pk, running in maybe.items() if read.get(pk, -1) < running)


def has_own_residual(fits: dict, lesson_id: int | None, pk: int) -> bool:
    """Whether the node has a residual of its own in its lesson (its odds are then its own)."""
    fit = fits.get(lesson_id)
    return fit is not None and pk in fit.residuals


def sure_new_slices(
    fit: capacity.odds.Belief, carve: capacity.Carve, total_mru: int, occupied: tuple, pk: int, min_odds: float
) -> int:
    """How many of the carve's new slices, added after the occupied ones, are at or above `min_odds`."""
    odds = capacity.slices_odds(
        fit,
        total_mru=total_mru,
        vm_mru=sum(m for _c, m, _s in occupied),
        running=len(occupied),
        sizes_mru=[carve.slice.mru] * carve.new_slices,
        node=pk,
    )
    return capacity.sure_slices(odds, min_odds)


def sure_free_slices(
    fit: capacity.odds.Belief, pk: int, free: tuple, used_mru: int, total_mru: int, occupied: tuple, min_odds: float
) -> int:
    """How many of the free slices, taken in order on the last reading, are at or above `min_odds`."""
    odds = capacity.odds_on_reading(
        fit,
        total_mru=total_mru,
        used_mru=used_mru,
        occupied_mru=[m for _c, m, _s in occupied],
        sizes_mru=[m for _c, m, _s in free],
        node=pk,
    )
    return capacity.sure_slices(odds, min_odds)


def free_slices_odds(node: Node, *, free: Sequence[Slice], occupied: Sequence[Slice]) -> dict[int, float]:
    """Each free slice's odds of deploying at the first try now, by index: taken in index order on the
    node's last reading (capacity.odds_on_reading, the rule the stored figures count sure slices by)."""
    fit = node_belief(node)
    used = node.used
    odds = capacity.odds_on_reading(
        fit,
        total_mru=node.total_mru,
        used_mru=used.mru if used is not None else None,
        occupied_mru=[s.mru for s in occupied],
        sizes_mru=[s.mru for s in free],
        node=node.pk,
    )
    return {s.index: round(o, 4) for s, o in zip(free, odds, strict=True)}


def odds_calibration_now() -> tuple[int, float | None, float | None]:
    """(outcomes, Brier score, expected calibration error) of the odds kept on each deployment against
    its outcome: deployed, or refused by ZOS for memory (what the odds are of; other failures say
    nothing of them). One grouped query (ten bins of odds), whatever the history's length."""
    deployed = Case(When(state=Deployment.State.FAILED, then=Value(0.0)), default=Value(1.0), output_field=FloatField())
    rows = (
        Deployment.objects.filter(odds__isnull=False)
        .filter(
            Q(state__in=(Deployment.State.DEPLOYED, Deployment.State.DELETED))
            | Q(state=Deployment.State.FAILED, cause=Deployment.Cause.MEMORY)
        )
        .annotate(
            y=deployed,
            bin=Least(
                Floor(F("odds") * Value(float(CALIBRATION_BINS))),
                Value(float(CALIBRATION_BINS - 1)),
                output_field=FloatField(),
            ),
        )
        .annotate(miss=ExpressionWrapper((F("odds") - F("y")) * (F("odds") - F("y")), output_field=FloatField()))
        .order_by()
        .values("bin")
        .annotate(n=Count("pk"), odds_sum=Sum("odds"), y_sum=Sum("y"), miss_sum=Sum("miss"))
        .values_list("n", "odds_sum", "y_sum", "miss_sum")
    )
    bins = list(rows)
    total = sum(n for n, *_ in bins)
    if not total:
        return 0, None, None
    brier = sum(miss for *_, miss in bins) / total
    ece = sum(abs(odds - y) for _n, odds, y, _miss in bins) / total  # each bin |mean odds - share| x its weight
    return total, brier, ece


def probe_wanted(node: Node) -> bool:
    """Whether placement asks for a probe on the node now (capacity.probe_first): it is judged unread, and that
    lowers the odds of its next free slice below PROBE_FIRST_BELOW. Read when the probe is reported, so that it
    counts as a proposed one while placement, a GET, writes nothing."""
    running = node.slices_rented + node.slices_deployed
    if node.pk not in unread_among([(node.pk, node.memory_lesson_id, node.zos_version, running)]):
        return False
    next_free = node.slices.filter(state=Slice.State.FREE).order_by("index").first()
    return next_free is not None and capacity.probe_first(vm_odds_now(node, mru=next_free.mru), unread=True)


def vm_odds_now(node: Node, *, mru: int, used_mru: int | None = None) -> float:
    """The odds ZOS takes one more VM of `mru` on the node now: on `used_mru` (a reading just taken) or the
    node's last reading, with its rented and deployed slices running. Kept on each deployment sent or
    reported, for calibration."""
    if used_mru is None and node.used is not None:
        used_mru = node.used.mru
    vm_mru = (
        max(used_mru - capacity.zos_reserve_mru(node.total_mru), 0)
        if used_mru is not None
        else int(node.slices.filter(state__in=Slice.OCCUPIED_STATES).aggregate(m=Sum("mru"))["m"] or 0)
    )
    running = node.slices_rented + node.slices_deployed
    return vm_odds(node_belief(node), total_mru=node.total_mru, vm_mru=vm_mru, running=running, mru=mru, pk=node.pk)


def vm_odds(belief: capacity.odds.Belief, *, total_mru: int, vm_mru: int, running: int, mru: int, pk: int) -> float:
    """The odds ZOS takes one more VM of `mru` beside `running` VMs using `vm_mru`, judged by the node's
    belief (beliefs_for): the one rule the node page, the reports and placement give a host's odds by."""
    odds = capacity.memory_odds(belief, total_mru=total_mru, vm_mru=vm_mru, running=running, slice_mru=mru, node=pk)
    return round(odds, 4)
