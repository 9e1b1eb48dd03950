"""Every operator command: one exit status per kind of error (dashboard/management/cli.py), said in its
--help; negative values reach the command; unknown nodes are usage errors with a suggestion only for
an id the grid could have (issue 25's CLI edges)."""

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, load_command_class

from dashboard.management.cli import EXIT_REFUSED, EXIT_USAGE
from tests.manage_in_process import manage

BASE_DIR = Path(__file__).resolve().parents[2]
# The operator's commands and the simulated world's (sim/: simgrid, simulate_traffic, demo_fleet).
COMMANDS = sorted(
    (app, p.stem)
    for app in ("dashboard", "sim")
    for p in (BASE_DIR / app / "management/commands").glob("*.py")
    if p.stem != "__init__"
)
NOT_REGISTERED = "node 999999 is not registered; run manage.py node_register 999999"


@pytest.mark.parametrize(("app", "name"), COMMANDS)
def test_each_commands_help_lists_its_exit_statuses(app, name):
    command = load_command_class(app, name)
    text = command.create_parser("manage.py", name).format_help()
    assert "exit statuses:" in text
    assert f"  {EXIT_USAGE}  " in text and "  0  " in text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "words", "status"),
    [
        (("precheck", "999999"), NOT_REGISTERED, EXIT_USAGE),
        (("node_reregister", "999999"), NOT_REGISTERED, EXIT_USAGE),
        (("slice_deploy", "999999", "--slice", "0"), NOT_REGISTERED, EXIT_USAGE),
        (("calibrate", "999999"), NOT_REGISTERED, EXIT_USAGE),
        (("precheck", "1774", "--wait"), "--wait only goes with --job", EXIT_USAGE),
        (("precheck", "1774", "--job", "--wait", "--timeout", "0"), "--timeout must be more than 0", EXIT_USAGE),
        (("node_reregister", "1774", "--farm-id", "3"), "--farm-id only goes with --stale", EXIT_USAGE),
        (("simulate_traffic", "--nodes", "0"), "--nodes must be between 1 and 100,000", EXIT_USAGE),
        (("simulate_traffic", "--nodes", "-5"), "--nodes must be between 1 and 100,000", EXIT_USAGE),
        (("simulate_traffic", "--forged-reports", "-1"), "--forged-reports must be between 0 and 10,000", EXIT_USAGE),
        (("simulate_traffic", "--forged-reports", str(2**64)), "--forged-reports must be between 0", EXIT_USAGE),
        (("api_token", "create", "nobody", "--scope", "read"), "no user named 'nobody'", EXIT_USAGE),
        (("api_token", "revoke", "sdk_nosuch"), "no token 'sdk_nosuch'", EXIT_USAGE),
        (("carve", "--cru", "8", "--mru", "-31GiB", "--sru", "1GiB"), "--mru: '-31GiB' is negative", EXIT_USAGE),
        (
            ("carve", "--cru", "8", "--mru", "31GiB", "--sru", "1GiB", "--policy", "nope"),
            "unknown policy 'nope'",
            EXIT_USAGE,
        ),
        (
            ("simgrid", "add-node", "77", "--cru", "8", "--mru", "31GB", "--sru", "1TiB"),
            "uses a decimal unit",
            EXIT_USAGE,
        ),
        (("figures_refresh", "--check"), None, 0),
    ],
)
def test_bad_input_gets_its_words_and_its_status(args, words, status, simgrid_path):
    try:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    except CommandError as error:
        assert (words is not None and words in str(error), error.returncode) == (True, status)
    else:
        assert status == 0


@pytest.mark.django_db
def test_a_node_the_grid_refuses_to_read_is_a_refusal_not_a_usage_error(legacy_node_1774, gridproxy_down):
    with pytest.raises(CommandError) as caught:
        call_command("precheck", "1774", stdout=StringIO())
    assert caught.value.returncode == EXIT_REFUSED and str(caught.value).startswith("grid: ")


ARGPARSE_REFUSALS = [
    (("precheck", "-5"), "argument node_id: '-5' is not a grid id (a whole number from 1 to 2147483647)"),
    (("node_reregister", "0"), "argument node_id: '0' is not a grid id"),
    (("carve", "--cru", "8", "--mru"), "argument --mru: expected one argument"),
]


# argparse's own refusals: only a command line (manage.py's path, not call_command) shows their exit status.
@pytest.mark.parametrize(("args", "words"), ARGPARSE_REFUSALS)
def test_argparse_refusals_exit_2_and_suggest_no_impossible_id(args, words):
    done = manage(*args)
    assert (done.returncode, words in done.stderr) == (EXIT_USAGE, True), done.stderr
    assert "node_register -" not in done.stderr


def test_an_argparse_refusal_is_exit_2_as_the_shell_sees_it():
    args, words = ARGPARSE_REFUSALS[0]
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, words in done.stderr) == (EXIT_USAGE, True), done.stderr
