"""Issue 34, finding 5: a policy version is its content. v1 -> v2 -> a revert as v3 (v1's values) leaves
the catalogs carved under v1 current, and the preview of such a version says it stales nothing."""

from dataclasses import replace

import pytest
from django.urls import reverse

from dashboard.capacity import PROFILES, GiB
from dashboard.figures.services.figures import figures_refresh_all
from dashboard.models import Node, Policy, PolicyVersion
from dashboard.policies.selectors.policy import policy_preview
from dashboard.policies.services.policy import policy_update, policy_version_record
from dashboard.views.policy import PolicyForm
from tests.factories import NODE_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_v1(sim_node):
    fleet = Policy.objects.create(name="fleet", scope=Policy.Scope.FLEET, **Policy.parameters_from(PROFILES["zos"]))
    policy_version_record(fleet, action=PolicyVersion.Action.CREATED)  # as policy_create and demo_fleet do
    sim_node(1774, **NODE_1774)
    sim_node(1775, **NODE_1774)
    figures_refresh_all()
    return fleet


def test_finding_5_a_revert_to_the_values_a_catalog_was_carved_with_stales_nothing(fleet_v1):
    v1 = Policy.parameters_from(PROFILES["zos"])
    fleet, _ = policy_update(policy=fleet_v1, parameters={"slice_mru": 8 * GiB})
    assert Node.objects.filter(stale=True).count() == 2  # v2 carves otherwise: stale, and why
    assert "the policy is now v2" in Node.objects.first().stale_reason
    fleet, changed = policy_update(policy=fleet, parameters=v1, reverted_from=1)
    assert changed and fleet.version == 3
    assert set(Node.objects.values_list("stale", "stale_reason")) == {(False, "")}


def test_finding_5_the_preview_of_a_revert_says_it_stales_nothing_and_makes_the_nodes_current(fleet_v1, admins_client):
    v1 = Policy.parameters_from(PROFILES["zos"])
    fleet, _ = policy_update(policy=fleet_v1, parameters={"slice_mru": 8 * GiB})
    preview = policy_preview(candidate=replace(fleet_v1.to_capacity(), version=3), scope=Policy.Scope.FLEET)
    assert (preview.nodes, preview.stale_now, preview.stale_after, len(preview.would_go_stale)) == (2, 2, 0, 0)
    data = {
        name: PolicyForm.base_fields[name].prepare_value(value)
        for name, value in PolicyForm.initial_from(fleet).items()
    }
    data |= {name: PolicyForm.base_fields[name].prepare_value(v1[name]) for name in v1 if name in data}
    page = admins_client.post(reverse("policy-edit", args=[fleet.pk]), {**data, "preview": "1"}).content.decode()
    assert "Saving it stales no node and makes 2 current again" in page


def _deployed(node_grid_id: int, count: int) -> None:
    from dashboard.models import Slice

    Node.objects.get(grid_id=node_grid_id).slices.filter(index__lt=count).update(state=Slice.State.DEPLOYED)


def test_issue_45_defect_2_a_revert_keeps_a_catalog_current_through_later_deploys(fleet_v1):
    """Deploys round what is left up (4 of 1774's 151 GiB slices deployed: the policy would carve 152 GiB);
    a catalog carved by identical values keeps that tolerance under the reverted version."""
    v1 = Policy.parameters_from(PROFILES["zos"])
    fleet, _ = policy_update(policy=fleet_v1, parameters={"slice_mru": 8 * GiB})
    policy_update(policy=fleet, parameters=v1, reverted_from=1)
    from dashboard.models import AuditEvent

    said = AuditEvent.objects.get(action="policy.reverted").message
    assert "catalogs carved under v1 (the same values) count as v3" in said
    _deployed(1774, 4)
    figures_refresh_all()
    assert list(Node.objects.filter(grid_id=1774).values_list("stale", "stale_reason")) == [(False, "")]


def test_issue_45_defect_2_a_catalog_already_rounded_under_v1_stays_current_after_the_revert(fleet_v1):
    _deployed(1775, 4)
    figures_refresh_all()
    assert not Node.objects.get(grid_id=1775).stale
    v1 = Policy.parameters_from(PROFILES["zos"])
    fleet, _ = policy_update(policy=fleet_v1, parameters={"slice_mru": 8 * GiB})
    policy_update(policy=fleet, parameters=v1, reverted_from=1)
    assert list(Node.objects.filter(grid_id=1775).values_list("stale", "stale_reason")) == [(False, "")]
