"""The API's shapes for placement and probes: where a slice of a size can go now, best nodes first,
and which nodes a probe would teach most (bytes are integers, as in api/schemas.py)."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema

from dashboard.api.inputs import Size
from dashboard.api.node_room import WarningOut


class PlacementIn(Schema):
    cru: int = Field(ge=1, le=4096, description="cores")
    mru: Size = Field(
        ge=250 * 1024**2, le=1024**5, description='memory: bytes or "4GiB" (ZOS refuses less than 250 MiB)'
    )
    sru: Size = Field(ge=0, le=1024**5, description='data disk: bytes or "151GiB" (the root filesystem comes on top)')
    best: int = Field(10, ge=0, le=100, description="how many of the best nodes to list")
    exclude_nodes: str | None = Field(None, max_length=12000, description="node ids never to offer, e.g. 1774,2310")
    exclude_farms: str | None = Field(None, max_length=12000, description="farm ids never to offer, e.g. 4242")
    per_node: int | None = Field(None, description="at most this many slices of the size on one node (1 to 10000)")
    per_farm: int | None = Field(
        None, description="at most this many slices of the size in one farm, over the best nodes (1 to 10000)"
    )
    strategy: str = Field(
        "spread",
        description="spread: most room left first; pack: nodes already running VMs first, the tightest fit first "
        "(so a farm's idle nodes can stay asleep)",
    )
    ipv4: bool = Field(
        False,
        description="the slice carries a public IPv4: only nodes that take one (not ZOS-light), each farm's nodes "
        "together offered at most the farm's free IPs (as last read, less those held)",
    )
    min_odds: float | None = Field(
        None,
        ge=0,
        le=1,
        description="list only best nodes where the slice's odds of deploying at the first try are at least this "
        "(e.g. 0.95); surer nodes come first either way",
    )


class PlacementNodeOut(Schema):
    node_id: int
    farm_id: int
    farm_name: str
    status: str
    seen_at: datetime | None = Field(description="when the reading it was judged on was taken")
    fits: bool
    blocked_by: str = Field(description='"" when it fits, else one of the keys of "blocked"')
    room_mru: int = Field(description="memory left after the slice, bytes")
    room_sru: int = Field(description="SSD left after the slice (node total; a pool may hold less), bytes")
    could_take: int | None = Field(description="slices of this size it could take one after another (up to 100)")
    odds: float | None = Field(
        None, description="the slice's probability of deploying there at the first try now (capacity.odds)"
    )
    probe_first: bool = Field(
        False,
        description="send `probe` there before the slice: the node was never read with as many VMs as it runs, in "
        "a ZOS build whose nodes probes read were seen to differ, and that lowers the odds below 0.999 "
        "(capacity.probe_first). ZOS refuses the probe with the node's usable memory; report it with "
        "POST /api/v1/deployments (probe: true), which counts it as a proposed probe while the node still "
        "wants one, then ask again: a contract created and cancelled instead of a buyer refused",
    )
    probe: dict[str, int] | None = Field(
        None, description="the probe VM when probe_first: cru, mru (more than the node's memory), sru; else null"
    )
    take: int | None = Field(None, description="the slices offered there: could_take within per_node and per_farm")
    largest_disk: int | None = Field(
        None,
        description="the largest data disk (bytes) a VM of the asked cru and mru gets there now, by the precheck's "
        "rules (the same figure as the node's room.disk.largest_disk for its slice size)",
    )
    warnings: list[WarningOut] = Field(
        default_factory=list, description="why a deploy there may still fail though it fits (capacity.warnings)"
    )
    words: str = Field(description="the precheck's verdict on the node's last reading, in words")


class PlacementOut(Schema):
    size: dict[str, int] = Field(description="cru, mru, sru as asked")
    nodes: int = Field(description="registered nodes judged")
    can_host: int = Field(
        description="nodes whose last reading places it now; with the blocked counts it adds up to nodes"
    )
    blocked: dict[str, int] = Field(
        description="nodes that cannot host it, by the first block that holds: node_excluded, farm_excluded (the asked "
        "exclusions), no_ipv4 (ZOS-light), farm_ips_unread (its farm's IPs were never read), farm_ips (no free IP; "
        "the three with ipv4), then every closure by its key (withheld, down, standby, rented, ...), unread (never "
        "read), old (reading older than reading_max_age_seconds), memory, disk (total), pool (no pool holds it), held "
        "(it would fit but for the live holds on it)"
    )
    reading_max_age_seconds: int
    strategy: str = "spread"
    limited: dict[str, int] = Field(
        default_factory=dict,
        description="per_node: best nodes offered fewer slices than they could take; per_farm: nodes left out of "
        "the best because their farm had its share",
    )
    held_nodes: int = Field(0, description="nodes with live holds, judged with the held VMs counted as running")
    slices_offered: int = Field(
        0, description="the slices the best nodes offer together (their take); with ipv4, within their farms' free IPs"
    )
    ipv4: bool = False
    notes: list[str] = Field(
        default_factory=list,
        description="what to know about the answer as a whole, e.g. that no policy sells a public IPv4 (so no farm's "
        "IPs are read and ipv4 blocks every node)",
    )
    best: list[PlacementNodeOut] = Field(
        description="most memory left after it first, then most disk, then the freshest reading"
    )


class ProbeOut(Schema):
    node_id: int
    farm_id: int
    zos_version: str = Field(description='the group it would teach: its ZOS version, "" when unknown')
    running: int = Field(description="VMs it runs (rented and deployed slices): a probe teaches only where VMs run")
    unknown_mru: int = Field(description="the standard deviation of its memory use the model has now, bytes")
    why: str
    probe: dict[str, int] = Field(
        description="the VM to send: cru, mru (more than the node's memory, so ZOS always refuses it), sru"
    )


class ProbesOut(Schema):
    probes: list[ProbeOut]
