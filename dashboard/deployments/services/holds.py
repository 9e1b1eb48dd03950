"""Holds: one free slice kept for one buyer (a marketplace id) for a while, made and released here.

Exactly one winner when many ask for the same slice at once: the node's row and then the slice's row
are locked (the order every writer takes, figures.services.node_writes), the slice's open holds are read
under that lock, and a partial unique index (one open hold per slice) stands behind it in the database.
An expired hold is free at once for every reader (they apply `Hold.objects.live(now)`), so nothing
needs a worker; the next hold of that slice ends it here ("expired") before it inserts its own.

A `deployed` report of the hold's marketplace id turns it into the deployment (deployments.services.outcomes
ends it "deployed"); another id's report on a held slice is refused there, naming the hold.
Every hold made or released is audited. Bad input raises HoldError naming the field; nothing is written.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.figures.closure import closure_of
from dashboard.figures.services.held_figures import held_store
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.text import text_problem
from dashboard.models import INTEGER_MAX, FarmIps, Hold, Node, Slice
from dashboard.nodes.selectors.farm_ips import farm_ipv4
from dashboard.policies.selectors.policy_book import policy_for_node

MARKETPLACE_ID_MAX = Hold._meta.get_field("marketplace_id").max_length


class HoldError(ValueError):
    """A hold that cannot be made or released; `field` names the input at fault. Nothing was written."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class HoldConflict(HoldError):
    """The slice is taken or held already, or the hold has ended: a 409."""


class HoldNotFound(HoldError):
    """No hold of that id: a 404."""


class HoldForbidden(HoldError):
    """Another buyer's hold: only its own token (or an admin) ends it; a 403."""


# Who may end any hold through the API, not only their own: a token with the act scope (an admin's).
HOLD_ADMIN_SCOPE = "act"


def hold_words(hold: Hold, now: datetime) -> str:
    """Who holds the slice and until when, as a refusal names it."""
    return (
        f"hold #{hold.pk} of slice {hold.slice_index} on node {hold.node.grid_id} for {hold.marketplace_id!r}, "
        f"until {hold.expires_at:%Y-%m-%d %H:%M:%S} UTC ({max(int((hold.expires_at - now).total_seconds()), 0)} s left)"
    )


