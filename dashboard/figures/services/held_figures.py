"""A node's live holds, kept on its row for placement's first cut: how many, their charges, sizes and expiries.

A held slice's VM is not on the grid's reading yet, so placement charges it on the node's stored room
(Node.room_mru, room_sru). Reading every live hold and judging each held node in Python cost placement
twice its time with 1,000 live holds (BENCHMARKS.md); with the holds summed on the node row the first
cut charges them in SQL and groups held nodes like any other.

A hold ends by time with no write, so the row keeps the first and last expiry of the holds it sums:
placement trusts the sums while every one of them is live, forgets them once all have expired, and
judges the node alone, from the live holds, in between (deployments.selectors.placement_cut). Nothing needs a worker
to be true. What must hold is that every write that makes or ends a hold, or changes a held slice's
state, stores the node's sums in its transaction: the hold services call `held_store`, and
figures.services.figures.figures_refresh (which every slice write calls) calls it too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone

from dashboard.deployments.selectors.holds import live_holds
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.models import Node

HELD_FIELDS = ("held_slices", "held_mru", "held_sru", "held_sizes", "held_first_expiry", "held_last_expiry")
NOTHING_HELD = (0, 0, 0, "", None, None)


def held_sizes_key(sizes: Iterable[tuple[int, int, int]]) -> str:
    """A short key of the held slices' sizes (cru, mru, sru) in slice order: the held VMs' disks are
    placed after the occupied ones in that order, so nodes whose pools judge alike and hold the same
    sizes judge alike with their holds too."""
    text = ",".join(f"{cru}:{mru}:{sru}" for cru, mru, sru in sizes)
    return hashlib.sha1(text.encode()).hexdigest()[:16] if text else ""


def held_computed(node_pks: Iterable[int], *, now: datetime) -> dict[int, tuple]:
    """Node pk -> its live holds' sums at `now` as HELD_FIELDS (only the nodes with one); one query.
    held_mru is what the held VMs will take of the node's memory: their charges and the hidden use the
    node's refusals taught for each (Node.hidden_mru_per_vm, which a lesson changes with figures_refresh)."""
    rows = (
        live_holds(now)
        .filter(node_id__in=list(node_pks))
        .order_by("node_id", "slice_index")
        .values_list(
            "node_id",
            "slice__cru",
            "slice__mru",
            "slice__sru",
            "charge_mru",
            "charge_sru",
            "expires_at",
            "node__hidden_mru_per_vm",
        )
    )
    found: dict[int, list] = {}
    for node_pk, cru, mru, sru, charge_mru, charge_sru, expires_at, hidden in rows:
        # A held VM will use what the node's refusals taught each VM hides, as the running ones do.
        found.setdefault(node_pk, []).append(((cru, mru, sru), charge_mru + hidden, charge_sru, expires_at))
    return {
        pk: (
            len(holds),
            sum(h[1] for h in holds),
            sum(h[2] for h in holds),
            held_sizes_key(h[0] for h in holds),
            min(h[3] for h in holds),
            max(h[3] for h in holds),
        )
        for pk, holds in found.items()
    }


def held_store(node_pks: Iterable[int], *, now: datetime | None = None) -> int:
    """Store these nodes' live holds' sums on their rows; how many rows changed. Call it in the transaction
    that made or ended a hold or changed a slice, after the change, with the nodes locked."""
    pks = sorted(set(node_pks))
    if not pks:
        return 0
    now = now or timezone.now()
    computed = held_computed(pks, now=now)
    stored = Node.objects.filter(pk__in=pks).values_list("pk", *HELD_FIELDS)
    changed = 0
    for pk, *columns in stored:
        wanted = computed.get(pk, NOTHING_HELD)
        if tuple(columns) != wanted:
            Node.objects.filter(pk=pk).update(**dict(zip(HELD_FIELDS, wanted, strict=True)))
            changed += 1
    if changed:
        # The farm totals trigger (figures/services/farm_totals_trigger.py) marks their farms changed: summed
        # again on commit, or every page would read those farms live (and the map draw them) until the beat's refresh.
        farm_totals_refresh_on_commit()
    return changed
