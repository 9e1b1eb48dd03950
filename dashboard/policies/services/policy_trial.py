"""A policy trial: a month of marketplace traffic on the registered fleet's shapes, the policy in
force against a candidate (job kind "simulate", dashboard.jobs.kinds.policy_trial).

The policy page's "Try this change on a month of traffic" runs this as a job. The nodes are the ones
the candidate would govern (its scope, as the preview counts them); each becomes a NodeSpec for
sim.month: its total memory and SSD, its SSD pools when known (else one pool, hidden), its cores,
and the hidden memory per VM its refusals taught (Node.hidden_mru_per_vm) as what ZOS really uses.
Both policies run as the shipped product (precheck, learning, the daily re-register of stale
nodes) over the same events, so the only difference between the two columns is the policy.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.jobs.kinds.policy_trial import PolicyTrialParameters
from dashboard.jobs.results import PolicyTrialResult
from dashboard.jobs.services.jobs import JobError, job_progress, job_succeed
from dashboard.models import Job, Node
from dashboard.policies.selectors.policy import policy_nodes
from dashboard.policies.selectors.policy_book import policies_for_nodes

if TYPE_CHECKING:  # names for the annotations only; the month itself is chosen by name (month_of_traffic)
    from sim.month import NodeSpec, PolicyFigures

# A sample this size replays two policies in about 10 s on this machine's cores (300 nodes,
# 3,000 events each); the whole fleet could take many minutes and hold a worker meanwhile.
SAMPLE_NODES = 300
EVENTS_PER_NODE = 10  # as `manage.py simulate_traffic` (1,000 nodes, 10,000 events)
MIN_EVENTS = 200  # a handful of nodes still sees them fill, empty and fill again
SEED = 7
ZOS_CACHE_SRU = 20 * GiB  # a node boots only when its largest pool holds zos-cache
SHIPPED = "zos-learning"  # the product as shipped: precheck, learning, the daily re-register
FIGURES = (
    "deploys",
    "refused",
    "refused_per_1000",
    "refused_after_first",
    "refused_by_cause",
    "utilisation",
    "phantom_slice_hours",
    "unserved",
)


def policy_trial_parameters(
    *,
    candidate: capacity.Policy,
    scope: str,
    farm_id: int | None = None,
    node: Node | None = None,
    policy_id: int | None = None,
) -> dict:
    """What a policy trial keeps of the request: the candidate's parameters and the scope it would govern."""
    return PolicyTrialParameters(
        candidate=candidate.as_dict(),
        scope=scope,
        farm_id=farm_id,
        node_id=node.grid_id if node is not None else None,
        policy_id=policy_id,
        seed=SEED,
    ).stored()


def month_of_traffic() -> ModuleType:
    """The simulated month the trial replays (settings.POLICY_TRIAL_MONTH, sim.month as shipped): chosen
    by name, as the grid backend is, so that production code never imports the simulated world."""
    return import_module(settings.POLICY_TRIAL_MONTH)


def node_spec(node: Node) -> NodeSpec | None:
    """The node's shape as the simulator boots it; None when it cannot boot (no SSD for zos-cache)."""
    pools = tuple(node.pools or (node.total_sru,))
    if sum(pools) > node.total_sru or min(pools) <= 0:
        pools = (node.total_sru,)  # pool sizes that do not fit the total were mistyped; one pool is the safe reading
    if node.total_mru <= 0 or node.total_cru < 1 or max(pools) < ZOS_CACHE_SRU:
        return None
    return month_of_traffic().NodeSpec(
        node_id=node.grid_id,
        cru=node.total_cru,
        mru=node.total_mru,
        sru=node.total_sru,
        pools=pools,
        hidden_mru=node.hidden_mru_per_vm,
        # Known pools are told to the replayed dashboard; unknown ones stay unknown (one pool is the
        # simulated truth then, and the carve is made for every plausible layout, as in production).
        pools_reported=node.pools is not None,
    )


def fleet_sample(nodes: list[Node], *, limit: int = SAMPLE_NODES, seed: int = SEED) -> list[Node]:
    """At most `limit` nodes, the same ones for the same fleet (a seeded draw over node ids), in node id order."""
    ordered = sorted(nodes, key=lambda n: n.grid_id)
    if len(ordered) <= limit:
        return ordered
    return sorted(random.Random(seed).sample(ordered, limit), key=lambda n: n.grid_id)


