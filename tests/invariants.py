"""What the reliability runs check, shared by the suite (tests/test_reliability_*.py) and the long runs
(bench/reliability/, which imports it from here: the suite imports nothing from bench/).

Everything here reads the database through the ORM (Django must be set up) and returns plain
data, so a check's failure can be printed and compared.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

from django.db import connection, transaction

from dashboard import capacity
from dashboard.models import AuditEvent, Deployment, Job, Node, Policy, Slice


@contextmanager
def one_moment():
    """Reads inside see one committed state of the database, even while a worker commits."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def catalog_snapshot() -> dict:
    """Every row that a page or a job could change by mistake, as comparable tuples."""
    return {
        "nodes": list(
            Node.objects.order_by("pk").values_list(
                "pk",
                "grid_id",
                "catalog_generation",
                "carved_policy_name",
                "carved_policy_version",
                "carved_deployable",
                "total_mru",
                "total_sru",
            )
        ),
        "slices": list(
            Slice.objects.order_by("pk").values_list(
                "pk", "node_id", "index", "cru", "mru", "sru", "state", "rented_by_twin_id", "generation"
            )
        ),
        "policies": list(Policy.objects.order_by("pk").values_list("pk", "name", "version", *Policy.PARAMETERS)),
        "deployments": list(Deployment.objects.order_by("pk").values_list("pk", "state", "slice_id")),
    }


def state_snapshot() -> dict:
    """The catalog plus jobs and the audit trail: what must not move at all after a refused request."""
    return {
        **catalog_snapshot(),
        "jobs": list(Job.objects.order_by("pk").values_list("pk", "state", "node_id")),
        "audit_events": AuditEvent.objects.count(),
    }


def occupied_slices() -> dict[int, tuple]:
    """Rented and deployed slices by pk: someone's VM, which nothing may delete or resize."""
    return {
        row[0]: row[1:]
        for row in Slice.objects.filter(state__in=Slice.OCCUPIED_STATES).values_list(
            "pk", "node_id", "index", "cru", "mru", "sru", "state", "rented_by_twin_id"
        )
    }


def occupied_violations(before: dict[int, tuple], after: dict[int, tuple]) -> list[str]:
    """Each rented/deployed slice of `before` is still there, same node, index, size and state."""
    problems = []
    for pk, row in before.items():
        now = after.get(pk)
        if now is None:
            problems.append(f"occupied slice #{pk} {row} was deleted")
        elif now != row:
            problems.append(f"occupied slice #{pk} changed from {row} to {now}")
    return problems


def half_catalog_violations(policies: dict[tuple[str, int], capacity.Policy]) -> list[str]:
    """Every node's free slices form one carve: one generation, one size, as many as the carve makes.

    `policies` maps (policy name, version) to its parameters for every version a node may have
    been carved with; the carve is recomputed from the node's stored totals and occupied slices.
    """
    problems = []
    slices_by_node: dict[int, list[Slice]] = {}
    for s in Slice.objects.order_by("node_id", "index"):
        slices_by_node.setdefault(s.node_id, []).append(s)
    for node in Node.objects.order_by("grid_id"):
        slices = slices_by_node.get(node.pk, [])
        free = [s for s in slices if s.state == Slice.State.FREE]
        occupied = [s for s in slices if s.is_occupied]
        where = f"node {node.grid_id}"
        generations = {s.generation for s in free}
        if len(generations) > 1:
            problems.append(f"{where}: free slices from generations {sorted(generations)}")
        if generations and max(generations) > node.catalog_generation:
            problems.append(
                f"{where}: a free slice of generation {max(generations)} > node generation {node.catalog_generation}"
            )
        sizes = Counter((s.cru, s.mru, s.sru) for s in free)
        if len(sizes) > 1:
            problems.append(f"{where}: free slices of {len(sizes)} sizes: {dict(sizes)}")
        policy = policies.get((node.carved_policy_name, node.carved_policy_version))
        if policy is None:
            problems.append(
                f"{where}: carved with unknown policy {node.carved_policy_name} v{node.carved_policy_version}"
            )
            continue
        cut = capacity.carve(
            node.total, policy, occupied=[s.size.resources for s in occupied], pools=node.pools_sru or None
        )
        if len(free) != cut.new_slices:
            problems.append(
                f"{where}: {len(free)} free slices, but {policy.name} v{policy.version} carves {cut.new_slices} "
                f"next to {len(occupied)} occupied"
            )
        elif free and (free[0].cru, free[0].mru) != (cut.slice.cru, cut.slice.mru):
            problems.append(f"{where}: free slices of {free[0].mru} bytes, the carve makes {cut.slice.mru}")
        if node.carved_deployable != cut.slices:
            problems.append(f"{where}: carved_deployable {node.carved_deployable} but the carve holds {cut.slices}")
    return problems


def figures_violations() -> list[str]:
    """Every node's stored figures (what the overview shows) are what its rows make now."""
    from dataclasses import asdict

    from dashboard.figures.services.figures import FIGURE_FIELDS, figures_compute

    stored = {
        pk: dict(zip(FIGURE_FIELDS, values, strict=True))
        for pk, *values in Node.objects.values_list("pk", *FIGURE_FIELDS)
    }
    node_ids = dict(Node.objects.values_list("pk", "grid_id"))
    problems = []
    for pk, figures in sorted(figures_compute(Node.objects.all()).items()):
        wrong = {
            name: (stored[pk][name], value) for name, value in asdict(figures).items() if stored[pk][name] != value
        }
        if wrong:
            shown = ", ".join(f"{name} {was!r} (should be {value!r})" for name, (was, value) in wrong.items())
            problems.append(f"node {node_ids[pk]}: stored figures out of date: {shown}")
    return problems


def job_violations() -> list[str]:
    """Every job ended: succeeded, or failed with a reason a person can read."""
    problems = []
    for job in Job.objects.order_by("pk"):
        if job.state in Job.ACTIVE_STATES:
            problems.append(f"job #{job.pk} ({job.kind}) is still {job.state} (step {job.step!r})")
        elif job.state == Job.State.FAILED and not job.error.strip():
            problems.append(f"job #{job.pk} failed without a reason")
        elif job.state == Job.State.SUCCEEDED and not job.result:
            problems.append(f"job #{job.pk} succeeded without a result")
    return problems


def job_outcomes() -> dict[str, int]:
    """Counts by how each job ended, for the report."""
    counts: Counter[str] = Counter()
    for state, attempts, error in Job.objects.values_list("state", "attempts", "error"):
        if state == Job.State.SUCCEEDED:
            counts["succeeded" if attempts <= 1 else "succeeded after a redelivery"] += 1
        elif state == Job.State.FAILED:
            if error.startswith("worker lost"):
                counts["failed: worker lost (reaper)"] += 1
            elif error.startswith("gave up after"):
                counts["failed: gave up after repeated worker losses"] += 1
            elif error.startswith("never started"):
                counts["failed: never started (reaper)"] += 1
            else:
                counts[f"failed: {error[:60]}"] += 1
        else:
            counts[state] += 1
    return dict(sorted(counts.items()))
