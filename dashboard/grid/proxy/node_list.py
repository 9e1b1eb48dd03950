"""GET /nodes: one page of the node list, asked with its filters and read entry by entry.

An entry that cannot be trusted (malformed, twice in the page, of a farm or an id not asked for) is
skipped with its reason, not fatal: one bad node must not hide a page of good ones. The client
checks the arguments first; this module asks the same way farms.py and rent.py do, through the
client's one request path, so the page is under the same budget, deadline and metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dashboard.grid.proxy.answers import count_header, entry_label
from dashboard.grid.proxy.parse import describe, parse_node
from dashboard.grid.types import MalformedPayload, NodeCapacity, NodePage


def node_page_read(
    get_json: Callable[..., tuple[Any, str]],
    *,
    farms: Sequence[int],
    wanted: Sequence[int],
    status: str | None,
    page: int,
    size: int,
) -> NodePage:
    """One request for one page of the nodes of these farms (and ids, and status), every one when none."""
    params: dict[str, Any] = {}
    if farms:
        params["farm_ids"] = ",".join(str(f) for f in farms)
    if wanted:
        params["node_ids"] = ",".join(str(n) for n in wanted)
    if status is not None:
        params["status"] = status
    # No sort_by: the proxy lists nodes by node id already, and the query keeps the shape it always had.
    # Offset paging can still miss a node added between two pages; a second run reads it.
    # ret_count: the `count` header says how many nodes match in all, so a paged read knows its end
    # (grid.paging stops at it, whatever the pages bring).
    params.update({"page": page, "size": size, "ret_count": "true"})
    answer: dict[str, Any] = {}
    payload, url = get_json("/nodes", params=params, node_id=None, answer=answer)
    if not isinstance(payload, list):
        raise MalformedPayload(f"the node list from {url} is {describe(payload)}, must be a JSON array")
    nodes, skipped = _entries_read(payload, farms=farms, wanted=wanted)
    return NodePage(
        nodes=tuple(nodes), page=page, size=size, skipped=tuple(skipped), count=count_header(answer.get("headers"))
    )


def _entries_read(
    payload: list, *, farms: Sequence[int], wanted: Sequence[int]
) -> tuple[list[NodeCapacity], list[tuple[str, str]]]:
    """The page's nodes to keep, in order, and (entry, why) for each one skipped."""
    farm_set, wanted_set = set(farms), set(wanted)
    nodes: list[NodeCapacity] = []
    skipped: list[tuple[str, str]] = []
    seen: set[int] = set()
    for position, item in enumerate(payload, start=1):
        label = entry_label(item, position)
        try:
            node = parse_node(item, listed=True)
        except MalformedPayload as exc:
            skipped.append((label, str(exc)))
            continue
        if node.node_id in seen:
            skipped.append((label, f"node {node.node_id} appears twice in the page; the first entry is kept"))
            continue
        if farm_set and node.farm_id not in farm_set:
            asked = ", ".join(str(f) for f in farms)
            skipped.append(
                (label, f"node {node.node_id} belongs to farm {node.farm_id}, not the requested farm {asked}")
            )
            continue
        if wanted_set and node.node_id not in wanted_set:
            skipped.append((label, f"node {node.node_id} was not asked for"))
            continue
        seen.add(node.node_id)
        nodes.append(node)
    return nodes, skipped
