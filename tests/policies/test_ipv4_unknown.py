"""Issue 45, defect 7: unknown is not zero. A farm whose public IPs were never read says "never read" (and
null in the API), not "0 free"; placement with ipv4 says the farm was never read apart from "all taken", and
says when no policy sells a public IPv4 at all; a policy that starts selling one has its farms read at once."""

import pytest
from django.urls import reverse

from dashboard.capacity import PROFILES, GiB
from dashboard.models import FarmIps, Policy
from dashboard.policies.services.policy import policy_create, policy_update

pytestmark = pytest.mark.django_db
FARM = 88
NODE = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=FARM, farm_name="unread")


@pytest.fixture
def unread_farm(sim_node):
    sim_node(601, **NODE)
    sim_node.grid.farm_ips_set(FARM, 3)  # the grid knows 3 free IPs; nobody has read them yet
    return sim_node


def test_the_api_says_null_not_0_for_a_farm_never_read(unread_farm, api_call, api_token):
    carries = api_call("get", "/api/v1/nodes/601", api_token("read")).json()["carries"]
    assert (carries["ipv4_slices"], carries["farm_ips_free"], carries["farm_ips_total"]) == (None, None, None)
    assert "never read" in carries["ipv4_words"]


def test_the_node_page_says_never_read_rather_than_0(unread_farm, support_client):
    page = support_client.get(reverse("node", args=[601])).content.decode()
    card = page[page.index('id="ipv4-card"') :][:400]
    assert "<dd>never read<" in card and "<dd>0<" not in card


def test_placement_tells_never_read_from_all_taken_and_that_no_policy_sells_ipv4(unread_farm, api_call, api_token):
    answer = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=4 * GiB, sru=100 * GiB, ipv4=1).json()
    assert (answer["blocked"]["farm_ips_unread"], answer["blocked"]["farm_ips"]) == (1, 0)
    assert any("No policy sells a public IPv4" in note for note in answer["notes"])


def test_a_policy_that_starts_selling_ipv4_reads_its_farms_at_once(
    unread_farm, django_capture_on_commit_callbacks, api_call, api_token
):
    fleet = policy_create(name="fleet", scope="fleet", parameters=Policy.parameters_from(PROFILES["zos"]))
    assert not FarmIps.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        policy_update(policy=fleet, parameters={}, carries={"ipv4_addon": True})
    assert FarmIps.objects.get(farm_id=FARM).free == 3
    answer = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=4 * GiB, sru=100 * GiB, ipv4=1).json()
    assert answer["notes"] == [] and answer["blocked"]["farm_ips_unread"] == 0


def test_a_policy_created_selling_ipv4_reads_its_farms_at_once(unread_farm, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        policy_create(
            name="fleet",
            scope="fleet",
            parameters=Policy.parameters_from(PROFILES["zos"]),
            carries={"public_ipv4": 1},
        )
    assert FarmIps.objects.filter(farm_id=FARM).exists()


def test_the_placement_page_shows_the_note(unread_farm, support_client):
    page = support_client.get(reverse("placement"), {"cru": 1, "mru": "4GiB", "sru": "100GiB", "ipv4": "on"})
    assert "No policy sells a public IPv4" in page.content.decode()
