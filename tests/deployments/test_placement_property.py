"""Issue 34, finding 6: placement's fast path (deployments.selectors.placement_cut) gives the answer of its Python
reference (every node judged, `every_node=True`) in every state the fleet reaches, driven by random
sequences of the writes that change it: register, precheck from the CLI and as the web's job, closures
(rent by another twin, down, standby), withholds, holds, rent (a deploy) and re-register.

The quick loop runs a few sequences from a fixed seed; `make test` runs many more (slow-marked)."""

import itertools
import tempfile
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from hypothesis import HealthCheck, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dashboard.capacity import GiB
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.deployments.services.holds import HoldConflict, hold_create
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Node, Slice
from dashboard.nodes.services.registration import node_register_from_grid
from dashboard.nodes.services.withholds import node_withhold, withhold_release
from sim.grid import SimulatedGrid

pytestmark = pytest.mark.django_db
OURS, OTHER = 7, 42
# Sizes that divide the fleet differently: a small VM most nodes take, the usual one, a big disk, big memory.
SIZES = ((1, 2 * GiB, 50 * GiB), (1, 4 * GiB, 151 * GiB), (2, 8 * GiB, 400 * GiB), (4, 40 * GiB, 100 * GiB))
# The nodes a sequence may register: (cru, mru, sru, pools or None, farm).
SHAPES = {
    1774: (8, 31 * GiB, int(931.5 * GiB), None, 1),
    2310: (8, 31 * GiB, 930 * GiB, [465 * GiB, 465 * GiB], 2),
    2456: (16, 62 * GiB, 1397 * GiB, [465 * GiB, 466 * GiB, 466 * GiB], 2),
    4000: (4, 8 * GiB, 250 * GiB, None, 3),
    4001: (64, 256 * GiB, 7452 * GiB, [3726 * GiB, 3726 * GiB], 3),
}
NODE = st.sampled_from(sorted(SHAPES))
STEP = st.one_of(
    st.tuples(st.just("register"), NODE, st.sampled_from(("zos", "legacy"))),
    st.tuples(st.just("precheck-cli"), NODE),
    st.tuples(st.just("precheck-web"), NODE),
    st.tuples(st.just("rent-away"), NODE, st.booleans()),  # rented by another twin, or that rent ended
    st.tuples(st.just("status"), NODE, st.sampled_from(("up", "down", "standby"))),
    st.tuples(st.just("withhold"), NODE, st.booleans()),  # withheld, or released
    st.tuples(st.just("hold"), NODE, st.integers(0, 6)),
    st.tuples(st.just("deploy"), NODE, st.integers(0, 6)),
    st.tuples(st.just("reregister"), NODE),
)


def _answer(placement) -> dict:
    return {
        "nodes": placement.nodes,
        "can_host": placement.can_host,
        "blocked": placement.blocked,
        "held_nodes": placement.held_nodes,
        "best": [(v.node_id, v.blocked_by, v.verdict, v.could_take) for v in placement.best],
    }


def _agree(step, sizes) -> None:
    for cru, mru, sru in sizes:
        reference = _answer(placement_for(cru=cru, mru=mru, sru=sru, best=5, every_node=True))
        assert _answer(placement_for(cru=cru, mru=mru, sru=sru, best=5)) == reference, (step, cru, mru, sru)


def _free_slice(node: Node, index: int) -> int | None:
    free = list(node.slices.filter(state=Slice.State.FREE).order_by("index").values_list("index", flat=True))
    return free[index % len(free)] if free else None


def _job_run(kind: str, node: Node) -> None:
    """A job as the web requests it, claimed and run here in the test's own transaction."""
    job_execute(job=job_claim(job_id=job_request(kind=kind, node=node, source="web").job.pk))


def _rent_away(grid: SimulatedGrid, node: Node, rented: bool) -> None:
    """Another twin rents the node, or its rent ends (each only when the grid is not already so)."""
    if rented and grid.rent_contract(node.grid_id) is None:
        grid.rent(node.grid_id, OTHER)
    elif not rented and grid.rent_contract(node.grid_id) is not None:
        grid.rent_end(node.grid_id)


def _withhold(node: Node, withheld: bool) -> None:
    if withheld and not node.withheld_reason:
        node_withhold(nodes=[node], reason="property test", via="command")
    elif not withheld and node.withheld_reason:
        withhold_release(node=node, via="command")


