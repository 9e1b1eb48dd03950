"""What the nodes of one shape share, judged once per shape (figures.node_figures memoises them).

Pure: nothing here reads or writes the database. A fleet of thousands of nodes has a few shapes,
so the figures carve, precheck and key the pools once per shape, not once per node.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache

from dashboard import capacity
from dashboard.capacity.catalog import catalog_stale, stale_reason


class ShapeVerdict:
    """What nodes of one shape share: the carve, the stale verdict and its words."""

    __slots__ = ("deployable", "stale", "reason", "policy")

    def __init__(self, *, policy: capacity.Policy, carve: capacity.Carve, reason_args: dict, sure_new: int):
        self.policy = f"{policy.name} v{policy.version}"
        # The occupied slices and the new ones the odds let a headline promise.
        self.deployable = carve.slices - carve.new_slices + min(sure_new, carve.new_slices)
        self.stale = catalog_stale(policy=policy, carve=carve, **reason_args)
        self.reason = stale_reason(policy=policy, carve=carve, **reason_args) if self.stale else ""


def pools_shape_key(
    pools_text: str | None,
    effective: str,
    observed: capacity.Observed,
    occupied: tuple,
    total_sru: int,
    cache=None,
    *,
    light: bool = False,
) -> str:
    """ "" when the pools cannot refuse what memory and SSD allow; else a short key that nodes whose
    pools judge any VM alike share: the pools, the policy, the refused-disk bound in force and the
    occupied slices' sizes in order (where ZOS placed their disks), and the zos-cache's quota when known."""
    pools = json.loads(pools_text) if pools_text else None
    if not capacity.pools_decide(capacity.LiveNode(pools=tuple(pools) if pools else None, observed=observed)):
        return ""
    # Unknown pools are the plausible layouts of the SSD total: nodes of one total judge alike.
    # A ZOS-light node's unknown pools are the light set of its total (capacity.layouts): its own group.
    unknown = ["unknown-light" if light else "unknown", total_sru]
    made_of = [pools if pools else unknown, effective, observed.pool_room_below, occupied]
    if cache is not None:  # kept out otherwise, so the keys of nodes without it stay as they were
        made_of.append(cache)
    return hashlib.sha1(json.dumps(made_of).encode()).hexdigest()[:16]


@lru_cache(maxsize=4096)  # pure, and the costly half of the figures: see figures_compute's `pools`
def placeable_on_reading(
    *,
    policy: capacity.Policy,
    closure: capacity.Closure | None,
    free: tuple,
    occupied: tuple,
    total: capacity.Resources,
    used: capacity.Resources,
    pools: tuple[int, ...] | None,
    observed: capacity.Observed,
    pools_used: tuple[int, ...] | None = None,
    cache: int | None = None,
    light: bool = False,
) -> tuple[int, int, dict]:
    """(placeable now, phantom, phantom by reason) of the free sizes, in order, on this reading."""
    sizes = [capacity.SliceSize(*size) for size in free]
    if not sizes:
        return 0, 0, {}
    occupied_sizes = [capacity.Resources(cru=c, mru=m, sru=s) for c, m, s in occupied]
    live = capacity.live_node(
        policy=policy,
        pools=pools,
        occupied=occupied_sizes,
        observed=observed,
        pools_used=pools_used,
        cache=cache,
        light=light,
    )
    check = capacity.precheck(list(enumerate(sizes)), total, used, policy, live=live, closure=closure)
    return check.placeable_now, len(check.phantom_slices), check.phantom_by_reason
