"""Re-register: re-carve one node's catalog with its effective policy (services.reregister)."""

from dashboard.job_kinds.declaration import JobKind, node_target
from dashboard.job_results import ReregisterResult

KIND = JobKind(
    value="reregister",
    label="Re-register",
    result=ReregisterResult,
    runner="dashboard.services.reregister:node_reregister",
    target="node",
    describe=node_target,
)
