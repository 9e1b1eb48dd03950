"""Issue 34, the smaller findings: the words the trial found wrong ("twin twin 7", "ZOS1 turned away",
"(rented by another twin 6)", a dry run saying "recorded")."""

import pytest
from django.urls import reverse

from dashboard.figures.selectors.fleet import FleetTotals
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Policy
from tests.factories import node_1774

pytestmark = pytest.mark.django_db


def test_the_fleet_page_names_the_marketplace_twin_once(sim_node, settings, admins_client):
    settings.MARKETPLACE_TWIN_ID = (7,)
    sim_node(1774, **node_1774())
    page = admins_client.get(reverse("fleet")).content.decode()
    assert "the marketplace's twin 7:" in page and "twin twin" not in page


def test_the_closed_tier_puts_each_count_before_its_reason():
    totals = FleetTotals(deployable_closed=13, deployable_closed_by_reason={"withheld": 7, "rented": 6})
    assert totals.closed_reasons_words == "7 withheld (maintenance or quarantine), 6 rented by another twin"


def test_a_dry_run_never_says_recorded(sim_node):
    fleet = Policy.objects.create(name="fleet", scope=Policy.Scope.FLEET)
    node = sim_node(1774, **node_1774())
    Policy.objects.filter(pk=fleet.pk).update(version=2)  # the same values: only the record would change
    job = job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=node, source="command", dry_run=True).job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    said = " ".join([*job.result.get("notes", []), job.outcome.sentence()])
    assert "would be recorded" in said and "recorded them" not in said and ": recorded" not in said
