"""The policy history: every version recorded with who and when, its diff and the nodes it carves; a revert
is previewed first, then saved as a new version (audited)."""

import re

import pytest

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.models import AuditEvent, Node, Policy, PolicyVersion
from dashboard.policies.services.policy import policy_create, policy_update


@pytest.fixture
def fleet_policy(role_user):
    ada = role_user("admins", username="grace")
    policy = policy_create(
        name="fleet", scope="fleet", parameters=Policy.parameters_from(capacity.PROFILES["zos"]), by=ada
    )
    policy_update(policy=policy, parameters={"slice_mru": 2 * GiB}, by=ada)
    return Policy.objects.get(pk=policy.pk)


@pytest.mark.django_db
def test_every_create_and_change_is_a_version_with_who(fleet_policy):
    entries = list(PolicyVersion.objects.filter(policy=fleet_policy).order_by("version"))
    assert [(e.version, e.action, e.by.username) for e in entries] == [(1, "created", "grace"), (2, "changed", "grace")]
    assert entries[1].parameters["slice_mru"] == 2 * GiB and entries[0].parameters["slice_mru"] == 4 * GiB


@pytest.mark.django_db
def test_support_reads_every_version_with_its_diff_and_the_nodes_it_carves(support_client, fleet_policy, legacy_fleet):
    legacy_fleet(2)
    Node.objects.filter(grid_id=1).update(carved_policy_name="fleet", carved_policy_version=1)
    page = support_client.get("/policy/history/").content.decode()
    assert "slice memory: 4 GiB → <strong>2 GiB</strong>" in page
    v1 = re.search(r'data-version="1">(.*?)</tr>', page, re.S).group(1)
    assert '<td class="num">1</td>' in v1 and "grace" in v1
    assert "Nodes carved today</th>" in page  # today's count, said so (issue 34)
    assert "Revert to v1" not in page  # support reads; only admins revert


@pytest.mark.django_db
def test_the_history_needs_the_policy_read_permission(nogroup_client):
    assert nogroup_client.get("/policy/history/").status_code == 403


@pytest.mark.django_db
def test_the_history_takes_only_a_get(support_client):
    assert support_client.post("/policy/history/").status_code == 405


def v1_values(admins_client) -> dict:
    page = admins_client.get("/policy/history/").content.decode()
    form = re.search(r'<form method="post" action="(/policy/\d+/edit/)">(.*?)</form>', page, re.S)
    values = dict(re.findall(r'name="([a-z0-9_]+)" value="([^"]*)"', form.group(2)))  # public_ipv4 too
    values.pop("csrfmiddlewaretoken", None)
    return {"url": form.group(1), **values}


@pytest.mark.django_db
def test_a_revert_is_previewed_first_and_saves_nothing_until_asked(admins_client, fleet_policy):
    values = v1_values(admins_client)
    url = values.pop("url")
    assert values["revert_from"] == "1" and values["slice_mru"] == "4GiB"
    page = admins_client.post(url, values).content.decode()
    assert "Reverting fleet to v1" in page and "Preview: what this would do" in page
    assert Policy.objects.get(pk=fleet_policy.pk).version == 2


@pytest.mark.django_db
def test_a_saved_revert_is_a_new_version_with_the_old_values_and_audited(admins_client, fleet_policy):
    values = v1_values(admins_client)
    url = values.pop("url")
    preview = admins_client.post(url, values).content.decode()
    token = re.search(r'name="preview_token" value="([0-9a-f]+)"', preview).group(1)
    admins_client.post(url, {**values, "save": "1", "preview_token": token})
    entry = PolicyVersion.objects.get(policy=fleet_policy, version=3)
    assert (entry.action, entry.reverted_from, entry.parameters["slice_mru"]) == ("reverted", 1, 4 * GiB)
    assert AuditEvent.objects.filter(action="policy.reverted", detail__reverted_from=1).exists()