def _hold(node: Node, index: int, holds: itertools.count) -> None:
    try:
        hold_create(
            node_id=node.grid_id,
            slice_index=index,
            ttl_seconds=600,
            marketplace_id=f"b{next(holds)}",
            source="command",
        )
    except HoldConflict as refused:
        # A closed node (withheld, rented by another twin, down) refuses a hold: the refusal is
        # right, and the placement readers must agree with it all the same.
        assert "none of its slices can be held" in str(refused), refused
        node.refresh_from_db()
        closed = node.withheld_reason or node.rented_by_twin_id not in (None, OURS)
        assert closed or node.status not in (Node.Status.UP, Node.Status.STANDBY), (node, refused)


def _hold_or_deploy(grid: SimulatedGrid, kind: str, node: Node, pick: int, holds: itertools.count) -> None:
    """Hold or deploy one of the node's free slices, unless it has none or that one is held already."""
    index = _free_slice(node, pick)
    if index is None or node.holds.filter(slice_index=index, ended_at__isnull=True).exists():
        return
    if kind == "hold":
        _hold(node, index, holds)
    else:
        slice_deploy(node=node, slice_index=index, grid=grid, source="command")


# The writes a step makes on a registered node: (grid, node, the step's arguments, hold ids) -> None.
STEP_WRITES = {
    "precheck-cli": lambda grid, node, args, holds: call_command(
        "precheck", str(node.grid_id), stdout=StringIO(), stderr=StringIO()
    ),
    "precheck-web": lambda grid, node, args, holds: _job_run(Job.Kind.PRECHECK, node),
    "reregister": lambda grid, node, args, holds: _job_run(Job.Kind.REREGISTER, node),
    "rent-away": lambda grid, node, args, holds: _rent_away(grid, node, args[0]),
    "status": lambda grid, node, args, holds: grid.set_status(node.grid_id, args[0]),
    "withhold": lambda grid, node, args, holds: _withhold(node, args[0]),
    "hold": lambda grid, node, args, holds: _hold_or_deploy(grid, "hold", node, args[0], holds),
    "deploy": lambda grid, node, args, holds: _hold_or_deploy(grid, "deploy", node, args[0], holds),
}


def _do(grid: SimulatedGrid, step: tuple, holds: itertools.count) -> None:
    kind, node_id, *args = step
    node = Node.objects.filter(grid_id=node_id).first()
    if kind == "register":
        if node is None:
            node_register_from_grid(live=grid.node(node_id), policy_name=args[0])
        return
    # Every other step is a write on a registered node: one the sequence has not registered yet is skipped.
    if node is not None:
        STEP_WRITES[kind](grid, node, args, holds)


def _run(steps: list[tuple], sizes=SIZES) -> None:
    """One sequence on a fresh simulated grid and, rolled back after it, the database as the test found it."""
    with (
        tempfile.TemporaryDirectory(prefix="placement-prop-") as scratch,
        override_settings(SIMGRID_PATH=Path(scratch) / "simgrid.sqlite3", MARKETPLACE_TWIN_ID=(OURS,)),
        transaction.atomic(),
    ):
        folder = Path(scratch)
        grid = SimulatedGrid(folder / "simgrid.sqlite3", deployer_twin=OURS)
        for node_id, (cru, mru, sru, pools, farm) in SHAPES.items():
            grid.add_node(node_id, cru=cru, mru=mru, sru=sru, pools=pools, farm_id=farm)
        holds = itertools.count()
        for step in steps:
            _do(grid, step, holds)
            _agree(step, sizes)
        transaction.set_rollback(True)


QUICK = hypothesis_settings(
    max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)


@pytest.mark.slow
@seed(34)
@QUICK
@given(steps=st.lists(STEP, min_size=3, max_size=5))
def test_finding_6_the_fast_path_agrees_with_its_reference_after_each_step(steps):
    # Kept cheap for `make check`: two sizes, a few short sequences from a fixed seed.
    _run([("register", 1774, "legacy"), ("register", 2310, "zos"), *steps], sizes=SIZES[:2])


@pytest.mark.slow
# 40 sequences take about 100 s on a quiet 2-core machine and up to 400 s on a loaded one: the suite's
# 300 s per-test limit is for a test that hangs, not for one this long by design.
@pytest.mark.timeout(1200)
@hypothesis_settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(steps=st.lists(STEP, min_size=4, max_size=16))
def test_finding_6_the_fast_path_agrees_with_its_reference_over_many_sequences(steps):
    _run([("register", 1774, "legacy"), *steps])
