"""How far a group's nodes may differ from its line: the chance an unread node runs its VMs with a use of its own.

A build's line (capacity.overhead) is what its nodes share. A node may run its VMs with a use of its own on
top (another driver, a kernel module, a leak: issue 44's worlds "wide" and "nodes"), and nothing but a
reading of that node (a refusal or a probe) tells it: a node never read may be the next. The nodes read so far tell
how often: `Spread.share`, Laplace's rule over the group's nodes read (one in two before any is read, each
node found on the line moving it down). A probe of an unread node is then worth that chance times what
such a use would be where it runs (`own_unknown_mru`), beside what the line itself does not know
(capacity.overhead.probe_need). Pure: plain values in and out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dashboard.capacity.hidden import PER_VM_PRIOR_SD


@dataclass(frozen=True)
class Spread:
    """A group's nodes read (refused or probed) and, of those, the nodes whose reading stayed their own."""

    nodes_read: int = 0
    nodes_own: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.nodes_own <= self.nodes_read:
            raise ValueError("a group's nodes of their own are among its nodes read")

    @property
    def share(self) -> float:
        """The chance an unread node of the group has a use of its own (Laplace's rule of succession)."""
        return (self.nodes_own + 1) / (self.nodes_read + 2)

    def own_unknown_mru(self, running: int, *, per_vm_sd: float = PER_VM_PRIOR_SD) -> float:
        """The standard deviation of an unread node's own use at `running` VMs: a use of `per_vm_sd` a VM
        (the per-VM prior's doubt) with the chance `share`, none otherwise."""
        p = self.share
        return math.sqrt(p * (1 - p)) * running * per_vm_sd if running > 0 else 0.0


NOTHING_READ = Spread()


def probe_rank(unknown_mru: float, *, free_slices: int) -> float:
    """Which probe first: what the model does not know of a node's memory (capacity.overhead.probe_need) per
    slice it still offers. A hidden use refuses a node's last slices first, so a node near full is at risk
    soonest; a full node offers nothing to refuse until a slice is freed (0: last)."""
    return unknown_mru / free_slices if free_slices > 0 else 0.0
