"""Registering a node: carve it with its effective policy and store it with its catalog, or nothing.

`node_register` takes the facts however they came (typed by hand, or read from the grid);
`node_register_from_grid` maps a grid reading onto it, and is what the node_register command, the
demo fleet and the test fixtures use, so a node registered from the grid carries the same facts
whichever door it came in by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import IntegrityError
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import audit_record
from dashboard.capacity.catalog import size_words
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.types import NodeCapacity
from dashboard.lessons.services.memory_model import memory_lessons_for_new
from dashboard.models import Node, Slice
from dashboard.nodes.services.pools_heard import (
    Heard,
    lives_with_pools,
    pools_hear,
    pools_heard_store,
    pools_not_taken_words,
    without_pools,
)
from dashboard.nodes.services.readings import rent_of, reported_at_of
from dashboard.nodes.services.registration_checks import (
    CatalogError,
    check_first_pool,
    check_is_a_node,
    check_registration,
)
from dashboard.policies.selectors.policy_book import policy_book, policy_named


class NodeAlreadyRegistered(CatalogError):
    def __init__(self, node_id: int):
        super().__init__(
            f"node {node_id} is already registered; re-register it to re-carve its catalog "
            f"(manage.py node_reregister {node_id})"
        )
        self.node_id = node_id


def catalog_slices(*, node: Node, carve: capacity.Carve, start_index: int, generation: int) -> list[Slice]:
    """Unsaved free Slice rows for the carve's new slices, numbered from start_index."""
    size = carve.slice
    return [
        Slice(node=node, index=start_index + i, cru=size.cru, mru=size.mru, sru=size.sru, generation=generation)
        for i in range(carve.new_slices)
    ]


@dataclass(frozen=True)
class NodeFacts:
    """What is stated of a node (typed by hand or read from the grid), as its new row stores it (node_row)."""

    node_id: int
    total: capacity.Resources
    farm_id: int
    farm_name: str
    twin_id: int | None
    status: str
    dedicated: bool
    used: capacity.Resources | None  # the live used capacity, as read at seen_at
    seen_at: datetime | None
    reported_at: datetime | None
    country: str
    city: str
    healthy: bool | None
    power_state: str
    power_target: str
    uptime: int | None
    rent: dict | None = None  # the chain's rent columns as read (readings.rent_of)

    @classmethod
    def of_live(cls, live: NodeCapacity, *, seen_at: datetime | None) -> NodeFacts:
        """Every fact a grid reading states of the node, as read at `seen_at`."""
        return cls(
            node_id=live.node_id,
            total=live.total,
            farm_id=live.farm_id,
            farm_name=live.farm_name,
            twin_id=live.twin_id,
            status=live.status,
            dedicated=live.dedicated,
            used=live.used,
            seen_at=seen_at,
            reported_at=reported_at_of(live),
            country=live.country,
            city=live.city,
            healthy=live.healthy,
            power_state=live.power_state,
            power_target=live.power_target,
            uptime=live.uptime,
            rent=rent_of(live),
        )


def node_register(
    *,
    node_id: int,
    total: capacity.Resources,
    farm_id: int,
    farm_name: str = "",
    twin_id: int | None = None,
    status: str = "up",
    dedicated: bool = False,
    pools: Sequence[int] | None = None,
    cache: int | None = None,
    policy_name: str | None = None,
    by=None,
    source: str = "command",
    used: capacity.Resources | None = None,
    seen_at: datetime | None = None,
    reported_at: datetime | None = None,
    origin: str = "",
    country: str = "",
    city: str = "",
    healthy: bool | None = None,
    power_state: str = "",
    power_target: str = "",
    uptime: int | None = None,
    rent: dict | None = None,
    refuse_no_node: bool = False,
) -> Node:
    """Register a node stated by hand (the command's flags, the tests): its facts as keyword arguments,
    the rest as node_register_facts takes it. `used` is the live used capacity when it was read (at
    `seen_at`, default now)."""
    facts = NodeFacts(
        node_id=node_id,
        total=total,
        farm_id=farm_id,
        farm_name=farm_name,
        twin_id=twin_id,
        status=status,
        dedicated=dedicated,
        used=used,
        seen_at=seen_at,
        reported_at=reported_at,
        country=country,
        city=city,
        healthy=healthy,
        power_state=power_state,
        power_target=power_target,
        uptime=uptime,
        rent=rent,
    )
    return node_register_facts(
        facts,
        pools=pools,
        cache=cache,
        policy_name=policy_name,
        by=by,
        source=source,
        origin=origin,
        refuse_no_node=refuse_no_node,
    )


