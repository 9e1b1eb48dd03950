"""Reads for the policy page: which policy is in force where, and what a change would do to the fleet.

Precedence is node override > farm override > fleet default > built-in profile, the same as
dashboard.policies.selectors.policy_book.policy_for_node. A fixed number of queries whatever the fleet size.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, QuerySet

from dashboard import capacity
from dashboard.models import Job, Node, Policy, Slice
from dashboard.nodes.selectors.farm_ips import Carries, farm_ips_available
from dashboard.policies.selectors.policy_book import catalog_is_stale, node_carve, policies_for_nodes

SCOPE_ORDER = {Policy.Scope.FLEET: 0, Policy.Scope.FARM: 1, Policy.Scope.NODE: 2}


@dataclass(frozen=True)
class PolicyInForce:
    row: Policy | None  # None: no fleet default row, the built-in profile applies
    policy: capacity.Policy
    nodes: int  # how many nodes it is in force on
    # The job rewriting its nodes' figures after an edit, while it is active (policies.services.policy_figures).
    rewrite: Job | None = None


@dataclass(frozen=True)
class PreviewNode:
    node_id: int
    nominal: int
    deployable_now: int
    deployable_after: int
    stale_now: bool
    stale_after: bool
    stale_reason: str
    # Why the candidate carves no slice there in ZOS's own terms, "" when it carves: each slice asks more
    # vCPUs than ZOS lets one VM have on the node (capacity.vcpus; the carve's note, in plain words).
    refused_words: str = ""


@dataclass(frozen=True)
class PolicyPreview:
    candidate: capacity.Policy
    nodes: int
    nominal: int
    deployable_now: int
    deployable_after: int
    stale_now: int
    stale_after: int
    # Nodes whose catalog would be stale after the change but is current now.
    would_go_stale: tuple[PreviewNode, ...]
    # Nodes whose deployable count changes.
    changed: tuple[PreviewNode, ...]
    # Slices deployable with a public IPv4, now and under the candidate: each farm's free IPs bound them.
    ipv4_now: int = 0
    ipv4_after: int = 0
    sells_ipv4_now: bool = False
    sells_ipv4_after: bool = False
    ipv4_farms: tuple[FarmIpv4Preview, ...] = ()
    # Nodes on which ZOS would refuse every slice of the candidate: more vCPUs than their threads.
    cpu_refused: tuple[PreviewNode, ...] = ()


@dataclass(frozen=True)
class FarmIpv4Preview:
    farm_id: int
    free_ips: int  # free now, less those live holds keep
    slices: int  # placeable now on its nodes under the candidate that take a public IPv4

    @property
    def ipv4_slices(self) -> int:
        return min(self.slices, self.free_ips)


def policies_in_force() -> list[PolicyInForce]:
    """The fleet default first, then farm overrides, then node overrides, each with its node count."""
    rows = sorted(
        Policy.objects.select_related("node"),
        key=lambda p: (SCOPE_ORDER[p.scope], p.farm_id or 0, p.node.grid_id if p.node else 0, p.name),
    )
    node_override_pks = [p.node_id for p in rows if p.scope == Policy.Scope.NODE]
    farm_ids = [p.farm_id for p in rows if p.scope == Policy.Scope.FARM]
    farm_counts = dict(
        Node.objects.filter(farm_id__in=farm_ids)
        .exclude(pk__in=node_override_pks)
        .values_list("farm_id")
        .annotate(n=Count("pk"))
    )
    fleet_count = Node.objects.exclude(pk__in=node_override_pks).exclude(farm_id__in=farm_ids).count()

    rewrites = policy_figures_active([p.pk for p in rows])
    result = []
    if not any(p.scope == Policy.Scope.FLEET for p in rows):
        result.append(PolicyInForce(row=None, policy=capacity.profile(capacity.DEFAULT_PROFILE), nodes=fleet_count))
    for p in rows:
        nodes = {
            Policy.Scope.FLEET: fleet_count,
            Policy.Scope.FARM: farm_counts.get(p.farm_id, 0),
            Policy.Scope.NODE: 1,
        }[p.scope]
        result.append(PolicyInForce(row=p, policy=p.to_capacity(), nodes=nodes, rewrite=rewrites.get(p.pk)))
    return result


def policy_node_pks(policy: Policy) -> list[int]:
    """The nodes whose effective policy this row may be, before or after a change to it.

    A farm override covers its farm's nodes and the fleet default every node; nodes with an
    override of their own are included (refreshing them changes nothing), which keeps this one query.
    """
    nodes = Node.objects.all()
    if policy.scope == Policy.Scope.NODE:
        nodes = nodes.filter(pk=policy.node_id)
    elif policy.scope == Policy.Scope.FARM:
        nodes = nodes.filter(farm_id=policy.farm_id)
    return list(nodes.values_list("pk", flat=True))


def policy_figures_active(policy_pks) -> dict[int, Job]:
    """Policy pk -> its active figures rewrite (policies.services.policy_figures); one query."""
    pks = [int(pk) for pk in policy_pks]
    if not pks:
        return {}
    jobs = Job.objects.filter(
        kind=Job.Kind.POLICY_FIGURES, state__in=Job.ACTIVE_STATES, parameters__policy_id__in=pks
    ).order_by("pk")
    return {job.parameters["policy_id"]: job for job in jobs}


def policy_nodes(*, scope: str, farm_id: int | None = None, node: Node | None = None) -> QuerySet[Node]:
    """The nodes a policy of this scope is (or would be) in force on."""
    node_overrides = Policy.objects.filter(scope=Policy.Scope.NODE).values("node_id")
    if scope == Policy.Scope.NODE:
        return Node.objects.filter(pk=node.pk if node else None)
    if scope == Policy.Scope.FARM:
        return Node.objects.filter(farm_id=farm_id).exclude(pk__in=node_overrides)
    farm_overrides = Policy.objects.filter(scope=Policy.Scope.FARM).values("farm_id")
    return Node.objects.exclude(pk__in=node_overrides).exclude(farm_id__in=farm_overrides)


def policy_preview(
    *,
    candidate: capacity.Policy,
    scope: str,
    farm_id: int | None = None,
    node: Node | None = None,
    carries: Carries | None = None,
) -> PolicyPreview:
    """What putting `candidate` (its slices carrying `carries`) in force for this scope would do:
    deployable totals, staleness, and the slices deployable with a public IPv4."""
    nodes = list(policy_nodes(scope=scope, farm_id=farm_id, node=node).order_by("grid_id"))
    current = policies_for_nodes(nodes)
    ipv4 = _ipv4_preview(nodes, current, carries or Carries())
    slices_by_node: dict[int, list[Slice]] = {}
    for s in Slice.objects.filter(node__in=[n.pk for n in nodes]).order_by("node_id", "index"):
        slices_by_node.setdefault(s.node_id, []).append(s)

    previews = []
    for n in nodes:
        slices = slices_by_node.get(n.pk, [])
        occupied = [s.size.resources for s in slices if s.is_occupied]
        free = [s.size for s in slices if s.state == Slice.State.FREE]
        carve_now = node_carve(n, current[n.pk], occupied=occupied)
        carve_after = node_carve(n, candidate, occupied=occupied)
        stale_now, _ = catalog_is_stale(n, current[n.pk], occupied=occupied, free=free, carve=carve_now)
        stale_after, reason = catalog_is_stale(n, candidate, occupied=occupied, free=free, carve=carve_after)
        previews.append(
            PreviewNode(
                node_id=n.grid_id,
                nominal=len(slices),
                deployable_now=carve_now.slices,
                deployable_after=carve_after.slices,
                stale_now=stale_now,
                stale_after=stale_after,
                stale_reason=reason,
                refused_words=_vcpu_words(carve_after),
            )
        )
    return PolicyPreview(
        candidate=candidate,
        nodes=len(previews),
        nominal=sum(p.nominal for p in previews),
        deployable_now=sum(p.deployable_now for p in previews),
        deployable_after=sum(p.deployable_after for p in previews),
        stale_now=sum(1 for p in previews if p.stale_now),
        stale_after=sum(1 for p in previews if p.stale_after),
        would_go_stale=tuple(p for p in previews if p.stale_after and not p.stale_now),
        changed=tuple(p for p in previews if p.deployable_after != p.deployable_now),
        cpu_refused=tuple(p for p in previews if p.refused_words),
        **ipv4,
    )


def _vcpu_words(carve: capacity.Carve) -> str:
    """The carve's own note when ZOS's vCPU bound left it nothing new (capacity.vcpus), else ""."""
    if carve.limited_by != "cru":
        return ""
    return next((note for note in carve.notes if "vCPU" in note), "")


def _ipv4_preview(nodes: list[Node], current: dict[int, capacity.Policy], after: Carries) -> dict:
    """The IPv4 slices of these nodes under their policies now and under `after`, in two queries: a farm's
    nodes (ZOS-light ones take none) offer at most its free public IPv4s together (nodes.selectors.farm_ips)."""
    sold = {
        row.pop("name"): Carries(**row)
        for row in Policy.objects.filter(name__in={p.name for p in current.values()}).values("name", *Policy.CARRIES)
    }
    free = farm_ips_available()
    now_slices: dict[int, int] = {}
    after_slices: dict[int, int] = {}
    for n in nodes:
        if n.light:
            continue
        if sold.get(current[n.pk].name, Carries()).sells_ipv4:
            now_slices[n.farm_id] = now_slices.get(n.farm_id, 0) + (n.placeable_now or 0)
        if after.sells_ipv4:
            after_slices[n.farm_id] = after_slices.get(n.farm_id, 0) + (n.placeable_now or 0)
    farms = tuple(FarmIpv4Preview(f, free.get(f, 0), n) for f, n in sorted(after_slices.items()))
    return {
        "ipv4_now": sum(min(n, free.get(f, 0)) for f, n in now_slices.items()),
        "ipv4_after": sum(farm.ipv4_slices for farm in farms),
        "sells_ipv4_now": bool(now_slices),
        "sells_ipv4_after": after.sells_ipv4,
        "ipv4_farms": farms,
    }


def policy_for_edit(*, policy_id: int) -> Policy:
    return Policy.objects.select_related("node").get(pk=policy_id)
