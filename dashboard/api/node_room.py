"""The node answer's `room` (GET /api/v1/nodes/{id}): what ZOS keeps for itself and the rest, summing to
the node's total, each part with where it came from; its SSD pools now and the largest disk it takes now.
The same nodes.selectors.node_room the node page reads, so the API and the page say each figure one way."""

from __future__ import annotations

from ninja import Field, Schema

from dashboard.capacity.kept import Kept
from dashboard.nodes.selectors.node_room import NodeRoom


class WarningOut(Schema):
    key: str = Field(
        description="capacity.warnings: cache-small (the zos-cache's quota is below a full VM's image), "
        "grace-contracts (contracts in their grace period still hold capacity), or any reason added there"
    )
    detail: str
    label: str
    words: str = Field(description="the warning in a sentence about the node, for people")


class KeptPartOut(Schema):
    key: str = Field(
        description="reserve (ZOS's memory reserve), hidden (hidden use learnt from refusals), cache (the zos-cache: "
        "its quota reported, or the policy's reserve_sru assumed), cache_step (its next 5 GiB step, kept free), vms "
        "(rented and deployed slices), free (free slices), left (left over), over (promised beyond the total)"
    )
    label: str
    bytes: int
    source: str = Field(description="where the figure came from, in words")
    zos: bool = Field(description="a part ZOS keeps for itself (reserve, hidden, cache, cache_step)")


class KeptOut(Schema):
    total: int = Field(description="the node's total, bytes: the parts but `over` add up to it")
    zos_keeps: int = Field(description="what ZOS keeps for itself: the parts with zos true")
    over: int = Field(description="what the catalog promises beyond the total (its last slices are phantom)")
    parts: list[KeptPartOut]


class PoolNowOut(Schema):
    index: int = Field(description="the pool's place in the node's report, from 0")
    size: int
    used: int
    free: int
    holds_cache: bool = Field(description="the zos-cache's pool (the largest, made at first boot)")
    reported: bool = Field(
        description="used is ZOS's own report; false: the VMs' disks placed as ZOS places them, fullest device order"
    )


class DiskRoomOut(Schema):
    pools_known: bool
    pools: list[PoolNowOut] = Field(description="each SSD pool now; empty when the pools are unknown")
    layouts_assumed: list[list[int]] = Field(
        description="with the pools unknown: the plausible layouts of the SSD total the answer holds under"
    )
    vm: dict[str, int] = Field(description="the VM asked about: the policy's slice cru and mru")
    largest_disk: int | None = Field(
        description="the largest data disk (bytes, to the policy's step) such a VM fits with now, by the precheck's "
        "rules on the last reading; null: none fits (why)"
    )
    why: str = Field(description='why none fits ("" when one does)')
    limited_by: str = Field(description="what bounds it: pool (one pool), total, cache, memory, closed, or empty")


class RoomOut(Schema):
    memory: KeptOut
    ssd: KeptOut
    disk: DiskRoomOut


def _kept_out(kept: Kept) -> dict:
    return {
        "total": kept.total,
        "zos_keeps": kept.zos_keeps,
        "over": kept.over,
        "parts": [
            {"key": p.key, "label": p.label, "bytes": p.size, "source": p.source, "zos": p.zos} for p in kept.parts
        ],
    }


def room_out(room: NodeRoom) -> dict:
    disk = room.pools
    return {
        "memory": _kept_out(room.memory),
        "ssd": _kept_out(room.disk),
        "disk": {
            "pools_known": disk.pools_known,
            "pools": [
                {
                    "index": p.index,
                    "size": p.size,
                    "used": p.used,
                    "free": p.free,
                    "holds_cache": p.holds_cache,
                    "reported": p.reported,
                }
                for p in disk.pools
            ],
            "layouts_assumed": [list(layout) for layout in disk.layouts],
            "vm": {"cru": disk.vm.cru, "mru": disk.vm.mru},
            "largest_disk": disk.largest_disk,
            "why": disk.why,
            "limited_by": disk.limited_by,
        },
    }


class WakeOut(Schema):
    farm_id: int
    wakes_measured: int = Field(description="wakes the fleet watch measured in the farm over the last 30 days")
    median_seconds: float | None = Field(description="the median wake, seconds (to the watch's interval)")
    longest_seconds: float | None
    elsewhere: int = Field(description="nodes up and open that could host a slice of this node's size now")
    words: str = Field(description="wait or go elsewhere, in a sentence")


def wake_out(advice) -> dict:
    wake = advice.wake
    return {
        "farm_id": wake.farm_id,
        "wakes_measured": wake.wakes,
        "median_seconds": wake.median_seconds,
        "longest_seconds": wake.longest_seconds,
        "elsewhere": advice.elsewhere,
        "words": advice.words,
    }
