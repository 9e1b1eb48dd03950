"""Deleting a deployed slice's VM: the grid first, then the slice given back to the catalog, audited."""

from __future__ import annotations

import logging

from django.utils import timezone

from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.deploy import deployment_audit
from dashboard.deployments.services.deploy_carries import farm_ips_read_again
from dashboard.deployments.services.deploy_errors import DeployError
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.types import Grid, GridError
from dashboard.models import Deployment, Slice

log = logging.getLogger(__name__)


def deployment_delete(*, deployment: Deployment, by=None, grid: Grid | None = None, source: str = "web") -> Deployment:
    """Remove a deployed slice's VM from the grid and give the slice back to the catalog.

    A grid error deleting the VM propagates and nothing changes here.
    """
    if deployment.state != Deployment.State.DEPLOYED:
        raise DeployError(f"deployment {deployment.pk} is {deployment.state}, not deployed; there is no VM to delete")
    grid = grid or get_grid()
    grid.delete_vm(deployment.node.grid_id, deployment.grid_workload_id)
    with node_writes(
        [deployment.node_id]
    ) as writes:  # the node before the slice: see figures.services.figures.nodes_lock
        Deployment.objects.filter(pk=deployment.pk).update(state=Deployment.State.DELETED, finished_at=timezone.now())
        if deployment.slice_id:
            Slice.objects.filter(pk=deployment.slice_id, state=Slice.State.DEPLOYED).update(
                state=Slice.State.FREE, updated_at=timezone.now()
            )
        else:
            writes.refresh_only(())  # no slice given back: the figures are the same
        deployment.state = Deployment.State.DELETED
        deployment_audit(
            deployment,
            message=f"deleted the VM of slice {deployment.slice_index} on node {deployment.node.grid_id} "
            f"(workload {deployment.grid_workload_id}); the slice is free again",
            by=by,
            source=source,
        )
    deployment.refresh_from_db()
    if deployment.public_ipv4:
        farm_ips_read_again(deployment.node, grid)  # its IPs are free again for every node of the farm
    try:
        precheck_run(node=deployment.node, grid=grid)  # the freed room changes placeable/phantom
    except GridError as exc:
        log.warning("node %s figures not refreshed after deleting a VM: %s", deployment.node.grid_id, exc)
    return deployment
