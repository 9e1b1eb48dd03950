"""The simulated ZOS grid: ZOS played on its own, the reference the product is tested against.

`make run` and the tests deploy on it (GRID_BACKEND=simulator; `manage.py simgrid` runs it).
Nothing here asks dashboard.capacity for a decision: it takes sizes and types only, and
writes every rule of ZOS (reserve, memory check, storaged's placement, rootfs, validation)
on its own, so the suite can check the capacity model against it as against a real node.
The sources are in docs/domain.md.

What it tells is what a real node tells: the statistics' and the proxy's `used` are the
accounted use (workloads + reserve); memory really in use shows only in a memory refusal's
`usable` figure. The Grid Proxy's face (readings, pages, the HTTP server) tells no pools, as the
real proxy tells none; `storage_pools` answers as a ZOS node answers `zos.storage.pools` over RMB.
The reported `used` follows the Grid Proxy: used_mru = sum VM memory + reserve,
used_sru = sum VM (data + rootfs) + 20 GiB; `system` in the statistics is the reserve.

Its parts:
- `records.py`: a node and its VMs as kept, the reserves ZOS keeps for itself;
- `storaged.py`: storaged's placement of each disk in the node's SSD pools;
- `machine.py`: `ZosMachine`, one node deploying and releasing VMs as ZOS does;
- `store.py`: `SimulatedGrid`, the fleet in one SQLite file behind the Grid interface;
- `http.py`: the same behind the Grid Proxy's own HTTP paths (`serve_simulator`);
- `rmb_peer.py`: the nodes' answers over RMB, served on an rmb-peer's Redis (the stand-in peer);
- `rmb_loopback.py`: the same answers handed to the product's RMB reader in process (settings.SIMULATED_RMB).
"""

from sim.grid.http import SimulatorServer, serve_simulator
from sim.grid.machine import ZosMachine
from sim.grid.records import ZOS_BUILDS, ZOS_CACHE_SRU, SimVm, zos_reserve_mru
from sim.grid.store import NodeAlreadyOnGrid, SimulatedGrid

__all__ = [
    "NodeAlreadyOnGrid",
    "SimVm",
    "SimulatedGrid",
    "SimulatorServer",
    "ZOS_BUILDS",
    "ZOS_CACHE_SRU",
    "ZosMachine",
    "serve_simulator",
    "zos_reserve_mru",
]


def grid_from_settings() -> SimulatedGrid:
    """The simulated grid `dashboard.grid.get_grid` serves when GRID_BACKEND is "simulator"."""
    from django.conf import settings

    # The simulated chain asks who signs a contract: the marketplace's (first) twin, when one is set.
    twins = settings.MARKETPLACE_TWIN_ID
    return SimulatedGrid(settings.SIMGRID_PATH, deployer_twin=twins[0] if twins else None)
