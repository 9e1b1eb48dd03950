import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.capacity import GiB, MiB, Resources
from dashboard.figures.services.figures import figures_refresh
from dashboard.models import AuditEvent, CapacitySample, Deployment, Job, Node, Policy, Slice
from dashboard.nodes.services.registration import node_register
from tests.factories import TOTAL_1774

pytestmark = pytest.mark.django_db

NODE_1774 = TOTAL_1774  # 31 GiB and 931.5 GiB, in bytes: 33285996544 and 1000190509056
SMALL = Resources(cru=4, mru=16 * GiB, sru=250 * GiB)


@pytest.fixture
def superuser_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser(username="root", password="not-used-1774"))
    return client


@pytest.fixture
def node_1774():
    """The legacy catalog of node 1774 with slice 0 deployed and a failed deployment of slice 6."""
    node = node_register(node_id=1774, total=NODE_1774, farm_id=1, farm_name="mitana", policy_name="legacy")
    node.slices.filter(index=0).update(state=Slice.State.DEPLOYED)
    Node.objects.filter(pk=node.pk).update(placeable_now=5, phantom_slices=1)
    figures_refresh([node.pk])
    Deployment.objects.create(
        node=node,
        slice_index=6,
        cru=1,
        mru=4 * GiB,
        sru=133 * GiB,
        state=Deployment.State.FAILED,
        cause=Deployment.Cause.MEMORY,
        raw_error="failed to satisfy required capacity: cannot fulfil required memory size 4294967296 bytes "
        "out of usable 4187593113 bytes",
    )
    Job.objects.create(kind=Job.Kind.PRECHECK, node=node, state=Job.State.SUCCEEDED, step="done")
    CapacitySample.objects.create(
        node=node,
        vm_count=1,
        vm_mru=4 * GiB,
        vm_sru=133 * GiB,
        total_mru=NODE_1774.mru,
        total_sru=NODE_1774.sru,
        used_mru=7 * GiB,
        used_sru=153 * GiB,
    )
    return Node.objects.get(pk=node.pk)


def small_nodes(count, start=5000):
    for i in range(count):
        node_register(node_id=start + i, total=SMALL, farm_id=2 + i % 3, farm_name=f"farm-{2 + i % 3}")


@pytest.mark.parametrize(
    "model", ["node", "slice", "policy", "deployment", "job", "capacitysample", "auditevent", "apitoken"]
)
def test_it_lists_every_model_for_a_superuser(superuser_client, node_1774, model):
    assert superuser_client.get(f"/admin/dashboard/{model}/").status_code == 200


def test_it_refuses_the_admin_to_an_anonymous_visitor(client, node_1774):
    response = client.get("/admin/dashboard/node/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_it_shows_nominal_against_deployable_in_the_node_list(superuser_client, node_1774):
    content = superuser_client.get("/admin/dashboard/node/").content.decode()
    assert "7 → 6 (1 over)" in content


def test_it_marks_a_stale_catalog_in_the_node_list(superuser_client, node_1774):
    content = superuser_client.get("/admin/dashboard/node/").content.decode()
    assert '<img src="/static/admin/img/icon-no.svg" alt="False">' not in content
    assert 'alt="True"' in content


def test_it_lists_nodes_in_a_fixed_number_of_queries(superuser_client, node_1774):
    small_nodes(3)
    with CaptureQueriesContext(connection) as few:
        assert superuser_client.get("/admin/dashboard/node/").status_code == 200
    small_nodes(40, start=6000)
    with CaptureQueriesContext(connection) as many:
        assert superuser_client.get("/admin/dashboard/node/").status_code == 200
    assert len(many) == len(few)


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ("q=1774", "1774", "5001"),
        ("q=farm-3", "5001", "1774"),
        ("q=mitana", "1774", "5000"),
        ("status__exact=unknown", "5000", "1774"),
        ("farm=1", "1774", "5000"),
        ("dedicated__exact=1", None, "1774"),
    ],
)
def test_it_searches_and_filters_nodes(superuser_client, node_1774, query, shown, hidden):
    small_nodes(3)
    Node.objects.filter(grid_id__gte=5000).update(status="unknown")
    content = superuser_client.get(f"/admin/dashboard/node/?{query}").content.decode()
    if shown:
        assert f">{shown}</a>" in content
    assert f">{hidden}</a>" not in content


def test_it_survives_a_search_that_is_not_a_number(superuser_client, node_1774):
    assert superuser_client.get("/admin/dashboard/node/?q=%27%3B--").status_code == 200


def test_it_shows_a_nodes_catalog_and_figures(superuser_client, node_1774):
    content = superuser_client.get(f"/admin/dashboard/node/{node_1774.pk}/change/").content.decode()
    assert "7 in the catalog, 6 deployable under zos v1" in content
    assert "Stale: carved with policy legacy v1" in content


def test_it_does_not_add_nodes_by_hand(superuser_client):
    assert superuser_client.get("/admin/dashboard/node/add/").status_code == 403


