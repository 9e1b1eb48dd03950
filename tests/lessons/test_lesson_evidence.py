"""No single voice rewrites the fleet (issue 44): a reported memory refusal is believed in proportion to its
evidence. Held aside when implausible, its node's alone until a second source agrees, bounded per token
and build in time, every step audited with its actors. Real PostgreSQL, the API with tokens."""

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from dashboard.alerts.rules import LESSON_REPORTS
from dashboard.alerts.services.alerts import alerts_evaluate
from dashboard.capacity import GiB, MiB
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.lessons.services.lesson_evidence import memory_lessons_follow
from dashboard.lessons.services.lesson_review import observation_drop
from dashboard.models import Alert, AuditEvent, CapacitySample, Deployment, MemoryLesson, Node, Observation
from dashboard.policies.services.calibration import fleet_calibration, readings_by_node
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy

pytestmark = pytest.mark.django_db

BUILD = "v3.14.0-sim"
RUNNING = 8
HIDDEN_PER_VM = 700 * MiB  # what the reporters say each VM really used beyond ZOS's count


def _node(sim_node, grid_id: int) -> Node:
    node = sim_node(grid_id, cru=32, mru=round(62.8 * GiB), sru=4000 * GiB, farm_id=77)
    Node.objects.filter(pk=node.pk).update(zos_version=BUILD)
    for index in range(RUNNING):
        slice_deploy(node=Node.objects.get(pk=node.pk), slice_index=index)
    return Node.objects.get(pk=node.pk)


@pytest.fixture(scope="module")
def build_nodes_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """Three nodes of one ZOS build with 8 VMs each (no hidden use on the simulated grid: nothing learnt yet),
    built once for the module: their 24 deploys were most of every test's time. Their simulated grid is in a
    folder of its own, their rows are rolled back after the module (tests/conftest.py rolled_back_after)."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("lesson-evidence") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)

    def add(node_id, **options):
        return sim_node_add(grid, node_id, **options)

    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        yield path, [_node(add, 4101 + i).pk for i in range(3)]


@pytest.fixture
def build_nodes(build_nodes_built, simgrid_path, db):
    """The module's three nodes on a copy of their simulated grid; what a test writes is undone after it."""
    path, pks = build_nodes_built
    simgrid_copy(path, simgrid_path)
    return [Node.objects.get(pk=pk) for pk in pks]


def _figures(nodes) -> dict:
    rows = Node.objects.filter(pk__in=[n.pk for n in nodes]).order_by("grid_id")
    return {
        n.grid_id: (n.hidden_mru_per_vm, n.zos_own_mru, n.memory_lesson_id, n.memory_lesson_scope, n.placeable_now)
        for n in rows
    }


def _usable(node: Node, *, hidden_per_vm: int = HIDDEN_PER_VM) -> int:
    return node.total_mru - node.used_mru - RUNNING * hidden_per_vm


def _report(api_call, token, node: Node, usable: int, *, mid: str):
    body = {
        "node_id": node.grid_id,
        "slice_index": RUNNING,
        "marketplace_id": mid,
        "outcome": "failed",
        "error": f"failed to satisfy required capacity: cannot fulfil required memory size {4 * GiB} bytes out of "
        f"usable {usable} bytes",
        "at": datetime.now(UTC).isoformat(),
    }
    return api_call("post", "/api/v1/deployments", token, json=body)


@pytest.fixture
def two_tokens(api_token, role_user):
    """Two report tokens of two accounts (two independent reporters)."""
    first, second = role_user("admins", username="rita"), role_user("admins", username="remy")
    return (api_token("read,report", user=first), first), (api_token("read,report", user=second), second)


@pytest.mark.parametrize("usable", ["absurd", "plausible"])
def test_one_forged_report_changes_no_other_nodes_figures(api_call, build_nodes, two_tokens, usable):
    (token, _user), _ = two_tokens
    target, *others = build_nodes
    before = _figures(others)
    figure = 1 if usable == "absurd" else _usable(target)

    response = _report(api_call, token, target, figure, mid="forged-1")

    assert response.status_code == 201, response.json()
    assert _figures(others) == before
    assert not MemoryLesson.objects.exists()


