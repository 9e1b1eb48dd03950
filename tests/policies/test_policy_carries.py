"""Admins set what a policy's slices carry (public IPv4, the add-on, GPU slices) on the policy page and in
the admin, previewed like any edit; support cannot. The farm's free IPs bound the IPv4 slices.

The expected figures are worked out here: 2 nodes of 16 GiB in one farm, a 4 GiB slice each, the memory
reserve max(10%, 2 GiB): 3 slices a node, 6 in the farm, and 2 free public IPv4s bound them to 2.
"""

import pytest
from django.urls import reverse

from dashboard import capacity
from dashboard.models import AuditEvent, Node, Policy, PolicyVersion
from dashboard.nodes.services.farm_ips import farm_ips_refresh
from dashboard.policies.services.policy import policy_update, policy_version_record
from dashboard.views.policy import PolicyForm

pytestmark = pytest.mark.django_db

GiB = capacity.GiB
FARM = 91
FREE_IPS = 2
NODE = dict(cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=FARM, farm_name="carries")


def slices_per_node() -> int:
    total = NODE["mru"]
    return (total - max(total // 10, 2 * GiB)) // (4 * GiB)


@pytest.fixture
def farm_policy(sim_node):
    row = Policy.objects.create(name="farm-91", scope=Policy.Scope.FARM, farm_id=FARM)
    for node_id in (501, 502):
        sim_node(node_id, **NODE)
    sim_node.grid.farm_ips_set(FARM, FREE_IPS)
    farm_ips_refresh(farm_ids=[FARM])
    return row


def form_data(policy: Policy, **changes) -> dict:
    data = {
        name: PolicyForm.base_fields[name].prepare_value(value)
        for name, value in PolicyForm.initial_from(policy).items()
    }
    # An unticked box is not posted at all.
    return {k: v for k, v in {**data, **changes}.items() if v is not False}


def test_an_admin_previews_and_saves_a_public_ipv4_and_the_farm_bounds_it(admins_client, farm_policy):
    assert Node.objects.filter(farm_id=FARM, placeable_now=slices_per_node()).count() == 2
    url = reverse("policy-edit", args=[farm_policy.pk])
    preview = admins_client.post(url, form_data(farm_policy, public_ipv4="1", preview="1"))
    page = preview.content.decode()
    bound = min(2 * slices_per_node(), FREE_IPS)
    assert f"IPv4 slices: 0 → <strong>farm-bound {bound}</strong>" in page
    assert f"farm {FARM} has {FREE_IPS} free for {2 * slices_per_node()} slices" in page
    assert Policy.objects.get().public_ipv4 == 0  # a preview saves nothing
    token = preview.context["preview_token"]
    response = admins_client.post(url, form_data(farm_policy, public_ipv4="1", save="1", preview_token=token))
    assert response.status_code == 302
    saved = Policy.objects.get()
    # What a slice carries stales no catalog: the version stays.
    assert (saved.public_ipv4, saved.version) == (1, 1)
    assert AuditEvent.objects.filter(action="policy.changed", message__contains="public IPv4s a slice 0 -> 1").exists()
    node_page = admins_client.get(reverse("node", args=[501])).content.decode()
    assert f"{bound} IPv4 slices in farm {FARM}" in node_page
    size = Node.objects.get(grid_id=501).slices.order_by("index").values("cru", "mru", "sru").first()
    placement = admins_client.get(reverse("placement"), {**size, "ipv4": "on"}).content.decode()
    assert f"<dd>{bound}<" in placement


def test_the_add_on_and_gpu_slices_are_saved_and_a_revert_keeps_them(admins_client, farm_policy):
    policy_version_record(farm_policy, action=PolicyVersion.Action.CREATED)  # made directly, not by the service
    url = reverse("policy-edit", args=[farm_policy.pk])
    data = form_data(farm_policy, ipv4_addon="on", gpu_slices="on")
    token = admins_client.post(url, {**data, "preview": "1"}).context["preview_token"]
    admins_client.post(url, {**data, "save": "1", "preview_token": token})
    assert Policy.objects.values_list("ipv4_addon", "gpu_slices", "version").get() == (True, True, 1)
    policy_update(policy=Policy.objects.get(), parameters={"slice_mru": 8 * GiB})  # v2, to revert from
    history = admins_client.get(reverse("policy-history")).content.decode()
    # The history keeps sizes only: the revert to v1 posts what the slices carry now, not "unticked".
    assert history.count('name="ipv4_addon" value="on"') == 1 and 'name="gpu_slices" value="on"' in history


def test_support_cannot_set_what_a_slice_carries(support_client, farm_policy):
    url = reverse("policy-edit", args=[farm_policy.pk])
    assert support_client.post(url, form_data(farm_policy, public_ipv4="1", preview="1")).status_code == 403
    assert Policy.objects.get().public_ipv4 == 0


def test_it_refuses_more_public_ipv4s_a_slice_than_a_vm_takes(admins_client, farm_policy):
    url = reverse("policy-edit", args=[farm_policy.pk])
    response = admins_client.post(url, form_data(farm_policy, public_ipv4="50", preview="1"))
    assert response.status_code == 400 and Policy.objects.get().public_ipv4 == 0


def test_a_new_override_is_created_with_what_its_slices_carry(admins_client, sim_node):
    data = form_data(Policy(name="x"), name="farm-5", scope="farm", farm_id="5", public_ipv4="1", ipv4_addon="on")
    token = admins_client.post(reverse("policy-new"), {**data, "preview": "1"}).context["preview_token"]
    admins_client.post(reverse("policy-new"), {**data, "save": "1", "preview_token": token})
    assert Policy.objects.values_list("name", "public_ipv4", "ipv4_addon").get() == ("farm-5", 1, True)


def test_the_api_says_what_each_policys_slices_carry(api_call, api_token, farm_policy):
    Policy.objects.filter(pk=farm_policy.pk).update(public_ipv4=1)
    body = api_call("get", "/api/v1/policies", api_token("read")).json()
    carries = {p["name"]: p["carries"] for p in body}
    assert carries["farm-91"] == {"public_ipv4": 1, "ipv4_addon": False, "gpu_slices": False}
    assert carries["zos"] == {"public_ipv4": 0, "ipv4_addon": False, "gpu_slices": False}


def test_a_new_override_starts_from_what_the_fleet_defaults_slices_carry(admins_client, db):
    Policy.objects.create(name="fleet", scope=Policy.Scope.FLEET, public_ipv4=1, gpu_slices=True)
    form = admins_client.get(reverse("policy-new")).context["form"]
    assert (form.initial["public_ipv4"], form.initial["ipv4_addon"], form.initial["gpu_slices"]) == (1, False, True)
