"""Issue 37, finding 1: a policy edit over many nodes saves at once and a job rewrites their figures.

POLICY_FIGURES_INLINE_NODES is set below the fleet's size here, so three nodes stand for 10,000.
"""

import pytest
from django.urls import reverse

from dashboard import capacity
from dashboard.figures.services.figures import figures_refresh_all
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, Job, Node, Policy
from dashboard.policies.services.policy import PolicyConflict, policy_create, policy_delete, policy_update
from dashboard.views.policy import PolicyForm

GiB = capacity.GiB


@pytest.fixture
def many_nodes(settings, legacy_fleet):
    """Three nodes carved under the fleet default, more than an edit rewrites itself."""
    settings.POLICY_FIGURES_INLINE_NODES = 2
    fleet = Policy.objects.create(
        name="fleet", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )
    legacy_fleet(3)
    figures_refresh_all()
    return fleet


def effective() -> set[str]:
    return set(Node.objects.values_list("effective_policy", flat=True))


def rewrite_run(job: Job) -> Job:
    job_execute(job=job_claim(job_id=job.pk))
    return Job.objects.get(pk=job.pk)


def only_rewrite() -> Job:
    return Job.objects.get(kind=Job.Kind.POLICY_FIGURES)


@pytest.mark.django_db
def test_finding_1_the_edit_saves_the_version_and_leaves_the_figures_to_a_job(
    many_nodes, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        saved, changed = policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    job = only_rewrite()
    assert (changed, saved.version, effective()) == (True, 2, {"fleet v1"})
    assert (job.state, job.parameters) == (Job.State.QUEUED, {"policy_id": many_nodes.pk, "version": 2})


@pytest.mark.django_db
def test_finding_1_the_edits_effect_is_on_every_node_when_the_job_ends(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    job = rewrite_run(only_rewrite())
    assert (job.state, job.progress_done, job.result["nodes"]) == (Job.State.SUCCEEDED, 3, 3)
    assert effective() == {"fleet v2"}


@pytest.mark.django_db
def test_finding_1_a_second_edit_while_the_rewrite_runs_is_refused(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    with pytest.raises(PolicyConflict, match="still being rewritten"):
        policy_update(policy=Policy.objects.get(), parameters={"slice_mru": 2 * GiB})
    assert (Policy.objects.get().version, Job.objects.filter(kind=Job.Kind.POLICY_FIGURES).count()) == (2, 1)


@pytest.mark.django_db
def test_finding_1_the_next_edit_is_taken_once_the_rewrite_ended(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    rewrite_run(only_rewrite())
    with django_capture_on_commit_callbacks(execute=False):
        saved, changed = policy_update(policy=Policy.objects.get(), parameters={"slice_mru": 2 * GiB})
    assert (changed, saved.version, Job.objects.filter(kind=Job.Kind.POLICY_FIGURES).count()) == (True, 3, 2)


@pytest.mark.django_db
def test_it_still_rewrites_a_few_nodes_inside_the_edit(settings, many_nodes):
    settings.POLICY_FIGURES_INLINE_NODES = 3
    policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    assert (effective(), Job.objects.filter(kind=Job.Kind.POLICY_FIGURES).count()) == ({"fleet v2"}, 0)


@pytest.mark.django_db
def test_it_fails_the_rewrite_of_a_policy_deleted_meanwhile(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    job = only_rewrite()
    Policy.objects.all().delete()
    job = rewrite_run(job)
    assert job.state == Job.State.FAILED and "was deleted" in job.error


def form_data(policy: Policy, **changes) -> dict:
    data = {
        name: PolicyForm.base_fields[name].prepare_value(value)
        for name, value in PolicyForm.initial_from(policy).items()
    }
    return {**data, **changes}


@pytest.mark.django_db
def test_finding_1_the_policy_page_shows_the_rewrites_progress_until_it_ends(
    admins_client, many_nodes, django_capture_on_commit_callbacks
):
    url = reverse("policy-edit", args=[many_nodes.pk])
    preview = admins_client.post(url, form_data(many_nodes, slice_mru="8GiB", preview="1"))
    with django_capture_on_commit_callbacks(execute=False):
        saved = admins_client.post(
            url,
            form_data(many_nodes, slice_mru="8GiB", save="1", preview_token=preview.context["preview_token"]),
            follow=True,
        )
    job = only_rewrite()
    assert f"job #{job.pk}" in saved.content.decode()
    running = admins_client.get(reverse("policy"), headers={"HX-Request": "true"}).content.decode()
    rewrite_run(job)
    ended = admins_client.get(reverse("policy"), headers={"HX-Request": "true"}).content.decode()
    assert f'data-rewrite-job="{job.pk}"' in running and 'hx-trigger="every 2s"' in running
    assert "data-rewrite-job" not in ended and "hx-trigger" not in ended


@pytest.mark.django_db
def test_it_keeps_the_edit_and_the_jobs_request_in_the_audit_trail(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"policy.changed", "job.requested"} <= actions


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_finding_1_a_real_worker_rewrites_the_figures_after_the_edit(settings, legacy_fleet, live_worker, job_finished):
    settings.POLICY_FIGURES_INLINE_NODES = 2
    fleet = Policy.objects.create(
        name="fleet", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )
    legacy_fleet(3)
    figures_refresh_all()
    policy_update(policy=fleet, parameters={"slice_mru": 8 * GiB})
    job = job_finished(Job.objects.get(kind=Job.Kind.POLICY_FIGURES))
    assert (job.state, effective()) == (Job.State.SUCCEEDED, {"fleet v2"})


@pytest.mark.django_db
def test_a_new_fleet_default_over_many_nodes_leaves_the_figures_to_a_job(
    settings, legacy_fleet, django_capture_on_commit_callbacks
):
    settings.POLICY_FIGURES_INLINE_NODES = 2
    legacy_fleet(3)
    figures_refresh_all()
    before = effective()
    with django_capture_on_commit_callbacks(execute=False):
        created = policy_create(
            name="fleet", scope=Policy.Scope.FLEET, parameters=Policy.parameters_from(capacity.PROFILES["zos"])
        )
    job = only_rewrite()
    assert (job.parameters, effective()) == ({"policy_id": created.pk, "version": 1}, before)
    assert rewrite_run(job).state == Job.State.SUCCEEDED
    assert effective() == {"fleet v1"}


@pytest.mark.django_db
def test_deleting_the_fleet_default_over_many_nodes_leaves_the_fallback_to_a_job(
    many_nodes, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        policy_delete(policy=many_nodes)
    job = only_rewrite()
    assert (Policy.objects.count(), effective()) == (0, {"fleet v1"})  # deleted at once, figures next
    assert rewrite_run(job).state == Job.State.SUCCEEDED, job.error
    assert effective() == {"zos v1"}  # the built-in default every node falls back to


@pytest.mark.django_db
def test_deleting_a_farm_override_rewrites_that_farm_only(settings, many_nodes, django_capture_on_commit_callbacks):
    farm = Node.objects.order_by("grid_id").first().farm_id
    settings.POLICY_FIGURES_INLINE_NODES = 10
    override = policy_create(
        name="farmwide",
        scope=Policy.Scope.FARM,
        farm_id=farm,
        parameters=Policy.parameters_from(capacity.PROFILES["zos"]),
    )
    settings.POLICY_FIGURES_INLINE_NODES = 0
    with django_capture_on_commit_callbacks(execute=False):
        policy_delete(policy=override)
    job = rewrite_run(only_rewrite())
    farm_nodes = Node.objects.filter(farm_id=farm).count()
    assert (job.state, job.result["nodes"]) == (Job.State.SUCCEEDED, farm_nodes)
    assert set(Node.objects.filter(farm_id=farm).values_list("effective_policy", flat=True)) == {"fleet v1"}


@pytest.mark.django_db
def test_a_deletion_while_the_policys_figures_are_rewritten_is_refused(many_nodes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        policy_update(policy=many_nodes, parameters={"slice_mru": 8 * GiB})
    with pytest.raises(PolicyConflict, match="still being rewritten"):
        policy_delete(policy=Policy.objects.get())
    assert Policy.objects.count() == 1
