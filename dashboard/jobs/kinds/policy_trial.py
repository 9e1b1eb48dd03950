"""A policy trial: a month of marketplace traffic replayed on the fleet's shapes under the policy in
force and under a candidate, before the candidate is saved (policies.services.policy_trial).

Stored as kind "simulate" (the rows written before it had this name keep reading).
"""

from typing import Any, ClassVar

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import PolicyTrialResult


class PolicyTrialParameters(JobParameters):
    candidate: dict[str, Any]  # the candidate policy's parameters (capacity.Policy.as_dict)
    scope: str = "fleet"  # the nodes it would govern: fleet, farm or node
    farm_id: int | None = None
    node_id: int | None = None
    policy_id: int | None = None  # the stored policy it would change; None for a new one
    seed: int = 7

    REFUSAL: ClassVar[str] = "a policy trial needs the candidate policy's parameters"


def policy_trial_target(job, asked: PolicyTrialParameters | None) -> str:
    name = (asked.candidate.get("name") if asked is not None else None) or "?"
    return f"policy {name}"


KIND = JobKind(
    value="simulate",
    label="Policy trial",
    result=PolicyTrialResult,
    runner="dashboard.policies.services.policy_trial:policy_trial_run",
    template="dashboard/jobs/kinds/policy_trial.html",
    target="fleet",
    describe=policy_trial_target,
    parameters=PolicyTrialParameters,
    dry_run=False,
    takes="a policy trial takes its nodes from the candidate policy's scope, and changes nothing",
    one_at_a_time="one_active_simulate_job",
    when_lost="nothing was changed; try again",
)