@pytest.mark.parametrize("usable", ["absurd", "more than ZOS ever leaves"])
def test_a_figure_held_aside_gives_calibration_no_sample(api_call, build_nodes, two_tokens, usable):
    # Calibration's fleet figure (its pooled and median per-VM overhead) reads every memory refusal's sample:
    # a forged figure taken there would move what the calibration page says of the whole fleet.
    (token, _user), _ = two_tokens
    target = build_nodes[0]
    before = fleet_calibration().as_dict()
    figure = 1 if usable == "absurd" else target.total_mru

    response = _report(api_call, token, target, figure, mid="forged-calibration")

    assert response.status_code == 201, response.json()
    assert not CapacitySample.objects.filter(source="refusal").exists()
    assert fleet_calibration().as_dict() == before


def test_a_plausible_figure_is_kept_once_and_calibration_reads_it(api_call, build_nodes, two_tokens):
    # One row per refusal (issue 46): the Observation, which calibration reads; no CapacitySample copy.
    (token, _user), _ = two_tokens
    target = build_nodes[0]

    response = _report(api_call, token, target, _usable(target), mid="plausible-calibration")

    assert response.status_code == 201, response.json()
    assert not CapacitySample.objects.filter(source="refusal").exists()
    observation = Observation.objects.get(node=target)
    assert observation.used_sru == target.used_sru
    (memory,) = readings_by_node(target)[target.pk].memory
    # By hand: the host used total - usable; the VMs, what was accounted less ZOS's reserve (10% or 2 GiB).
    reserve = max(target.total_mru // 10, 2 * GiB)
    assert memory == (RUNNING, target.used_mru - reserve, target.total_mru - _usable(target), *memory[3:])
    assert memory[3:] == (max(target.used_sru - 20 * GiB, 0), target.used_sru)


def test_a_refusal_dropped_by_an_admin_gives_calibration_nothing_any_more(api_call, build_nodes, two_tokens):
    # The copy used to outlive its observation: one row, so one fate.
    (token, user), _ = two_tokens
    target = build_nodes[0]
    _report(api_call, token, target, _usable(target), mid="dropped-calibration")
    assert readings_by_node(target)[target.pk].memory

    observation_drop(observation=Observation.objects.get(node=target), by=user)

    assert readings_by_node(target)[target.pk].memory == []  # its statistics samples stay


def test_an_absurd_figure_is_kept_but_held_aside_and_the_node_page_and_api_say_why(
    api_call, build_nodes, two_tokens, admins_client
):
    (token, _user), _ = two_tokens
    target = build_nodes[0]
    before = _figures([target])

    _report(api_call, token, target, 1, mid="forged-1")

    held = Observation.objects.get()
    assert held.standing == "held" and "far above it" in held.held_why
    assert _figures([target]) == before  # not even its own node follows an implausible figure
    page = admins_client.get(reverse("node", args=[target.grid_id])).content.decode()
    assert "held aside" in page and "far above it" in page
    body = api_call("get", f"/api/v1/nodes/{target.grid_id}", token).json()
    (shown,) = body["lessons"]["observations"]
    assert (shown["standing"], shown["held_why"]) == ("held", held.held_why)


def test_a_plausible_figure_changes_its_own_node_alone(api_call, build_nodes, two_tokens):
    (token, _user), _ = two_tokens
    target = build_nodes[0]
    _report(api_call, token, target, _usable(target), mid="one-1")
    node = Node.objects.get(pk=target.pk)
    assert (node.memory_lesson_scope, node.hidden_mru_per_vm) == ("own", HIDDEN_PER_VM)
    assert Observation.objects.get().standing == "node"


def test_two_agreeing_sources_teach_the_group_and_the_audit_names_both(api_call, build_nodes, two_tokens):
    (first_token, first), (second_token, second) = two_tokens
    a, b, c = build_nodes
    before = _figures([c])

    assert _report(api_call, first_token, a, _usable(a), mid="one-1").status_code == 201
    assert _report(api_call, second_token, b, _usable(b), mid="two-1").status_code == 201

    assert _figures([c]) != before
    assert Node.objects.get(pk=c.pk).memory_lesson_scope == "build"
    assert set(Observation.objects.values_list("standing", flat=True)) == {"group"}
    learnt = AuditEvent.objects.filter(action="observation.learnt").order_by("pk")
    assert [e.actor for e in learnt] == [first, second]
    assert "token " in learnt[0].message and learnt[1].detail["corroborating_actor"] == first.pk
    lesson = AuditEvent.objects.get(action="memory_lesson.learnt")
    assert lesson.actor == second
    assert {t["user"] for t in lesson.detail["taught_by"]} == {first.pk, second.pk}


def test_one_token_on_one_node_twice_is_still_one_source(api_call, build_nodes, two_tokens):
    (token, _user), _ = two_tokens
    a, _b, c = build_nodes
    before = _figures([c])
    _report(api_call, token, a, _usable(a), mid="one-1")
    _report(api_call, token, a, _usable(a) - MiB, mid="one-2")
    assert _figures([c]) == before


def test_past_its_bound_a_token_gets_429_and_an_alert(api_call, build_nodes, two_tokens, settings):
    settings.LESSON_REPORTS_PER_TOKEN = 2
    (token, _user), (other_token, _other) = two_tokens
    a, b, c = build_nodes
    assert [_report(api_call, token, n, 1, mid=f"m-{n.grid_id}").status_code for n in (a, b)] == [201, 201]

    refused = _report(api_call, token, c, 1, mid="m-3")

    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "reports that teach" in refused.json()["detail"]
    assert not Deployment.objects.filter(marketplace_id="m-3").exists()
    assert AuditEvent.objects.filter(action="observation.refused").count() == 1
    alerts_evaluate(deliver=False)
    assert Alert.objects.get(rule=LESSON_REPORTS).state == Alert.State.FIRING
    # Another token is not bound by this one's count, and a report that teaches nothing is never bound.
    assert _report(api_call, other_token, c, 1, mid="m-4").status_code == 201


def test_the_bound_is_documented_in_the_openapi_schema(api_call):
    schema = api_call("get", "/api/v1/openapi.json").json()
    operation = schema["paths"]["/api/v1/deployments"]["post"]
    assert "429" in operation["responses"] and "LESSON_REPORTS_WINDOW" in operation["description"]


def test_a_lesson_goes_with_the_observations_that_taught_it(api_call, build_nodes, two_tokens):
    (first_token, _first), (second_token, _second) = two_tokens
    a, b, c = build_nodes
    before = _figures(build_nodes)
    _report(api_call, first_token, a, _usable(a), mid="one-1")
    _report(api_call, second_token, b, _usable(b), mid="two-1")
    assert _figures([c]) != {k: v for k, v in before.items() if k == c.grid_id}

    Observation.objects.update(seen_at=datetime.now(UTC) - timedelta(days=31))
    assert memory_lessons_follow() == [BUILD]

    assert _figures(build_nodes) == before
    assert MemoryLesson.objects.get().reverted_at is not None
    assert AuditEvent.objects.filter(action="memory_lesson.ended").exists()
    assert memory_lessons_follow() == []


def test_a_reading_waiting_alone_goes_when_it_expires(api_call, build_nodes, two_tokens):
    (token, _user), _ = two_tokens
    a = build_nodes[0]
    before = _figures([a])
    _report(api_call, token, a, _usable(a), mid="one-1")
    Observation.objects.update(seen_at=datetime.now(UTC) - timedelta(days=31))
    memory_lessons_follow()
    assert _figures([a]) == before


class TestReviewPage:
    """An admin applies or drops a reading waiting for its second source, or one held aside."""

    @pytest.fixture
    def waiting(self, api_call, build_nodes, two_tokens):
        (token, _user), _ = two_tokens
        _report(api_call, token, build_nodes[0], _usable(build_nodes[0]), mid="one-1")
        _report(api_call, token, build_nodes[1], 1, mid="forged-1")
        return Observation.objects.get(standing="node"), Observation.objects.get(standing="held"), build_nodes

    @pytest.mark.slow
    def test_an_admin_sees_both_lists(self, waiting, admins_client):
        page = admins_client.get(reverse("lessons-waiting")).content.decode()
        alone, held, _nodes = waiting
        assert f'id="observation-{alone.pk}"' in page and f'id="observation-{held.pk}"' in page
        assert "far above it" in page and "rita" in page

    def test_the_node_page_links_to_it(self, waiting, admins_client):
        _alone, _held, nodes = waiting
        page = admins_client.get(reverse("node", args=[nodes[0].grid_id])).content.decode()
        assert reverse("lessons-waiting") in page

    def test_an_admin_applies_a_reading_to_its_group(self, waiting, admins_client):
        alone, _held, nodes = waiting
        response = admins_client.post(reverse("lesson-observation-apply", args=[alone.pk]))
        assert response.status_code == 302
        assert Observation.objects.get(pk=alone.pk).standing == "group"
        assert Node.objects.get(pk=nodes[2].pk).memory_lesson_scope == "build"
        assert AuditEvent.objects.get(action="observation.applied").actor.username == "ada"

    def test_an_admin_drops_a_reading_and_its_node_goes_back(self, waiting, admins_client):
        alone, _held, nodes = waiting
        response = admins_client.post(
            reverse("lesson-observation-drop", args=[alone.pk]), headers={"HX-Request": "true"}
        )
        assert response.status_code == 200 and f'id="observation-{alone.pk}"' not in response.content.decode()
        assert Observation.objects.get(pk=alone.pk).cleared_at is not None
        node = Node.objects.get(pk=nodes[0].pk)
        assert (node.hidden_mru_per_vm, node.memory_lesson_scope) == (0, "")
        assert AuditEvent.objects.get(action="observation.dropped").actor.username == "ada"

    def test_deciding_wants_a_post(self, waiting, admins_client):
        alone, _held, _nodes = waiting
        assert admins_client.get(reverse("lesson-observation-apply", args=[alone.pk])).status_code == 405

    def test_support_may_neither_see_nor_decide(self, waiting, support_client):
        alone, _held, _nodes = waiting
        assert support_client.get(reverse("lessons-waiting")).status_code == 403
        assert support_client.post(reverse("lesson-observation-drop", args=[alone.pk])).status_code == 403
        assert Observation.objects.get(pk=alone.pk).cleared_at is None


def _refit_broken(monkeypatch):
    def broken(**_kwargs):
        raise RuntimeError("the refit broke")

    monkeypatch.setattr("dashboard.lessons.services.observations.memory_model_refit", broken)


def test_a_group_step_that_fails_leaves_the_report_recorded_and_the_follow_applies_it(
    api_call, build_nodes, two_tokens, monkeypatch, caplog
):
    (first_token, _first), (second_token, _second) = two_tokens
    a, b, c = build_nodes
    _refit_broken(monkeypatch)

    answers = [
        _report(api_call, first_token, a, _usable(a), mid="one-1"),
        _report(api_call, second_token, b, _usable(b), mid="two-1"),
    ]

    assert [r.status_code for r in answers] == [201, 201]  # the report's answer, not a 500
    assert answers[1].json()["deployment"]["marketplace_id"] == "two-1"
    assert set(Observation.objects.values_list("standing", flat=True)) == {"group"}  # the reports stand
    assert not MemoryLesson.objects.exists()
    failed = [
        r for r in caplog.records if r.name == "dashboard.lessons.services.group_steps" and r.levelname == "ERROR"
    ]
    assert len(failed) == 2 and "the refit broke" in failed[0].getMessage()

    monkeypatch.undo()
    assert memory_lessons_follow() == [BUILD]
    lesson = MemoryLesson.objects.get()
    assert sorted(lesson.observation_ids) == sorted(Observation.objects.values_list("pk", flat=True))
    assert Node.objects.get(pk=c.pk).memory_lesson_scope == "build"
    assert memory_lessons_follow() == []


def test_a_reading_left_off_its_node_by_a_failed_step_is_applied_by_the_follow(
    api_call, build_nodes, two_tokens, monkeypatch
):
    (token, _user), _ = two_tokens
    a = build_nodes[0]
    before = _figures([a])
    _refit_broken(monkeypatch)

    assert _report(api_call, token, a, _usable(a), mid="one-1").status_code == 201

    assert _figures([a]) == before  # its step did not run
    monkeypatch.undo()
    assert memory_lessons_follow() == [BUILD]
    node = Node.objects.get(pk=a.pk)
    assert (node.memory_lesson_scope, node.hidden_mru_per_vm) == ("own", HIDDEN_PER_VM)


def test_the_nodes_own_readings_are_weighed_in_queries_flat_in_the_nodes_read(api_call, build_nodes, two_tokens):
    """node_readings_apply's reading of the nodes (lesson_evidence._node_readings_wanted) costs the same
    queries for one node read as for three: no query per node."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.lessons.services.lesson_evidence import _node_readings_wanted

    (token, _user), _ = two_tokens
    a, *others = build_nodes
    _report(api_call, token, a, _usable(a), mid="flat-1")
    with CaptureQueriesContext(connection) as one:
        _node_readings_wanted(build=BUILD, now=timezone.now())
    for i, node in enumerate(others):
        _report(api_call, token, node, _usable(node, hidden_per_vm=HIDDEN_PER_VM + i * MiB), mid=f"flat-{i + 2}")
    with CaptureQueriesContext(connection) as three:
        _node_readings_wanted(build=BUILD, now=timezone.now())
    assert Observation.objects.values("node").distinct().count() == 3
    assert len(three.captured_queries) == len(one.captured_queries)
