"""Where a slice of one size can go instead: one fleet-wide answer from what each node's row stores.

No grid read: every node is judged on its last reading (used_*, seen_at, status), its SSD pools,
the VMs its catalog holds and what ZOS's refusals taught, by capacity.fits, the judgement the
precheck makes of that same reading.

Two ways to the same answer. Judging every node in Python (`every_node=True`) is the reference:
three queries (the policies, the nodes as values, the occupied slices of the nodes with known pools)
and a verdict for each node. The database makes the first cut (deployments.selectors.placement_cut: status,
reading, and the memory and SSD room capacity stored on each node, compared with the charge of one VM),
and Python judges only what needs capacity's pool model, one node of each group of nodes alike, and the
best nodes' candidates: a Python cost that does not grow with the fleet.
tests/deployments/test_selectors_placement.py checks the two give the same answer.

A reading older than reading_age.reading_untrusted_after() (ALERT_READING_MAX_AGE) is not trusted: such a
node counts as blocked by its age, whatever its numbers say (the alert calls the same readings old).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity.disk_room import largest_disk_now
from dashboard.deployments.selectors import placement_cut
from dashboard.deployments.selectors.placement_rows import (
    NODE_FIELDS,
    live_holds_by_node,
    node_rows,
    occupied_by_node,
    policies_by_name,
    policy_of,
)
from dashboard.deployments.selectors.placement_rules import LIMITS, NO_RULES, Rules
from dashboard.figures.closure import closure_of_values
from dashboard.figures.warning import warnings_of_values
from dashboard.lessons.selectors.odds import belief_key, beliefs_for, unread_among, vm_odds
from dashboard.models import Node, Policy, observed_of_columns
from dashboard.nodes.reading_age import reading_untrusted_after
from dashboard.nodes.selectors.farm_ips import farm_ips_available

# Why a node cannot host the slice now, in the order they are judged (the first one that holds). The
# first two are the asker's rules; then a closed node (capacity.closures: down, standby, withheld,
# rented, ...; a new closure reason is a block with no edit); "held" is a node that would host it but
# for the live holds on it.
BLOCKS = {
    "node_excluded": "node excluded (exclude_nodes)",
    "farm_excluded": "farm excluded (exclude_farms)",
    "no_ipv4": "ZOS-light: takes no public IPv4 (ipv4)",
    "farm_ips_unread": "the farm's public IPv4s were never read (ipv4)",
    "farm_ips": "the farm's public IPv4s are all taken (ipv4)",
    **{key: reason.label for key, reason in capacity.CLOSURE_REASONS.items()},
    "unread": "never read from the grid",
    "old": "reading too old",
    # ZOS refuses one VM of more vCPUs than the node's threads (capacity.vcpus), whatever its room.
    "cpu": "CPU (more vCPUs than the node's threads)",
    "memory": "memory",
    "disk": "disk (total)",
    "pool": "disk (no pool holds it)",
    "held": "room held for buyers (live holds)",
}
# capacity.Shortfall.resource -> the block it is.
_SHORTFALL_BLOCK = {"cru": "cpu", "mru": "memory", "sru": "disk", "pool": "pool", "cache": "pool"}
BEST_SHOWN = 10
# The best nodes' candidates read at a time (more only when whole groups' pools refuse the size).
CANDIDATES_PAGE = 20
# How many more of the size one of the best nodes could take, counted up to this.
COULD_TAKE_LIMIT = 100


@dataclass(frozen=True)
class NodeVerdict:
    """One node's answer: blocked_by is "" when the slice fits its reading now."""

    node_id: int
    farm_id: int
    farm_name: str
    status: str
    seen_at: datetime | None
    blocked_by: str
    verdict: capacity.Verdict | None  # None: no reading, or the node is closed
    could_take: int | None = None  # how many of the size, one after another (the best nodes only)
    closure_detail: str = ""  # the closure's detail when blocked_by is a closure
    vms: int = 0  # rented and deployed slices: pack fills the busy nodes first
    take: int | None = None  # the slices this answer offers there: could_take within per_node / per_farm
    odds: float | None = None  # the slice's odds of deploying there at the first try (the best nodes only)
    # Why a deploy there may still fail though it fits (capacity.warnings), for a node that can host it.
    warnings: tuple = ()
    # The largest data disk a VM of the asked vCPUs and memory gets there now (the best nodes only).
    largest_disk: int | None = None
    # The probe VM's memory where the deployer sends one before the slice (capacity.probe_first): the node was
    # never read with as many VMs as it runs, in a build whose nodes were seen to differ, and that lowers the odds.
    probe_mru: int | None = None

    @property
    def probe_first(self) -> bool:
        return self.probe_mru is not None

    @property
    def probe(self) -> dict[str, int] | None:
        """The VM to send first, as GET /api/v1/probes describes one (ZOS always refuses it)."""
        return {"cru": 1, "mru": self.probe_mru, "sru": 0} if self.probe_mru is not None else None

    @property
    def fits(self) -> bool:
        return not self.blocked_by

    @property
    def room_mru(self) -> int:
        """Memory left after the slice."""
        return self.verdict.available.mru - self.verdict.needed.mru if self.verdict else 0

    @property
    def room_sru(self) -> int:
        """SSD left after the slice (node total; a pool may hold less)."""
        return self.verdict.available.sru - self.verdict.needed.sru if self.verdict else 0

    @property
    def words(self) -> str:
        closed = capacity.CLOSURE_REASONS.get(self.blocked_by)
        if closed is not None:
            return f"cannot be placed: the node {capacity.Closure(closed.key, self.closure_detail).what}"
        if self.blocked_by == "unread":
            return "cannot be judged: the node's capacity was never read from the grid"
        if self.blocked_by == "old" and self.verdict is not None:
            return f"reading too old to trust; on it the slice {self.verdict.words}"
        return self.verdict.words if self.verdict else ""


