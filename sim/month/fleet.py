"""The fleet and the month's events: a stated mix of nodes, ZOS booted on each, and the event stream.

A fifth of the nodes with hidden per-VM memory use, a third with 2-4 SSD pools of near-equal size in
an unknown device order; `pools_reported` of them (a share, default none) have their pools reported
to the dashboard, as the marketplace's deployer can over RMB; the others' pools the dashboard
never sees, as with the Grid Proxy alone. Events: deploy requests (92%), each with the lifetime its
VM will have, and nodes going to standby (4%) and waking (4%).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from dashboard import capacity
from dashboard.capacity import GiB, MiB, SliceSize
from sim.grid import ZosMachine
from sim.grid.machine import test_vm_running_at

HOURS = 30 * 24  # a month
MEAN_LIFETIME_HOURS = 45 * 24  # about half the VMs are released within the month
MEMORY_CHOICES_GIB = (8, 16, 16, 32, 32, 64)
SSD_CHOICES_GIB = (240, 480, 960, 1920)
HIDDEN_CHOICES = (256 * MiB, 512 * MiB, GiB, 1536 * MiB)
# The zos-cache (zosbase checkAndResizeCache): 5 GiB at first boot, grown a step each time it is 60% full.
# The first VM of each of the marketplace's images on a node pulls what it reads of the image into the
# cache (flists are fetched lazily; ZOS ADR "Dynamic cache": a few hundred MB in normal use), and it stays.
IMAGES = 8
IMAGE_CACHE_USE = 512 * MiB


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...]  # in device order (the dashboard sees them largest first, when reported)
    hidden_mru: int  # memory each running VM really uses beyond its size
    # Reported to the dashboard (zos.storage.pools through the marketplace's deployer); else unknown to
    # it, as with the Grid Proxy alone, and the catalog is carved for every plausible layout.
    pools_reported: bool = False
    # Its zos-cache boots at ZOS's 5 GiB and grows with the images pulled (IMAGES); else it stays at the
    # 20 GiB the simulated grid has always taken it as grown to.
    cache_grows: bool = False
    # The ZOS version it runs (grid.simgrid.ZOS_BUILDS: its own use and each VM's beyond the guest),
    # told over RMB (zos.system.version) where its pools are; "" a node of no build (hidden_mru alone).
    zos_build: str = ""

    @property
    def hides_use(self) -> bool:
        """Its VMs really use memory beyond ZOS's count: a build's overhead, or a use of its own."""
        return bool(self.hidden_mru or self.zos_build)

    @property
    def told_build(self) -> str:
        """The group the dashboard learns this node's memory in: the version it told, or the fleet's."""
        return self.zos_build if self.pools_reported else ""


@dataclass(frozen=True)
class Event:
    at: float  # hours since the start
    kind: str  # deploy, standby, wake
    pick: float  # the marketplace's tie-break among equally full nodes, or which node changes status
    lifetime: float = 0.0  # hours the VM of a deploy request will live


def fleet_mix(nodes: int, rng: random.Random) -> list[NodeSpec]:
    """A fifth of the nodes with hidden per-VM use, a third with 2-4 near-equal SSD pools."""
    specs = []
    for i in range(nodes):
        mru = rng.choice(MEMORY_CHOICES_GIB) * GiB
        sru = rng.choice(SSD_CHOICES_GIB) * GiB
        pools: tuple[int, ...] = (sru,)
        if rng.random() < 1 / 3:
            count = rng.randint(2, 4)
            base = sru // count
            sizes = [base + rng.randint(-base // 50, base // 50) for _ in range(count)]
            pools = tuple(sizes)
            sru = sum(sizes)
        hidden = rng.choice(HIDDEN_CHOICES) if rng.random() < 0.2 else 0
        specs.append(
            NodeSpec(node_id=1 + i, cru=max(mru // (2 * GiB), 4), mru=mru, sru=sru, pools=pools, hidden_mru=hidden)
        )
    return specs


# --hidden-use: how the fleet's memory really differs from ZOS's count.
# - builds (default): every node on a ZOS build (most on the first, BUILD_MINOR_SHARE on the second),
#   with its small per-node spread (grid.simgrid.build_spread) and the daily test VM;
# - wide: as builds, and a fifth of the nodes with their own per-VM deviation (HIDDEN_CHOICES);
# - nodes: no builds, a fifth of the nodes with a hidden per-VM use of their own (the month before builds).
HIDDEN_USE_CHOICES = ("builds", "wide", "nodes")
BUILD_MAJOR, BUILD_MINOR = "v3.14.0-sim", "v3.13.2-sim"
BUILD_MINOR_SHARE = 0.1


def hidden_use_for(specs: list[NodeSpec], hidden_use: str, seed: int) -> list[NodeSpec]:
    """The fleet with its memory's hidden use as `hidden_use` says; builds drawn apart from the fleet
    and the events (another random stream), so the same seed gives the same nodes and events."""
    if hidden_use not in HIDDEN_USE_CHOICES:
        raise ValueError(f"unknown hidden use {hidden_use!r}; choose from {', '.join(HIDDEN_USE_CHOICES)}")
    if hidden_use == "nodes":
        return specs
    rng = random.Random(f"zos-builds-{seed}")
    return [
        replace(
            spec,
            zos_build=BUILD_MINOR if rng.random() < BUILD_MINOR_SHARE else BUILD_MAJOR,
            hidden_mru=spec.hidden_mru if hidden_use == "wide" else 0,
        )
        for spec in specs
    ]


def test_vm_running(spec: NodeSpec, at: float) -> bool:
    """ZOS's test VM runs on a node on its build's schedule (grid.simgrid.machine.test_vm_running_at):
    daily, or every 15 minutes on v3.14.7/v3.14.8; a node of no build (the month before builds) runs none."""
    return test_vm_running_at(spec.zos_build, spec.node_id, at)


def event_stream(events: int, rng: random.Random) -> list[Event]:
    """Deploy requests (92%), standby (4%) and wake-ups (4%), spread over the month."""
    stream = []
    for _ in range(events):
        at = rng.uniform(0, HOURS)
        roll = rng.random()
        if roll < 0.92:
            stream.append(Event(at, "deploy", rng.random(), rng.expovariate(1 / MEAN_LIFETIME_HOURS)))
        else:
            stream.append(Event(at, "standby" if roll < 0.96 else "wake", rng.random()))
    return sorted(stream, key=lambda e: e.at)


def image_of(event: Event) -> int:
    """Which of the marketplace's images a deploy request runs (drawn with it, as its lifetime is)."""
    return int(event.lifetime * 1_000_003) % IMAGES