def node_form(node, **changes):
    """The node change form as the admin page would post it, with its slice inline."""
    slices = list(node.slices.order_by("index"))
    data = {
        "farm_name": node.farm_name,
        "twin_id": "",
        "status": node.status,
        "rented_by_twin_id": "",
        "country": "",
        "city": "",
        "slices-TOTAL_FORMS": str(len(slices)),
        "slices-INITIAL_FORMS": str(len(slices)),
        "slices-MIN_NUM_FORMS": "0",
        "slices-MAX_NUM_FORMS": "1000",
    }
    for i, s in enumerate(slices):
        data.update(
            {
                f"slices-{i}-id": str(s.pk),
                f"slices-{i}-node": str(node.pk),
                f"slices-{i}-index": str(s.index),
                f"slices-{i}-cru": str(s.cru),
                f"slices-{i}-mru": str(s.mru),
                f"slices-{i}-sru": str(s.sru),
                f"slices-{i}-state": s.state,
                f"slices-{i}-rented_by_twin_id": "",
            }
        )
    data.update(changes)
    return data


def test_it_edits_a_free_slice_from_the_node_page(superuser_client, node_1774):
    response = superuser_client.post(
        f"/admin/dashboard/node/{node_1774.pk}/change/", node_form(node_1774, **{"slices-1-sru": str(100 * GiB)})
    )
    assert response.status_code == 302
    assert node_1774.slices.get(index=1).sru == 100 * GiB
    assert_figures_current()


def test_it_keeps_an_occupied_slice_read_only(superuser_client, node_1774):
    superuser_client.post(
        f"/admin/dashboard/node/{node_1774.pk}/change/",
        node_form(node_1774, **{"slices-0-sru": str(GiB), "slices-0-state": "free"}),
    )
    assert node_1774.slices.values_list("sru", "state").get(index=0) == (133 * GiB, "deployed")


def test_it_refuses_to_delete_an_occupied_slice(superuser_client, node_1774):
    response = superuser_client.post(
        f"/admin/dashboard/node/{node_1774.pk}/change/", node_form(node_1774, **{"slices-0-DELETE": "on"})
    )
    assert response.status_code == 200
    assert "slice 0 is deployed: it is someone&#x27;s VM and cannot be deleted here" in response.content.decode()
    assert node_1774.slices.count() == 7


def test_it_refuses_a_bulk_delete_that_includes_someones_vm(superuser_client, node_1774):
    pks = [str(pk) for pk in node_1774.slices.values_list("pk", flat=True)]
    response = superuser_client.post(
        "/admin/dashboard/slice/", {"action": "delete_selected", "_selected_action": pks, "post": "yes"}
    )
    assert response.status_code == 403 and node_1774.slices.count() == 7


def test_it_bulk_deletes_free_slices(superuser_client, node_1774):
    pks = [str(pk) for pk in node_1774.slices.filter(index__gte=5).values_list("pk", flat=True)]
    superuser_client.post(
        "/admin/dashboard/slice/", {"action": "delete_selected", "_selected_action": pks, "post": "yes"}
    )
    assert list(node_1774.slices.values_list("index", flat=True)) == [0, 1, 2, 3, 4]
    assert Node.objects.values_list("slices_free", "stale").get(pk=node_1774.pk) == (4, True)
    assert_figures_current()


def test_it_counts_a_slice_edited_on_its_own_page(superuser_client, node_1774):
    s = node_1774.slices.get(index=6)
    data = {
        "node": str(node_1774.pk),
        "index": "6",
        "cru": "1",
        "mru": str(s.mru),
        "sru": str(s.sru),
        "state": "rented",
        "rented_by_twin_id": "",
        "generation": "1",
    }
    assert superuser_client.post(f"/admin/dashboard/slice/{s.pk}/change/", data).status_code == 302
    assert Node.objects.values_list("slices_free", "slices_rented").get(pk=node_1774.pk) == (5, 1)
    assert_figures_current()


