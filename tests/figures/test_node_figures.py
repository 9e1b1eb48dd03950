"""A node's figures from plain values (issue 46): figures.node_figures computes them from a row and the inputs
the rows share, with no database. This module has no `db` mark: pytest-django refuses any query here, so
each test also proves the computation reads nothing. The expected figures are worked out by hand from ZOS's
rule (docs/zos.md: ZOS keeps 10% of the memory, at least 2 GiB, for itself)."""

from collections import namedtuple
from dataclasses import replace

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.figures.node_figures import NODE_VALUES, FiguresInputs, FleetFigures

Row = namedtuple("Row", NODE_VALUES)
ZOS = capacity.PROFILES["zos"]
TOTAL_MRU = 32 * GiB
RESERVE_MRU = TOTAL_MRU // 10  # 3.2 GiB: above the 2 GiB floor
SLICE = (1, 4 * GiB, 127 * GiB)  # a slice of the zos policy on this node (its data disk as the carve makes it)
# (32 GiB - 3.2 GiB) / 4 GiB = 7.2: seven slices.
SLICES_BY_HAND = 7


def _row(**changes) -> Row:
    values = dict.fromkeys(NODE_VALUES)
    values.update(
        pk=1,
        farm_id=7,
        light=False,
        total_cru=8,
        total_mru=TOTAL_MRU,
        total_sru=1000 * GiB,
        total_hru=0,
        pools_text=f"[{1000 * GiB}]",
        pools_used=[0],
        zos_cache_sru=100 * GiB,
        carved_pools_known=True,
        carved_policy_name="zos",
        carved_policy_version=1,
        hidden_mru_per_vm=0,
        zos_own_mru=0,
        zos_version="",
        # A reading with nothing deployed: ZOS's memory reserve is all it counts, nothing written on the disk.
        used_cru=0,
        used_mru=RESERVE_MRU,
        used_sru=0,
        used_hru=0,
        status="up",
        withheld_reason="",
        rent_state="",
        in_dedicated_farm=False,
        extra_fee=0,
        zos_cache_missing="",
        zos_cache_missing_source="",
        placeable_now=3,  # what is stored: kept where there is no reading
        phantom_slices=0,
        phantom_reasons={},
    )
    values.update(changes)
    return Row(**values)


def _inputs(slices: dict | None = None) -> FiguresInputs:
    return FiguresInputs(
        slices=slices or {},
        fits={},
        beliefs={(None, ""): None},  # an unknown build, no lesson: every slice's odds are 1
        by_node={},
        by_farm={},
        fleet_policy=ZOS,
        min_odds=0.9,
    )


def _catalog(free: int) -> dict:
    """Node 1's catalog as figures.selectors.slices_grouped groups it: `free` free slices of SLICE."""
    return {1: (free, 0, 0, 0, (((SLICE, free),), ()), (SLICE,) * free)}


def _figures(row: Row, inputs: FiguresInputs):
    figures, _stored = FleetFigures(inputs).node(row)
    return figures


def test_a_node_without_a_catalog_is_stale_with_what_zos_deploys():
    figures = _figures(_row(), _inputs())
    assert (figures.slices_free, figures.deployable, figures.stale) == (0, SLICES_BY_HAND, True)
    assert figures.stale_reason == f"0 free slice(s) where the policy carves {SLICES_BY_HAND}"
    assert (figures.effective_policy, figures.closure) == ("zos v1", "")


def test_a_node_with_its_catalog_places_every_slice_on_its_reading():
    figures = _figures(_row(), _inputs(_catalog(SLICES_BY_HAND)))
    assert (figures.slices_free, figures.deployable, figures.stale) == (SLICES_BY_HAND, SLICES_BY_HAND, False)
    assert (figures.placeable_now, figures.phantom_slices) == (SLICES_BY_HAND, 0)
    # The room the reading leaves: the total less what ZOS counted (its reserve).
    assert figures.room_mru == TOTAL_MRU - RESERVE_MRU


def test_a_reading_with_memory_in_use_places_only_what_fits_beside_it():
    # 10 GiB used beyond the reserve: (32 - 3.2 - 10) / 4 = 4.7, four of the seven free slices fit now.
    figures = _figures(_row(used_mru=RESERVE_MRU + 10 * GiB), _inputs(_catalog(SLICES_BY_HAND)))
    assert (figures.placeable_now, figures.phantom_slices) == (4, 3)


def test_a_reading_with_disk_in_use_places_only_the_disks_a_pool_holds():
    # Each VM's disks go to a pool with room (docs/zos.md): the one pool of 1000 GiB less its zos-cache (100 GiB)
    # and the 100 GiB written holds 800 GiB; a slice's data disk and rootfs take 127 GiB and 500 MiB: six of seven fit.
    figures = _figures(_row(used_sru=100 * GiB), _inputs(_catalog(SLICES_BY_HAND)))
    assert (figures.placeable_now, figures.phantom_slices, figures.phantom_reasons) == (6, 1, {"disk": 1})


def test_a_node_that_is_down_offers_nothing_now():
    figures = _figures(_row(status="down"), _inputs(_catalog(SLICES_BY_HAND)))
    assert figures.closure == "down"
    assert figures.placeable_now == 0


def test_without_a_reading_what_is_stored_stays():
    figures = _figures(_row(used_mru=None, used_sru=None), _inputs(_catalog(SLICES_BY_HAND)))
    assert (figures.placeable_now, figures.room_mru, figures.pools_shape) == (3, None, "?")  # Node.NOT_WORKED_OUT


def test_a_policy_of_the_farm_wins_over_the_fleets():
    bigger = replace(ZOS, name="big", slice_mru=8 * GiB)
    inputs = replace(_inputs(), by_farm={7: bigger})
    figures = _figures(_row(), inputs)
    # (32 - 3.2) / 8 = 3.6: three slices of 8 GiB.
    assert (figures.deployable, figures.effective_policy) == (3, "big v1")
