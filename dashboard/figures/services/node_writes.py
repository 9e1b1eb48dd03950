"""The one door of every write to nodes: `with node_writes(pks) as writes:`.

A writer of a node's facts (its slices, reading, pools, lessons, windows) locks the node before anything
of it (its slices, holds, observations: the order re-register takes) and stores its figures
(figures.services.figures) after its writes, in the same transaction. The block does both, so no writer forgets
either or takes the locks out of order: it opens (or joins) a transaction, locks the nodes in primary-key
order, and on a normal exit refreshes their figures inside that transaction. An exception leaves with no
refresh, the block's writes rolled back with it. tests/test_architecture.py holds every other module off
figures.services.figures' store and lock.

A build's turn (lessons.services.group_steps.group_turn, an advisory lock) is taken before the block, never in it.
A block inside another on the same nodes waits for no lock (the transaction holds them) and refreshes
at its own exit, where the nested writer's change is complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import transaction

from dashboard.figures.services.figures import figures_refresh, nodes_lock


class NodeWrites:
    """The nodes a block locked; which of them it refreshes on exit; after it, how many figures changed."""

    def __init__(self, *, refresh: bool) -> None:
        self.locked: set[int] = set()
        self.refreshed: set[int] | None = None if refresh else set()  # None: every node locked
        self.changed = 0

    def lock(self, node_pks: Iterable[int]) -> None:
        """Lock more nodes, known only inside the block (a node just inserted, a build's group after its
        node), in pk order among themselves; refreshed on exit with the others."""
        new = sorted(set(node_pks) - self.locked)
        if new:
            nodes_lock(new)
            self.locked.update(new)

    def refresh_only(self, node_pks: Iterable[int]) -> None:
        """Refresh only these of the locked nodes on exit (none: the block changed nothing they are figured from)."""
        only = set(node_pks)
        if not only <= self.locked:  # a writer's mistake: refreshing a node it does not hold (not an assert: -O)
            raise ValueError(f"nodes {sorted(only - self.locked)} are refreshed but not locked")
        self.refreshed = only

    def _refresh(self) -> None:
        pks = self.locked if self.refreshed is None else self.refreshed
        self.changed = figures_refresh(pks, locked=True) if pks else 0


@contextmanager
def node_writes(node_pks: Iterable[int] = (), *, refresh: bool = True) -> Iterator[NodeWrites]:
    """Lock these nodes (pk order) in a transaction, run the block, then store their figures in it.

    `refresh=False` for a block that writes nothing the figures are made of (a hold, whose sums
    figures.services.held_figures stores; a check under the lock), so it only takes the locks in their order.
    """
    with transaction.atomic():
        writes = NodeWrites(refresh=refresh)
        writes.lock(node_pks)
        yield writes
        writes._refresh()


def figures_follow(node_pks: Iterable[int]) -> int:
    """Store these nodes' figures now, each node locked first (a block's own nodes are locked already):
    after a change that is not theirs (a policy edited, a group's belief moved) or a move made in an outer
    block that stores figures only for some of its outcomes (deployments.services.outcomes); how many changed."""
    with node_writes(node_pks) as writes:
        pass
    return writes.changed
