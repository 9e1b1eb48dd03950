"""The "Add nodes from the grid" pages: the form, the preview job, the onboarding job."""

import pytest
from django.test import Client

from dashboard.capacity import GiB
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, Job, Node

FARM = {"farm_ids": "4242", "node_ids": "", "status": "", "policy": ""}


@pytest.fixture
def farm(sim_node):
    for node_id in (1, 2, 3):
        sim_node(node_id, register=False, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    return sim_node.grid


def run(job_id: int) -> Job:
    job = job_claim(job_id=job_id)
    job_execute(job=job)
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_it_shows_the_form_to_an_admin(admins_client):
    response = admins_client.get("/nodes/add/")
    assert response.status_code == 200 and b'id="onboard-form"' in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["support_client", "nogroup_client"])
def test_it_refuses_anyone_but_an_admin(request, who):
    client = request.getfixturevalue(who)
    assert (client.get("/nodes/add/").status_code, client.post("/nodes/add/", FARM).status_code) == (403, 403)


@pytest.mark.django_db
def test_it_refuses_other_methods(admins_client):
    assert admins_client.put("/nodes/add/").status_code == 405


@pytest.mark.django_db
def test_it_refuses_a_post_without_the_csrf_token(role_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admins", username="ada"))
    assert client.post("/nodes/add/", {**FARM, "action": "preview"}).status_code == 403


@pytest.mark.django_db
def test_a_preview_is_a_dry_run_job(admins_client, farm):
    response = admins_client.post("/nodes/add/", {**FARM, "action": "preview"})
    job = Job.objects.get(kind=Job.Kind.ONBOARD)
    assert (response.status_code, response["Location"], job.dry_run) == (302, f"/nodes/add/{job.pk}/", True)
    assert job.parameters == {"farm_ids": [4242], "node_ids": [], "status": None, "policy": None}


@pytest.mark.django_db
def test_the_preview_lists_what_would_be_registered_and_offers_it(admins_client, farm):
    admins_client.post("/nodes/add/", {**FARM, "action": "preview"})
    job = run(Job.objects.get().pk)
    page = admins_client.get(f"/nodes/add/{job.pk}/").content.decode()
    assert Node.objects.count() == 0
    assert "Would be registered (3 nodes, 18 deployable slices)" in page and 'value="register"' in page


@pytest.mark.django_db
def test_confirming_registers_the_nodes_and_shows_their_ages(admins_client, farm):
    admins_client.post("/nodes/add/", {**FARM, "action": "register"})
    job = run(Job.objects.get().pk)
    page = admins_client.get(f"/nodes/add/{job.pk}/").content.decode()
    assert (job.state, Node.objects.count()) == (Job.State.SUCCEEDED, 3)
    assert "read just now, node reported just now" in page


@pytest.mark.django_db
def test_the_run_is_audited_with_who_asked(admins_client, farm):
    admins_client.post("/nodes/add/", {**FARM, "action": "register"})
    run(Job.objects.get().pk)
    event = AuditEvent.objects.get(action="nodes onboarded")
    assert (event.actor.username, event.source) == ("ada", "web")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"farm_ids": "", "node_ids": ""}, "Give at least one farm id or node id"),
        ({"farm_ids": "42x"}, "Not a farm id"),
        ({"node_ids": "1 2 0"}, "Not a node id"),
    ],
)
def test_it_says_what_is_wrong_with_the_form(admins_client, form, message):
    response = admins_client.post("/nodes/add/", {**FARM, **form, "action": "preview"})
    assert response.status_code == 400 and message in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_polled_card_alone_comes_back_to_htmx(admins_client, farm):
    admins_client.post("/nodes/add/", {**FARM, "action": "preview"})
    job = Job.objects.get()
    response = admins_client.get(f"/nodes/add/{job.pk}/", headers={"HX-Request": "true"})
    assert (
        response.content.decode().lstrip().startswith('<section id="onboard-card"')
        and b"hx-trigger" in response.content
    )


@pytest.mark.django_db
def test_an_unknown_job_is_not_found(admins_client):
    assert admins_client.get("/nodes/add/999/").status_code == 404


@pytest.mark.django_db
def test_it_shows_the_run_already_going_instead_of_starting_another(admins_client, farm):
    admins_client.post("/nodes/add/", {**FARM, "action": "register"})
    first = Job.objects.get()
    response = admins_client.post("/nodes/add/", {**FARM, "farm_ids": "7", "action": "register"}, follow=True)
    assert (Job.objects.count(), response.redirect_chain[-1][0]) == (1, f"/nodes/add/{first.pk}/")
    assert "Already running" in response.content.decode()


@pytest.mark.django_db
def test_only_admins_see_the_link(admins_client):
    assert b'href="/nodes/add/"' in admins_client.get("/").content


@pytest.mark.django_db
def test_support_does_not_see_the_link(support_client):
    assert b'href="/nodes/add/"' not in support_client.get("/").content


@pytest.mark.django_db
def test_a_preview_past_the_limit_asks_the_admin_to_confirm_the_number(admins_client, farm, settings):
    settings.ONBOARD_MAX_NEW_NODES = 2
    admins_client.post("/nodes/add/", {**FARM, "action": "preview"})
    page = admins_client.get(f"/nodes/add/{run(Job.objects.get().pk).pk}/").content.decode()
    assert 'id="confirm-new-nodes"' in page and 'name="max_new_nodes" value="3" required' in page
    assert "ONBOARD_MAX_NEW_NODES" in page


@pytest.mark.django_db
def test_without_the_confirmation_a_run_stops_at_the_limit(admins_client, farm, settings):
    settings.ONBOARD_MAX_NEW_NODES = 2
    settings.GRID_PAGE_SIZE = 2
    admins_client.post("/nodes/add/", {**FARM, "action": "register"})
    job = run(Job.objects.get().pk)
    assert (job.state, Node.objects.count()) == (Job.State.FAILED, 2)
    assert "past the 2 allowed (ONBOARD_MAX_NEW_NODES=2)" in job.error


@pytest.mark.django_db
def test_the_confirmed_number_is_what_the_run_may_register(admins_client, farm, settings):
    settings.ONBOARD_MAX_NEW_NODES = 2
    admins_client.post("/nodes/add/", {**FARM, "action": "register", "max_new_nodes": "3"})
    job = run(Job.objects.get().pk)
    assert job.parameters["max_new_nodes"] == 3
    assert (job.state, Node.objects.count()) == (Job.State.SUCCEEDED, 3)