@dataclass(frozen=True)
class Placement:
    size: capacity.SliceSize
    nodes: int
    can_host: int
    blocked: dict[str, int]  # every key of BLOCKS, in its order; the counts and can_host add up to nodes
    best: tuple[NodeVerdict, ...]
    reading_max_age: int  # seconds
    verdicts: tuple[NodeVerdict, ...] = field(default=(), repr=False)  # every node, by node id
    rules: Rules = NO_RULES
    limited: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIMITS, 0))
    held_nodes: int = 0  # nodes with live holds, judged with them
    notes: tuple[str, ...] = ()  # what the asker should know about the answer as a whole (ipv4 unsold, ...)

    @property
    def slices_offered(self) -> int:
        """The slices the best nodes offer together (their `take`): with ipv4, at most their farms' free IPs."""
        return sum(v.take or 0 for v in self.best)

    @property
    def blocked_total(self) -> int:
        return sum(self.blocked.values())

    @property
    def blocked_rows(self) -> tuple[tuple[str, str, int], ...]:
        """(key, words, nodes) for each block, in BLOCKS' order."""
        return tuple((key, BLOCKS[key], count) for key, count in self.blocked.items())

    @property
    def limited_rows(self) -> tuple[tuple[str, str, int], ...]:
        return tuple((key, LIMITS[key], count) for key, count in self.limited.items())

    @property
    def reading_max_age_delta(self) -> timedelta:
        return timedelta(seconds=self.reading_max_age)


def placement_for(
    *,
    cru: int,
    mru: int,
    sru: int,
    best: int = BEST_SHOWN,
    now: datetime | None = None,
    every_node: bool = False,
    rules: Rules = NO_RULES,
) -> Placement:
    """How many registered nodes could host a VM of this size now, what blocks the others, and
    the best ones to try: most memory left after it, then most disk, then the freshest reading.

    The database makes the first cut (deployments.selectors.placement_cut) and Python judges only
    what needs capacity's pool model; `every_node` judges every node in
    Python and keeps each node's verdict in the answer: the reference the first cut is tested against.
    """
    size = capacity.SliceSize(cru=cru, mru=mru, sru=sru)
    policies = policies_by_name()
    now = now or timezone.now()
    cutoff = now - reading_untrusted_after()
    if rules.ipv4:
        # Each farm's IPv4s free now (as last read, less those held), bounding its nodes together.
        rules = replace(rules, farm_ips_free=tuple(sorted(farm_ips_available(now).items())))
    if every_node:
        # The live holds, in one query whatever the fleet: a hold expired at `now` is simply not read.
        answer = _placement_judged(size, policies, cutoff, best, rules, live_holds_by_node(now))
    else:
        answer = _placement_counted(size, policies, cutoff, best, rules, now)
    return replace(answer, notes=_notes(rules))


