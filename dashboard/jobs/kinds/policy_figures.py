"""A policy's figures rewritten: every node it may govern, a batch per transaction (policies.services.policy_figures).

An edit, creation or deletion of a policy over many nodes (the fleet default) saves the policy in the
admin's request and hands the rewrite of its nodes' stored figures to a worker, so no request holds a write of every node.
"""

from typing import ClassVar, Literal

from pydantic import Field

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import PolicyFiguresResult


class PolicyFiguresParameters(JobParameters):
    policy_id: int = Field(ge=1, le=2**31 - 1)  # the policy whose nodes' figures are rewritten
    version: int = Field(ge=1, le=2**31 - 1)  # the version the edit saved
    # Set when the policy was deleted: the nodes it governed (every node, or one farm's) fall back to
    # the next policy, and these say which nodes those are once the row is gone.
    deleted_scope: Literal["fleet", "farm"] | None = None
    farm_id: int | None = Field(default=None, ge=0, le=2**31 - 1)

    REFUSAL: ClassVar[str] = "a figures rewrite takes the policy (policy_id) and the version it follows (version)"


def policy_figures_target(job, asked: PolicyFiguresParameters | None) -> str:
    if asked is None:
        return "a policy that cannot be read"
    if asked.deleted_scope is not None:
        return f"the nodes of deleted policy #{asked.policy_id}"
    return f"policy #{asked.policy_id} v{asked.version}'s nodes"


KIND = JobKind(
    value="policy-figures",
    label="Figures rewrite",
    result=PolicyFiguresResult,
    parameters=PolicyFiguresParameters,
    runner="dashboard.policies.services.policy_figures:policy_figures_run",
    target="fleet",
    describe=policy_figures_target,
    dry_run=False,
    takes="a figures rewrite follows a policy edit (policy_id, version); it takes no node or farm",
    one_active_per="policy_id",
    progress_label="Nodes rewritten",
    when_lost="the batches written before it are kept; `manage.py figures_refresh` rewrites the rest",
)
