"""Each node's slices grouped as the stored figures need them (figures.services.figures): one query, any fleet."""

from __future__ import annotations

from django.db.models import Case, Count, F, IntegerField, Min, QuerySet, Value, When

from dashboard.models import Node, Slice

# Up to this many nodes named by primary key, their slices are asked for by node id, not by a join
# to the nodes' query (figures.services.figures stores 500 nodes a batch).
PKS_LISTED = 1000


def slices_grouped(nodes: QuerySet[Node], *, pks: list[int] | None = None) -> dict[int, tuple]:
    """Node pk -> (free, rented, deployed, failed, (free sizes with their count, occupied sizes in index order)).

    One row per free size, per failed size, and per occupied slice with its index: occupied
    ones are kept by the carve in index order (first fit in the pools follows it), free ones
    are compared with it, and all of them are counted. `pks`: the primary keys of `nodes`, when
    the caller has read them already.
    """
    occupied_index = Case(
        When(state__in=Slice.OCCUPIED_STATES, then=F("index")), default=Value(None), output_field=IntegerField()
    )
    slice_rows = Slice.objects.all()
    if nodes.query.has_filters() and pks is not None and len(pks) <= PKS_LISTED:
        # By the slices' node index: joined to the nodes' query, the planner scanned every slice of the
        # fleet for a page of 100 new nodes whenever its statistics lagged behind (issue 43: 58 ms a page).
        slice_rows = slice_rows.filter(node_id__in=pks)
    elif nodes.query.has_filters():
        # Unfiltered, the join to the nodes would cost as much as the grouping itself.
        slice_rows = slice_rows.filter(node__in=nodes.order_by().values("pk"))
    groups = (
        slice_rows.annotate(occupied_index=occupied_index)
        .values_list("node_id", "state", "cru", "mru", "sru", "occupied_index")
        .annotate(n=Count("pk"), first=Min("index"))
        .order_by()
    )
    counted: dict[int, list] = {}
    for node_pk, state, cru, mru, sru, index, n, first in groups:
        counts = counted.get(node_pk)
        if counts is None:
            counts = counted[node_pk] = [0, 0, 0, 0, [], [], []]
        if state == Slice.State.FREE:
            counts[0] += n
            counts[4].append(((cru, mru, sru), n))
            counts[6].append((first, (cru, mru, sru), n))
        elif state == Slice.State.FAILED:
            counts[3] += n
        else:
            counts[1 if state == Slice.State.RENTED else 2] += n
            counts[5].extend([(index, (cru, mru, sru))] * n)
    # Free sizes in slice order for the precheck: each size group where its first slice is (the
    # groups of a catalog are contiguous: kept slices first, re-carved ones after them).
    return {
        pk: (
            free,
            rented,
            deployed,
            failed,
            (tuple(sorted(free_sizes)), tuple(size for _, size in sorted(occupied))),
            tuple(size for _first, size, n in sorted(free_order) for _ in range(n)),
        )
        for pk, (free, rented, deployed, failed, free_sizes, occupied, free_order) in counted.items()
    }