# --- one node, as ZOS and as the dashboard see it ------------------------------------------


def boot(spec: NodeSpec) -> ZosMachine:
    return ZosMachine.boot(
        spec.node_id,
        cru=spec.cru,
        mru=spec.mru,
        sru=spec.sru,
        pools=spec.pools,
        per_vm_overhead_mru=spec.hidden_mru,
        zos_build=spec.zos_build,
        **({"cache_sru": capacity.CACHE_STEP} if spec.cache_grows else {}),
    )


def allowed_mru(spec: NodeSpec) -> int:
    """The memory ZOS would let the empty node hold at once in 4 GiB slices with 10 GiB disks."""
    machine = boot(spec)
    size = SliceSize(cru=1, mru=4 * GiB, sru=10 * GiB)
    count = 0
    while True:
        vm, _refusal = machine.place(size, name=f"a{count}", deployment_id=count + 1)
        if vm is None:
            return count * size.mru
        count += 1


def pools_reported_for(specs: list[NodeSpec], share: float, seed: int) -> list[NodeSpec]:
    """The fleet with `share` of its nodes' pools reported, drawn apart from the fleet and the events
    (another random stream) so that the same seed gives the same nodes and events at every share."""
    if not 0 <= share <= 1:
        raise ValueError(f"the share of nodes whose pools are reported must be between 0 and 1 (got {share})")
    order = list(range(len(specs)))
    random.Random(f"pools-reported-{seed}").shuffle(order)
    reported = set(order[: round(share * len(specs))])
    return [replace(spec, pools_reported=i in reported) for i, spec in enumerate(specs)]


def in_plausible_set(spec: NodeSpec) -> bool:
    """The node's drives are covered by the prudent carve's plausible layouts (capacity.layouts)."""
    return capacity.in_plausible_set(spec.pools, spec.sru)
