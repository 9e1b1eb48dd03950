"""What ZOS would say of a node's free slices now, on a copy of its machine (the month's judges).

Each takes one of traffic.run's SimNode (its machine, free slots and slice size).
"""

from __future__ import annotations


def phantom_count(node, offer: int | None = None) -> int:
    """Free slices ZOS would refuse if they were deployed one after another now (ZOS's own word);
    of the first `offer` of them where the catalog offers only those (the sure ones)."""
    free = sorted(node.free_slots(), key=lambda s: s.index)
    if offer is not None:
        free = free[:offer]
    if not free:
        return 0
    trial = node.machine.copy()
    refused = 0
    for n, slot in enumerate(free):
        vm, _refusal = trial.place(slot.size, name=f"p{n}", deployment_id=10**9 + n)
        refused += vm is None
    return refused


def room_left(node, limit: int = 256) -> int:
    """Memory of the node's slices ZOS would still take now, one after another (no test VM: at best)."""
    size = node.slice_size
    if size is None or not size.mru:
        return 0
    trial = node.machine.copy()
    trial.test_vm = False
    taken = 0
    while taken < limit and trial.place(size, name=f"r{taken}", deployment_id=2 * 10**9 + taken)[0] is not None:
        taken += 1
    return taken * size.mru
