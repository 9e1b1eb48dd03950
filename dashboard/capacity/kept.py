"""What ZOS keeps for itself on a node, and the rest, each part with where it came from, summing to the
node's total: the one breakdown the node page's bars, its table and the API read.

Memory: ZOS's reserve, max(10% of total, 2 GiB) as the policy counts it (zos cmds/modules/provisiond
getNodeReserved); the hidden use the refusals taught (ZOS's own use beyond its reserve and each running
VM's overhead: capacity.lessons.Observed.hidden_mru); the VMs rented or deployed; the free slices (each
with the hidden use it would bring); what is left. SSD: the zos-cache, its quota as the node's pools told
it and the next 5 GiB step it grows by once 60% full (zosbase pkg/storage checkAndResizeCache), or the
policy's fixed reserve_sru (the Grid Proxy's 20 GiB) when no pool report tells it; the VMs' disks (data
and root filesystem); the free slices' disks; what is left. A catalog promising more than the node has
ends with an `over` part beyond the total instead of a left-over one.

Pure: plain capacity types in, `Kept` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboard.capacity.lessons import NOTHING_OBSERVED, Observed
from dashboard.capacity.policy import CACHE_STEP, PROXY_CACHE_SRU, Policy, cache_now
from dashboard.capacity.sizes import Resources, format_size

# The parts ZOS keeps for itself (the rest is the VMs', the catalog's, or left).
ZOS_KEEPS = ("reserve", "hidden", "cache", "cache_step")


@dataclass(frozen=True)
class KeptPart:
    key: str  # reserve, hidden, cache, cache_step, vms, free, left, over
    label: str
    size: int  # bytes, never negative
    source: str  # where the figure came from, in words
    cells: tuple[int, ...] = ()  # vms and free: one charge per slice, in slice order

    @property
    def zos(self) -> bool:
        return self.key in ZOS_KEEPS


@dataclass(frozen=True)
class Kept:
    """One resource of a node: its parts in order; all but `over` add up to `total`."""

    resource: str  # mru or sru
    total: int
    parts: tuple[KeptPart, ...]

    def part(self, key: str) -> int:
        return sum(p.size for p in self.parts if p.key == key)

    @property
    def over(self) -> int:
        return self.part("over")

    @property
    def zos_keeps(self) -> int:
        return sum(p.size for p in self.parts if p.zos)

    @property
    def promised(self) -> int:
        """What the reserve, the VMs and the catalog's free slices take together (over the total by `over`)."""
        return sum(p.size for p in self.parts if p.key != "left")


def _rest(resource_total: int, taken: Sequence[KeptPart]) -> KeptPart:
    used = sum(p.size for p in taken)
    if used > resource_total:
        return KeptPart(
            "over", "Promised beyond the node", used - resource_total, "the catalog offers more than is left"
        )
    return KeptPart(
        "left", "Left over, too small for a slice", resource_total - used, "the node's total less the above"
    )


def memory_kept(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources],
    free: Sequence[Resources],
    observed: Observed = NOTHING_OBSERVED,
    learnt_from: str = "",
) -> Kept:
    """The node's memory, part by part; `learnt_from` says whose refusals taught the hidden use."""
    reserve = policy.reserve(total).mru
    hidden = observed.hidden_mru(len(occupied), total.mru)
    per_vm = observed.hidden_mru_per_vm
    vms = tuple(policy.vm_charge(o.cru, o.mru, o.sru).mru for o in occupied)
    offered = tuple(policy.vm_charge(f.cru, f.mru, f.sru).mru + per_vm for f in free)
    floor = format_size(policy.reserve_mru_floor)
    hidden_words = (
        (
            f"ZOS's own use beyond its reserve and {format_size(per_vm)} per running VM, from {learnt_from}"
            if observed.zos_own_mru is not None
            else f"{format_size(per_vm)} per running VM × {len(occupied)}, from {learnt_from}"
        )
        if (hidden or per_vm) and learnt_from
        else "none: no memory refusal has shown hidden use"
    )
    if observed.test_vm_mru:  # capacity.test_vm: a build that boots it every 15 minutes
        hidden_words = f"ZOS's test VM kept ({format_size(observed.test_vm_mru)}, every 15 minutes on its build); " + (
            hidden_words
        )
    parts = [
        KeptPart(
            "reserve",
            "ZOS's reserve",
            reserve,
            f"max({policy.reserve_mru_percent}% of {format_size(total.mru)}, {floor}) by policy {policy.name} "
            f"v{policy.version}; ZOS keeps max(10%, 2 GiB) (zos provisiond getNodeReserved)",
        ),
        KeptPart(
            "hidden",
            "Hidden use learnt",
            hidden,
            hidden_words,
        ),
        KeptPart("vms", "Deployed or rented", sum(vms), "the catalog's rented and deployed slices", vms),
        KeptPart(
            "free",
            "Free slices",
            sum(offered),
            "the catalog's free slices" + (f", each with {format_size(per_vm)} hidden use" if per_vm else ""),
            offered,
        ),
    ]
    return Kept("mru", total.mru, (*parts, _rest(total.mru, parts)))


def disk_kept(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources],
    free: Sequence[Resources],
    cache: int | None = None,
    cache_told: str = "",
) -> Kept:
    """The node's SSD, part by part; `cache`: the zos-cache's quota a pool report told (`cache_told`: who, when)."""
    vms = tuple(policy.vm_charge(o.cru, o.mru, o.sru).sru for o in occupied)
    offered = tuple(policy.vm_charge(f.cru, f.mru, f.sru).sru for f in free)
    if cache is not None and policy.reserve_sru:
        kept = [
            KeptPart("cache", "zos-cache quota", cache_now(cache), f"the node's pools as {cache_told} told them"),
            KeptPart(
                "cache_step",
                "its next step",
                CACHE_STEP,
                "+5 GiB once 60% full, checked every 5 min (zosbase checkAndResizeCache): kept free on its pool",
            ),
        ]
    else:
        kept = [
            KeptPart(
                "cache",
                "zos-cache (assumed)",
                policy.reserve_sru,
                f"policy {policy.name}'s reserve_sru (the Grid Proxy counts a fixed {format_size(PROXY_CACHE_SRU)}): "
                "no pool report told its quota",
            )
        ]
    parts = [
        *kept,
        KeptPart("vms", "Deployed or rented", sum(vms), "their data disks and root filesystems", vms),
        KeptPart(
            "free", "Free slices", sum(offered), "the catalog's free slices, each with its root filesystem", offered
        ),
    ]
    return Kept("sru", total.sru, (*parts, _rest(total.sru, parts)))