@dataclass(frozen=True)
class PolicyComparison:
    """A policy trial's result: the written and the read side agree on these keys (jobs/kinds/policy_trial.html)."""

    candidate: str
    in_force: str
    in_force_mixed: int  # sampled nodes under another policy than the most common one
    nodes_in_scope: int
    nodes: int
    skipped: int
    hidden_use: int
    events: int
    seed: int
    figures: dict[str, PolicyFigures]
    words: str

    def as_dict(self) -> dict:
        def pick(f: PolicyFigures) -> dict:
            return {k: v for k, v in f.as_dict().items() if k in FIGURES}

        return {
            "words": self.words,
            "candidate": self.candidate,
            "in_force": self.in_force,
            "in_force_mixed": self.in_force_mixed,
            "nodes_in_scope": self.nodes_in_scope,
            "nodes": self.nodes,
            "sampled": self.nodes < self.nodes_in_scope - self.skipped,
            "skipped": self.skipped,
            "hidden_use": self.hidden_use,
            "events": self.events,
            "days": month_of_traffic().HOURS // 24,
            "seed": self.seed,
            "policies": {
                "in_force": {"label": self.in_force, **pick(self.figures["in_force"])},
                "candidate": {"label": self.candidate, **pick(self.figures["candidate"])},
            },
        }


def _trial_candidate(asked: PolicyTrialParameters) -> capacity.Policy:
    try:
        return capacity.Policy(**asked.candidate)
    except (KeyError, TypeError) as exc:
        raise JobError(
            f"this policy trial's candidate policy cannot be read ({exc}); start it again from the policy page"
        ) from None


def _trial_fleet(asked: PolicyTrialParameters) -> tuple[list[Node], list[Node], list[NodeSpec]]:
    """The nodes the policy governs, the sample of them replayed, and the shapes of those the replay can boot."""
    node = None
    if asked.scope == "node":
        node = Node.objects.filter(grid_id=asked.node_id).first()
        if node is None:
            raise JobError(f"node {asked.node_id} is no longer registered; nothing to try the policy on")
    in_scope = list(policy_nodes(scope=asked.scope, farm_id=asked.farm_id, node=node))
    sample = fleet_sample(in_scope, seed=asked.seed)
    specs = [spec for spec in map(node_spec, sample) if spec is not None]
    if not specs:
        raise JobError(
            "no registered node this policy would govern has a shape the traffic replay can boot; nothing to try it on"
        )
    return in_scope, sample, specs


def policy_trial_run(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> PolicyTrialResult:
    """Replay a month of traffic on the sampled fleet under the policy in force and under the candidate."""
    asked: PolicyTrialParameters = job.asked
    candidate = _trial_candidate(asked)
    seed = asked.seed
    job_progress(job=job, step="reading the shapes of the nodes under this policy")
    in_scope, sample, specs = _trial_fleet(asked)
    in_force_counts = Counter(policies_for_nodes(sample).values())
    in_force, most = in_force_counts.most_common(1)[0]
    events = max(EVENTS_PER_NODE * len(specs), MIN_EVENTS)
    names = {
        "in_force": f"{in_force.name} v{in_force.version} (in force)",
        "candidate": f"{candidate.name} v{candidate.version} (candidate)",
    }

    def tick(name: str, done: int, total: int) -> None:
        first = name == "in_force"
        job_progress(
            job=job,
            step=f"replaying a month of traffic under {names[name]}",
            done=done + (0 if first else total),
            total=2 * total,
        )

    traffic = month_of_traffic()
    shipped = traffic.MODES[SHIPPED]
    month = traffic.simulate(
        fleet=specs,
        events=events,
        seed=seed,
        tick=tick,
        policies=(
            traffic.Contender("in_force", in_force, shipped),
            traffic.Contender("candidate", candidate, shipped),
        ),
    )
    comparison = PolicyComparison(
        candidate=names["candidate"],
        in_force=names["in_force"],
        in_force_mixed=len(sample) - most,
        nodes_in_scope=len(in_scope),
        nodes=len(specs),
        skipped=len(sample) - len(specs),
        hidden_use=month.mix["hidden_use"],
        events=events,
        seed=seed,
        figures=month.policies,
        words=comparison_words(month.policies["in_force"], month.policies["candidate"], nodes=len(specs)),
    )
    result = PolicyTrialResult.model_validate(comparison.as_dict())
    with transaction.atomic():
        job_succeed(job=job, result=result)
    return result


def comparison_words(in_force: PolicyFigures, candidate: PolicyFigures, *, nodes: int) -> str:
    """One sentence an admin reads before saving: utilisation and refusals, candidate against in force."""

    def share(f: PolicyFigures) -> str:
        return f"{f.utilisation:.0%}"

    if abs(candidate.utilisation - in_force.utilisation) < 0.005:
        use = f"uses as much of what ZOS allows as the policy in force ({share(candidate)})"
    elif candidate.utilisation < in_force.utilisation:
        use = f"uses less of what ZOS allows: {share(candidate)} against {share(in_force)} in force"
    else:
        use = f"uses more of what ZOS allows: {share(candidate)} against {share(in_force)} in force"
    if candidate.refused == in_force.refused:
        refused = f"with as many refusals ({candidate.refused})"
    else:
        fewer = "fewer" if candidate.refused < in_force.refused else "more"
        refused = f"with {fewer} refusals: {candidate.refused} against {in_force.refused}"
    return f"over a month of traffic on {nodes} node{'s' if nodes != 1 else ''}, the candidate {use}, {refused}"
