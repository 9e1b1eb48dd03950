"""What a reported outcome keeps of its node's capacity: the last grid reading, since the marketplace sends none."""

from __future__ import annotations

from dashboard.models import Node


def capacity_last_read(node: Node) -> dict:
    """The node's last grid reading, in the shape slice_deploy stores, marked as not read live."""
    seen = {
        "status": node.status,
        "source": "last reading",
        "seen_at": node.seen_at.isoformat() if node.seen_at else None,
    }
    used = node.used
    if used is not None:
        seen["total"] = node.total.as_dict()
        seen["used"] = used.as_dict()
    return seen
