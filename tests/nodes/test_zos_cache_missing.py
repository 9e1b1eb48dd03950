"""Issue 43: a node that lost its zos-cache refuses every workload (zos provisiond getNodeReserved; zos#2043).

The simulated grid answers as ZOS does (a deploy: `failed to satisfy required capacity: failed to get
available memory: subvolume 'zos-cache' not found: file does not exist`; `zos.statistics.get` over RMB:
an `err` of those words; the proxy's /statistics: a 500 passing them on). The dashboard closes the node
with that reason through the one closure seam (capacity.closures "no-cache"), on every page, total, API
answer and placement, and opens it again when it answers for its statistics.
"""

from __future__ import annotations

import csv
import io
import threading

import pytest
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.services.deploy import slices_deploy_all_free
from dashboard.grid import get_grid
from dashboard.grid.classify import classify
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import GridError
from dashboard.models import Node
from dashboard.nodes.services.watch import fleet_watch
from dashboard.nodes.services.zos_cache import THROUGH_PROXY, statistics_heard
from sim.grid import serve_simulator
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
# zosbase pkg/storage/storage.go path(): errors.Wrapf(os.ErrNotExist, "subvolume '%s' not found", name);
# os.ErrNotExist's text is "file does not exist" (zos#2043 quotes the whole).
NOT_FOUND = "subvolume 'zos-cache' not found: file does not exist"


@pytest.fixture
def lost(sim_node):
    """Node 1774 registered (6 free slices under zos), then its zos-cache gone."""
    node = sim_node(1774, policy_name="zos", **node_1774())
    sim_node.grid.cache_lose(1774)
    return node


def closed_by_a_refused_deploy(node, grid) -> Node:
    failed = slices_deploy_all_free(node=node, grid=grid, precheck=False)[0]
    assert (failed.state, failed.cause) == ("failed", "cache-missing")
    assert failed.raw_error.endswith(
        f"failed to satisfy required capacity: failed to get available memory: {NOT_FOUND}"
    )
    return Node.objects.get(pk=node.pk)


def test_a_deploy_zos_refuses_for_the_lost_cache_closes_the_node_and_says_why(lost, sim_node):
    node = closed_by_a_refused_deploy(lost, sim_node.grid)
    assert (node.closure, node.placeable_now, node.phantom_reasons) == ("no-cache", 0, {"no-cache": 6})
    assert NOT_FOUND.split(":")[0] in node.closure_detail and "a deploy ZOS refused" in node.closure_detail
    assert "has lost its zos-cache, so ZOS refuses every workload" in node.closed.what


def test_the_failure_is_explained_in_plain_words(lost, sim_node):
    failed = slices_deploy_all_free(node=lost, grid=sim_node.grid, precheck=False)[0]
    words = deployment_words(failed)
    assert "lost its zos-cache" in words and "refuses every workload" in words and "do not re-register" in words


def test_every_page_total_api_and_placement_shows_the_reason(
    lost, sim_node, admins_client, api_call, api_token, client, settings
):
    closed_by_a_refused_deploy(lost, sim_node.grid)
    page = admins_client.get(reverse("node", args=[1774])).content.decode()
    assert "has lost its zos-cache, so ZOS refuses every workload" in page
    rows = list(csv.DictReader(io.StringIO(admins_client.get(reverse("fleet-export")).content.decode())))
    assert (rows[0]["placeable_now"], rows[0]["phantom_no-cache"], rows[0]["closure"]) == ("0", "6", "no-cache")
    body = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()
    assert (body["figures"]["closure"], body["figures"]["phantom_by_reason"]) == ("no-cache", {"no-cache": 6})
    answer = placement_for(cru=1, mru=4 * GiB, sru=100 * GiB, every_node=True)
    assert (answer.can_host, answer.blocked["no-cache"]) == (0, 1)
    assert "has lost its zos-cache" in answer.verdicts[0].words
    assert placement_for(cru=1, mru=4 * GiB, sru=100 * GiB).blocked["no-cache"] == 1  # the SQL cut agrees
    settings.METRICS_TOKEN = "metrics-token-for-the-zos-cache"
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {settings.METRICS_TOKEN}"}).content.decode()
    assert 'reason="no-cache"} 6' in metrics


def test_our_precheck_then_refuses_before_the_grid(lost, sim_node):
    closed_by_a_refused_deploy(lost, sim_node.grid)
    refused = slices_deploy_all_free(node=Node.objects.get(pk=lost.pk), grid=sim_node.grid)[0]
    assert refused.state == "refused"


def test_a_precheck_opens_it_once_it_answers_for_its_statistics_again(lost, sim_node):
    node = closed_by_a_refused_deploy(lost, sim_node.grid)
    report = precheck_run(node=node, grid=sim_node.grid)
    assert report.closure.key == "no-cache"  # still gone: the proxy's /statistics says so again
    sim_node.grid.cache_lose(1774, missing=False)  # the reboot that recreates it
    report = precheck_run(node=Node.objects.get(pk=node.pk), grid=sim_node.grid)
    node.refresh_from_db()
    assert (report.closure, node.closure, node.zos_cache_missing, node.placeable_now) == (None, "", "", 5)


def test_the_fleet_watch_asks_a_closed_node_again_and_opens_it(lost, sim_node):
    closed_by_a_refused_deploy(lost, sim_node.grid)
    result = fleet_watch(grid=get_grid())
    assert Node.objects.get(pk=lost.pk).closure == "no-cache"
    assert "1 node(s) closed for a lost zos-cache asked again" in " ".join(result.notes)
    sim_node.grid.cache_lose(1774, missing=False)
    result = fleet_watch(grid=get_grid())
    assert Node.objects.get(pk=lost.pk).closure == ""
    assert "1 answered and opened" in " ".join(result.notes)