def _notes(rules: Rules) -> tuple[str, ...]:
    """The answer's caveats: asked for a public IPv4 while no policy sells one, no farm's IPs are read."""
    if rules.ipv4 and not Policy.objects.filter(Q(public_ipv4__gt=0) | Q(ipv4_addon=True)).exists():
        return (
            "No policy sells a public IPv4 (every policy's slices carry 0 and none offers the add-on), so no farm's "
            "IPs are read and every node is blocked for it: a policy that starts selling one has its farms' IPs "
            "read at once.",
        )
    return ()


def _placement_judged(
    size: capacity.SliceSize, policies: dict, cutoff: datetime, best: int, rules: Rules, held: dict
) -> Placement:
    rows = list(Node.objects.order_by("grid_id").values_list(*NODE_FIELDS))
    occupied = occupied_by_node()
    judged: dict[tuple, capacity.Verdict] = {}  # many nodes share a size, a reading and a policy
    verdicts = tuple(_judge(row, size, policies, occupied, cutoff, judged, rules, held) for row in rows)

    by_node_id = {row[1]: row for row in rows}
    blocked = dict.fromkeys(BLOCKS, 0)
    for v in verdicts:
        if v.blocked_by:
            blocked[v.blocked_by] += 1
    hosts = sorted((v for v in verdicts if v.fits), key=_order_of(rules))
    shown, limited = _limited(hosts, size, by_node_id, policies, occupied, held, rules, best)
    return Placement(
        size=size,
        nodes=len(verdicts),
        can_host=len(verdicts) - sum(blocked.values()),
        blocked=blocked,
        best=shown,
        reading_max_age=int(reading_untrusted_after().total_seconds()),
        verdicts=verdicts,
        rules=rules,
        limited=limited,
        held_nodes=len(held),
    )


_TO_JUDGE = (placement_cut.POOLS_TO_JUDGE, placement_cut.JUDGE_ALONE, placement_cut.HELD_SHORT)


def _placement_counted(
    size: capacity.SliceSize, policies: dict, cutoff: datetime, best: int, rules: Rules, now: datetime
) -> Placement:
    """The same answer with the database's first cut: Python judges one node of each group whose
    pools decide (and any node whose policy version is no longer in force, or whose holds partly ended
    by time), and the best nodes' candidates in order until enough of them fit. The live holds are
    read for those nodes only, with their occupied slices (the first cut charges the rest from the
    sums on each node row)."""
    charges = [
        placement_cut.PolicyCharge(f"{policy.name} v{policy.version}", need.mru, need.sru)
        for policy in policies.values()
        for need in (policy.vm_charge(size.cru, size.mru, size.sru),)
    ]
    cut = {
        "cutoff": cutoff,
        "below_min_mru": size.mru < capacity.MIN_VM_MRU,
        "vcpus": size.cru,
        "now": now,
        "exclude_nodes": tuple(sorted(rules.exclude_nodes)),
        "exclude_farms": tuple(sorted(rules.exclude_farms)),
        "ipv4_farms": tuple(farm for farm, free in rules.farm_ips_free if free > 0) if rules.ipv4 else None,
        "ipv4_read_farms": tuple(farm for farm, _free in rules.farm_ips_free) if rules.ipv4 else None,
    }
    counts = placement_cut.first_cut(charges, **cut)
    judge = _Judge(size=size, policies=policies, cutoff=cutoff, rules=rules)
    judge.read([c.sample_pk for c in counts if c.block in _TO_JUDGE], now, always=True)
    tally = _groups_tallied(counts, judge)
    cut |= {"refused_groups": tuple(tally.refused_groups), "pack": rules.strategy == "pack"}
    hosts = _fitting_candidates(charges, cut, judge, best=best, now=now)
    # Under a per-farm bound (per_farm, a farm's free IPs) the nodes it leaves out are counted: every host goes in.
    bounded = rules.per_farm or rules.ipv4
    hosts = sorted([*(hosts if bounded else hosts[:best]), *tally.alone], key=_order_of(rules))
    by_node_id = {row[1]: row for row in judge.rows.values()}
    shown, limited = _limited(hosts, size, by_node_id, policies, judge.occupied, judge.held, rules, best)
    return Placement(
        size=size,
        nodes=tally.can_host + sum(tally.blocked.values()),
        can_host=tally.can_host,
        blocked=tally.blocked,
        best=shown,
        reading_max_age=int(reading_untrusted_after().total_seconds()),
        rules=rules,
        limited=limited,
        held_nodes=sum(count.held for count in counts),
    )


