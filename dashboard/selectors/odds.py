"""The odds a slice deploys at the first try now (capacity.odds), read from the stored lessons.

One door for every reader of odds: the stored figures (services.figures: deployable and placeable
now count only slices at or above SLICE_MIN_ODDS), the node page and the API's catalog, placement,
and the calibration /metrics gives over the outcomes reported (`odds_calibration_now`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db.models import Case, Count, ExpressionWrapper, F, FloatField, Q, Sum, Value, When
from django.db.models.functions import Floor, Least

from dashboard import capacity
from dashboard.models import Deployment, MemoryLesson, Node, Slice

CALIBRATION_BINS = 10  # as capacity.odds_calibration bins them


def lesson_fits(lesson_ids: Iterable[int | None]) -> dict[int, capacity.OverheadFit]:
    """Lesson pk -> its fit, for the lessons deciding some nodes' memory (one query; none for no lesson)."""
    ids = {pk for pk in lesson_ids if pk is not None}
    return {lesson.pk: lesson.fit() for lesson in MemoryLesson.objects.filter(pk__in=ids)} if ids else {}


def has_own_residual(fits: dict, lesson_id: int | None, pk: int) -> bool:
    """Whether the node has a residual of its own in its lesson (its odds are then its own)."""
    fit = fits.get(lesson_id)
    return fit is not None and pk in fit.residuals


def sure_new_slices(
    fit: capacity.OverheadFit | None, carve: capacity.Carve, total_mru: int, occupied: tuple, pk: int, min_odds: float
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
    fit: capacity.OverheadFit, pk: int, free: tuple, used_mru: int, total_mru: int, occupied: tuple, min_odds: float
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
    fit = node.memory_lesson.fit() if node.memory_lesson_id else None
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


def vm_odds_now(node: Node, *, mru: int, used_mru: int | None = None) -> float:
    """The odds ZOS takes one more VM of `mru` on the node now: on `used_mru` (a reading just taken) or the
    node's last reading, with its rented and deployed slices running. Kept on each deployment sent or
    reported, for calibration."""
    fit = node.memory_lesson.fit() if node.memory_lesson_id else None
    running = node.slices_rented + node.slices_deployed
    if used_mru is None and node.used is not None:
        used_mru = node.used.mru
    vm_mru = (
        max(used_mru - capacity.zos_reserve_mru(node.total_mru), 0)
        if used_mru is not None
        else int(node.slices.filter(state__in=Slice.OCCUPIED_STATES).aggregate(m=Sum("mru"))["m"] or 0)
    )
    odds = capacity.memory_odds(
        fit, total_mru=node.total_mru, vm_mru=vm_mru, running=running, slice_mru=mru, node=node.pk
    )
    return round(odds, 4)
