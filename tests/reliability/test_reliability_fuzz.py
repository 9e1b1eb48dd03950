"""Property-based fuzz of what comes from outside: Grid Proxy payloads, and every page's parameters.

- The payload parsers take any JSON-like value (and the client any HTTP body) and give a
  NodeCapacity / NodeStatistics or a MalformedPayload (a GridError through the client); nothing else.
- Every page, every form field and query parameter, as an admin and as support: never a 500,
  never an unhandled exception (the test client re-raises them), and no catalog change.

Size: a few hundred cases in the suite (derandomized, so the suite is repeatable); the long run
(bench/reliability/fuzz.py) sets RELIABILITY_FUZZ_CASES=10000 and a fresh seed. Each test takes
its share of the total by the weights below.
"""

from __future__ import annotations

import copy
import json
import os
import re
from urllib.parse import quote_from_bytes, urlencode

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import capacity
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.grid.proxy import GridProxyClient, parse_node, parse_statistics
from dashboard.grid.types import GridError, MalformedPayload, NodeCapacity, NodeStatistics
from dashboard.models import Job, Policy, Slice
from tests.gridproxy_canned import Answer, sample, start_canned_proxy
from tests.invariants import catalog_snapshot, state_snapshot

# Long: part of `make test` and `make reliability`, not of the quick loop (`make check`).
pytestmark = pytest.mark.slow

GiB = capacity.GiB
CASES = int(os.environ.get("RELIABILITY_FUZZ_CASES", "400"))
LONG_RUN = "RELIABILITY_FUZZ_CASES" in os.environ
WEIGHTS = {
    "node": 0.12,
    "statistics": 0.08,
    "http": 0.05,
    "get": 0.45,
    "post": 0.20,
    "save": 0.10,
}


def budget(name: str):
    return settings(
        max_examples=max(10, int(CASES * WEIGHTS[name])),
        deadline=None,
        derandomize=not LONG_RUN,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None if not LONG_RUN else settings.default.database,
    )


# --- JSON-like values ------------------------------------------------------------------------

EDGE_NUMBERS = st.sampled_from(
    [
        0,
        -1,
        1,
        2**31 - 1,
        2**31,
        2**32,
        2**53 + 1,
        2**63 - 1,
        2**63,
        2**64,
        10**30,
        -(2**63),
        0.5,
        -0.0,
        1e308,
        float("inf"),
        float("-inf"),
        float("nan"),
        33285996544.0,
        1e19,
    ]
)
SCALARS = st.none() | st.booleans() | st.integers() | EDGE_NUMBERS | st.floats() | st.text(max_size=20)
JSON_LIKE = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)


