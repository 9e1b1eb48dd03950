import json
import os
import re
import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from dashboard import capacity
from dashboard.capacity import GiB, MiB
from dashboard.models import Policy
from tests.manage_in_process import database_unreachable, manage

NODE_1774 = ["--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB"]
ONE_SSD = ["--pools", "931.5GiB"]  # its one SSD, as zos.storage.pools reports it
# Nothing listens on port 1: any attempt to reach the database fails at once.
NO_DATABASE = "postgres://nobody@127.0.0.1:1/nowhere"


# The what-if reads the fleet's saved policy when no --policy is given (none saved: the zos profile).
pytestmark = pytest.mark.django_db


def carve(*args: str) -> str:
    out = StringIO()
    call_command("carve", *args, stdout=out)
    return out.getvalue()


def carve_json(*args: str) -> dict:
    return json.loads(carve(*args, "--json"))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": NO_DATABASE}
    return subprocess.run(
        [sys.executable, "manage.py", "carve", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_carves_node_1774_into_six_slices_by_default():
    result = carve_json(*NODE_1774)
    assert (result["policy"], result["slices"], result["limited_by"]) == ("zos", 6, "mru")


def test_it_prints_the_slice_size_in_bytes():
    size = carve_json(*NODE_1774, *ONE_SSD)["slice"]
    assert (size["cru"], size["mru"], size["rootfs"]) == (1, 4 * GiB, 500 * MiB)
    assert size["sru"] >= 150 * GiB


def test_it_prints_the_reserve_unallocated_and_notes():
    result = carve_json(*NODE_1774, *ONE_SSD)
    assert (result["reserve"]["mru"], result["reserve"]["sru"]) == (3328599654, 20 * GiB)
    assert result["unallocated"]["mru"] == 4187593114 and result["notes"] == []


def test_it_prints_exactly_one_json_object():
    text = carve(*NODE_1774, "--json")
    assert text.count("\n") == 1 and json.loads(text)["slices"] == 6


def test_it_carves_the_legacy_way_when_asked():
    result = carve_json(*NODE_1774, "--policy", "legacy")
    assert (result["slices"], result["slice"]["sru"]) == (7, 133 * GiB)
    assert "not every slice can be deployed" in result["notes"][0]


def test_it_carves_with_the_flat_overhead_guess():
    assert carve_json(*NODE_1774, "--policy", "flat-overhead")["slices"] == 4


def test_it_keeps_each_disk_in_one_pool():
    result = carve_json("--cru", "8", "--mru", "80GiB", "--pools", "465.75GiB", "465.75GiB")
    assert result["total"]["sru"] == int(931.5 * GiB)
    assert result["pools"] == [int(465.75 * GiB)] * 2
    assert result["slice"]["sru"] + result["slice"]["rootfs"] <= int(465.75 * GiB)


def test_it_reads_comma_separated_pools():
    assert carve_json(*NODE_1774, "--pools", "465.75GiB,465.75GiB")["pools"] == [int(465.75 * GiB)] * 2


def test_it_sizes_the_disks_for_unknown_pools_without_pools_and_says_what_that_gives_up():
    known, hidden = carve_json(*NODE_1774, *ONE_SSD), carve_json(*NODE_1774)
    assert (hidden["slices"], hidden["pools_known"]) == (known["slices"], False)
    assert hidden["slice"]["sru"] < known["slice"]["sru"]
    assert hidden["disk_given_up"] == 6 * (known["slice"]["sru"] - hidden["slice"]["sru"])
    assert "the SSD pools are not reported" in carve(*NODE_1774)


def test_it_prints_a_short_table_in_gib():
    text = carve(*NODE_1774, *ONE_SSD)
    assert "slices:  6, limited by memory" in text
    assert "each:    1 vCPU, 4 GiB memory, 151 GiB disk + 500 MiB rootfs" in text
    assert re.search(r"\nreserve +3\.1 +20\n", text)


def test_it_notes_a_node_too_small_for_one_slice():
    text = carve("--cru", "1", "--mru", "5GiB", "--sru", "100GiB")
    assert "note:    the node cannot hold even one slice: short of memory" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cru", "8", "--mru", "31GB", "--sru", "931.5GiB"], "--mru: '31GB' uses a decimal unit"),
        (["--cru", "8", "--mru", "31GiB", "--sru=-1GiB"], "--sru: '-1GiB' is negative"),
        # A negative value after a space reaches the command too (argparse took it for an option).
        (["--cru", "8", "--mru", "-31GiB", "--sru", "1GiB"], "--mru: '-31GiB' is negative"),
        (["--cru", "-8", "--mru", "31GiB", "--sru", "1GiB"], "--cru: '-8' is not a number of CPU cores"),
        (["--cru", "8", "--mru", "0", "--sru", "1GiB"], "--mru: must be more than zero"),
        (["--cru", "8", "--mru", "nan", "--sru", "1GiB"], "--mru: 'nan' is not a size"),
        (["--cru", "8", "--mru", "31GiB", "--sru", "5000TiB"], "--sru: 5000 TiB is absurd"),
        (["--cru", "0", "--mru", "31GiB", "--sru", "1GiB"], "--cru: '0' is not a number of CPU cores"),
        (["--cru", "eight", "--mru", "31GiB", "--sru", "1GiB"], "--cru: 'eight' is not a number of CPU cores"),
        ([*NODE_1774, "--pools", "500GiB", "500GiB"], "--pools add up to 1000 GiB, more than --sru 931.5 GiB"),
        ([*NODE_1774, "--pools", "0GiB"], "--pools: must be more than zero"),
        (["--cru", "8", "--mru", "31GiB"], r"give --cru, --mru and --sru \(missing --sru\)"),
        ([], r"missing --cru, --mru, --sru"),
    ],
)
def test_it_refuses_bad_input_with_one_clear_error(args, message):
    with pytest.raises(CommandError, match=message):
        carve(*args)