@dataclass
class _Judge:
    """The nodes read so far for the first cut's answer (rows, occupied slices, live holds), and the
    verdicts worked out on them: many nodes share a size, a reading and a policy."""

    size: capacity.SliceSize
    policies: dict
    cutoff: datetime
    rules: Rules
    rows: dict = field(default_factory=dict)
    occupied: dict = field(default_factory=dict)
    held: dict = field(default_factory=dict)
    verdicts: dict[tuple, capacity.Verdict] = field(default_factory=dict)

    def read(self, pks: list[int], now: datetime, *, always: bool = False) -> None:
        for got, more in zip((self.rows, self.occupied, self.held), node_rows(pks, now, always=always), strict=True):
            got.update(more)

    def node(self, pk: int, *, holds_charged: bool = True) -> NodeVerdict:
        held = self.held if holds_charged else {}
        return _judge(
            self.rows[pk], self.size, self.policies, self.occupied, self.cutoff, self.verdicts, self.rules, held
        )


@dataclass
class _Tally:
    """The first cut's groups counted: the blocks, the nodes that can host, and what the candidates need."""

    blocked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BLOCKS, 0))
    can_host: int = 0
    alone: list[NodeVerdict] = field(default_factory=list)  # judged alone and fitting: among the best by their own room
    refused_groups: list[str] = field(default_factory=list)  # pools refuse the size: no candidate of theirs can host it


def _groups_tallied(counts, judge: _Judge) -> _Tally:
    """Each group's nodes counted under its block; a group whose pools decide is judged on its sample."""
    tally = _Tally()
    for count in counts:
        block = count.block
        if block == placement_cut.HELD_SHORT:
            # It fits on its own but not with its holds charged: "held", unless its pools refuse the size anyway.
            block = judge.node(count.sample_pk, holds_charged=False).blocked_by or "held"
        elif block in _TO_JUDGE:
            verdict = judge.node(count.sample_pk)
            block = verdict.blocked_by
            if count.block == placement_cut.JUDGE_ALONE and verdict.fits:
                tally.alone.append(verdict)
            if count.block == placement_cut.POOLS_TO_JUDGE and not verdict.fits:
                tally.refused_groups.append(count.group)
        if block:
            tally.blocked[block] += count.nodes
        else:
            tally.can_host += count.nodes
    return tally


def _fitting_candidates(charges, cut: dict, judge: _Judge, *, best: int, now: datetime) -> list[NodeVerdict]:
    """The best nodes' candidates in the first cut's order that fit, read a page at a time until enough do."""
    page = max(2 * best, CANDIDATES_PAGE)
    pks = placement_cut.candidates(charges, **cut, limit=page if best else 0, offset=0)
    judge.read(pks, now, always=True)
    hosts: list[NodeVerdict] = []
    offset = 0
    while pks and _shown_at_most(hosts, judge.rules) < best:
        hosts += [v for v in (judge.node(pk) for pk in pks) if v.fits]
        offset += page
        if len(pks) < page or _shown_at_most(hosts, judge.rules) >= best:
            break
        # Whole groups of candidates whose pools refuse the size: look further down the order.
        pks = placement_cut.candidates(charges, **cut, limit=page, offset=offset)
        judge.read(pks, now)
    return hosts


def _best_first(v: NodeVerdict) -> tuple:
    """The best nodes' order: most memory left after the slice, then most disk, then the freshest reading."""
    return (-v.room_mru, -v.room_sru, -v.seen_at.timestamp() if v.seen_at else 0, v.node_id)


def _packed_first(v: NodeVerdict) -> tuple:
    """pack: nodes already running VMs first, then the least memory left after the slice, then the least
    disk, then the freshest reading (placement_cut orders the candidates the same way)."""
    return (v.vms == 0, v.room_mru, v.room_sru, -v.seen_at.timestamp() if v.seen_at else 0, v.node_id)


