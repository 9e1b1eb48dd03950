"""Each job kind is declared once (dashboard/jobs/kinds/): every declaration is complete, Job.Kind and its
constraints are made from them, old rows still read, and nothing else in the code describes a kind.

Adding a kind is a module in dashboard/jobs/kinds/, its template under templates/dashboard/jobs/kinds/,
and the migration makemigrations writes: these tests fail when any of the three is missing.
"""

import importlib
import inspect
import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.template import engines
from django.template.loader import get_template

from dashboard.jobs.kinds import (
    JobKind,
    JobParameters,
    ParametersUnreadable,
    job_describe,
    kind_of,
    kinds,
    kinds_declare,
    result_of,
)
from dashboard.jobs.results import JobResult
from dashboard.models import Job

ROOT = Path(__file__).resolve().parents[2]
KINDS = kinds()
VALUES = [kind.value for kind in KINDS]


def test_every_module_of_the_package_declares_one_kind_and_every_kind_is_found():
    modules = {p.stem for p in (ROOT / "dashboard" / "jobs" / "kinds").glob("*.py")} - {"__init__", "declaration"}
    declared = {importlib.import_module(f"dashboard.jobs.kinds.{m}").KIND for m in modules}
    assert all(isinstance(kind, JobKind) for kind in declared)
    assert {kind.value for kind in declared} == set(VALUES) and len(KINDS) == len(modules)


def test_job_kind_choices_are_the_declared_kinds():
    assert Job.Kind.choices == [(kind.value, kind.label) for kind in KINDS]
    assert {Job.Kind[kind.name] for kind in KINDS} == set(Job.Kind)


@pytest.mark.parametrize("kind", KINDS, ids=VALUES)
def test_each_kind_is_complete(kind):
    assert kind.label and kind.words and kind.of
    assert kind.takes or kind.target == "node"  # a fleet kind says what it takes instead of a node
    assert len(kind.value) <= Job._meta.get_field("kind").max_length
    assert issubclass(kind.result, JobResult) and issubclass(kind.parameters, JobParameters)
    assert kind.target in ("node", "fleet") and callable(kind.describe)
    runner = kind.runner_function()
    accepts = inspect.signature(runner).parameters
    assert {"job", "stop_on"} <= set(accepts), f"{kind.runner} must take job= and stop_on="
    assert kind.template.startswith("dashboard/jobs/kinds/") and get_template(kind.template)


@pytest.mark.parametrize("kind", KINDS, ids=VALUES)
def test_each_kind_renders_its_result_from_an_empty_result(kind, rf):
    job = Job(pk=1, kind=kind.value)
    html = get_template(kind.template).render({"job": job, "result": kind.result()}, rf.get("/"))
    assert html.strip()


def test_a_kind_of_which_one_runs_at_a_time_has_its_constraint():
    names = {constraint.name for constraint in Job._meta.constraints}
    assert {kind.one_at_a_time for kind in KINDS if kind.one_at_a_time} <= names
    assert all(kind.target == "fleet" for kind in KINDS if kind.one_at_a_time)  # a node kind has one per node


def test_a_kind_of_which_one_runs_per_value_of_a_parameter_has_its_constraint_and_takes_that_parameter():
    names = {constraint.name for constraint in Job._meta.constraints}
    per = [kind for kind in KINDS if kind.one_active_per]
    assert per and {kind.one_per_constraint for kind in per} <= names
    assert all(kind.one_active_per in kind.parameters.model_fields and kind.target == "fleet" for kind in per)


@pytest.mark.django_db
def test_the_migrations_hold_every_declared_kind():
    out = io.StringIO()
    call_command("makemigrations", "dashboard", "--check", "--dry-run", stdout=out)  # exits 1 on a missing one


def test_no_template_or_module_outside_the_declarations_tells_kinds_apart_by_their_value():
    compared = re.compile(r"kind\s*(?:==|!=|=)\s*[\"'](" + "|".join(map(re.escape, VALUES)) + r")[\"']")
    found = []
    for path in [*(ROOT / "dashboard").rglob("*.py"), *(ROOT / "templates").rglob("*.html")]:
        if "migrations" in path.parts or "kinds" in path.parts:
            continue
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in compared.finditer(path.read_text())]
    assert found == []