def node_register_facts(
    facts: NodeFacts,
    *,
    pools: Sequence[int] | None = None,
    cache: int | None = None,
    policy_name: str | None = None,
    by=None,
    source: str = "command",
    origin: str = "",
    refuse_no_node: bool = False,
) -> Node:
    """Carve a new node with its effective policy (or `policy_name`) and store it with its catalog: the one
    path of a node's registration, its facts typed by hand (node_register) or read (NodeFacts.of_live).

    `refuse_no_node` (the operator's `manage.py node_register`): refuse, in one line, what can host no VM
    at all (no SSD, memory below one slice and the reserve); a farm's onboarding and the demo keep such a
    node, with its empty catalog, to show it.

    One transaction: the node, its slices and an audit event, or nothing. `by` is the user (None for
    the command line); `source` and `origin` (a host or address) say from where. `cache` bounds the
    zos-cache's quota when the node's own pools answer told it (nodes.services.pools.pools_cache): the carve
    then keeps its next step, as the figures will once that answer is kept as the node's pool report.
    """
    policy, carve = registration_carve(facts, pools, cache, _policy_for(policy_name), refuse_no_node=refuse_no_node)
    return _node_insert(facts, pools=pools, policy=policy, carve=carve, by=by, source=source, origin=origin)


def _policy_for(policy_name: str | None) -> Callable[[int], capacity.Policy]:
    if policy_name:
        return lambda _farm_id: policy_named(policy_name)
    return lambda farm_id: policy_book(node_pks=[], farm_ids=[farm_id]).for_farm(farm_id)


def registration_carve(
    facts: NodeFacts,
    pools: Sequence[int] | None,
    cache: int | None,
    policy_for: Callable[[int], capacity.Policy],
    *,
    refuse_no_node: bool = False,
) -> tuple[capacity.Policy, capacity.Carve]:
    """The new node's effective policy (`policy_for` its farm) and its carve, once the facts are checked
    (CatalogError or CapacityError if not): the one path of a registration, one node or a page's."""
    node_id, total = facts.node_id, facts.total
    # Checked as given: an empty list of pools is refused, not read as pools unknown.
    check_registration(
        node_id=node_id, total=total, farm_id=facts.farm_id, twin_id=facts.twin_id, status=facts.status, pools=pools
    )
    pools = list(pools) if pools else None
    policy = policy_for(facts.farm_id)
    check_first_pool(node_id=node_id, pools=pools, policy=policy)
    light = bool((facts.rent or {}).get("light"))
    carve = capacity.carve_memoised(total, policy, pools=pools, cache=cache, light=light)
    if refuse_no_node:
        check_is_a_node(node_id, total, policy, carve)
    return policy, carve


def _node_insert(
    facts: NodeFacts,
    *,
    pools: Sequence[int] | None,
    policy: capacity.Policy,
    carve: capacity.Carve,
    by,
    source: str,
    origin: str,
) -> Node:
    """The new node's row, stored with its slices, figures and audit event in one transaction, or nothing
    (NodeAlreadyRegistered if its grid id is taken)."""
    if Node.objects.filter(grid_id=facts.node_id).exists():
        raise NodeAlreadyRegistered(facts.node_id)
    pools = list(pools) if pools else None
    if facts.used is not None and facts.seen_at is None:
        facts = replace(facts, seen_at=timezone.now())  # a live reading is from now unless told otherwise
    node = node_row(facts, pools=pools, policy=policy, carve=carve)
    node_id, total = facts.node_id, facts.total
    try:
        with node_writes() as writes:
            node.save(force_insert=True)
            writes.lock([node.pk])  # its own new row, seen by no one else yet: its figures on exit
            Slice.objects.bulk_create(catalog_slices(node=node, carve=carve, start_index=0, generation=1))
            memory_lessons_for_new([node.pk])
            audit_record(
                actor=by,
                source=source,
                action="node registered",
                node=node,
                message=_registered_words(node_id, policy, carve),
                detail={
                    "origin": origin,
                    "policy": {"name": policy.name, "version": policy.version},
                    "total": total.as_dict(),
                    "pools": pools,
                    "carve": carve.as_dict(),
                },
            )
    except IntegrityError:
        # Registered by someone else between the check and the insert.
        if Node.objects.filter(grid_id=node_id).exists():
            raise NodeAlreadyRegistered(node_id) from None
        raise
    return node