def _order_of(rules: Rules):
    return _packed_first if rules.strategy == "pack" else _best_first


def _shown_at_most(hosts: list[NodeVerdict], rules: Rules) -> int:
    """How many of these hosts per_farm (and with ipv4 the farm's free IPs) let into the best at most (each
    takes one slice at least)."""
    if rules.per_farm is None and not rules.ipv4:
        return len(hosts)
    ips = dict(rules.farm_ips_free)
    farms: dict[int, int] = {}
    for v in hosts:
        farms[v.farm_id] = farms.get(v.farm_id, 0) + 1
    caps = {farm: min(rules.per_farm or n, ips.get(farm, 0) if rules.ipv4 else n) for farm, n in farms.items()}
    return sum(min(n, caps[farm]) for farm, n in farms.items())


def _limited(hosts, size, by_node_id, policies, occupied, held, rules: Rules, best: int):
    """The best nodes in order, each with the slices it could take and those the rules let it take."""
    shown: list[NodeVerdict] = []
    limited = dict.fromkeys(LIMITS, 0)
    taken_in: dict[int, int] = {}
    ips_left = dict(rules.farm_ips_free)  # ipv4: every slice offered takes one of its farm's free IPs
    hosts = _with_odds(hosts, size, by_node_id)
    for v in hosts:
        if len(shown) >= best:
            break
        if v.odds < rules.min_odds:
            limited["min_odds"] += 1
            continue
        if rules.per_farm is not None and taken_in.get(v.farm_id, 0) >= rules.per_farm:
            limited["per_farm"] += 1
            continue
        if rules.ipv4 and ips_left.get(v.farm_id, 0) <= 0:
            limited["farm_ips"] += 1
            continue
        v = _with_could_take(v, size, by_node_id, policies, occupied, held)
        take = v.could_take
        if rules.per_node is not None and take > rules.per_node:
            take = rules.per_node
            limited["per_node"] += 1
        if rules.per_farm is not None:
            take = min(take, rules.per_farm - taken_in.get(v.farm_id, 0))
            taken_in[v.farm_id] = taken_in.get(v.farm_id, 0) + take
        if rules.ipv4:
            if take > ips_left[v.farm_id]:
                take = ips_left[v.farm_id]
                limited["farm_ips"] += 1
            ips_left[v.farm_id] -= take
        shown.append(replace(v, take=take))
    return tuple(shown), limited


def _asker_block(values: dict, rules: Rules) -> str:
    """The block the asker's own rules put on the node ("" none), in BLOCKS' order."""
    if values["grid_id"] in rules.exclude_nodes:
        return "node_excluded"
    if values["farm_id"] in rules.exclude_farms:
        return "farm_excluded"
    if not rules.ipv4:
        return ""
    if values["light"]:
        return "no_ipv4"
    free = dict(rules.farm_ips_free)
    if values["farm_id"] not in free:
        return "farm_ips_unread"  # unknown is not none: said apart (issue 45, defect 7)
    return "farm_ips" if free[values["farm_id"]] <= 0 else ""


def _judge(
    row: tuple, size, policies, occupied, cutoff: datetime, judged: dict, rules: Rules, held: dict
) -> NodeVerdict:
    values = dict(zip(NODE_FIELDS, row, strict=True))
    blocked_by, verdict = "", None
    holds = held.get(values["pk"], ())
    closed = closure_of_values(values)
    if _asker_block(values, rules):
        blocked_by = _asker_block(values, rules)
    elif closed is not None:
        blocked_by = closed.key
    elif values["used_mru"] is None or values["used_sru"] is None:
        blocked_by = "unread"
    else:
        args = _fit_args(values, policies, occupied)
        verdict = judged.get(args)
        if verdict is None:
            verdict = judged[args] = capacity.fits(size, *args[:3], live=args[3])
        if values["seen_at"] is None or values["seen_at"] < cutoff:
            blocked_by = "old"
        elif not verdict.fits:
            blocked_by = _SHORTFALL_BLOCK.get(verdict.shortfalls[0].resource, "memory")
        elif holds:
            # It would host the slice on its own; with the held VMs counted as if running, may it still?
            total, used, policy, live = _fit_args(values, policies, occupied, holds)
            verdict = capacity.fits(size, total, used, policy, live=live)
            if not verdict.fits:
                blocked_by = "held"
    return NodeVerdict(
        node_id=values["grid_id"],
        farm_id=values["farm_id"],
        farm_name=values["farm_name"],
        status=values["status"],
        seen_at=values["seen_at"],
        blocked_by=blocked_by,
        verdict=verdict,
        closure_detail=closed.detail if closed is not None and blocked_by == closed.key else "",
        vms=values["slices_rented"] + values["slices_deployed"],
        warnings=() if blocked_by else warnings_of_values(values),
    )