def test_the_job_pages_print_what_the_declarations_say():
    for name in ("dashboard/job.html", "dashboard/jobs.html"):
        source = engines["django"].engine.find_template(name)[0].source
        assert "job.kind" not in source.replace("job.kind_", ""), f"{name} looks at job.kind itself"


# --- requests: the typed parameters ---------------------------------------------------------------


def test_a_precheck_takes_a_whole_number_of_seconds_and_nothing_else():
    precheck = kind_of("precheck")
    assert precheck.parameters_checked({"max_age_seconds": 30}).stored() == {"max_age_seconds": 30}
    assert precheck.parameters_checked({}).stored() == {}
    for bad in ({"max_age_seconds": "30"}, {"max_age_seconds": True}, {"max_age_seconds": -1}, {"other": 1}):
        with pytest.raises(ParametersUnreadable, match="a precheck takes one parameter, max_age_seconds"):
            precheck.parameters_checked(bad)


def test_a_kind_without_parameters_refuses_any():
    with pytest.raises(ParametersUnreadable, match="a re-register job takes no parameters"):
        kind_of("reregister").parameters_checked({"max_age_seconds": 3})


def test_a_policy_trial_needs_its_candidate():
    with pytest.raises(ParametersUnreadable, match="needs the candidate policy's parameters"):
        kind_of("simulate").parameters_checked({"scope": "fleet"})


# --- old rows still read ------------------------------------------------------------------------------


def test_an_old_simulate_row_reads_as_a_policy_trial():
    stored = {"candidate": {"name": "lean", "version": 2}, "scope": "farm", "farm_id": 9, "seed": 7}
    job = Job(pk=12, kind="simulate", parameters=stored)
    assert (job.asked.farm_id, job.asked.candidate["name"]) == (9, "lean")
    assert job_describe(job) == "policy trial of policy lean (job #12)"


def test_a_row_with_keys_this_version_does_not_know_still_reads():
    job = Job(pk=3, kind="onboard", parameters={"farm_ids": [4], "node_ids": [], "status": None, "origin": "x"})
    assert job.asked.farm_ids == [4] and job.target == "farm 4"


def test_a_row_whose_parameters_cannot_be_read_is_described_without_failing():
    job = Job(pk=5, kind="simulate", parameters={"candidate": "not a mapping"})
    with pytest.raises(ParametersUnreadable, match="cannot be read"):
        _ = job.asked
    assert job.target == "policy ?"


def test_an_old_result_reads_typed_and_one_of_another_shape_reads_as_nothing():
    assert result_of("bulk-reregister", {"stale": 3, "reregistered": 2, "words": "w", "later": 1}).reregistered == 2
    assert result_of("bulk-reregister", {"stale": "many"}) is None
    assert result_of("no-such-kind", {"stale": 3}) is None


@pytest.mark.parametrize(
    "kind, fields, words",
    [
        ("reregister", {"dry_run": True}, "dry run of re-register of a deleted node (job #7)"),
        ("bulk-reregister", {"farm_id": 3}, "bulk re-register of farm 3's stale nodes (job #7)"),
        ("bulk-reregister", {}, "bulk re-register of all stale nodes (job #7)"),
        (
            "onboard",
            {"parameters": {"farm_ids": [1], "node_ids": [2, 3]}},
            "adding nodes from the grid: farm 1, node 2, node 3 (job #7)",
        ),
    ],
)
def test_each_kind_says_what_a_job_is(kind, fields, words):
    assert job_describe(Job(pk=7, kind=kind, **fields)) == words


def test_the_registry_refuses_a_kind_declared_twice():
    once = kinds_declare({})
    assert list(once) == VALUES
    with pytest.raises(RuntimeError, match="declared twice"):
        kinds_declare(once)
