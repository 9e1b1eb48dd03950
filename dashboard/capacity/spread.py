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
from collections.abc import Iterable
from dataclasses import dataclass

from dashboard.capacity.hidden import AGREE_MRU, PER_VM_PRIOR_SD
from dashboard.capacity.overhead import MemoryPoint, count_decided


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


# At most this many figures of a use of its own weigh an unread node's odds (capacity.odds.Unread): the
# differing nodes' excesses at even quantiles, so the odds cost a few evaluations whatever the group's size.
DIFFERS_FIGURES = 5
# Below this chance a node differs, nothing says its group's nodes do: a reading beside ZOS's daily test VM
# (512 MiB and its overhead, on any node, any day) looks like a use of its own now and then on a build whose
# nodes are alike. One in twenty: SLICE_MIN_ODDS's default leaves a promise that much doubt anyway.
DIFFERS_MIN_SHARE = 0.05
# Nodes seen to differ before a group's unread nodes are doubted: one node's reading is one voice (a forged
# probe report, a one-off), and no single report changes what other nodes show (issue 44); a second node that
# differs is a second source.
DIFFERS_MIN_NODES = 2


# A slice an unread node offers (capacity.Unread) at odds below this is deployed only once a probe has read
# the node with the VMs it runs: a probe costs a contract created and cancelled, a refusal costs a buyer
# (issue 44: probes never cost refusals). Not SLICE_MIN_ODDS: a slice at 0.96 is promised, and one node in
# twenty five refusing a promise is what the probe saves (measured: docs/lessons-in-the-month.md).
PROBE_FIRST_BELOW = 0.999


def probe_first(odds: float, *, unread: bool) -> bool:
    """Whether a deployer probes the node before it deploys a slice of these odds there: only on a node judged
    unread (no reading with as many VMs as it runs, in a group whose nodes were seen to differ), where it is
    the want of that reading that lowers them."""
    return unread and odds < PROBE_FIRST_BELOW


def excess_per_vm(point: MemoryPoint, expected_beyond_mru: float) -> int:
    """How much more a VM the node read at `point` used than its group's line expects there (the line's
    use beyond the VMs' memory at the reading's VM count), where the two tell two stories: more than
    AGREE_MRU apart, as two readings disagree (capacity.corroborate). 0 where they agree, where no VM ran,
    and where ZOS's count decided the reading (it tells only that the use stayed within the count)."""
    if point.vms <= 0 or count_decided(point):
        return 0
    beyond = point.beyond_vms - expected_beyond_mru
    return int(beyond // point.vms) if beyond > AGREE_MRU else 0


def differs(
    excess: Iterable[int], *, figures: int = DIFFERS_FIGURES, min_share: float = DIFFERS_MIN_SHARE
) -> tuple[float, tuple[int, ...]] | None:
    """How an unread node of a group may differ, from the nodes probes read (`excess`: each one's
    excess_per_vm, 0 for a node on its group's line): the chance it does (Laplace's rule, as
    `Spread.share`) and what it would use more a VM (the differing nodes' figures at up to `figures` even
    quantiles, each as likely). None until two nodes probes read were seen to differ (DIFFERS_MIN_NODES), and while the chance is
    below `min_share`: a group whose nodes read sit on its line is judged by its line alone. Only probes' readings count: a probe reads the
    node its list ranks, not the node a buyer was refused on (a refusal finds the nodes that differ, so
    counting them would tell every group differs)."""
    excess = list(excess)
    own = sorted(e for e in excess if e > 0)
    if len(own) < DIFFERS_MIN_NODES:
        return None
    share = Spread(nodes_read=len(excess), nodes_own=len(own)).share
    if share < min_share:
        return None
    if len(own) <= figures:
        return share, tuple(own)
    return share, tuple(own[(2 * i + 1) * len(own) // (2 * figures)] for i in range(figures))


def below_line(point: MemoryPoint, expected_beyond_mru: float) -> bool:
    """Whether the node read at `point` used less than its group's line expects there, by more than two
    readings agree within (AGREE_MRU). A reading ZOS's count decided tells only that the node used at most the
    count (its `beyond_vms` is then the reserve): below where the line expects more than that."""
    return point.vms > 0 and expected_beyond_mru - point.beyond_vms > AGREE_MRU


def read_apart(points: Iterable[MemoryPoint], expected_beyond) -> bool:
    """Whether the nodes probes read (`points`) part from their group's line: DIFFERS_MIN_NODES or more of them
    used less than it expects where they were read (below_line; `expected_beyond(point)`). Nodes of one ZOS
    build share what the line measures; nodes that share no build (the fleet-wide group) need not, and a line
    that the nodes which refused drew holds back every node that uses less (issue 44's world "nodes")."""
    below = {p.node for p in points if below_line(p, expected_beyond(p))}
    return len(below) >= DIFFERS_MIN_NODES
