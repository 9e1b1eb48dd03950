"""manage.py node_withhold: a node or a farm withheld with a reason and a window; --release; exit statuses."""

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.management.cli import EXIT_REFUSED, EXIT_USAGE
from dashboard.models import AuditEvent, Node, NodeWithhold
from tests.factories import node_1774, sim_node_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(sim_node):
    return sim_node_1774(sim_node)


def command(*args) -> str:
    out = StringIO()
    call_command("node_withhold", *[str(a) for a in args], stdout=out)
    return out.getvalue()


def refused(*args) -> CommandError:
    with pytest.raises(CommandError) as caught:
        command(*args)
    return caught.value


def test_it_withholds_a_node_until_a_time(node):
    out = command(1774, "--reason", "disk swap", "--until", "2027-06-01T18:00Z")
    assert "node 1774 withheld from" in out and "until 2027-06-01 18:00 UTC: disk swap" in out
    held = Node.objects.get(pk=node.pk)
    assert (held.withheld_reason, held.withheld_until) == ("disk swap", dt.datetime(2027, 6, 1, 18, tzinfo=dt.UTC))
    assert AuditEvent.objects.get(action="node withheld").source == "command"


def test_a_future_from_withholds_ahead_of_time(node):
    command(1774, "--reason", "disk swap", "--from", "2027-06-01T10:00+01:00")
    window = NodeWithhold.objects.get()
    assert (window.starts_at, Node.objects.get(pk=node.pk).withheld_reason) == (
        dt.datetime(2027, 6, 1, 9, tzinfo=dt.UTC),
        "",
    )


def test_it_withholds_every_node_of_a_farm(node, sim_node):
    sim_node(1775, **node_1774())
    sim_node(1776, **node_1774(farm_id=77))
    command("--farm-id", 4242, "--reason", "farm power work")
    assert dict(Node.objects.values_list("grid_id", "withheld_reason")) == {
        1774: "farm power work",
        1775: "farm power work",
        1776: "",
    }


def test_release_ends_the_window(node):
    command(1774, "--reason", "disk swap")
    assert "1 window released" in command(1774, "--release")
    assert Node.objects.get(pk=node.pk).withheld_reason == ""


def test_release_of_a_node_not_withheld_is_refused(node):
    assert refused(1774, "--release").returncode == EXIT_REFUSED


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((1774,), "--reason TEXT is needed"),
        (("--reason", "x"), "give a NODE or --farm-id F"),
        ((1774, "--farm-id", 4242, "--reason", "x"), "give a NODE or --farm-id F"),
        ((1774, "--release", "--reason", "x"), "--release takes a NODE and nothing else"),
        ((999999, "--reason", "x"), "node 999999 is not registered"),
        (("--farm-id", 9, "--reason", "x"), "farm 9 has no registered node"),
        ((1774, "--reason", "x", "--from", "2027-06-02T00:00Z", "--until", "2027-06-01T00:00Z"), "before it starts"),
        ((1774, "--reason", "two\nlines"), "on one line"),
    ],
)
def test_a_wrong_command_line_is_a_usage_error_and_writes_nothing(node, args, words):
    caught = refused(*args)
    assert (caught.returncode, words in str(caught)) == (EXIT_USAGE, True)
    assert NodeWithhold.objects.count() == 0


@pytest.mark.parametrize("moment", ["tomorrow", "2030-01-01T10:00"])
def test_a_time_must_be_iso_with_a_zone(node, moment):
    with pytest.raises(CommandError) as caught:
        command(1774, "--reason", "x", "--until", moment)
    assert "ISO 8601" in str(caught.value) or "no time zone" in str(caught.value)
