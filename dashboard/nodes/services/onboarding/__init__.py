"""Adding whole farms (or a list of node ids) from the grid: read by pages, one commit per page.

New nodes are registered through registration.node_register_from_grid with the chosen policy; nodes already
known get their capacity reading refreshed and their figures (stale, placeable, phantom)
recomputed, and are never carved again. Each page is one transaction, so a read that fails on
page 3 leaves pages 1 and 2 committed and consistent; the run stops there and says so, and
running it again reads everything again: known nodes are refreshed, the rest are registered.

The reading has two ages, both kept on the node: when it was read (seen_at) and when the node
last reported to the grid (reported_at, the proxy's updatedAt).

Modules: `request` (what was asked, what a run did), `apply` (one page, one transaction), `run`
(the reads in order, where a run stops, the job).
"""

from dashboard.jobs.results import OnboardResult
from dashboard.nodes.services.onboarding.apply import OnboardLimit, page_apply
from dashboard.nodes.services.onboarding.request import OnboardError, OnboardRequest, OnboardStopped
from dashboard.nodes.services.onboarding.run import grid_onboard, onboard_job

__all__ = [
    "OnboardError",
    "OnboardLimit",
    "OnboardRequest",
    "OnboardResult",
    "OnboardStopped",
    "grid_onboard",
    "onboard_job",
    "page_apply",
]