def test_with_a_profile_it_touches_no_database_and_by_default_reads_only_the_fleets_policy(
    django_assert_num_queries,
):
    with django_assert_num_queries(0):
        carve(*NODE_1774, "--policy", "zos", "--json")
    with django_assert_num_queries(1):
        carve(*NODE_1774, "--json")


def test_it_works_with_the_database_unreachable():
    # A real process with a DATABASE_URL where nothing listens: the one run that shows no database at all.
    done = run(*NODE_1774, "--json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["slices"] == 6


def test_it_exits_non_zero_with_one_line_and_no_traceback_on_a_bad_size():
    done = manage("carve", "--cru", "8", "--mru", "31GB", "--sru", "931.5GiB")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "CommandError: --mru: '31GB' uses a decimal unit; ZOS counts 1024-based units, write 31GiB or 31MiB"
    ]


def test_it_exits_non_zero_with_one_line_on_a_bad_policy():
    # With no database the words say that the saved policies could not be looked at.
    with database_unreachable():
        done = manage("carve", *NODE_1774, "--policy", "zoz")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip() == (
        "CommandError: unknown policy 'zoz': it is no profile (zos, legacy, flat-overhead) and the saved "
        "policies could not be read (is the database up?)"
    )


@pytest.mark.django_db
def test_it_names_the_profiles_and_the_saved_policies_for_an_unknown_one():
    Policy.objects.create(
        name="fleet-default", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )
    with pytest.raises(
        CommandError, match="unknown policy 'zoz'; choose one of: zos, legacy, flat-overhead, fleet-default"
    ):
        carve(*NODE_1774, "--policy", "zoz")


@pytest.mark.django_db
def test_it_carves_with_the_policy_in_force_by_its_name():
    params = Policy.parameters_from(capacity.with_overrides(capacity.PROFILES["zos"], slice_mru=8 * capacity.GiB))
    Policy.objects.create(name="fleet-default", scope=Policy.Scope.FLEET, **params)
    data = json.loads(carve(*NODE_1774, "--policy", "fleet-default", "--json"))
    assert (data["policy"], data["slice"]["mru"]) == ("fleet-default", 8 * capacity.GiB)


@pytest.mark.parametrize(
    ("size", "short"),
    [(["--mru", "31GiB", "--sru", "0"], "20 GiB of SSD"), (["--mru", "1MiB", "--sru", "1TiB"], "2 GiB of memory")],
)
def test_a_what_if_below_zos_reserve_says_so_not_that_rented_slices_need_more(size, short):
    text = carve("--cru", "8", *size)
    assert f"the node is smaller than what ZOS keeps for itself ({short}" in text
    assert "rented and deployed" not in text


def test_finding_7_without_policy_it_carves_with_the_fleets_policy():
    Policy.objects.create(name="fleet-8g", scope=Policy.Scope.FLEET, slice_mru=8 * GiB)
    result = carve_json(*NODE_1774)
    assert (result["policy"], result["slices"]) == ("fleet-8g", 3)
    assert carve_json(*NODE_1774, "--policy", "zos")["slices"] == 6


def test_with_the_pools_and_the_zos_cache_it_keeps_the_quota_and_its_next_step():
    known = carve_json("--cru", "8", "--mru", "31GiB", "--pools", "931.5GiB", "--zos-cache", "5GiB")
    proxy = carve_json("--cru", "8", "--mru", "31GiB", "--pools", "931.5GiB")
    assert (known["reserve"]["sru"], proxy["reserve"]["sru"]) == (10 * GiB, 20 * GiB)
