"""Keeping the farm totals (FarmTotals) current, after the writes that change a farm's nodes.

The farm totals trigger (figures/services/farm_totals_trigger.py) marks a farm changed (FarmTotalsChanged) in
the same transaction as any statement that inserts, updates or deletes its nodes, whoever writes them.
`farm_totals_refresh` sums the marked farms again; the services that write nodes ask for it on commit
(`farm_totals_refresh_on_commit`) and the beat runs it too (FARM_TOTALS_EVERY), for writes made by hand.
A reader never waits for it: figures.selectors.farm_totals reads a marked farm's nodes live (reads only read).

The refresh locks the marked farms' FarmTotals rows (in farm order), then sums their nodes in a new
statement, whose snapshot therefore holds every change committed before the lock, and removes exactly
the marks it read. A change committed after those marks were read keeps its own mark, so the farm is
read live until the next refresh sums it again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import transaction

from dashboard.figures.selectors.farm_totals import COUNTED, FarmSums, summed
from dashboard.models import FarmTotals, FarmTotalsChanged, Node
from dashboard.rows import rows_update

log = logging.getLogger(__name__)

# Set inside farm_totals_deferred: whether a refresh was asked for meanwhile.
_deferred: ContextVar[list[bool] | None] = ContextVar("farm_totals_deferred", default=None)


def farm_totals_refresh() -> list[int]:
    """The farms marked changed summed again, each given a new `computed_at`; their ids."""
    marks = list(FarmTotalsChanged.objects.values_list("pk", "farm_id"))
    if not marks:
        return []
    farms = sorted({farm for _pk, farm in marks})
    with transaction.atomic():
        # The rows first, locked in farm order (two refreshes never wait on each other in a circle)...
        FarmTotals.objects.bulk_create([FarmTotals(farm_id=f) for f in farms], ignore_conflicts=True)
        list(FarmTotals.objects.select_for_update().filter(farm_id__in=farms).order_by("farm_id").values_list("pk"))
        # ...then the sums, in a statement that starts after the locks: it sees every committed change.
        sums = {s.farm_id: s for s in summed(Node.objects.filter(farm_id__in=farms))}
        # One statement for every farm: bulk_update's CASE arm a farm and a field took ~1.5 s at 200 farms.
        rows_update(
            FarmTotals,
            [("farm_id", "integer"), *((name, "bigint") for name in COUNTED), ("oldest_reading_at", "timestamptz")],
            [_kept(sums.get(f, FarmSums(farm_id=f))) for f in farms],
            stamped=["computed_at"],
        )
        # Exactly the marks read: their changes were committed before they were read, so the sums above
        # hold them. A mark with a smaller id may belong to a change committed only now: it stays.
        FarmTotalsChanged.objects.filter(pk__in=[pk for pk, _farm in marks]).delete()
    return farms


def _kept(sums: FarmSums) -> tuple:
    """The columns FarmTotals keeps, in rows_update's order (not `held`: holds end by themselves)."""
    return (sums.farm_id, *(getattr(sums, name) for name in COUNTED), sums.oldest_reading_at)


def _refresh_committed() -> None:
    try:
        farm_totals_refresh()
    except Exception:  # the write is committed; readers read the farm live until the beat's refresh
        log.exception("farm totals refresh after a commit failed")


@contextmanager
def farm_totals_deferred() -> Iterator[None]:
    """Inside, the refreshes asked for on commit are made once, when the block ends (however it ends).

    For a run that commits many pages of nodes (an onboarding: 20 pages for 2,000 nodes): a refresh
    after each page re-summed the same farms and cost a transaction of its own each time (issue 43).
    Nothing is less true meanwhile: the trigger's marks are committed with each page, and a reader
    reads a marked farm's nodes live until the refresh (figures.selectors.farm_totals).
    """
    asked = [False]
    token = _deferred.set(asked)
    try:
        yield
    finally:
        _deferred.reset(token)
        if asked[0]:
            _refresh_committed()


def farm_totals_refresh_on_commit() -> None:
    """Refresh the farm totals once the current transaction commits (at once outside one), however
    many writes in it ask; nothing if it rolls back (the trigger's marks roll back with it). Inside
    farm_totals_deferred, once when that block ends instead."""
    deferred = _deferred.get()
    if deferred is not None:
        deferred[0] = True
        return
    connection = transaction.get_connection()
    if connection.in_atomic_block and any(entry[1] is _refresh_committed for entry in connection.run_on_commit):
        return
    transaction.on_commit(_refresh_committed)