def test_the_proxys_statistics_error_closes_it_in_zos_own_words(lost, sim_node, settings):
    server = serve_simulator(sim_node.grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        proxy = GridProxyClient(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        with pytest.raises(GridError) as raised:
            proxy.statistics(1774)
    finally:
        server.shutdown()
        server.server_close()
    # tfgrid-sdk-go grid-proxy internal/explorer/server.go getNodeStatistics passes the relay's error on.
    assert f"failed to get get node statistics from relay: {NOT_FOUND}" in str(raised.value)
    assert classify(str(raised.value)).cause == "cache-missing"
    assert statistics_heard(node=lost, answer=raised.value, source=THROUGH_PROXY)
    node = Node.objects.get(pk=lost.pk)
    assert (node.closure, node.zos_cache_missing_source) == ("no-cache", "the Grid Proxy's /statistics")


def test_an_error_that_does_not_name_the_cache_changes_nothing(lost):
    assert not statistics_heard(node=lost, answer=GridError("node 1774 did not answer in time"), source="x")
    assert Node.objects.get(pk=lost.pk).closure == ""


@pytest.fixture
def rmb_peer(sim_node, settings, rmb_redis_url):
    """The stand-in rmb-peer serving this test's simulated grid in a thread, and RMB_REDIS_URL pointing at it."""
    from tests.conftest import stand_in_peer_serving

    settings.RMB_REDIS_URL = rmb_redis_url
    with stand_in_peer_serving(sim_node.grid, rmb_redis_url) as peer:
        yield peer


def test_over_rmb_a_precheck_hears_it_from_the_node_itself_and_closes_it(lost, rmb_peer):
    report = precheck_run(node=lost)
    node = Node.objects.get(pk=lost.pk)
    assert (report.closure.key, node.closure, node.zos_cache_missing_source) == (
        "no-cache",
        "no-cache",
        "zos.statistics.get over RMB",
    )
    assert NOT_FOUND in report.counters_words  # the peer's err, as the node said it
    assert report.words.startswith("node 1774 has lost its zos-cache, so ZOS refuses every workload")


def _report(api_call, api_token, error: str, *, marketplace_id: str):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.models import Slice

    Slice.objects.filter(node__grid_id=1774).update(created_at=timezone.now() - timedelta(days=1))
    body = {
        "node_id": 1774,
        "slice_index": 0,
        "marketplace_id": marketplace_id,
        "outcome": "failed",
        "error": error,
        "at": (timezone.now() - timedelta(minutes=5)).isoformat(),
    }
    return api_call("post", "/api/v1/deployments", api_token("report"), json=body)


def test_a_reported_refusal_for_the_lost_cache_closes_the_node(lost, api_call, api_token):
    error = (
        "workload s1774_0 within deployment 7 failed with error: failed to satisfy required capacity: "
        f"failed to get available memory: {NOT_FOUND}"
    )
    response = _report(api_call, api_token, error, marketplace_id="contract-cache")
    assert response.status_code == 201 and response.json()["deployment"]["cause"] == "cache-missing"
    node = Node.objects.get(pk=lost.pk)
    assert (node.closure, node.zos_cache_missing_source) == ("no-cache", "a reported deploy ZOS refused")


def test_a_reported_image_refused_by_the_cache_quota_is_transient_and_closes_nothing(lost, api_call, api_token):
    # zos#2147's words; the node's catalog is right and it stays open.
    error = (
        "failed to mount flist: 81-27043-diskfulltest: ro mount of flist failed: failed to create flist "
        "mountpoint: mkdir /var/cache/modules/flistd/ro/e4b87e423369bbd1a5550a1ca99a69a6: disk quota exceeded"
    )
    Node.objects.filter(pk=lost.pk).update(zos_cache_sru=10 * GiB)  # as a pool report bounds it
    response = _report(api_call, api_token, error, marketplace_id="contract-image")
    assert response.status_code == 201 and response.json()["deployment"]["cause"] == "cache-full"
    from dashboard.models import Deployment

    words = deployment_words(Deployment.objects.get(marketplace_id="contract-image"))
    assert "transient" in words and "retry the same node after about 5 minutes" in words
    assert "cache quota was 10 GiB at its last pool report" in words
    assert Node.objects.get(pk=lost.pk).closure == ""


def test_the_watchs_pool_round_over_rmb_hears_a_node_without_its_cache(sim_node, rmb_peer, settings):
    # Pools reported long ago: the watch asks the node over RMB for them, its build and its counters.
    from datetime import timedelta

    from django.utils import timezone

    node = sim_node(1774, policy_name="zos", hide_pools=True, **node_1774())
    old = timezone.now() - timedelta(hours=settings.POOLS_MAX_AGE + 1)
    Node.objects.filter(pk=node.pk).update(pools_reported_at=old)
    sim_node.grid.cache_lose(1774)
    result = fleet_watch(grid=get_grid())
    node.refresh_from_db()
    assert (result.pools_asked, node.closure, node.zos_cache_missing_source) == (
        1,
        "no-cache",
        "zos.statistics.get over RMB",
    )
    sim_node.grid.cache_lose(1774, missing=False)
    fleet_watch(grid=get_grid())  # the closed node is asked again, over RMB, and answers
    assert Node.objects.get(pk=node.pk).closure == ""
