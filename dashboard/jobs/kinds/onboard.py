"""Adding nodes from the grid: farms or node ids read a page at a time (nodes.services.onboarding)."""

from typing import ClassVar

from pydantic import Field

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import OnboardResult

# Node ids named in a job's description; the rest are on the job's onboarding page.
NODES_NAMED = 5


class OnboardParameters(JobParameters):
    """The shape of what was asked; nodes.services.onboarding.OnboardRequest checks the rest (the policy exists)."""

    farm_ids: list[int] = Field(default_factory=list)
    node_ids: list[int] = Field(default_factory=list)
    status: str | None = None  # only nodes the grid reports with this status
    policy: str | None = None  # for new nodes; default: each node's effective policy
    # More new nodes than ONBOARD_MAX_NEW_NODES, confirmed by an admin (nodes.services.onboarding checks the bound).
    max_new_nodes: int | None = None

    REFUSAL: ClassVar[str] = "adding nodes from the grid takes farm ids or node ids as parameters"


def onboard_target(job, asked: OnboardParameters | None) -> str:
    if asked is None:
        return "farms or nodes that cannot be read"
    named = [*(f"farm {f}" for f in asked.farm_ids), *(f"node {n}" for n in asked.node_ids[:NODES_NAMED])]
    if len(asked.node_ids) > NODES_NAMED:
        named.append(f"{len(asked.node_ids) - NODES_NAMED} more node(s)")
    return ", ".join(named) or "no farm"


KIND = JobKind(
    value="onboard",
    label="Add nodes from the grid",
    words="adding nodes from the grid",
    result=OnboardResult,
    runner="dashboard.nodes.services.onboarding:onboard_job",
    target="fleet",
    describe=onboard_target,
    of=": ",
    parameters=OnboardParameters,
    takes="adding nodes from the grid takes farm ids or node ids as parameters, no node or farm",
    one_at_a_time="one_active_onboard_job",
    progress_label="Nodes read",
    when_lost="the pages read before it are committed; run it again to finish the rest",
    background=True,
)
