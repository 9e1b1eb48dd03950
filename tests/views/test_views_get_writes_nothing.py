"""A GET reads: no page, API read or /metrics answer writes a row, whoever asks and however often.

A GET is what a link prefetch, a crawler behind a login, a dashboard polling the API or a second tab
sends without anyone deciding anything; what it wrote would change what other pages show (the probe
list once kept its nodes as proposed on each GET). Every view in the URL conf (tests/url_conf.py, so
a new page is covered without anyone adding it) and every GET operation the OpenAPI document lists are
asked, as a page and as htmx, by an admin and with a token of every scope; every table of the
product is the same after, to the byte. What a sign-in stamps (the session, the last login and the
token's last use) is the door's own record, not the product's, and is left out.
"""

import pytest
from django.apps import apps
from django.db import connection

from dashboard.models import ApiToken
from tests.conftest import rolled_back_after
from tests.url_conf import HTMX, VIEWS, url_of, url_world

pytestmark = pytest.mark.django_db

# The door's own stamps (Django's and ours): who signed in and when a token was last used.
STAMPS = {ApiToken._meta.db_table: {"last_used_at"}}
METRICS_TOKEN = "metrics-secret-for-the-test"


@pytest.fixture(scope="module")
def world_built_once(django_db_setup, django_db_blocker):
    """conftest's `world` once for the module (its tests only read), rolled back after it, with a
    node running a VM that no reading tells (the probe list proposes it) and a live hold."""
    from django.utils import timezone

    from dashboard.capacity import GiB, Resources
    from dashboard.deployments.services.holds import hold_create
    from dashboard.deployments.services.outcomes.record import deployment_outcome_record
    from dashboard.nodes.services.registration import node_register

    with rolled_back_after(django_db_blocker):
        # Registered from its totals and read (no page here reads the grid); slice 0 deployed, as reported.
        total = Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
        node = node_register(node_id=1774, total=total, farm_id=4242, policy_name="legacy", used=Resources())
        world = url_world(node)
        # Node 1775 runs a VM that no reading tells (the world's reading tells 1774): the probe list proposes it.
        node_register(node_id=1775, total=total, farm_id=4242, used=Resources())
        for grid_id in (1774, 1775):
            deployment_outcome_record(
                node_id=grid_id, slice_index=0, marketplace_id=f"m-{grid_id}", outcome="deployed", at=timezone.now()
            )
        hold = hold_create(node_id=1774, slice_index=1, ttl_seconds=1800, marketplace_id="m-1", by=None)
        yield {**world, "hold_id": hold.pk}


@pytest.fixture
def world(world_built_once, db):
    return world_built_once


def product_tables() -> dict[str, str]:
    """Each of the product's tables -> a digest of all its rows (every column but the door's stamps)."""
    digests = {}
    with connection.cursor() as cursor:
        for model in apps.get_app_config("dashboard").get_models():
            table = model._meta.db_table
            columns = [f.column for f in model._meta.concrete_fields if f.column not in STAMPS.get(table, ())]
            row = "(" + ", ".join(connection.ops.quote_name(c) for c in columns) + ")::text"
            cursor.execute(
                f"SELECT count(*), md5(coalesce(string_agg({row}, '|' ORDER BY {row}), '')) "
                f"FROM {connection.ops.quote_name(table)}"
            )
            count, digest = cursor.fetchone()
            digests[table] = f"{count} rows, {digest}"
    return digests


def api_reads(world: dict) -> list[str]:
    """Every GET operation of the API, its path filled from the world (a query it needs is its own test's)."""
    from dashboard.api.main import api

    document = api.get_openapi_schema()
    found = []
    for path, operations in document["paths"].items():
        if "get" not in operations or path.endswith(("/openapi.json", "/docs")):
            continue
        found.append(path.format(**world))
    return sorted(found)


def test_the_api_lists_the_reads_this_test_asks(world):
    # A guard on the guard: the OpenAPI document does list the reads (a renamed key would ask none).
    assert {"/api/v1/fleet", "/api/v1/probes", "/api/v1/nodes/1774", "/api/v1/holds"} <= set(api_reads(world))


@pytest.mark.parametrize("headers", [{}, HTMX], ids=["page", "htmx"])
def test_no_page_writes_on_a_get(admins_client, world, headers):
    pages = [url_of(name, route, world) for name, route in VIEWS if name not in ("logout",)]
    admins_client.get("/")  # the session's first stamps, before the picture
    before = product_tables()
    answered = {url: admins_client.get(url, headers=headers).status_code for url in pages}
    assert product_tables() == before
    assert answered["/probes/"] == 200 and answered[f"/nodes/{world['node_id']}/"] == 200  # pages, not refusals
    assert 'data-node="1775"' in admins_client.get("/probes/").content.decode()  # a list it once kept on each GET


def test_no_api_read_and_no_metrics_answer_writes(api_call, api_token, world, settings):
    settings.METRICS_TOKEN = METRICS_TOKEN
    token = api_token("read,precheck,report,act")
    reads = api_reads(world)
    api_call("get", "/api/v1/fleet", token)  # the token's first use, stamped before the picture
    before = product_tables()
    answered = {path: api_call("get", path, token).status_code for path in reads}
    for path in ("/metrics", "/metrics/farms"):
        answered[path] = api_call("get", path, METRICS_TOKEN).status_code
    assert product_tables() == before
    assert answered["/api/v1/probes"] == 200 and answered["/metrics"] == 200, answered
    # The probe list did list a node (a list it once kept on each GET).
    assert [p["node_id"] for p in api_call("get", "/api/v1/probes", token).json()["probes"]] == [1775]
    assert [p for p in answered if answered[p] >= 500] == []
