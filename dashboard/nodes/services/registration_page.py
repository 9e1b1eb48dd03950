"""A page of new nodes registered together: the onboarding's path (nodes.services.onboarding.apply).

The same checks, carve, rows and audit as nodes.services.registration.node_register_from_grid, node by
node, written in a few statements whatever the page's size: its nodes, then every slice (one
INSERT from arrays on PostgreSQL), then their figures, then their audit events.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import AuditEntry, audit_records
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.figures.services.figures_new import figures_of_new
from dashboard.grid.types import NodeCapacity
from dashboard.lessons.services.memory_model import memory_lessons_for_new
from dashboard.models import Node, Slice
from dashboard.nodes.services.pools_heard import pools_not_taken_words, without_pools

# One place for what a registration checks and stores, shared with the one-by-one path.
from dashboard.nodes.services.registration import NodeFacts, _registered_words, node_row, registration_carve
from dashboard.nodes.services.registration_checks import CatalogError
from dashboard.policies.selectors.policy_book import policy_book, policy_named
from dashboard.rows import rows_insert, rows_pks


class Planned(NamedTuple):
    """A node of the page that passed the checks, with what it will be carved by."""

    live: NodeCapacity
    facts: NodeFacts
    policy: capacity.Policy
    carve: capacity.Carve
    pools_refused: str = ""  # the pools it said, refused by the checks: carved as for unknown pools, and why


def nodes_register_from_grid(
    *,
    lives: Sequence[NodeCapacity],
    read_at: datetime,
    policy_name: str | None = None,
    by=None,
    source: str = "command",
    origin: str = "",
) -> tuple[list[Node], list[tuple[int, str]]]:
    """Register a page of nodes the grid just described, in a few statements whatever its size:
    (the nodes registered, [(node id, why not)] for the others).

    The same checks, carve, rows and audit as node_register_from_grid, node by node, but written
    together: the nodes, then every slice, then their figures, then their audit events. Call it
    inside the caller's transaction (a page is all or nothing). A node registered meanwhile by
    someone else makes the insert fail: the caller gets NodeAlreadyRegistered's IntegrityError
    and falls back to one by one (which says which).
    """
    planned, refused = page_planned(lives, policy_name=policy_name, read_at=read_at)
    refused = [(node_id, f"not registered: {why}") for node_id, why in refused]
    if not planned:
        return [], refused
    nodes = [
        _page_node_row(entry, read_at=read_at, pk=pk)
        for entry, pk in zip(planned, rows_pks(Node, len(planned)), strict=True)
    ]
    # Their figures with them: computed as figures_refresh computes them, from the rows and catalogs in memory.
    figures_of_new(nodes, [entry.carve for entry in planned])
    _nodes_insert(nodes)
    _slices_insert([(node.pk, entry.carve) for node, entry in zip(nodes, planned, strict=True)])
    # A node whose build has a lesson takes it, and its figures are refreshed with it.
    memory_lessons_for_new([node.pk for node in nodes])
    # As figures_refresh asks after any node write (the insert's trigger marked their farms).
    farm_totals_refresh_on_commit()
    _page_audit(nodes, planned, by=by, source=source, origin=origin)
    return nodes, refused


def page_planned(
    lives: Sequence[NodeCapacity], *, policy_name: str | None, read_at: datetime
) -> tuple[list[Planned], list[tuple[int, str]]]:
    """The page's nodes that pass the checks, each with its policy and carve; [(node id, why not)] for the others.
    The one plan of a page: its registration, and the onboarding's preview of it (what it would carve)."""
    named = policy_named(policy_name) if policy_name else None
    book = policy_book(node_pks=[], farm_ids={live.farm_id for live in lives}) if named is None else None

    def policy_for(farm_id: int) -> capacity.Policy:
        return named or book.for_farm(farm_id)

    planned: list[Planned] = []
    refused: list[tuple[int, str]] = []
    for live in lives:
        try:
            planned.append(_node_planned(live, policy_for=policy_for, read_at=read_at))
        except (CatalogError, capacity.CapacityError) as exc:
            if not live.pools_sru:
                refused.append((live.node_id, str(exc)))
                continue
            # What the node said of its pools is what the checks refused: carved as for unknown pools instead.
            why = pools_not_taken_words(live.node_id, exc)
            try:
                prudent = _node_planned(without_pools(live), policy_for=policy_for, read_at=read_at)
            except (CatalogError, capacity.CapacityError) as again:
                refused.append((live.node_id, str(again)))
                continue
            planned.append(prudent._replace(pools_refused=why))
    return planned, refused


