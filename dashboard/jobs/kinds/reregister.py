"""Re-register: re-carve one node's catalog with its effective policy (catalogs.services.reregister)."""

from dashboard.jobs.kinds.declaration import JobKind
from dashboard.jobs.results import ReregisterResult

KIND = JobKind(
    value="reregister",
    label="Re-register",
    result=ReregisterResult,
    runner="dashboard.catalogs.services.reregister:node_reregister",
    target="node",
)
