"""The catalog's own rules, pure: when a stored catalog is stale, and which free slices are still current.

Imports nothing of ours but `capacity`; the stored figures (figures.services.figures), the policy page,
the node page, re-register's plan and the traffic simulation all ask these, so a catalog is
stale, or a free slice kept, for one reason everywhere.

A catalog carved while the pools were unknown is sized for every plausible layout (capacity.layouts);
once the pools are reported it is stale, so a re-register gives the larger disks back.

The tolerance: a deploy changes the rounding of what is left on a node, so a re-carve may offer
a slightly larger disk than the node was carved with. A free slice still of the carved size, no
larger than what the policy carves now, under the same policy, is current; otherwise every deploy
would make its node stale and every re-register would churn the catalog.

A version is its content: a new version of the node's policy stales a catalog only by what it carves
(count, sizes, pools), so a revert to the values a catalog was carved with leaves it current.
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboard.capacity.carve import Carve, SliceSize
from dashboard.capacity.policy import Policy
from dashboard.capacity.sizes import format_size


def slice_is_current(
    size: tuple[int, int, int], *, target: SliceSize, same_policy: bool, carved_slice_sru: int
) -> bool:
    """A free slice of (cru, mru, data sru) is what the policy carves, or (same policy) of the size carved then."""
    cru, mru, sru = size
    if (cru, mru) != (target.cru, target.mru):
        return False
    return sru == target.sru or (same_policy and sru == carved_slice_sru and sru <= target.sru)


def stale_reason(
    *,
    carved_policy_name: str,
    carved_policy_version: int,
    carved_slice_sru: int,
    policy: Policy,
    free: Sequence[tuple[int, int, int]],
    carve: Carve,
    carved_pools_known: bool = True,
) -> str:
    """Why a catalog is stale, in words ("" when it is not); pure, for callers holding plain rows.

    `free` holds (cru, mru, data sru) of each free slice; `carve` is what the policy carves
    on the node with its rented and deployed slices kept. `catalog_stale` is the same test
    without the words.
    """
    reasons = []
    same_policy = carved_policy_name == policy.name and carved_policy_version == policy.version
    if carved_policy_name != policy.name:
        reasons.append(
            f"carved with policy {carved_policy_name} v{carved_policy_version}; "
            f"its policy is {policy.name} v{policy.version}"
        )
    # A version is its content: a new version of the same policy that carves this catalog again (a revert,
    # a change that does not touch this node) stales nothing; the version is named only beside what differs.
    version = (
        f"carved with {policy.name} v{carved_policy_version}; the policy is now v{policy.version}"
        if carved_policy_name == policy.name and carved_policy_version != policy.version
        else ""
    )
    before = len(reasons)

    if len(free) != carve.new_slices:
        reasons.append(f"{len(free)} free slice(s) where the policy carves {carve.new_slices}")
    if pools_now_known(free, carve=carve, carved_pools_known=carved_pools_known):
        reasons.append(
            "carved for unknown pools; the pools are reported now: the policy carves "
            f"{format_size(carve.slice.sru)} disks where the catalog has "
            f"{format_size(min(size[2] for size in free))}"
        )
    wrong = free_not_current(free, carve=carve, carved_slice_sru=carved_slice_sru, same_policy=same_policy)
    if wrong:
        shown = ", ".join(size_words(SliceSize(*size)) for size in wrong[:3])
        reasons.append(f"free slices of {shown} where the policy carves {size_words(carve.slice)}")
    if version and len(reasons) > before:
        reasons.insert(before, version)
    return "; ".join(reasons)


def catalog_stale(
    *,
    carved_policy_name: str,
    carved_policy_version: int,
    carved_slice_sru: int,
    policy: Policy,
    free: Sequence[tuple[int, int, int]],
    carve: Carve,
    carved_pools_known: bool = True,
) -> bool:
    """stale_reason(...) != "", without writing the words: a fleet page needs the words of 50 nodes only."""
    if carved_policy_name != policy.name:
        return True
    if len(free) != carve.new_slices:
        return True
    if pools_now_known(free, carve=carve, carved_pools_known=carved_pools_known):
        return True
    # Another version of the same policy is stale only by what it carves (stale_reason says why).
    same_policy = carved_policy_version == policy.version
    return bool(free_not_current(free, carve=carve, carved_slice_sru=carved_slice_sru, same_policy=same_policy))


def pools_now_known(free: Sequence[tuple[int, int, int]], *, carve: Carve, carved_pools_known: bool) -> bool:
    """Carved for unknown pools, and the pools known now give free slices larger disks: the catalog
    gives up disk it need not (the tolerance of slice_is_current does not hide this)."""
    return (
        not carved_pools_known
        and carve.pools_known
        and bool(free)
        and carve.new_slices > 0
        and min(size[2] for size in free) < carve.slice.sru
    )


def free_not_current(
    free: Sequence[tuple[int, int, int]], *, carve: Carve, carved_slice_sru: int, same_policy: bool
) -> list[tuple[int, int, int]]:
    """The distinct free sizes that are not what the policy carves, smallest first (see slice_is_current)."""
    if not (carve.new_slices and free):
        return []
    return sorted(
        size
        for size in set(free)
        if not slice_is_current(size, target=carve.slice, same_policy=same_policy, carved_slice_sru=carved_slice_sru)
    )


def size_words(size: SliceSize) -> str:
    return f"{size.cru} vCPU / {format_size(size.mru)} / {format_size(size.sru)}"