def _node_planned(live: NodeCapacity, *, policy_for, read_at: datetime) -> Planned:
    """The node's checks, policy and carve (CatalogError or CapacityError when it cannot be registered so)."""
    facts = NodeFacts.of_live(live, seen_at=read_at)
    policy, carve = registration_carve(facts, live.pools_sru or None, live.zos_cache_sru, policy_for)
    return Planned(live, facts, policy, carve)


def _nodes_insert(nodes: list[Node]) -> None:
    """The page's node rows, keys and figures given, in one statement (rows.rows_insert: COPY), where
    bulk_create spent most of a page's Python time preparing 81 values a node (issue 43). A node
    registered meanwhile is an IntegrityError, as it was."""
    rows_insert(Node, nodes, with_pk=True)
    for node in nodes:
        node._state.adding = False
        node._state.db = connection.alias


def _page_node_row(entry: Planned, *, read_at: datetime, pk: int) -> Node:
    live = entry.live
    pools = list(live.pools_sru) if live.pools_sru else None
    node = node_row(entry.facts, pools=pools, policy=entry.policy, carve=entry.carve)
    if entry.pools_refused:
        node.pools_refused, node.pools_refused_at = entry.pools_refused[:300], read_at
    node.pk = pk
    return node


def _page_audit(nodes: list[Node], planned: list[Planned], *, by, source: str, origin: str) -> None:
    """One "node registered" event per node of the page, in one statement."""
    # The nodes of one shape share a carve (capacity.carve_memoised): its dict is made once a page, not
    # once a node (dataclasses.asdict copies every field; the event's detail is written, never changed).
    carves: dict[int, dict] = {}
    audit_records(
        [
            AuditEntry(
                actor=by,
                source=source,
                action="node registered",
                node=node,
                message=_registered_words(live.node_id, policy, carve),
                detail={
                    "origin": origin,
                    "policy": {"name": policy.name, "version": policy.version},
                    "total": live.total.as_dict(),
                    "pools": list(live.pools_sru) if live.pools_sru else None,
                    "carve": carves.get(id(carve)) or carves.setdefault(id(carve), carve.as_dict()),
                },
            )
            for node, (live, _facts, policy, carve, _refused) in zip(nodes, planned, strict=True)
        ]
    )


_SLICE_COLUMNS = (
    ("node_id", "bigint"),
    ("index", "integer"),
    ("cru", "integer"),
    ("mru", "bigint"),
    ("sru", "bigint"),
    ("state", "text"),
    ("generation", "integer"),
)


def _slices_insert(carves: list[tuple[int, capacity.Carve]]) -> None:
    """Each new node's free slices (registration.catalog_slices' rows: index from 0, generation 1), in one
    statement: a page's ~700 rows through bulk_create spent most of their time in Django preparing each
    value, and building a Slice instance for each cost as much again (issue 43): the columns are built
    straight from the carves, and written by one INSERT ... SELECT FROM unnest(arrays)."""
    columns: list[list] = [[] for _ in _SLICE_COLUMNS]
    node_ids, indexes, crus, mrus, srus, states, generations = columns
    for node_pk, carve in carves:
        count, size = carve.new_slices, carve.slice
        node_ids.extend([node_pk] * count)
        indexes.extend(range(count))
        crus.extend([size.cru] * count)
        mrus.extend([size.mru] * count)
        srus.extend([size.sru] * count)
        states.extend([Slice.State.FREE.value] * count)
        generations.extend([1] * count)
    if not node_ids:
        return
    quote = connection.ops.quote_name
    names = [name for name, _type in _SLICE_COLUMNS]
    arrays = ", ".join(f"%s::{column_type}[]" for _name, column_type in _SLICE_COLUMNS)
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Slice._meta.db_table)} "
            f"({', '.join(quote(n) for n in names)}, created_at, updated_at) "
            f"SELECT u.*, %s, %s FROM unnest({arrays}) AS u",
            [now, now, *columns],
        )