def _fit_args(values: dict, policies: dict, occupied: dict, holds=()) -> tuple:
    """(total, used, policy, LiveNode) for capacity.fits, as the precheck builds them for this reading."""
    total = capacity.Resources(
        cru=values["total_cru"], mru=values["total_mru"], sru=values["total_sru"], hru=values["total_hru"]
    )
    used = capacity.Resources(
        cru=(values["used_cru"] or 0) + sum(size.cru for size, _ in holds),
        mru=values["used_mru"] + sum(charge.mru for _, charge in holds),
        sru=values["used_sru"] + sum(charge.sru for _, charge in holds),
        hru=values["used_hru"] or 0,
    )
    policy = policy_of(values["effective_policy"], policies)
    observed = observed_of_columns(values, used_sru=values["used_sru"])
    # Known pools, or unknown ones: then every plausible layout of the SSD total (capacity.layouts), with
    # the disks already placed in it, as the node's own figures (placeable now) count them.
    # A held slice is counted as the VM it will be: charged on the reading, its disks placed after the others.
    held_sizes = [size for size, _ in holds]
    live = capacity.live_node(
        policy=policy,
        pools=values["pools_sru"] or None,
        occupied=[*occupied.get(values["pk"], ()), *held_sizes],
        observed=observed,
        # live_node counts the cache's quota only with the pools known, as Node.zos_cache does.
        cache=values["zos_cache_sru"],
        light=bool(values["light"]),
    )
    return total, used, policy, live


def _with_odds(hosts: list[NodeVerdict], size, by_node_id: dict) -> list[NodeVerdict]:
    """The hosts with the slice's odds there (lessons.selectors.odds.vm_odds on the node's reading and belief),
    surest first: odds in steps of 1%, then the strategy's own order."""
    rows = {v.node_id: dict(zip(NODE_FIELDS, by_node_id[v.node_id], strict=True)) for v in hosts}
    unread = unread_among(
        (v["pk"], v["memory_lesson_id"], v["zos_version"], v["slices_rented"] + v["slices_deployed"])
        for v in rows.values()
    )
    key = {
        node_id: belief_key(values["memory_lesson_id"], values["zos_version"], unread=values["pk"] in unread)
        for node_id, values in rows.items()
    }
    beliefs = beliefs_for(key.values())
    judged = []
    for v in hosts:
        values = rows[v.node_id]
        odds = vm_odds(
            beliefs[key[v.node_id]],
            total_mru=values["total_mru"],
            vm_mru=max(values["used_mru"] - capacity.zos_reserve_mru(values["total_mru"]), 0),
            running=values["slices_rented"] + values["slices_deployed"],
            mru=size.mru,
            pk=values["pk"],
        )
        probe_first = capacity.probe_first(odds, unread=values["pk"] in unread)
        probe_mru = values["total_mru"] + capacity.PROBE_BEYOND_MRU if probe_first else None
        judged.append(replace(v, odds=odds, probe_mru=probe_mru))
    # A stable sort: among nodes of the same odds the strategy's order stands.
    return sorted(judged, key=lambda v: -math.floor(v.odds * 100))


def _with_could_take(v: NodeVerdict, size, by_node_id: dict, policies, occupied, held) -> NodeVerdict:
    values = dict(zip(NODE_FIELDS, by_node_id[v.node_id], strict=True))
    total, used, policy, live = _fit_args(values, policies, occupied, held.get(values["pk"], ()))
    could = capacity.placeable_count(size, total, used, policy, live=live, limit=COULD_TAKE_LIMIT)
    largest, _why, _bound = largest_disk_now(total, used, policy, live=live, vm=size)
    return NodeVerdict(**{**v.__dict__, "could_take": could, "largest_disk": largest})
