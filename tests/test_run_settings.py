"""Issue 34, finding 1: what `make run` decides for the demo (the marketplace twin, the grid backend) is
read by every process, web, worker, beat and a `manage.py` typed in another terminal; a command that would
store figures computed under other settings than the stored ones says so and stores nothing."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from config.env import RUN_SETTINGS_FILE, run_settings_load
from dashboard.figures.services.figures_settings import figures_settings_store
from dashboard.models import Node
from scripts.run import RUN_SETTINGS, run_settings_keep, run_settings_words
from tests.factories import node_1774

BASE_DIR = Path(__file__).resolve().parent.parent
OURS, OTHER = 7, 4711


def test_finding_1_make_run_writes_its_settings_for_every_process_and_the_environment_wins(tmp_path, monkeypatch):
    for name in RUN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GRID_BACKEND", "simulator")
    decided = run_settings_keep(tmp_path)
    assert decided == {"MARKETPLACE_TWIN_ID": "7", "GRID_BACKEND": "simulator"}
    assert "MARKETPLACE_TWIN_ID=7" in (tmp_path / RUN_SETTINGS_FILE).read_text().splitlines()
    assert "MARKETPLACE_TWIN_ID=7" in run_settings_words(decided)
    monkeypatch.delenv("MARKETPLACE_TWIN_ID")
    monkeypatch.setenv("GRID_BACKEND", "gridproxy")
    assert run_settings_load(tmp_path / RUN_SETTINGS_FILE) == {"MARKETPLACE_TWIN_ID": "7"}
    assert (os.environ["MARKETPLACE_TWIN_ID"], os.environ["GRID_BACKEND"]) == ("7", "gridproxy")


def test_finding_1_a_bad_line_in_the_run_settings_file_stops_start_up(tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    (tmp_path / RUN_SETTINGS_FILE).write_text("MARKETPLACE_TWIN_ID 7\n")
    with pytest.raises(ImproperlyConfigured, match="line 1"):
        run_settings_load(tmp_path / RUN_SETTINGS_FILE)


def test_finding_1_manage_py_in_the_embedded_default_reads_make_runs_settings(tmp_path):
    (tmp_path / RUN_SETTINGS_FILE).write_text("MARKETPLACE_TWIN_ID=7\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MARKETPLACE_TWIN_ID")}
    env |= {"VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings"}
    read = "import django; django.setup(); from django.conf import settings; print(settings.MARKETPLACE_TWIN_ID)"
    out = subprocess.run([sys.executable, "-c", read], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "(7,)", out.stderr


@pytest.fixture
def node_3150(sim_node, settings, db):
    """Node 3150 as the demo has it: rented by twin 4711, registered and stored under MARKETPLACE_TWIN_ID=7."""
    from dashboard.nodes.services.registration import node_register_from_grid

    settings.MARKETPLACE_TWIN_ID = (OURS,)
    sim_node.grid.deployer_twin = OURS
    sim_node.grid.add_node(3150, **node_1774())
    sim_node.grid.rent(3150, OTHER)
    node = node_register_from_grid(live=sim_node.grid.node(3150), policy_name="zos")
    figures_settings_store()
    return node


def test_finding_1_precheck_under_the_stored_settings_leaves_3150_closed(node_3150):
    call_command("precheck", "3150", stdout=StringIO())
    node = Node.objects.get(grid_id=3150)
    assert (node.closure, node.placeable_now) == ("rented", 0)


def test_finding_1_precheck_without_the_marketplace_twin_stores_nothing_and_says_so(node_3150, settings):
    settings.MARKETPLACE_TWIN_ID = ()
    before = Node.objects.filter(grid_id=3150).values("closure", "placeable_now", "prechecked_at").get()
    with pytest.raises(CommandError, match=r"MARKETPLACE_TWIN_ID=7, this process has MARKETPLACE_TWIN_ID=\(unset\)"):
        call_command("precheck", "3150", stdout=StringIO())
    assert Node.objects.filter(grid_id=3150).values("closure", "placeable_now", "prechecked_at").get() == before


def test_finding_1_figures_refresh_stores_every_node_again_under_its_settings_and_records_them(node_3150, settings):
    settings.MARKETPLACE_TWIN_ID = ()
    out = StringIO()
    call_command("figures_refresh", stdout=out)
    assert "MARKETPLACE_TWIN_ID=(unset)" in out.getvalue()
    assert Node.objects.get(grid_id=3150).closure == ""
    call_command("precheck", "3150", stdout=StringIO())  # the stored settings are now this process's
