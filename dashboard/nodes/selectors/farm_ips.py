"""A farm's public IPv4s as the bound on its nodes' IPv4 slices: the one place that rule is written.

Public IPv4 is the farm's pool on the chain, not a node's: every node of the farm competes for the same
free IPs, so IPv4 slices deployable in a farm = min(the slices its nodes can place now, excluding
ZOS-light nodes which take no public IP, the farm's free IPs as last read less those live holds keep).
A farm whose IPs were never read offers no IPv4 slice: an unread pool is not a free one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from dashboard.deployments.selectors.holds import live_holds
from dashboard.models import FarmIps, Node, Policy


@dataclass(frozen=True)
class FarmIpv4:
    """One farm's IPv4 bound."""

    farm_id: int
    farm_name: str
    read_at: datetime | None  # None: the farm's IPs were never read
    total_ips: int
    free_ips: int  # free as last read
    held_ips: int  # of them, kept by live holds
    node_slices: int  # the slices the farm's nodes that take a public IP can place now

    @property
    def available(self) -> int:
        return max(self.free_ips - self.held_ips, 0)

    @property
    def ipv4_slices(self) -> int:
        return min(self.node_slices, self.available)

    @property
    def words(self) -> str:
        farm = f"farm {self.farm_id}" + (f" ({self.farm_name})" if self.farm_name else "")
        if self.read_at is None:
            return f"IPv4 slices unknown: {farm}'s public IPs were never read (none is offered until they are)"
        if not self.total_ips:
            return f"0 IPv4 slices: {farm} has no public IPv4"
        if not self.available:
            held = f", {self.held_ips} of them held" if self.held_ips else ""
            return (
                f"0 IPv4 slices: {farm}'s public IPv4s are all taken ({self.free_ips} free of {self.total_ips}{held})"
            )
        return (
            f"{self.ipv4_slices} IPv4 slices in {farm}: {self.available} free public IPv4s of {self.total_ips}, "
            f"shared by its nodes ({self.node_slices} slices placeable on those that take one)"
        )


def farm_ips_available(now: datetime | None = None) -> dict[int, int]:
    """Farm id -> its public IPv4s free now (as last read, less those live holds keep): one query."""
    held = _held_ips_of_farm(now or timezone.now())
    rows = FarmIps.objects.annotate(held=Coalesce(Subquery(held), 0)).values_list("farm_id", "ips", "held")
    return {farm_id: max(sum(1 for ip in ips if not ip.get("contract_id")) - held, 0) for farm_id, ips, held in rows}


def farms_ipv4(farm_ids: Iterable[int], now: datetime | None = None) -> dict[int, FarmIpv4]:
    """Each farm's IPv4 bound, in three queries whatever the number of farms."""
    farm_ids = sorted(set(farm_ids))
    now = now or timezone.now()
    read = {row.farm_id: row for row in FarmIps.objects.filter(farm_id__in=farm_ids)}
    held = _held_ips(now, farm_ids)
    slices = dict(
        # A node not known to be ZOS-light counts (None: its features not listed; the words say so).
        Node.objects.filter(farm_id__in=farm_ids)
        .exclude(light=True)
        .values("farm_id")
        .annotate(n=Sum("placeable_now"))
        .values_list("farm_id", "n")
    )
    names = dict(Node.objects.filter(farm_id__in=farm_ids).values_list("farm_id", "farm_name"))
    return {
        farm_id: FarmIpv4(
            farm_id=farm_id,
            farm_name=(read[farm_id].farm_name if farm_id in read else "") or names.get(farm_id, ""),
            read_at=read[farm_id].read_at if farm_id in read else None,
            total_ips=read[farm_id].total if farm_id in read else 0,
            free_ips=read[farm_id].free if farm_id in read else 0,
            held_ips=held.get(farm_id, 0),
            node_slices=slices.get(farm_id) or 0,
        )
        for farm_id in farm_ids
    }