def test_it_moves_a_nodes_figures_to_the_policy_made_and_deleted_in_the_admin(superuser_client, node_1774):
    superuser_client.post("/admin/dashboard/policy/add/", policy_form(name="fleet", slice_mru=str(8 * GiB)))
    assert Node.objects.get(pk=node_1774.pk).effective_policy == "fleet v1"
    pk = Policy.objects.get().pk
    assert superuser_client.post(f"/admin/dashboard/policy/{pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Policy.objects.exists()
    assert Node.objects.get(pk=node_1774.pk).effective_policy == "zos v1"
    assert AuditEvent.objects.filter(action="policy.deleted").count() == 1
    assert_figures_current()


def assert_figures_current():
    from django.core.management import call_command

    call_command("figures_refresh", "--check", stdout=open("/dev/null", "w"))


def test_it_searches_deployments_by_the_raw_error(superuser_client, node_1774):
    content = superuser_client.get("/admin/dashboard/deployment/?q=usable+4187593113").content.decode()
    assert "cannot fulfil required memory size" in content


def test_it_filters_deployments_by_cause(superuser_client, node_1774):
    assert "cannot fulfil" in superuser_client.get("/admin/dashboard/deployment/?cause__exact=memory").content.decode()
    assert (
        "cannot fulfil" not in superuser_client.get("/admin/dashboard/deployment/?cause__exact=disk").content.decode()
    )


@pytest.mark.parametrize("model", ["deployment", "job", "auditevent", "capacitysample"])
def test_it_shows_records_read_only(superuser_client, node_1774, model):
    pk = (
        {"deployment": Deployment, "job": Job, "auditevent": AuditEvent, "capacitysample": CapacitySample}[model]
        .objects.first()
        .pk
    )
    assert superuser_client.get(f"/admin/dashboard/{model}/{pk}/change/").status_code == 200
    assert superuser_client.post(f"/admin/dashboard/{model}/{pk}/change/", {}).status_code == 403
    assert superuser_client.get(f"/admin/dashboard/{model}/add/").status_code == 403


def policy_form(**changes):
    data = {
        "name": "fleet",
        "scope": "fleet",
        "farm_id": "",
        "node": "",
        "slice_mru": str(4 * GiB),
        "slice_cru": "1",
        "reserve_mru_percent": "10",
        "reserve_mru_floor": str(2 * GiB),
        "reserve_sru": str(20 * GiB),
        "overhead_mru_per_vm": "0",
        "overhead_sru_per_vm": "0",
        "rootfs": "zos",
        "min_slice_sru": str(10 * GiB),
        "sru_step": str(GiB),
        "arithmetic": "bytes",
        # What a slice carries, at the model's defaults: a required number, and two unticked boxes (not sent).
        "public_ipv4": "0",
    }
    data.update(changes)
    return data


def test_it_creates_a_policy_with_an_audit_event(superuser_client):
    assert superuser_client.post("/admin/dashboard/policy/add/", policy_form()).status_code == 302
    assert Policy.objects.values_list("name", "version").get() == ("fleet", 1)
    assert AuditEvent.objects.get().source == "admin"


def test_it_bumps_the_version_of_a_policy_changed_in_the_admin(superuser_client, node_1774):
    superuser_client.post("/admin/dashboard/policy/add/", policy_form())
    pk = Policy.objects.get().pk
    response = superuser_client.post(f"/admin/dashboard/policy/{pk}/change/", policy_form(slice_mru=str(8 * GiB)))
    assert response.status_code == 302
    assert Policy.objects.values_list("slice_mru", "version").get() == (8 * GiB, 2)


def test_it_sets_what_a_policys_slices_carry_without_a_new_version(superuser_client):
    superuser_client.post("/admin/dashboard/policy/add/", policy_form())
    pk = Policy.objects.get().pk
    response = superuser_client.post(
        f"/admin/dashboard/policy/{pk}/change/", policy_form(public_ipv4="1", gpu_slices="on")
    )
    assert response.status_code == 302
    # No catalog goes stale by what a slice carries: the version stays.
    assert Policy.objects.values_list("public_ipv4", "ipv4_addon", "gpu_slices", "version").get() == (1, False, True, 1)


def test_it_refuses_a_bad_policy_with_the_reason_and_saves_nothing(superuser_client):
    response = superuser_client.post("/admin/dashboard/policy/add/", policy_form(slice_mru=str(100 * MiB)))
    assert response.status_code == 200 and not Policy.objects.exists()
    assert "below ZOS&#x27;s minimum of 250 MiB" in response.content.decode()


def test_it_refuses_a_policy_named_like_a_built_in_profile(superuser_client):
    response = superuser_client.post("/admin/dashboard/policy/add/", policy_form(name="zos"))
    assert "is the name of a built-in profile" in response.content.decode() and not Policy.objects.exists()


def test_a_slice_edited_in_the_admin_is_audited_and_moves_the_catalog_generation(superuser_client, node_1774):
    generation = node_1774.catalog_generation
    superuser_client.post(
        f"/admin/dashboard/node/{node_1774.pk}/change/", node_form(node_1774, **{"slices-1-sru": str(100 * GiB)})
    )
    event = AuditEvent.objects.get(action="slice.edited")
    assert event.actor.is_superuser and event.node_id == node_1774.pk and "sru" in event.message
    # A re-register planned before the edit sees another generation and writes nothing over it.
    assert Node.objects.get(pk=node_1774.pk).catalog_generation == generation + 1


def test_a_slice_deleted_in_the_admin_is_audited(superuser_client, node_1774):
    pks = [str(pk) for pk in node_1774.slices.filter(index__gte=5).values_list("pk", flat=True)]
    superuser_client.post(
        "/admin/dashboard/slice/", {"action": "delete_selected", "_selected_action": pks, "post": "yes"}
    )
    assert AuditEvent.objects.filter(action="slice.deleted", node=node_1774).count() == 2


def test_the_service_refuses_to_edit_a_slice_that_holds_a_vm_and_writes_nothing(node_1774):
    from dashboard.catalogs.services.slices import SliceOccupied, slice_edit

    deployed = node_1774.slices.get(index=0)
    deployed.sru = GiB
    with pytest.raises(SliceOccupied, match="slice 0 of node 1774 is deployed"):
        slice_edit(slice_=deployed, fields=["sru"])
    assert node_1774.slices.get(index=0).sru == 133 * GiB
    assert not AuditEvent.objects.filter(action="slice.edited").exists()