def node_row(facts: NodeFacts, *, pools: list[int] | None, policy: capacity.Policy, carve: capacity.Carve) -> Node:
    """The new node's row, unsaved: one place for what a registration stores (one node or a page)."""
    used = facts.used
    return Node(
        **(facts.rent or {}),
        grid_id=facts.node_id,
        farm_id=facts.farm_id,
        farm_name=facts.farm_name,
        country=facts.country,
        city=facts.city,
        twin_id=facts.twin_id,
        status=facts.status,
        dedicated=facts.dedicated,
        total_cru=facts.total.cru,
        total_mru=facts.total.mru,
        total_sru=facts.total.sru,
        total_hru=facts.total.hru,
        pools_sru=pools,
        used_cru=used.cru if used else None,
        used_mru=used.mru if used else None,
        used_sru=used.sru if used else None,
        used_hru=used.hru if used else None,
        seen_at=facts.seen_at,
        reported_at=facts.reported_at,
        healthy=facts.healthy,
        power_state=facts.power_state,
        power_target=facts.power_target,
        uptime=facts.uptime,
        carved_policy_name=policy.name,
        carved_policy_version=policy.version,
        carved_slice_sru=carve.slice.sru,
        carved_deployable=carve.slices,
        carved_pools_known=carve.pools_known,
        catalog_generation=1,
        slice_index_next=carve.new_slices,
    )


def _registered_words(node_id: int, policy: capacity.Policy, carve: capacity.Carve) -> str:
    if not carve.new_slices:
        return f"node {node_id} registered with policy {policy.name} v{policy.version}: no slice fits ({', '.join(carve.notes)})"
    return (
        f"node {node_id} registered with policy {policy.name} v{policy.version}: "
        f"{carve.new_slices} slice(s) of {size_words(carve.slice)}"
    )


def node_register_from_grid(
    *,
    live: NodeCapacity,
    read_at: datetime | None = None,
    policy_name: str | None = None,
    by=None,
    source: str = "command",
    origin: str = "",
    refuse_no_node: bool = False,
    ask_rmb: bool = True,
) -> Node:
    """Register the node the grid just described (`live`, read at `read_at`, default now).

    Every fact the grid states goes onto the node: its farm, twin, status, dedication, location,
    total and live used capacity as its first reading. The SSD pools: those `live` carries, or the
    node's own answer through the RMB door (the rmb-peer, or the simulated grid's loopback), kept as
    a pool report; without them the catalog is carved for unknown pools.
    Pools the registration's checks refuse (a total a little off, a first pool too small for the
    cache) are not taken: the node is registered and carved as for unknown pools, and says why.
    """
    # The node is asked itself, first-hand, through the RMB door (get_rmb: the rmb-peer, or the simulated
    # grid's loopback). `pools_heard_words` on the node says what came of it.
    # `ask_rmb=False`: the caller asked already (an onboarding page) or holds a transaction open.
    heard = pools_hear([live]) if ask_rmb else Heard()
    live = lives_with_pools([live], heard)[0]
    how = dict(
        policy_name=policy_name,
        by=by,
        source=source,
        origin=origin,
        seen_at=read_at or timezone.now(),
        refuse_no_node=refuse_no_node,
    )
    try:
        node = _node_register_live(live, **how)
    except (CatalogError, capacity.CapacityError) as exc:
        if not live.pools_sru or isinstance(exc, NodeAlreadyRegistered):
            raise
        # What the node said of its pools is what the checks refused: carved as for unknown pools instead.
        heard.refuse(live.node_id, pools_not_taken_words(live.node_id, exc))
        node = _node_register_live(without_pools(live), **how)
    if heard.pools or heard.versions or heard.refused:
        pools_heard_store([node], heard)
        node.refresh_from_db()
    node.pools_heard_words = heard.words(node.grid_id)
    return node


def _node_register_live(live: NodeCapacity, *, seen_at: datetime, **how) -> Node:
    """node_register with every fact the reading states (NodeFacts.of_live); `how`: who, from where, the policy."""
    return node_register_facts(
        NodeFacts.of_live(live, seen_at=seen_at),
        pools=list(live.pools_sru) if live.pools_sru else None,
        cache=live.zos_cache_sru if live.pools_sru else None,
        **how,
    )
