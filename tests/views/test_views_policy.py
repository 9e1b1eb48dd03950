"""The policy page: the fleet default and overrides; admins preview a change, then save it."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import capacity
from dashboard.models import AuditEvent, Policy
from dashboard.views.policy import PolicyForm

GiB = capacity.GiB


@pytest.fixture
def fleet_default(db):
    return Policy.objects.create(
        name="fleet-default", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )


@pytest.fixture
def fleet(sim_node, fleet_default):
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, policy_name="legacy")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1)
    return sim_node


def form_data(policy: Policy, **changes) -> dict:
    data = {
        name: PolicyForm.base_fields[name].prepare_value(value)
        for name, value in PolicyForm.initial_from(policy).items()
    }
    return {**data, **changes}


@pytest.mark.django_db
def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("policy"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_it_shows_the_fleet_default_and_how_many_nodes_use_it(support_client, fleet):
    response = support_client.get(reverse("policy"))
    [item] = response.context["policies"]
    assert (item.policy.name, item.nodes) == ("fleet-default", 2)


@pytest.mark.django_db
def test_it_shows_the_built_in_profile_when_no_default_is_saved(support_client):
    [item] = support_client.get(reverse("policy")).context["policies"]
    assert item.row is None and item.policy.name == "zos"


@pytest.mark.django_db
def test_it_shows_no_edit_button_to_support(support_client, fleet_default):
    assert reverse("policy-edit", args=[fleet_default.pk]).encode() not in support_client.get(reverse("policy")).content


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_refuses_support_staff_the_editor(support_client, fleet_default, method):
    response = getattr(support_client, method)(reverse("policy-edit", args=[fleet_default.pk]))
    assert response.status_code == 403


@pytest.mark.django_db
def test_it_refuses_a_post_to_the_list(admins_client):
    assert admins_client.post(reverse("policy")).status_code == 405


@pytest.mark.django_db
def test_it_fills_the_form_with_sizes_a_person_can_read(admins_client, fleet_default):
    response = admins_client.get(reverse("policy-edit", args=[fleet_default.pk]))
    assert b'value="4GiB"' in response.content


@pytest.mark.django_db
def test_it_previews_a_change_without_saving_it(admins_client, fleet):
    policy = Policy.objects.get()
    response = admins_client.post(
        reverse("policy-edit", args=[policy.pk]), form_data(policy, slice_mru="8GiB", preview="1")
    )
    preview = response.context["preview"]
    assert (preview.nodes, preview.deployable_now, preview.deployable_after) == (2, 9, 4)
    assert Policy.objects.get().version == 1


@pytest.mark.django_db
def test_a_preview_of_slices_with_more_vcpus_than_a_node_has_threads_says_so_for_that_node(admins_client, fleet):
    # zosbase pkg/vm.go VM.Validate: "invalid cpu must be between 1 and 2" for a 4-vCPU VM on 2 threads.
    fleet(30, cru=2, mru=16 * GiB, sru=465 * GiB, farm_id=1)
    policy = Policy.objects.get()
    response = admins_client.post(
        reverse("policy-edit", args=[policy.pk]), form_data(policy, slice_cru="4", preview="1")
    )
    preview = response.context["preview"]
    [refused] = preview.cpu_refused
    assert (refused.node_id, refused.deployable_after) == (30, 0)
    assert "node has 2 logical CPUs" in refused.refused_words
    assert "invalid cpu must be between 1 and 2" in refused.refused_words
    assert b"ZOS would refuse every slice of this policy" in response.content


@pytest.mark.django_db
def test_it_lists_the_nodes_that_would_go_stale(admins_client, fleet):
    policy = Policy.objects.get()
    response = admins_client.post(
        reverse("policy-edit", args=[policy.pk]), form_data(policy, slice_mru="8GiB", preview="1")
    )
    assert [n.node_id for n in response.context["preview"].would_go_stale] == [20]


@pytest.mark.django_db
def test_it_saves_the_previewed_values_with_a_new_version_and_an_audit_event(admins_client, fleet):
    policy = Policy.objects.get()
    url = reverse("policy-edit", args=[policy.pk])
    preview = admins_client.post(url, form_data(policy, slice_mru="8GiB", preview="1"))
    response = admins_client.post(
        url, form_data(policy, slice_mru="8GiB", save="1", preview_token=preview.context["preview_token"])
    )
    saved = Policy.objects.get()
    assert response["Location"] == reverse("policy")
    assert (saved.slice_mru, saved.version) == (8 * GiB, 2)
    assert AuditEvent.objects.filter(action="policy.changed").count() == 1


@pytest.mark.django_db
def test_it_shows_the_preview_again_when_the_values_differ_from_the_previewed_ones(admins_client, fleet):
    policy = Policy.objects.get()
    url = reverse("policy-edit", args=[policy.pk])
    preview = admins_client.post(url, form_data(policy, slice_mru="8GiB", preview="1"))
    response = admins_client.post(
        url, form_data(policy, slice_mru="2GiB", save="1", preview_token=preview.context["preview_token"])
    )
    assert response.status_code == 200 and "preview" in response.context
    assert Policy.objects.get().version == 1


@pytest.mark.django_db
def test_it_refuses_a_decimal_unit_with_one_clear_error(admins_client, fleet_default):
    url = reverse("policy-edit", args=[fleet_default.pk])
    response = admins_client.post(url, form_data(fleet_default, slice_mru="4GB", preview="1"))
    assert response.status_code == 400
    assert b"uses a decimal unit" in response.content
    assert Policy.objects.get().slice_mru == 4 * GiB


@pytest.mark.django_db
def test_it_refuses_a_slice_below_the_zos_minimum(admins_client, fleet_default):
    url = reverse("policy-edit", args=[fleet_default.pk])
    response = admins_client.post(url, form_data(fleet_default, slice_mru="100MiB", preview="1"))
    assert response.status_code == 400
    assert b"below ZOS&#x27;s minimum of 250 MiB" in response.content


@pytest.mark.django_db
def test_it_refuses_a_save_without_the_csrf_token(role_user, fleet_default):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admins"))
    response = client.post(reverse("policy-edit", args=[fleet_default.pk]), form_data(fleet_default, save="1"))
    assert response.status_code == 403


@pytest.mark.django_db
def test_it_creates_a_farm_override_after_a_preview(admins_client, fleet):
    data = {**form_data(Policy.objects.get()), "name": "farm-1", "scope": "farm", "farm_id": "1"}
    preview = admins_client.post(reverse("policy-new"), {**data, "preview": "1"})
    assert preview.context["preview"].nodes == 1
    admins_client.post(reverse("policy-new"), {**data, "save": "1", "preview_token": preview.context["preview_token"]})
    assert Policy.objects.get(name="farm-1").farm_id == 1


@pytest.mark.django_db
def test_it_refuses_a_second_fleet_default_with_one_clear_error(admins_client, fleet):
    data = {**form_data(Policy.objects.get()), "name": "another", "scope": "fleet"}
    preview = admins_client.post(reverse("policy-new"), {**data, "preview": "1"})
    response = admins_client.post(
        reverse("policy-new"), {**data, "save": "1", "preview_token": preview.context["preview_token"]}
    )
    assert response.status_code == 409
    assert b"already a fleet default" in response.content


def _count_queries(client, method, url, data=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert getattr(client, method)(url, data).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_it_previews_a_larger_fleet_with_as_many_queries_as_a_small_one(admins_client, fleet):
    policy = Policy.objects.get()
    url = reverse("policy-edit", args=[policy.pk])
    data = form_data(policy, slice_mru="8GiB", preview="1")
    Policy.objects.create(name="farm-2", scope="farm", farm_id=2, **Policy.parameters_from(capacity.PROFILES["zos"]))
    few = (_count_queries(admins_client, "post", url, data), _count_queries(admins_client, "get", reverse("policy")))
    for node_id in range(100, 112):
        fleet(node_id, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1 + node_id % 3)
    Policy.objects.create(name="farm-3", scope="farm", farm_id=3, **Policy.parameters_from(capacity.PROFILES["zos"]))
    assert (
        _count_queries(admins_client, "post", url, data),
        _count_queries(admins_client, "get", reverse("policy")),
    ) == few


@pytest.mark.django_db
def test_a_preview_of_the_saved_values_says_so_and_offers_nothing_to_save(admins_client, fleet):
    # Issue 25: it said "saving changes nothing" beside "89 would go stale" and a "Save as v2" button.
    policy = Policy.objects.get()
    response = admins_client.post(reverse("policy-edit", args=[policy.pk]), form_data(policy, preview="1"))
    preview = response.context["preview"]
    assert response.context["unchanged"] and not preview.would_go_stale
    assert preview.stale_after == preview.stale_now
    page = response.content.decode()
    assert "nothing to save" in page
    assert 'name="save"' not in page and "Save as v2" not in page and "Try this change" not in page
    assert 'name="preview"' in page  # change a value and preview again


@pytest.mark.django_db
def test_a_preview_of_a_change_still_offers_the_save(admins_client, fleet):
    policy = Policy.objects.get()
    response = admins_client.post(
        reverse("policy-edit", args=[policy.pk]), form_data(policy, slice_mru="8GiB", preview="1")
    )
    assert not response.context["unchanged"] and "Save as v2" in response.content.decode()
