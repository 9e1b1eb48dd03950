"""Small factories for what many tests build: node 1774 above all (the issue's node).

One definition instead of a copy in every module, so a change to the reference node (its farm,
its disks) is made once. Plain data: pass it to `sim_node`, `node_register` or the simulator.
"""

from dashboard.capacity import GiB, Resources

# 8 cores, "31 GB" of memory (31 GiB), a 1 TB SSD (931.5 GiB), in farm 4242 "mitana".
TOTAL_1774 = Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
NODE_1774 = dict(cru=TOTAL_1774.cru, mru=TOTAL_1774.mru, sru=TOTAL_1774.sru, farm_id=4242, farm_name="mitana")


def node_1774(**changes) -> dict:
    """NODE_1774 with some fields changed, e.g. sim_node(1774, **node_1774(status="down"))."""
    return {**NODE_1774, **changes}


def sim_node_1774(sim_node, *, policy_name: str | None = "legacy", deployed: tuple[int, ...] = (), **changes):
    """Node 1774 on this test's simulated grid (conftest's `sim_node`), registered with `policy_name`
    (the legacy 7-slice carve unless told: the catalog the issue found), and the slices in `deployed`
    deployed through slice_deploy, as the marketplace would. `changes` as for node_1774().
    """
    from dashboard.deployments.services.deploy import slice_deploy

    node = sim_node(1774, policy_name=policy_name, **node_1774(**changes))
    for index in deployed:
        slice_deploy(node=node, slice_index=index, grid=sim_node.grid, source="command")
    if deployed:
        node.refresh_from_db()
    return node


MEMORY_ERROR = (
    "failed to satisfy required capacity: cannot fulfil required memory size 4294967296 bytes "
    "out of usable 4187593113 bytes"
)


def failed_deployment(node, *, index: int, raw_error: str, cause: str, needed=None, usable=None):
    """A failure as slice_deploy records it: ZOS's raw message, the cause, and what the node reported then."""
    from dashboard.models import Deployment

    return Deployment.objects.create(
        node=node,
        slice_index=index,
        cru=1,
        mru=4 * GiB,
        sru=133 * GiB,
        state=Deployment.State.FAILED,
        raw_error=raw_error,
        cause=cause,
        needed_bytes=needed,
        usable_bytes=usable,
        capacity_seen={
            "status": "up",
            "total": {"cru": 8, "mru": 31 * GiB, "sru": int(931.5 * GiB), "hru": 0},
            "used": {"cru": 6, "mru": 29098403430, "sru": 821 * GiB, "hru": 0},
        },
    )
