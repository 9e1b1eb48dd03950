"""A policy edit's effect on its nodes' stored figures: in the edit's transaction for a few nodes, as a
job for many (issue 37: a fleet-default edit at 10,000 nodes held the admin's request for 2.9 s).

The edit itself (the new version, its history entry and audit event) is saved at once either way;
with a job, the nodes' figures (deployable, stale and why, placeable now) follow when the job ends,
a batch per transaction so that no transaction holds every node's lock. One rewrite per policy at a
time: an edit while its policy's rewrite is active is refused (policies.services.policy).
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from dashboard.access.services.audit_trail import actor_of
from dashboard.figures.services.figures import STORE_BATCH
from dashboard.figures.services.node_writes import figures_follow
from dashboard.jobs.results import PolicyFiguresResult
from dashboard.jobs.services.jobs import JobError, job_progress, job_request, job_succeed
from dashboard.models import Job, Node, Policy
from dashboard.policies.selectors.policy import policy_node_pks


def policy_figures_follow(
    policy: Policy, node_pks: list[int], *, by=None, source: str = "web", deleted: bool = False
) -> Job | None:
    """Inside the edit's (creation's, deletion's) transaction: rewrite these nodes' figures now, or queue
    the job that will (sent on commit); the job, or None when they were rewritten here. `deleted`: the
    row is being deleted, so the job finds its nodes by the scope it had."""
    if len(node_pks) <= settings.POLICY_FIGURES_INLINE_NODES:
        figures_follow(node_pks)
        return None
    parameters = {"policy_id": policy.pk, "version": policy.version}
    if deleted:
        parameters |= {"deleted_scope": policy.scope, "farm_id": policy.farm_id}
    return job_request(
        kind=Job.Kind.POLICY_FIGURES,
        by=actor_of(by),
        source=source if source in Job.Source.values else Job.Source.COMMAND,
        parameters=parameters,
    ).job


def _deleted_policy_node_pks(asked) -> list[int]:
    """The nodes a deleted policy governed: the scope it had says which (a node override is rewritten inline)."""
    nodes = Node.objects.all()
    if asked.deleted_scope == Policy.Scope.FARM:
        nodes = nodes.filter(farm_id=asked.farm_id)
    return list(nodes.values_list("pk", flat=True))


def policy_figures_run(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> PolicyFiguresResult:
    """Rewrite the figures of every node the job's policy may govern, STORE_BATCH nodes a transaction."""
    asked = job.asked
    policy = Policy.objects.filter(pk=asked.policy_id).first()
    if asked.deleted_scope is not None:
        pks, label = sorted(_deleted_policy_node_pks(asked)), f"the policies after #{asked.policy_id}'s deletion"
    elif policy is None:
        raise JobError(
            f"policy #{asked.policy_id} was deleted; its nodes' figures were rewritten when it was "
            "(their next policy's)"
        )
    else:
        pks, label = sorted(policy_node_pks(policy)), f"{policy.name} v{policy.version}"
    changed = 0
    job_progress(job=job, step=f"rewriting the figures of {len(pks):,} node(s) under {label}", done=0, total=len(pks))
    for start in range(0, len(pks), STORE_BATCH):
        batch = pks[start : start + STORE_BATCH]
        # A node deleted since the list was read is simply not found; each batch reads the policy book
        # again, so what it stores is what the policies say at that moment.
        changed += figures_follow(batch)
        done = min(start + STORE_BATCH, len(pks))
        job_progress(job=job, step=f"rewriting the figures under {label}", done=done, total=len(pks))
    result = PolicyFiguresResult(
        policy=label,
        nodes=len(pks),
        changed=changed,
        words=f"rewrote the figures of {len(pks):,} node(s) under {label}; {changed:,} changed",
    )
    with transaction.atomic():
        job_succeed(job=job, result=result)
    return result
