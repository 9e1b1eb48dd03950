"""What the capacity model says in English: its resources' names, verdicts, carve notes (a closed node's
words are its closure's: capacity.closures).

The sentences only; the figures in them are computed elsewhere in the package and handed in.
A sentence changed here changes the pages, the CLI, the API and the stored job results alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from dashboard.capacity.sizes import Resources, format_size

RESOURCE_WORDS = {
    "cru": "CPU",
    "mru": "memory",
    "sru": "SSD disk",
    "hru": "HDD disk",
    "pool": "room in one SSD pool",
    # ZOS grows the zos-cache by 5 GiB when it is 60% full: a disk taking that room would be refused later.
    "cache": "room in one SSD pool while keeping the zos-cache's next 5 GiB step",
}


# --- a verdict: does one slice fit --------------------------------------------------------


def shortfall_words(resource: str, needed: int, available: int) -> str:
    """One resource a slice is short of: what it needs, what there is, by how much."""
    if resource == "cru":
        return vcpu_shortfall_words(needed, available)
    return (
        f"{RESOURCE_WORDS[resource]}: needs {format_size(needed)}, "
        f"{format_size(max(available, 0))} available, short by {format_size(needed - available)}"
    )


def fits_words(needed: Resources, available: Resources) -> str:
    return (
        f"fits: needs {format_size(needed.mru)} memory and {format_size(needed.sru)} disk; "
        f"{format_size(available.mru)} and {format_size(available.sru)} available"
    )


def vcpu_shortfall_words(vcpus: int, limit: int) -> str:
    """A VM of more vCPUs than ZOS lets one VM have on this node (capacity.vcpus: `limit` is uint8(threads))."""
    return (
        f"{RESOURCE_WORDS['cru']}: a VM of {vcpus} vCPU{'s' if vcpus != 1 else ''}, and ZOS lets one VM have at most "
        f"{limit} on this node (its logical CPUs); ZOS refuses it whatever the memory and disk"
    )


def misfit_words(shortfalls: Iterable[str]) -> str:
    """A slice that does not fit, from its shortfalls' words."""
    return "does not fit: " + "; ".join(shortfalls)


# --- what a carve notes ---------------------------------------------------------------------

LEGACY_CARVE_NOTE = "legacy carve: ignores the ZOS reserve and the rootfs; not every slice can be deployed"
OVERCOMMITTED_NOTE = (
    "the rented and deployed slices already need more than the node can host; they are kept and no free slice is added"
)


def below_reserve_note(kept: dict[str, int]) -> str:
    """A node, with nothing on it, smaller than what ZOS keeps for itself (`kept`: the reserve of each
    resource the node falls short of): no slice at all."""
    what = " and ".join(f"{format_size(n)} of {RESOURCE_WORDS[r]}" for r, n in kept.items())
    return f"the node is smaller than what ZOS keeps for itself ({what}): no slice fits"


def vcpu_note(vcpus: int, threads: int, limit: int, refusal: str) -> str:
    """No slice carved: each asks more vCPUs than one VM may have on the node (capacity.vcpus)."""
    wrapped = f", which ZOS compares as {limit} (it keeps the count in one byte)" if limit != threads else ""
    fix = (
        f"a policy of at most {limit} vCPU{'s' if limit != 1 else ''} per slice carves this node"
        if limit
        else "no slice of any size deploys on this node"
    )
    return (
        f"each slice asks {vcpus} vCPU{'s' if vcpus != 1 else ''} and the node has {threads} logical "
        f"CPU{'s' if threads != 1 else ''}{wrapped}: ZOS refuses a VM with more vCPUs than that "
        f'("{refusal}"), so no slice is carved; {fix}'
    )


def not_one_slice_note(limited_by: str) -> str:
    return f"the node cannot hold even one slice: short of {RESOURCE_WORDS[limited_by]}"


def hidden_memory_note(hidden_mru_per_vm: int) -> str:
    return f"counts {format_size(hidden_mru_per_vm)} of hidden memory per running VM, learnt from ZOS's refusals"


def refused_disk_note(disk_size: int) -> str:
    return f"no pool had room for a {format_size(disk_size)} disk when ZOS last refused one"


def unknown_pools_note(layouts: int, given_up: int) -> str:
    """The carve sized the disks for pools nobody reported (capacity.layouts)."""
    cost = (
        f"; that gives up {format_size(given_up)} of disk against a carve on the SSD total alone"
        if given_up > 0
        else ""
    )
    return (
        f"the SSD pools are not reported: the disks are sized to deploy under each of {layouts} plausible "
        f"pool layouts of the SSD total{cost}; a pool report gives the larger disks back"
    )
