"""Editing a catalog's slices by hand (the admin): with the node locked, audited, and the catalog's
generation moved on, so a re-register planned before the edit refuses to write over it.

Rented and deployed slices are someone's VM: never edited or deleted here.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F

from dashboard.access.services.audit_trail import AuditEntry, audit_records
from dashboard.figures.services.node_writes import node_writes
from dashboard.models import Node, Slice


class SliceNumberUsed(ValueError):
    """A new slice may not take a number the node used before (a failure row may name it)."""


class SliceOccupied(ValueError):
    """The slice holds a VM (rented or deployed): it is not the catalog's to change."""


def node_slices_write(
    *,
    node: Node,
    added: Iterable[Slice] = (),
    changed: Iterable[tuple[Slice, Iterable[str]]] = (),
    deleted: Iterable[Slice] = (),
    by=None,
    source: str = "admin",
) -> None:
    """One node's hand edits in one transaction: new slices, changed fields (set on the objects
    already), deleted slices. SliceOccupied, and nothing written, if a changed or deleted one holds a VM."""
    added, deleted = list(added), list(deleted)
    changed = [(s, [name for name in fields if name not in ("id", "node")]) for s, fields in changed]
    with node_writes([node.pk]):  # the node before the slices: see figures.services.figures.nodes_lock
        touched = [s.pk for s, _ in changed] + [s.pk for s in deleted]
        stored = {s.pk: s for s in Slice.objects.select_for_update().filter(pk__in=touched)}
        for pk in touched:
            if pk in stored and stored[pk].is_occupied:
                s = stored[pk]
                raise SliceOccupied(f"slice {s.index} of node {node.grid_id} is {s.state}: it holds a VM")
        events = _slices_delete(node, deleted, by=by, source=source)
        events += _slices_change(node, changed, stored=stored, by=by, source=source)
        events += _slices_add(node, added, generation=node.catalog_generation + 1, by=by, source=source)
        _catalog_changed([node.pk])
        audit_records(events)


def _slices_delete(node: Node, deleted: list[Slice], *, by, source: str) -> list[AuditEntry]:
    """Delete the slices; an audit entry for each."""
    events = []
    for s in deleted:
        events.append(
            _event(
                node,
                by,
                source,
                "slice.deleted",
                f"slice {s.index} deleted by hand ({s.state})",
                {"slice": s.pk, "index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru},
            )
        )
    Slice.objects.filter(pk__in=[s.pk for s in deleted]).delete()
    return events


def _slices_change(
    node: Node, changed: list[tuple[Slice, list[str]]], *, stored: dict[int, Slice], by, source: str
) -> list[AuditEntry]:
    """Save the changed fields (`stored`: the rows as they were); an audit entry for each slice, before and after."""
    events = []
    for s, fields in changed:
        before = {name: getattr(stored[s.pk], name) for name in fields}
        if fields:
            s.save(update_fields=[*fields, "updated_at"])
        words = ", ".join(f"{name} {before[name]} → {getattr(s, name)}" for name in fields) or "nothing changed"
        events.append(
            _event(
                node,
                by,
                source,
                "slice.edited",
                f"slice {s.index} edited by hand: {words}",
                {"slice": s.pk, "before": _plain(before), "after": _plain({n: getattr(s, n) for n in fields})},
            )
        )
    return events


def _slices_add(node: Node, added: list[Slice], *, generation: int, by, source: str) -> list[AuditEntry]:
    """Store the new slices under numbers never used on the node; an audit entry for each."""
    events = []
    for s in added:
        if s.index < node.slice_index_next:
            raise SliceNumberUsed(
                f"slice number {s.index} of node {node.grid_id} was used before; slice numbers are never reused "
                f"(a failure record may name it): the next free number is {node.slice_index_next}"
            )
        s.node, s.generation = node, generation
        s.save()
        node.slice_index_next = max(node.slice_index_next, s.index + 1)
        Node.objects.filter(pk=node.pk).update(slice_index_next=node.slice_index_next)
        events.append(
            _event(
                node,
                by,
                source,
                "slice.added",
                f"slice {s.index} added by hand ({s.state})",
                {"slice": s.pk, "index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru},
            )
        )
    return events


def slice_edit(*, slice_: Slice, fields: Iterable[str], by=None, source: str = "admin") -> Slice:
    """Store the changed `fields` of `slice_` (already set on it); SliceOccupied if it holds a VM."""
    node_slices_write(node=slice_.node, changed=[(slice_, fields)], by=by, source=source)
    return slice_


def slices_delete(*, slice_pks: Iterable[int], by=None, source: str = "admin") -> int:
    """Delete these slices, but never one that holds a VM; how many went."""
    pks = list(slice_pks)
    with node_writes() as writes:
        node_pks = sorted(set(Slice.objects.filter(pk__in=pks).values_list("node_id", flat=True)))
        writes.lock(node_pks)
        doomed = list(
            Slice.objects.select_for_update()
            .filter(pk__in=pks)
            .exclude(state__in=Slice.OCCUPIED_STATES)
            .select_related("node")
            .order_by("node_id", "index")
        )
        Slice.objects.filter(pk__in=[s.pk for s in doomed]).delete()
        _catalog_changed(node_pks)
        audit_records(
            AuditEntry(
                actor=by,
                source=source,
                action="slice.deleted",
                node_id=s.node_id,
                message=f"slice {s.index} of node {s.node.grid_id} deleted by hand ({s.state})",
                detail={"slice": s.pk, "index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru},
            )
            for s in doomed
        )
    return len(doomed)


def _catalog_changed(node_pks: list[int]) -> None:
    # A re-register planned before this edit sees another generation and writes nothing (CATALOG_CHANGED).
    Node.objects.filter(pk__in=node_pks).update(catalog_generation=F("catalog_generation") + 1)


def _event(node: Node, by, source: str, action: str, words: str, detail: dict) -> AuditEntry:
    return AuditEntry(
        actor=by,
        source=source,
        action=action,
        node=node,
        message=f"node {node.grid_id}: {words}",
        detail=detail,
    )


def _plain(values: dict) -> dict:
    return {k: (v if isinstance(v, (int, str, bool, type(None))) else str(v)) for k, v in values.items()}