def _paths(value, prefix=()):
    """Every key path in a nested dict (lists are leaves)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield prefix + (key,)
            yield from _paths(child, prefix + (key,))


def mutated(base: dict):
    """A real payload with a few fields replaced by any JSON-like value, or removed."""

    @st.composite
    def build(draw):
        payload = copy.deepcopy(base)
        paths = list(_paths(payload))
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(paths))
            parent = payload
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(parent, dict):
                continue
            if draw(st.booleans()) and path[-1] in parent:
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(EDGE_NUMBERS | JSON_LIKE)
        return payload

    return build()


NODE_NESTED = sample("node-1774.json")
NODE_FLAT = sample("nodes-page.json")[0]
STATISTICS = sample("node-1774-statistics.json")


@budget("node")
@given(payload=JSON_LIKE | mutated(NODE_NESTED) | mutated(NODE_FLAT))
def test_it_parses_any_node_payload_or_names_what_is_wrong(payload):
    try:
        node = parse_node(payload)
    except MalformedPayload as exc:
        assert str(exc)
        return
    assert isinstance(node, NodeCapacity) and node.node_id > 0
    assert min(node.total.mru, node.total.sru, node.used.mru, node.used.sru) >= 0


@budget("statistics")
@given(payload=JSON_LIKE | mutated(STATISTICS))
def test_it_parses_any_statistics_payload_or_names_what_is_wrong(payload):
    try:
        statistics = parse_statistics(payload, node_id=1774)
    except MalformedPayload as exc:
        assert str(exc)
        return
    assert isinstance(statistics, NodeStatistics) and statistics.total.mru >= 0


BODIES = st.one_of(
    JSON_LIKE.map(lambda v: json.dumps(v, allow_nan=True).encode()),
    mutated(NODE_NESTED).map(lambda v: json.dumps(v, allow_nan=True).encode()),
    st.binary(max_size=200),
)
DEEP = st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
ANSWERS = st.tuples(st.sampled_from([200, 200, 200, 201, 204, 301, 400, 404, 429, 500, 502]), BODIES | DEEP)


@budget("http")
@given(answer=ANSWERS)
def test_it_turns_any_http_answer_into_a_node_or_a_grid_error(grid_proxy_one, answer):
    client = grid_proxy_one(*answer)
    try:
        node = client.node(1774)
    except GridError as exc:
        assert str(exc)
        return
    assert node.node_id == 1774


@pytest.mark.parametrize("status", [404, 500])
def test_it_reports_a_deeply_nested_error_body_as_a_grid_error(grid_proxy_one, status):
    with pytest.raises(GridError):
        grid_proxy_one(status, b"[" * 2000 + b"]" * 2000).node(1774)


@pytest.fixture(scope="module")
def _one_answer_server():
    canned, server = start_canned_proxy()
    client = GridProxyClient(canned.url, retries=0, read_timeout=5)
    yield canned, client
    client.close()
    server.shutdown()
    server.server_close()


@pytest.fixture
def grid_proxy_one(_one_answer_server):
    canned, client = _one_answer_server

    def set_answer(status: int, body: bytes) -> GridProxyClient:
        canned.answer("/nodes/1774", Answer(status, body))
        return client

    return set_answer


# --- every page and parameter ------------------------------------------------------------------

# Values a person (or a script) might type: empty, spaces, huge and negative numbers, other
# scripts' digits, dates real and impossible, sizes in every unit, control characters.
TYPED = st.sampled_from(
    [
        "",
        " ",
        "0",
        "1",
        "-1",
        "1774",
        "01774",
        " 1774 ",
        "1774.0",
        "1e3",
        "99999999999",
        "2147483648",
        "9223372036854775808",
        "99999999999999999999999999",
        "١٧٧٤",
        "１７７４",
        "²",
        "\x00",
        "1774\x00",
        "%00",
        "yes",
        "no",
        "true",
        "null",
        "None",
        "up",
        "down",
        "standby",
        "unknown",
        "queued",
        "running",
        "failed",
        "succeeded",
        "reregister",
        "precheck",
        "bulk-reregister",
        "memory",
        "disk",
        "node-offline",
        "csv",
        "json",
        "node_id",
        "-node_id",
        "-gap",
        "-phantom",
        "-free",
        "seen",
        "farm",
        "status",
        "fleet",
        "farm",
        "node",
        "2025-01-31",
        "2025-02-30",
        "0001-01-01",
        "9999-12-31",
        "10000-01-01",
        "1970-01-01T00:00",
        "31/01/2025",
        "4GiB",
        "4 GiB",
        "0.5GiB",
        "931.5GiB",
        "250MiB",
        "1B",
        "0B",
        "-1GiB",
        "1e309GiB",
        "nanGiB",
        "infGiB",
        "99999999TiB",
        "4GB",
        "4gib",
        "zos",
        "none",
        "bytes",
        "whole-gib",
        "legacy",
        "fleet-default",
        "<script>alert(1)</script>",
        "' OR 1=1 --",
        "../../etc/passwd",
        "=cmd|' /C calc'!A0",
        "x" * 5000,
    ]
)
VALUE = TYPED | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40) | st.integers().map(str)

PARAMETERS = {
    "/": ["q", "farm", "status", "stale", "phantoms", "sort", "page", "format"],
    "/export.csv": ["q", "farm", "status", "stale", "phantoms", "sort"],
    "/fleet/reregister-stale/": [],
    "/nodes/{node}/": [],
    "/nodes/{node}/catalog/": [],
    "/deployments/failed/": ["node", "farm", "cause", "since", "until", "page", "error"],
    "/jobs/": ["state", "kind", "node", "page"],
    "/jobs/{job}/": [],
    "/jobs/{job}/progress/": [],
    "/policy/": [],
    "/policy/new/": ["scope", "farm"],
    "/policy/{policy}/edit/": [],
}
ACTIONS = ["/nodes/{node}/reregister/", "/nodes/{node}/preview/", "/nodes/{node}/precheck/", "/fleet/reregister-stale/"]
POLICY_FIELDS = [
    "slice_mru",
    "slice_cru",
    "reserve_mru_percent",
    "reserve_mru_floor",
    "reserve_sru",
    "overhead_mru_per_vm",
    "overhead_sru_per_vm",
    "rootfs",
    "min_slice_sru",
    "sru_step",
    "arithmetic",
]
NEW_POLICY_FIELDS = ["name", "scope", "farm_id", "node_id"]
PATH_IDS = st.sampled_from(["1774", "1775", "0", "99999999999999999999", "2147483648", "9223372036854775808"])


@pytest.fixture
def fuzz_world(sim_node, role_user):
    """Node 1774 (legacy carve, slice 0 deployed, slice 1 rented, a failed deploy), a job, two policies,
    and a logged-in client per role."""
    node = sim_node(
        1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", policy_name="legacy"
    )
    sim_node(1775, cru=4, mru=16 * GiB, sru=465 * GiB, farm_id=1)
    slice_deploy(node=node, slice_index=0, grid=sim_node.grid, source="command")
    Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED, rented_by_twin_id=77)
    for index in (2, 3, 4, 5):
        slice_deploy(node=node, slice_index=index, grid=sim_node.grid, source="command")
    slice_deploy(node=node, slice_index=6, precheck=False, grid=sim_node.grid, source="command")  # ZOS refuses: memory
    job = Job.objects.create(kind=Job.Kind.PRECHECK, node=node, state=Job.State.FAILED, error="boom")
    fleet = Policy.objects.create(
        name="fleet-default", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )
    clients = {}
    for role in ("admins", "support"):
        client = Client()
        client.force_login(role_user(role, username=f"fuzz-{role}", password=None))
        clients[role] = client
    return {"clients": clients, "ids": {"node": "1774", "job": str(job.pk), "policy": str(fleet.pk)}}


def _url(template: str, ids: dict, draw) -> str:
    def fill(match):
        name = match.group(1)
        return ids[name] if draw(st.integers(0, 3)) else draw(PATH_IDS)

    return re.sub(r"\{(\w+)\}", fill, template)


@st.composite
def page_requests(draw):
    template = draw(st.sampled_from(sorted(PARAMETERS)))
    known = PARAMETERS[template]
    params: list[tuple[str, str]] = []
    for name in (
        draw(st.lists(st.sampled_from(known + ["zzz", "csrfmiddlewaretoken", "next"]), max_size=6)) if known else []
    ):
        for _ in range(draw(st.integers(1, 2))):
            params.append((name, draw(VALUE)))
    raw = draw(st.none() | st.binary(max_size=30).map(lambda b: "junk=" + quote_from_bytes(b)))
    return {
        "template": template,
        "query": urlencode(params) + (("&" + raw) if raw else ""),
        "role": draw(st.sampled_from(["admins", "support"])),
        "htmx": draw(st.booleans()),
        "draw": draw,
    }


def _check(response) -> None:
    assert response.status_code < 500, (response.status_code, response.content[:300])


@budget("get")
@given(case=page_requests())
def test_it_answers_every_page_with_any_parameters_without_a_500_or_a_change(fuzz_world, case):
    before = state_snapshot()
    url = _url(case["template"], fuzz_world["ids"], case["draw"]) + ("?" + case["query"] if case["query"] else "")
    headers = {"HTTP_HX_REQUEST": "true"} if case["htmx"] else {}
    _check(fuzz_world["clients"][case["role"]].get(url, **headers))
    assert state_snapshot() == before


@st.composite
def form_posts(draw):
    template = draw(st.sampled_from(ACTIONS + ["/policy/new/", "/policy/{policy}/edit/", "/login/"]))
    if "policy" in template:
        names = POLICY_FIELDS + (NEW_POLICY_FIELDS if template.endswith("new/") else []) + ["save", "preview_token"]
    elif template == "/login/":
        names = ["username", "password", "next"]
    else:
        names = ["dry_run", "node", "farm", "zzz"]
    data: dict[str, list[str]] = {}
    for name in draw(st.lists(st.sampled_from(names), max_size=len(names) + 2)):
        data.setdefault(name, []).append(draw(VALUE))
    return {
        "template": template,
        "data": data,
        "role": draw(st.sampled_from(["admins", "support"])),
        "htmx": draw(st.booleans()),
        "draw": draw,
    }


@budget("post")
@given(case=form_posts())
def test_it_answers_every_form_with_any_data_without_a_500_or_a_catalog_change(fuzz_world, case):
    before = catalog_snapshot()
    url = _url(case["template"], fuzz_world["ids"], case["draw"])
    client = Client() if case["template"] == "/login/" else fuzz_world["clients"][case["role"]]
    headers = {"HTTP_HX_REQUEST": "true"} if case["htmx"] else {}
    _check(client.post(url, case["data"], **headers))
    # Starting a job is what an admin's click does; the catalog itself changes only when a worker runs it.
    assert catalog_snapshot() == before


SIZE_EDGES = st.sampled_from(["2GiB", "250MiB", "249MiB", "1B", "0B", "0", "1e3GiB", "99999999TiB", "931.5GiB", "8EiB"])
VALID_POLICY = {
    "slice_mru": "4GiB",
    "reserve_mru_floor": "2GiB",
    "reserve_sru": "20GiB",
    "overhead_mru_per_vm": "0",
    "overhead_sru_per_vm": "0",
    "min_slice_sru": "10GiB",
    "sru_step": "1GiB",
    "slice_cru": "1",
    "reserve_mru_percent": "10",
    "rootfs": "zos",
    "arithmetic": "bytes",
}
FIELD_VALUES = {
    **{name: SIZE_EDGES for name in VALID_POLICY if VALID_POLICY[name][-1] in "0B"},
    "slice_cru": st.sampled_from(["2", "255", "256", "512", "0", "-1", "2147483648"]),
    "reserve_mru_percent": st.sampled_from(["0", "90", "91", "-1", "100"]),
    "rootfs": st.sampled_from(["none", "ext4"]),
    "arithmetic": st.sampled_from(["whole-gib", "floats"]),
    "name": st.sampled_from(["farm-12", "node-1774", "fleet-default", "zos", "legacy", "a" * 64, "a" * 65, "x"])
    | st.from_regex(r"[a-z0-9_-]{1,70}", fullmatch=True),
    "scope": st.sampled_from(["fleet", "farm", "node", "planet"]),
    "farm_id": st.sampled_from(
        ["", "0", "1", "4242", "2147483647", "2147483648", "4294967296", "99999999999999999999"]
    ),
    "node_id": st.sampled_from(["", "0", "1774", "1775", "1776", "2147483648", "99999999999999999999"]),
}


@st.composite
def policy_saves(draw):
    """A valid policy form with up to two parameters at an edge: most of them reach the save."""
    new = draw(st.booleans())
    data = dict(VALID_POLICY)
    for name in draw(st.lists(st.sampled_from(sorted(VALID_POLICY)), max_size=2, unique=True)):
        data[name] = draw(FIELD_VALUES[name])
    if new:
        data.update({name: draw(FIELD_VALUES[name]) for name in NEW_POLICY_FIELDS})
    return {"new": new, "data": data, "role": draw(st.sampled_from(["admins", "admins", "support"]))}


@budget("save")
@given(case=policy_saves())
def test_it_previews_and_saves_any_policy_without_a_500_or_a_catalog_change(fuzz_world, case):
    """Plausible policy forms, previewed then saved with the preview's own token: the save path too."""
    client = fuzz_world["clients"][case["role"]]
    url = "/policy/new/" if case["new"] else f"/policy/{fuzz_world['ids']['policy']}/edit/"
    before = catalog_snapshot()
    preview = client.post(url, case["data"])
    _check(preview)
    token = (preview.context or {}).get("preview_token") if preview.status_code == 200 else None
    if token:
        _check(client.post(url, {**case["data"], "save": "1", "preview_token": token}))
    after = catalog_snapshot()
    # A saved policy is a change to policies, never to a node's slices.
    assert (after["nodes"], after["slices"], after["deployments"]) == (
        before["nodes"],
        before["slices"],
        before["deployments"],
    )
    if case["role"] == "support":
        assert after["policies"] == before["policies"]


# --- what the fuzz found, pinned ---------------------------------------------------------------


@pytest.mark.django_db
def test_it_refuses_a_farm_id_beyond_the_database_column_with_one_clear_error(fuzz_world):
    """Found by the fuzz: a farm override for farm 2147483648 got past the form and the insert failed (500)."""
    data = {**VALID_POLICY, "name": "farm-huge", "scope": "farm", "farm_id": "2147483648", "node_id": ""}
    response = fuzz_world["clients"]["admins"].post("/policy/new/", data)
    assert response.status_code == 400 and "farm_id" in response.context["form"].errors
    assert not Policy.objects.filter(name="farm-huge").exists()
