import json
import stat
from datetime import timedelta
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import RequestFactory, override_settings
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.models import AuditEvent, CapacitySample, Deployment, Node, Policy, Slice
from dashboard.policies.services.calibration import fleet_calibration
from sim.grid import SimulatedGrid
from sim.management.commands.demo_fleet import FLEET_SIZE
from tests.conftest import rolled_back_after

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_env(simgrid_path, settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.DEBUG = True
    # Hashing the demo passwords properly is most of a build's time; these tests check roles, not hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return settings.VAR_DIR / "demo-logins.json"


def _demo(*args):
    out = StringIO()
    call_command("demo_fleet", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def demo(demo_env):
    """A demo fleet of this test's own, for the tests that change it or run the command again."""
    _demo()


@pytest.fixture(scope="class")
def demo_built_once(django_db_setup, django_db_blocker, tmp_path_factory):
    """One demo fleet for a class of tests that read it (or run the command again, which must change
    nothing): built once, rolled back after the class (tests/conftest.py rolled_back_after). The
    simulated grid and the logins file live in a folder of their own that no other test sees.
    """
    folder = tmp_path_factory.mktemp("demo")
    built = SimpleNamespace(simgrid_path=folder / "simgrid.sqlite3", logins=folder / "var" / "demo-logins.json")
    with (
        override_settings(
            VAR_DIR=folder / "var", SIMGRID_PATH=built.simgrid_path, GRID_BACKEND="simulator", DEBUG=True
        ),
        rolled_back_after(django_db_blocker),
    ):
        _demo()
        yield built


@pytest.fixture
def shared_demo(demo_built_once, db, settings):
    """The class's demo fleet, with this test's settings pointing at it."""
    settings.VAR_DIR = demo_built_once.logins.parent
    settings.SIMGRID_PATH = demo_built_once.simgrid_path
    settings.GRID_BACKEND = "simulator"
    settings.DEBUG = True
    return demo_built_once


@pytest.mark.slow
class TestOneDemoFleet:
    """What `make run` shows, read by many tests from one build (see demo_built_once)."""

    def test_it_puts_more_than_a_page_of_nodes_on_the_simulator(self, shared_demo):
        from dashboard.views.fleet import NODES_PER_PAGE

        assert len(SimulatedGrid(shared_demo.simgrid_path).node_ids()) == FLEET_SIZE
        assert Node.objects.count() > NODES_PER_PAGE  # a newcomer sees the table's paging

    def test_it_says_which_nodes_it_leaves_unregistered_and_why(self, shared_demo):
        left = sorted(
            set(SimulatedGrid(shared_demo.simgrid_path).node_ids())
            - set(Node.objects.values_list("grid_id", flat=True))
        )
        out = _demo()
        assert left and f"{FLEET_SIZE - len(left)} registered" in out
        assert ", ".join(str(i) for i in left) in out
        assert f"manage.py node_register {left[0]}" in out

    def test_it_registers_1774_with_its_legacy_catalog_and_one_vm(self, shared_demo):
        node = Node.objects.get(grid_id=1774)
        slices = list(node.slices.order_by("index").values_list("state", "mru", "sru"))
        assert (node.farm_id, node.farm_name, node.total_mru, node.carved_policy_name) == (
            4242,
            "mitana",
            31 * GiB,
            "legacy",
        )
        assert slices == [("deployed", 4 * GiB, 133 * GiB)] + [("free", 4 * GiB, 133 * GiB)] * 6
        assert len(SimulatedGrid(shared_demo.simgrid_path).vms(1774)) == 1

    def test_it_shows_1774_with_one_phantom_slice(self, shared_demo):
        assert Node.objects.filter(grid_id=1774, placeable_now=5, phantom_slices=1).exists()

    def test_it_records_failed_deployments_with_real_causes(self, shared_demo):
        failed = Deployment.objects.filter(state="failed")
        assert {"memory", "disk", "node-offline"} <= set(failed.values_list("cause", flat=True))
        assert "cannot fulfil required memory size" in failed.filter(cause="memory").first().raw_error
        assert "not enough space left in pools" in failed.filter(cause="disk").first().raw_error

    def test_it_records_1774s_seventh_slice_refused_by_precheck_and_failed_on_the_grid(self, shared_demo):
        attempts = Deployment.objects.filter(node__grid_id=1774, slice_index=6)
        assert sorted(attempts.values_list("state", "cause")) == [("failed", "memory"), ("refused", "memory")]

    def test_it_has_stale_legacy_nodes_and_current_ones(self, shared_demo):
        legacy = Node.objects.filter(carved_policy_name="legacy").count()
        assert 3 <= legacy <= FLEET_SIZE // 5 and Node.objects.exclude(carved_policy_name="legacy").count() > 30

    def test_it_creates_the_fleet_default_policy(self, shared_demo):
        policy = Policy.objects.get(name="fleet-default")
        assert (policy.scope, policy.reserve_mru_percent, policy.rootfs) == ("fleet", 10, "zos")

    def test_it_has_varied_nodes_down_standby_and_two_pool(self, shared_demo):
        statuses = set(Node.objects.values_list("status", flat=True))
        sizes = list(Node.objects.values_list("total_mru", flat=True))
        assert statuses == {"up", "down", "standby"}
        assert min(sizes) == 4 * GiB and max(sizes) == 256 * GiB
        assert any(p and len(p) == 2 for p in Node.objects.values_list("pools_sru", flat=True))

    def test_the_marketplace_rents_1774_in_its_dedicated_farm_and_another_twin_rents_3150(self, shared_demo):
        rents = dict(Node.objects.filter(grid_id__in=(1774, 3150)).values_list("grid_id", "rented_by_twin_id"))
        assert rents == {1774: 7, 3150: 4711}
        assert Node.objects.get(grid_id=1774).in_dedicated_farm and Node.objects.get(grid_id=1774).rent_contract_id

    def test_with_the_marketplace_twin_set_the_rented_nodes_are_judged(self, shared_demo, settings):
        from dashboard.figures.services.figures import figures_refresh_all

        settings.MARKETPLACE_TWIN_ID = (7,)
        figures_refresh_all()
        closures = dict(Node.objects.exclude(closure__in=("", "down", "standby")).values_list("grid_id", "closure"))
        assert closures.get(3150) == "rented" and 1774 not in closures
        assert list(closures.values()).count("needs-rent") == 1  # the dedicated farm's one node nobody rents
        assert Node.objects.filter(grid_id=1774, placeable_now=5).exists()

    def test_it_rents_a_few_slices(self, shared_demo):
        assert 2 <= Slice.objects.filter(state="rented").count() <= FLEET_SIZE // 2

    def test_it_prechecks_every_registered_node(self, shared_demo):
        assert not Node.objects.filter(prechecked_at__isnull=True).exists()
        assert not Node.objects.filter(status="down").exclude(placeable_now=0).exists()

    def test_it_gives_calibration_something_to_show(self, shared_demo):
        fleet = fleet_calibration()
        assert 2877 in [c.node_id for c in fleet.flagged]
        assert CapacitySample.objects.values("node").distinct().count() >= 2

    def test_it_creates_the_demo_logins_with_their_roles(self, shared_demo):
        passwords = json.loads(shared_demo.logins.read_text())
        admin = authenticate(RequestFactory().post("/login/"), username="admin", password=passwords["admin"])
        support = authenticate(RequestFactory().post("/login/"), username="support", password=passwords["support"])
        assert (admin.is_superuser, admin.is_staff, list(admin.groups.values_list("name", flat=True))) == (
            True,
            True,
            ["admins"],
        )
        assert (support.is_staff, list(support.groups.values_list("name", flat=True))) == (False, ["support"])

    def test_it_keeps_the_logins_file_private(self, shared_demo):
        assert stat.S_IMODE(shared_demo.logins.stat().st_mode) == 0o600

    def test_the_counts_it_prints_at_start_are_the_fleet_pages_tiles(self, shared_demo, admins_client):
        """Issue 34: the start banner's counts match the fleet page (its tiles, as rendered)."""
        import re

        from dashboard.nodes.services.withholds import node_withhold

        node_withhold(nodes=[Node.objects.get(grid_id=1995)], reason="maintenance", via="command")  # a closed tier
        line = next(line for line in _demo().splitlines() if line.startswith("Fleet page:"))
        said = {
            word: int(n.replace(",", ""))
            for n, word in re.findall(
                r"([\d,]+) (nodes|deployable|now|after wake|blocked|closed|free|phantom|stale)", line
            )
        }
        page = admins_client.get("/").content.decode()
        tiles = {
            "nodes": r"<dt>Nodes</dt><dd>([\d,]+)",
            "deployable": r"<dt>Deployable</dt><dd>([\d,]+)",
            "now": r'data-tier="now"[^>]*><strong>([\d,]+)',
            "after wake": r'data-tier="after-wake"[^>]*><strong>([\d,]+)',
            "blocked": r'data-tier="blocked"[^>]*><strong>([\d,]+)',
            "closed": r'data-tier="closed"[^>]*><strong>([\d,]+)',
            "free": r"<dt>Free</dt><dd>([\d,]+)",
            "phantom": r"<dt>Phantom on up nodes</dt><dd>([\d,]+)",
            "stale": r"<dt>Stale catalogs</dt><dd>([\d,]+)",
        }
        shown = {word: int(re.search(pattern, page).group(1).replace(",", "")) for word, pattern in tiles.items()}
        assert said == shown
        assert (
            said["closed"] > 0
            and said["now"] + said["after wake"] + said["blocked"] + said["closed"] == said["deployable"]
        )

    def test_it_prints_only_the_login_lines(self, shared_demo):
        passwords = json.loads(shared_demo.logins.read_text())
        assert _demo("--print-logins").splitlines() == [
            f"Login: admin / {passwords['admin']}  (admins)",
            f"Login: support / {passwords['support']}  (support)",
        ]

    def test_it_changes_nothing_when_run_again(self, shared_demo):
        simgrid_path = shared_demo.simgrid_path

        def state():
            return (
                Node.objects.count(),
                Deployment.objects.count(),
                CapacitySample.objects.count(),
                sorted(SimulatedGrid(simgrid_path).node_ids()),
                len(SimulatedGrid(simgrid_path).vms(1774)),
                list(Slice.objects.order_by("node__grid_id", "index").values_list("state", flat=True)),
            )

        before = state()
        _demo()
        assert state() == before

    def test_its_tour_names_each_special_node_with_a_command_that_exists(self, shared_demo):
        from sim.management.commands.demo_fleet import TOUR

        out = _demo("--tour")
        commands = {p.stem for p in (Path(__file__).parents[2] / "dashboard/management/commands").glob("*.py")}
        for spec, _shows, command in TOUR:
            assert f"manage.py {command}" in out and Node.objects.filter(grid_id=spec.node_id).exists()
            assert command.split()[0] in commands and str(spec.node_id) in command
        assert out.index("Login: admin") < out.index("Tour:")

    def test_the_healthy_demo_audits_clean(self, shared_demo):
        """Issue 34 item 6: its rented slices (renters who may not run a VM yet) are not counts that disagree."""
        from dashboard.catalogs.selectors.catalog_audit import Pace
        from dashboard.catalogs.services.catalog_audit import catalog_audit_here

        job = catalog_audit_here(fix=False, pace=Pace(rate=1000.0, sleep=lambda _s: None))
        assert [f.words for f in job.outcome.findings] == []
        assert "nothing out of place" in job.outcome.words

    def test_it_gives_the_demo_groups_their_permissions_when_they_were_lost(self, shared_demo):
        from django.contrib.auth.models import Group

        Group.objects.all().delete()  # as a flushed database has them
        _demo()
        assert User.objects.get(username="support").has_perm("dashboard.view_node")
        assert not User.objects.get(username="support").has_perm("dashboard.reregister_node")

    def test_it_reuses_the_passwords_on_later_runs(self, shared_demo):
        first = shared_demo.logins.read_text()
        _demo()
        assert shared_demo.logins.read_text() == first
        assert (
            authenticate(RequestFactory().post("/login/"), username="admin", password=json.loads(first)["admin"])
            is not None
        )


# Two full builds of the demo of its own: `make test` runs it.
@pytest.mark.slow
def test_it_keeps_what_the_operator_did_across_runs_and_rebuilds_only_when_reset(demo, simgrid_path):
    from dashboard.nodes.services.registration import node_register_from_grid
    from sim.management.commands.demo_fleet import demo_nodes

    grid = SimulatedGrid(simgrid_path)
    spare = next(n.node_id for n in demo_nodes() if not n.registered)
    node_register_from_grid(live=grid.node(spare), source="command")
    Slice.objects.filter(node__grid_id=1774, state="free").update(state="rented")
    events = AuditEvent.objects.count()
    grid.remove_node(3021)  # a node the operator took off the simulated grid
    aged = timezone.now() - timedelta(hours=1)
    Node.objects.filter(grid_id=2733).update(seen_at=aged)
    fresh = Node.objects.get(grid_id=2456).seen_at

    again = _demo()
    # Only what aged since the last run is read again (a quick restart reads nothing).
    assert Node.objects.get(grid_id=2733).seen_at > aged and Node.objects.get(grid_id=2456).seen_at == fresh
    assert "kept as you left it" in again and "make demo-reset" in again
    assert Node.objects.filter(grid_id=spare).exists()
    assert not Slice.objects.filter(node__grid_id=1774, state="free").exists()
    assert AuditEvent.objects.count() >= events  # the audit trail kept (the prechecks add to it)

    rebuilt = _demo("--reset")
    assert "demo fleet rebuilt" in rebuilt
    assert not Node.objects.filter(grid_id=spare).exists()
    assert len(SimulatedGrid(simgrid_path).vms(1774)) == 1 and 3021 in SimulatedGrid(simgrid_path).node_ids()
    assert Deployment.objects.filter(node__grid_id=1774, state="deployed").count() == 1


def test_it_cannot_print_logins_before_they_exist(demo_env):
    with pytest.raises(CommandError, match="run manage.py demo_fleet first"):
        _demo("--print-logins")


def test_it_refuses_to_run_with_debug_off(demo_env, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG is off"):
        _demo()
    assert not User.objects.exists() and not demo_env.exists()


# A full build of the demo of its own: `make test` runs it.
@pytest.mark.slow
def test_it_runs_with_debug_off_only_when_forced(demo_env, settings):
    settings.DEBUG = False
    _demo("--force")
    assert User.objects.filter(username="admin").exists()


# A full build of the demo of its own, groups lost before it: `make test` runs it (the quick loop
# runs the same on the class's demo, TestOneDemoFleet).
@pytest.mark.slow
def test_it_gives_the_demo_groups_their_permissions_when_they_were_lost(demo_env):
    from django.contrib.auth.models import Group, User

    Group.objects.all().delete()  # as a flushed database has them
    _demo()
    assert User.objects.get(username="support").has_perm("dashboard.view_node")
    assert not User.objects.get(username="support").has_perm("dashboard.reregister_node")