def farms_ipv4_read(farm_ids: Iterable[int] | None = None, now: datetime | None = None) -> dict[int, FarmIpv4]:
    """The IPv4 bound of every farm whose IPs were read (of `farm_ids` only, if given), in one query whatever
    the number of farms or nodes: the map's farm tooltips read it (a farm never read has none to say)."""
    held = _held_ips_of_farm(now or timezone.now())
    slices = (
        Node.objects.filter(farm_id=OuterRef("farm_id"))
        .exclude(light=True)
        .order_by()
        .values("farm_id")
        .annotate(n=Sum("placeable_now"))
        .values("n")
    )
    rows = FarmIps.objects.defer("free_readings").annotate(
        held=Coalesce(Subquery(held), 0), node_slices=Coalesce(Subquery(slices), 0)
    )
    if farm_ids is not None:
        rows = rows.filter(farm_id__in=sorted(set(farm_ids)))
    return {
        row.farm_id: FarmIpv4(
            farm_id=row.farm_id,
            farm_name=row.farm_name,
            read_at=row.read_at,
            total_ips=row.total,
            free_ips=row.free,
            held_ips=row.held,
            node_slices=row.node_slices,
        )
        for row in rows
    }


def farm_ipv4(farm_id: int, now: datetime | None = None) -> FarmIpv4:
    return farms_ipv4([farm_id], now)[farm_id]


@dataclass(frozen=True)
class NodeIpv4:
    """What one node offers with a public IPv4, and why."""

    slices: int  # 0 where its farm's IPs were never read too: none is offered; `known` says which
    words: str
    farm: FarmIpv4
    known: bool = True  # False: its farm's IPs were never read, so the figure is not a count of anything


def node_ipv4(node: Node, now: datetime | None = None) -> NodeIpv4:
    farm = farm_ipv4(node.farm_id, now)
    if node.light:
        return NodeIpv4(0, f"0 IPv4 slices: node {node.grid_id} is ZOS-light (no public IPv4 feature)", farm)
    if farm.read_at is None:
        return NodeIpv4(0, farm.words, farm, known=False)
    if not farm.available:
        return NodeIpv4(0, farm.words, farm)
    slices = min(node.placeable_now or 0, farm.ipv4_slices)
    # Unknown is said, not guessed: an older proxy lists no features, so ZOS-light is not ruled out.
    unknown = (
        "; whether it is ZOS-light is not known (the Grid Proxy did not list its features): ZOS may refuse the IP"
        if node.light is None and slices
        else ""
    )
    return NodeIpv4(slices, f"{slices} of its slices with a public IPv4; {farm.words}{unknown}", farm)


def _held_ips_of_farm(now: datetime) -> QuerySet:
    """The public IPv4s live holds keep in the outer query's farm (OuterRef "farm_id"), as a subquery."""
    return (
        live_holds(now)
        .filter(public_ipv4__gt=0, node__farm_id=OuterRef("farm_id"))
        .order_by()
        .values("node__farm_id")
        .annotate(n=Sum("public_ipv4"))
        .values("n")
    )


def _held_ips(now: datetime, farm_ids: list[int] | None = None) -> dict[int, int]:
    holds = live_holds(now).filter(public_ipv4__gt=0)
    if farm_ids is not None:
        holds = holds.filter(node__farm_id__in=farm_ids)
    return dict(holds.values("node__farm_id").annotate(n=Sum("public_ipv4")).values_list("node__farm_id", "n"))


@dataclass(frozen=True)
class Carries:
    """What a policy's slices carry besides their size (models.Policy): none for a built-in profile."""

    public_ipv4: int = 0
    ipv4_addon: bool = False
    gpu_slices: bool = False

    @property
    def sells_ipv4(self) -> bool:
        return self.public_ipv4 > 0 or self.ipv4_addon


def policy_carries(policy_name: str) -> Carries:
    row = Policy.objects.filter(name=policy_name).values("public_ipv4", "ipv4_addon", "gpu_slices").first()
    return Carries(**row) if row else Carries()


def farms_selling_ipv4() -> list[int]:
    """The farms whose IPs are worth reading: a node of theirs has a policy that sells IPv4 (a slice that
    carries one, or the add-on), or their IPs were read before. The shipped policy sells none."""
    names = [
        f"{name} v{version}"
        for name, version in Policy.objects.filter(Q(public_ipv4__gt=0) | Q(ipv4_addon=True)).values_list(
            "name", "version"
        )
    ]
    selling = set(Node.objects.filter(effective_policy__in=names).values_list("farm_id", flat=True)) if names else set()
    return sorted(selling | set(FarmIps.objects.values_list("farm_id", flat=True)))
