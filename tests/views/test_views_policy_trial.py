"""The policy page's "Try this change on a month of traffic": admins start the policy trial; the job page shows the comparison."""

import pytest
from django.urls import reverse

from dashboard import capacity
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Job, Policy
from dashboard.views.policy import PolicyForm

GiB = capacity.GiB
pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_default(db):
    return Policy.objects.create(
        name="fleet-default", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )


@pytest.fixture
def fleet(sim_node, fleet_default):
    sim_node(20, cru=8, mru=32 * GiB, sru=960 * GiB, farm_id=1)
    sim_node(21, cru=8, mru=16 * GiB, sru=480 * GiB, farm_id=1, pools=[240 * GiB, 240 * GiB])
    return fleet_default


def form_data(policy: Policy, **changes) -> dict:
    data = {
        name: PolicyForm.base_fields[name].prepare_value(value)
        for name, value in PolicyForm.initial_from(policy).items()
    }
    return {**data, **changes}


def trial_url(policy: Policy) -> str:
    return reverse("policy-trial", args=[policy.pk])


def test_it_starts_a_policy_trial_and_sends_the_admin_to_its_page(admins_client, fleet):
    response = admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("job", args=[job.pk])
    assert (job.kind, job.parameters["scope"], job.parameters["candidate"]["overhead_mru_per_vm"]) == (
        "simulate",
        "fleet",
        3 * GiB,
    )


def test_it_tries_the_next_version_of_the_policy(admins_client, fleet):
    admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    candidate = Job.objects.get().parameters["candidate"]
    assert (candidate["name"], candidate["version"]) == ("fleet-default", 2)


def test_it_refuses_support_staff(support_client, fleet):
    response = support_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    assert response.status_code == 403 and not Job.objects.exists()


def test_it_refuses_a_get(admins_client, fleet):
    assert admins_client.get(trial_url(fleet)).status_code == 405


def test_it_answers_bad_values_with_the_form_and_no_job(admins_client, fleet):
    response = admins_client.post(trial_url(fleet), form_data(fleet, slice_mru="4GB"))
    assert response.status_code == 400 and not Job.objects.exists()


def test_it_tries_a_new_override_on_the_nodes_it_would_govern(admins_client, fleet):
    data = {**form_data(fleet, overhead_mru_per_vm="1GiB"), "name": "farm-1", "scope": "farm", "farm_id": "1"}
    response = admins_client.post(reverse("policy-new-trial"), data)
    job = Job.objects.get()
    assert response.status_code == 302
    assert (job.parameters["scope"], job.parameters["farm_id"], job.parameters["candidate"]["name"]) == (
        "farm",
        1,
        "farm-1",
    )


def test_it_refuses_support_staff_a_new_policys_trial(support_client, fleet):
    data = {**form_data(fleet), "name": "farm-1", "scope": "farm", "farm_id": "1"}
    assert support_client.post(reverse("policy-new-trial"), data).status_code == 403


def test_the_preview_offers_the_trial(admins_client, fleet):
    response = admins_client.post(reverse("policy-edit", args=[fleet.pk]), form_data(fleet, overhead_mru_per_vm="3GiB"))
    assert f'formaction="{trial_url(fleet)}"'.encode() in response.content
    assert b"Try this change on a month of traffic" in response.content


def test_it_shows_one_running_trial_instead_of_starting_another(admins_client, fleet):
    first = admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    again = admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="1GiB"))
    assert again["Location"] == first["Location"] and Job.objects.count() == 1


def test_the_job_page_shows_both_policies_side_by_side(admins_client, fleet):
    admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    job_execute(job=job_claim(job_id=Job.objects.get().pk))
    page = admins_client.get(reverse("job", args=[Job.objects.get().pk])).content.decode()
    assert 'data-policy="in_force"' in page and 'data-policy="candidate"' in page
    assert "fleet-default v1 (in force)" in page and "fleet-default v2 (candidate)" in page
    assert "the candidate uses less of what ZOS allows" in page


def test_the_jobs_list_says_what_the_trial_found(admins_client, fleet):
    admins_client.post(trial_url(fleet), form_data(fleet, overhead_mru_per_vm="3GiB"))
    job_execute(job=job_claim(job_id=Job.objects.get().pk))
    page = admins_client.get(reverse("jobs")).content.decode()
    assert "policy fleet-default" in page and "Over a month of traffic on 2 nodes" in page
