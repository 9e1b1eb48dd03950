"""The plausible SSD pool layouts of a node whose pools nobody reported.

The Grid Proxy reports a node's SSD total (`sru`), never its pools; ZOS places each disk in one
pool (docs/domain.md "Who knows the pools"). A catalog carved on the total alone is, on a node of
several SSDs, often one ZOS cannot deploy in full. So without a report the carve and the precheck
ask for a catalog that deploys under *every* plausible layout of the total, in every device order:

- the total as 1 to `COMMON_DRIVES` (4) equal drives, always: the drive count is what the total
  hides, and a total that also fits a standard size says nothing against 3 drives of another;
- the total as k identical drives of one standard size S (k = 5 to 8, S from `STANDARD_SSD_GB`,
  decimal gigabytes as drives are sold), when k * S lies within `MODEL_TOLERANCE` of the total:
  drive models of one nominal size differ a little, and the total is what ZOS measured;
- when no standard size fits, every equal split of the total into k = 1 to 8 pools;
- each pool `POOL_OVERHEAD` (2%) smaller than its share of the total: the room a filesystem takes,
  and the margin that keeps drives within 2% of each other (one a little smaller, another a little
  larger, as drives of one nominal size are) inside the set.

Nodes of unequal drives (a 256 GB and a 1 TB) are outside the set; their first disk refusal
teaches a bound (`lessons`), and `narrowed` keeps the layouts that bound leaves possible.

A ZOS-light node's pools are partitions (zosbase 063d895 pkg/storage_light: storage.go `initialize`,
filesystem/device.go `GetUnallocatedSpaces`, `isValidAsDevice`, `IsPXEPartition`): a disk with no
partition table is one pool, as on full ZOS; a partitioned disk gives one pool per partition that holds
btrfs or nothing (its `ZOSPXE` boot partition is skipped, another system's filesystem fails to mount and
is left out) and one more per free region of at least 5 GiB, which ZOS-light partitions (`parted mkpart`).
So its pools are unequal and several to one disk, and the total it reports is theirs alone. The light
set (`light=True`) is the full one plus, for each drive count, one drive cut into the partitions a
partitioned disk usually holds (`LIGHT_CUTS`: two, the smaller a half, a third or a quarter of it, or
three equal ones; every part at least 5 GiB); a disk cut finer is outside the set, and its first refusal
teaches as above.
Pure integers in and out; remembered, since a fleet has few distinct totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from dashboard.capacity.placement import largest_pool_room

# Common SSD capacities in decimal GB (SATA, NVMe and U.2 drives of the last decade).
STANDARD_SSD_GB = (
    120,
    128,
    240,
    250,
    256,
    400,
    480,
    500,
    512,
    800,
    960,
    1000,
    1024,
    1600,
    1920,
    2000,
    2048,
    3200,
    3840,
    4000,
    4096,
    6400,
    7680,
    8000,
    15360,
    16000,
)
GB = 1000**3
MAX_DRIVES = 8
# Guessed on every total: one to four SSDs is what most nodes' chassis hold, and the total alone
# cannot tell three 343 GB drives from one of 1,024 GB (SIMULATION.md: without these, two
# thirds of the simulated multi-SSD nodes fell outside the set, phantom until their first refusal).
COMMON_DRIVES = 4
MODEL_TOLERANCE_PERCENT = 2  # k * S within 2% of the total counts as k drives of S
POOL_OVERHEAD_PERMILLE = 20  # each pool 2% below its share of the total
# zosbase pkg/storage_light/filesystem/device.go isValidAsDevice: free space below 5 GiB is not partitioned.
LIGHT_MIN_PARTITION = 5 * 1024**3
# How one disk of a ZOS-light node may be cut, as shares of it (see the module's words).
LIGHT_CUTS = ((1, 1), (1, 2), (1, 3), (1, 1, 1))


def _pool(share: int) -> int:
    return share - share * POOL_OVERHEAD_PERMILLE // 1000


@lru_cache(maxsize=4096)
def plausible_layouts(total_sru: int, *, light: bool = False) -> tuple[tuple[int, ...], ...]:
    """The pool layouts (sizes in bytes) the total may hide: identical pools, and on a ZOS-light node
    (`light`) also one drive of each count cut into partitions (`light_cut`)."""
    full = _full_layouts(total_sru)
    if not light:
        return full
    cut = (light_cut(total_sru, drives=len(layout), parts=parts) for layout in full for parts in LIGHT_CUTS)
    # Every device order is tried, so a layout is its sizes: one cut equal to a full layout is that one.
    seen = {tuple(sorted(layout)) for layout in full}
    more = []
    for layout in cut:
        if layout and tuple(sorted(layout)) not in seen:
            seen.add(tuple(sorted(layout)))
            more.append(layout)
    return full + tuple(more)


def light_cut(total_sru: int, *, drives: int, parts: tuple[int, ...]) -> tuple[int, ...]:
    """`drives` equal drives of the total, one of them partitioned in the shares `parts` (each partition,
    as each pool, 2% under its share); () when a partition would be under ZOS-light's 5 GiB."""
    share = total_sru // drives
    cut = tuple(_pool(share * part // sum(parts)) for part in parts)
    if min(cut) < LIGHT_MIN_PARTITION:
        return ()
    return (_pool(share),) * (drives - 1) + cut


def _full_layouts(total_sru: int) -> tuple[tuple[int, ...], ...]:
    if total_sru <= 0:
        return ()
    standard = []
    for drives in range(1, MAX_DRIVES + 1):
        for size_gb in STANDARD_SSD_GB:
            nominal = drives * size_gb * GB
            if abs(nominal - total_sru) * 100 <= MODEL_TOLERANCE_PERCENT * total_sru:
                standard.append(drives)
                break  # one size per drive count: the pools are the total's share either way
    counts = sorted(set(standard) | set(range(1, COMMON_DRIVES + 1))) if standard else range(1, MAX_DRIVES + 1)
    return tuple((_pool(total_sru // drives),) * drives for drives in counts)


def in_plausible_set(pools: Sequence[int], total_sru: int, *, light: bool = False) -> bool:
    """The real pools are covered by a plausible layout: as many pools, each at least its size."""
    return any(
        len(layout) == len(pools) and all(p >= q for p, q in zip(sorted(pools), sorted(layout), strict=True))
        for layout in plausible_layouts(total_sru, light=light)
    )


def narrowed(
    layouts: Sequence[tuple[int, ...]], *, cache: int, occupied: Sequence[tuple[int, int]], refused: int
) -> tuple[tuple[int, ...], ...]:
    """The layouts in which a disk of `refused` bytes, refused while `occupied` was placed, could not
    have been placed either (no pool had the room, in the worst device order): ZOS's refusal rules
    the others out. Empty when none agrees: the node is outside the plausible set."""
    return tuple(layout for layout in layouts if largest_pool_room(layout, cache, occupied) < refused)
