"""Issue 45: the probes the API lists (GET /api/v1/probes), on a page: support reads it, others may not."""

import pytest
from django.urls import reverse

from dashboard.models import MemoryLesson, Node, ProbeProposal

pytestmark = pytest.mark.django_db


def test_the_page_lists_the_same_probes_as_the_api(support_client, api_call, api_token, sim_node):
    from dashboard.capacity import GiB
    from dashboard.deployments.services.deploy import slice_deploy

    node = sim_node(2877, cru=32, mru=64 * GiB, sru=4000 * GiB, farm_id=77, zos_build="v3.14.0-sim")
    Node.objects.filter(pk=node.pk).update(zos_version="v3.14.0-sim")
    slice_deploy(node=Node.objects.get(pk=node.pk), slice_index=0)
    api = api_call("get", "/api/v1/probes", api_token("read")).json()["probes"]
    page = support_client.get(reverse("probes")).content.decode()
    assert [p["node_id"] for p in api] == [2877]
    assert 'data-node="2877"' in page and "v3.14.0-sim" in page
    assert MemoryLesson.objects.count() == 0  # nothing learnt yet: the build is as uncertain as can be
    # Both only read: the sender takes the list with POST /api/v1/probes (tests/api/test_api_probes.py).
    assert ProbeProposal.objects.count() == 0
    assert "POST /api/v1/probes" in page


def test_the_page_says_so_when_there_is_nothing_to_probe(support_client):
    assert "No probe would teach anything now" in support_client.get(reverse("probes")).content.decode()


def test_a_user_in_no_group_is_refused(nogroup_client):
    assert nogroup_client.get(reverse("probes")).status_code == 403


def test_it_takes_only_a_get(support_client):
    assert support_client.post(reverse("probes")).status_code == 405


def test_the_failed_deployments_page_links_to_it(support_client):
    assert 'href="/probes/"' in support_client.get(reverse("deployments-failed")).content.decode()