def hold_checked(*, node_id, slice_index, ttl_seconds, marketplace_id) -> str:
    for name, value in (("node_id", node_id), ("slice_index", slice_index)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INTEGER_MAX:
            raise HoldError(f"{name} must be a whole number from 0 to {INTEGER_MAX}, not {value!r}", field=name)
    cap = settings.HOLD_MAX_TTL
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or not 1 <= ttl_seconds <= cap:
        raise HoldError(
            f"ttl_seconds must be a whole number of seconds from 1 to {cap} (HOLD_MAX_TTL), not {ttl_seconds!r}",
            field="ttl_seconds",
        )
    if not isinstance(marketplace_id, str) or len(marketplace_id) > MARKETPLACE_ID_MAX:
        raise HoldError(
            f"marketplace_id must be text of at most {MARKETPLACE_ID_MAX} characters", field="marketplace_id"
        )
    problem = text_problem(marketplace_id, allow_whitespace=False)
    if problem:
        raise HoldError(f"marketplace_id contains {problem}; send it without", field="marketplace_id")
    marketplace_id = marketplace_id.strip()
    if not marketplace_id:
        raise HoldError(
            "marketplace_id must name the buyer's deployment or contract id (the one its `deployed` report will carry)",
            field="marketplace_id",
        )
    return marketplace_id


def _slice_holdable(node: Node, row: Slice, *, node_id: int, now: datetime) -> None:
    """HoldConflict unless the slice is free on an open node and unheld; a hold that ran out is ended here."""
    # A closed node offers nothing (withheld, rented by another twin, down ...): nothing to hold there.
    # On standby is the one exception: a buyer may hold a slice while the farm's power manager wakes it.
    closed = closure_of(Node.objects.get(pk=node.pk))
    if closed is not None and closed.key != "standby":
        raise HoldConflict(
            f"node {node_id} {closed.what}: none of its slices can be held {closed.reason.until}", field="node_id"
        )
    if row.state != Slice.State.FREE:
        raise HoldConflict(
            f"slice {row.index} of node {node_id} is {row.state}, not free: it cannot be held",
            field="slice_index",
        )
    open_hold = Hold.objects.filter(slice=row, ended_at__isnull=True).select_related("node").first()
    if open_hold is not None and open_hold.expires_at > now:
        raise HoldConflict(
            f"slice {row.index} of node {node_id} is held: {hold_words(open_hold, now)}", field="slice_index"
        )
    if open_hold is not None:
        Hold.objects.filter(pk=open_hold.pk).update(ended_at=open_hold.expires_at, end=Hold.End.EXPIRED)


def hold_create(
    *,
    node_id: int,
    slice_index: int,
    ttl_seconds: int,
    marketplace_id: str,
    by=None,
    token=None,
    source: str = "api",
    now: datetime | None = None,
    public_ipv4: int = 0,
) -> Hold:
    """Hold slice `slice_index` of node `node_id` (the grid's id) for `marketplace_id`, `ttl_seconds` long.
    With `public_ipv4`, the hold keeps that many of the farm's free IPs off everyone else until it ends."""
    marketplace_id = hold_checked(
        node_id=node_id, slice_index=slice_index, ttl_seconds=ttl_seconds, marketplace_id=marketplace_id
    )
    node = Node.objects.filter(grid_id=node_id).first()
    if node is None:
        raise HoldError(f"node {node_id} is not registered with the dashboard", field="node_id")
    with node_writes([node.pk], refresh=False):  # a hold's sums only (held_store)
        row = Slice.objects.select_for_update().filter(node=node, index=slice_index).first()
        if row is None:
            listed = ", ".join(map(str, node.slices.order_by("index").values_list("index", flat=True))) or "none"
            raise HoldError(f"node {node_id} has no slice {slice_index} (its slices: {listed})", field="slice_index")
        # The time is read under the lock: a hold that just expired is seen expired by the one who waited.
        now = now or timezone.now()
        _slice_holdable(node, row, node_id=node_id, now=now)
        if public_ipv4:
            _ipv4_holdable(node, public_ipv4, now)
        charge = policy_for_node(node).vm_charge(row.cru, row.mru, row.sru)
        hold = Hold.objects.create(
            node=node,
            slice=row,
            slice_index=row.index,
            marketplace_id=marketplace_id,
            charge_mru=charge.mru,
            charge_sru=charge.sru,
            public_ipv4=public_ipv4,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
            by=actor_of(by),
            token=token,
        )
        _hold_recorded(
            hold,
            "hold.made",
            f"slice {row.index} of node {node_id} held for {marketplace_id!r} for {ttl_seconds} s",
            now=now,
            by=by,
            source=source,
            token=token,
        )
    return hold


def hold_release(*, hold_id: int, by=None, token=None, source: str = "api", now: datetime | None = None) -> Hold:
    """End a live hold: the slice is on offer again at once."""
    with transaction.atomic():
        hold = Hold.objects.select_related("node").filter(pk=hold_id).first()
        if hold is None:
            raise HoldNotFound(f"there is no hold #{hold_id}", field="hold_id")
        with node_writes([hold.node_id], refresh=False):  # a hold's sums only (held_store)
            hold = Hold.objects.select_for_update().select_related("node").get(pk=hold_id)
            now = now or timezone.now()
            _release_allowed(hold, by=by, token=token)
            state = hold.state_at(now)
            if state != "live":
                when = hold.ended_at or hold.expires_at
                raise HoldConflict(
                    f"hold #{hold.pk} has ended already ({state} at {when:%Y-%m-%d %H:%M:%S} UTC); nothing to release",
                    field="hold_id",
                )
            hold.ended_at, hold.end = now, Hold.End.RELEASED
            hold.save(update_fields=["ended_at", "end"])
            _hold_recorded(
                hold,
                "hold.released",
                f"hold of slice {hold.slice_index} on node {hold.node.grid_id} for {hold.marketplace_id!r} released",
                now=now,
                by=by,
                source=source,
                token=token,
            )
    return hold


def _release_allowed(hold: Hold, *, by, token) -> None:
    """A hold is its buyer's: through the API it is ended by the token that made it (or its user's, for a
    hold no token made), or by an admin's `act` token; a caller with no token (a command) is an operator's."""
    if token is None:
        return
    own = hold.token_id == token.pk if hold.token_id else hold.by_id == getattr(by, "pk", None)
    if own or HOLD_ADMIN_SCOPE in (token.scopes or []):
        return
    raise HoldForbidden(
        f"hold #{hold.pk} of slice {hold.slice_index} on node {hold.node.grid_id} is {hold.marketplace_id!r}'s, made "
        "by another token: only that token, or an admin's act token, can release it (it ends by itself at its expiry)",
        field="hold_id",
    )


def hold_turned_deployed(
    *, node: Node, slice_index: int, marketplace_id: str, now: datetime, by=None, source: str = "api"
) -> Hold | None:
    """The live hold of this slice for this id ends as its deployment (called by deployments.services.outcomes,
    inside its transaction with the node and slice locked). None when there is none."""
    hold = Hold.objects.live(now).filter(node=node, slice_index=slice_index, marketplace_id=marketplace_id).first()
    if hold is None:
        return None
    hold.ended_at, hold.end = now, Hold.End.DEPLOYED
    hold.save(update_fields=["ended_at", "end"])
    where = f"slice {slice_index} of node {node.grid_id}"
    _hold_recorded(
        hold,
        "hold.deployed",
        f"hold of {where} for {marketplace_id!r} became its deployment",
        now=now,
        by=by,
        source=source,
        token=None,
    )
    return hold


def _hold_recorded(hold: Hold, action: str, message: str, *, now: datetime, by, source: str, token) -> None:
    """A hold made or ended: its node's held sums stored again, then the audit trail told (with the hold)."""
    held_store([hold.node_id], now=now)
    audit_record(
        action=action,
        actor=by,
        source=source,
        node=hold.node,
        message=message,
        detail=_hold_detail(hold, token=token),
    )


def _hold_detail(hold: Hold, *, token) -> dict:
    return {
        "hold": hold.pk,
        "slice": hold.slice_index,
        "marketplace_id": hold.marketplace_id,
        "expires_at": hold.expires_at.isoformat(),
        "end": hold.end,
        "token": token.prefix if token is not None else None,
    }


def _ipv4_holdable(node: Node, wanted: int, now: datetime) -> None:
    """HoldConflict unless the farm has `wanted` IPs free now; the farm's row locked, so two holds of one
    farm's last IP (on two nodes) are taken one after the other."""
    FarmIps.objects.select_for_update().filter(farm_id=node.farm_id).first()
    farm = farm_ipv4(node.farm_id, now)
    if node.light or farm.available < wanted:
        why = f"node {node.grid_id} is ZOS-light" if node.light else farm.words
        raise HoldConflict(f"no public IPv4 to hold: {why}", field="public_ipv4")
