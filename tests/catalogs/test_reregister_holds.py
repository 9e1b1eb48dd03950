"""A re-register keeps a free slice under a live hold, like one whose deploy is in flight; an ended hold keeps nothing.

The buyer was promised the slice until the hold ends, and their `deployed` report turns the hold into
the deployment: the re-register must leave both the slice and the hold for it (catalogs.services.reregister).
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.catalogs.services.reregister import CatalogChanged, node_capacity_read, reregister_apply, reregister_plan
from dashboard.catalogs.services.reregister.stale import held_slices
from dashboard.deployments.services.holds import HoldError, hold_create
from dashboard.deployments.services.outcomes import deployment_outcome_record
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Deployment, Hold, Job, Slice
from dashboard.policies.selectors.policy_book import policy_for_node
from tests.bulk_runs import ONE_BATCH, bulk, planned

pytestmark = pytest.mark.django_db


def reregistered(node, **request) -> Job:
    job = job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=node, **request).job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    return job


def catalog(node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


def hold(index: int, *, node_id: int = 1774, ttl: int = 600, buyer: str = "buyer", now=None) -> Hold:
    return hold_create(
        node_id=node_id, slice_index=index, ttl_seconds=ttl, marketplace_id=buyer, source="command", now=now
    )


def test_it_keeps_a_held_free_slice_and_its_hold(legacy_node_1774):
    held = hold(6)
    row = [r for r in catalog(legacy_node_1774) if r[1] == 6]
    job = reregistered(legacy_node_1774)
    held.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.error
    assert [r for r in catalog(legacy_node_1774) if r[1] == 6] == row  # the same row, not resized
    assert (held.state_at(timezone.now()), held.slice_id) == ("live", row[0][0])
    assert [k["index"] for k in job.result["kept"]] == [0, 6]


def test_the_result_says_how_many_held_slices_were_kept(legacy_node_1774):
    hold(6)
    job = reregistered(legacy_node_1774, dry_run=True)
    assert any(note.startswith("1 held slice kept (slice 6)") for note in job.result["notes"])


def test_the_buyers_deployed_report_then_turns_the_hold_into_the_deployment(legacy_node_1774):
    held = hold(6, buyer="contract-81725")
    reregistered(legacy_node_1774)
    recorded = deployment_outcome_record(
        node_id=1774, slice_index=6, marketplace_id="contract-81725", outcome="deployed", at=timezone.now()
    )
    held.refresh_from_db()
    assert held.end == Hold.End.DEPLOYED
    assert Slice.objects.get(node=legacy_node_1774, index=6).state == Slice.State.DEPLOYED
    assert Deployment.objects.get(pk=recorded.deployment.pk).slice_id == held.slice_id


def test_an_expired_hold_keeps_nothing_and_ends_at_its_expiry(legacy_node_1774):
    made = timezone.now() - timedelta(minutes=5)
    expired = hold(6, ttl=60, now=made)
    job = reregistered(legacy_node_1774)
    expired.refresh_from_db()
    assert 6 in [r["index"] for r in job.result["removed"]]
    assert (expired.end, expired.ended_at, expired.slice_id) == (Hold.End.EXPIRED, expired.expires_at, None)


def test_a_released_hold_keeps_nothing(legacy_node_1774):
    from dashboard.deployments.services.holds import hold_release

    hold_release(hold_id=hold(6).pk, source="command")
    job = reregistered(legacy_node_1774)
    assert 6 in [r["index"] for r in job.result["removed"]]


def test_a_hold_made_after_the_plan_refuses_the_swap_and_writes_nothing(legacy_node_1774):
    job = job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job.pk)
    plan = reregister_plan(
        node=legacy_node_1774,
        slices=list(legacy_node_1774.slices.all()),
        policy=policy_for_node(legacy_node_1774),
        seen=node_capacity_read(grid=legacy_node_1774.grid, node_id=1774),
        held=held_slices([legacy_node_1774.pk], now=timezone.now()).get(legacy_node_1774.pk, set()),
    )
    before = catalog(legacy_node_1774)
    made = hold(4)  # a buyer holds a slice the plan removes, before the swap
    with pytest.raises(CatalogChanged, match="slice\\(s\\) 4 of node 1774 were held for a buyer"):
        reregister_apply(plan=plan, job=job, dry_run=False, finish=True)
    made.refresh_from_db()
    assert catalog(legacy_node_1774) == before
    assert (made.state_at(timezone.now()), made.slice.index) == ("live", 4)


def test_a_hold_asked_for_a_slice_the_swap_removed_finds_it_gone(legacy_node_1774):
    reregistered(legacy_node_1774)
    with pytest.raises(HoldError, match="has no slice 4"):
        hold(4)
    assert not Hold.objects.exists()


def test_a_bulk_run_plans_again_alone_a_node_held_after_its_plan_and_keeps_the_slice(legacy_fleet):
    legacy_fleet(3)
    made = []
    hooks, order = planned({2: lambda node: made.append(hold(1, node_id=2))})
    job = bulk(limits=ONE_BATCH, hooks=hooks)
    made[0].refresh_from_db()
    assert (job.state, job.result["reregistered"], job.result["failures"]) == (Job.State.SUCCEEDED, 3, [])
    assert order == [1, 2, 3, 2]  # node 2 alone planned again, after the batch, with its hold
    assert made[0].state_at(timezone.now()) == "live" and made[0].slice.index == 1
    assert Slice.objects.get(node__grid_id=2, index=1).pk == made[0].slice_id
