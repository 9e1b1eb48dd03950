"""The capacity model, table by table: node 1774, sizes, policies, fits, precheck, carve.

Node 1774 is the node of the original issue: 8 cores, 31 GiB of memory and a 1 TB SSD
(931.5 GiB). Its figures are written out in bytes here on purpose, so a unit slip in
capacity.py cannot cancel out against the same slip in the test.
"""

import pytest

from dashboard import capacity
from dashboard.capacity import (
    CapacityError,
    GiB,
    MiB,
    PolicyError,
    Resources,
    SizeError,
    SliceSize,
    TiB,
    carve,
    fits,
    format_size,
    parse_size,
    placeable_count,
    precheck,
)
from tests.factories import TOTAL_1774

NODE_1774 = TOTAL_1774  # 31 GiB and 931.5 GiB, in bytes: 33285996544 and 1000190509056
# Its one SSD, reported (zos.storage.pools): the table of docs/domain.md. Without a report the
# carve and the precheck must hold under every plausible layout (the "pools hidden" section).
ONE_SSD = (NODE_1774.sru,)
ONE_SSD_LIVE = capacity.LiveNode(pools=ONE_SSD)
ZOS = capacity.PROFILES["zos"]
LEGACY = capacity.PROFILES["legacy"]
FLAT = capacity.PROFILES["flat-overhead"]
LEGACY_SLICE = SliceSize(cru=1, mru=4 * GiB, sru=133 * GiB)


def proxy_used(total: Resources, vms: list[SliceSize]) -> Resources:
    """Used capacity as the Grid Proxy reports it: the VMs (with ZOS's rootfs) plus the node reserve."""
    mru = sum(vm.mru for vm in vms) + max(total.mru // 10, 2 * GiB)
    sru = sum(vm.sru + capacity.zos_rootfs(vm.cru, vm.mru) for vm in vms) + 20 * GiB
    return Resources(cru=sum(vm.cru for vm in vms), mru=mru, sru=sru)


# --- node 1774, the table of docs/domain.md ---------------------------------------------


def test_it_carves_node_1774_into_six_slices_under_zos():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD)
    assert (result.slices, result.limited_by) == (6, "mru")
    assert result.slice.mru == 4 * GiB


def test_it_gives_node_1774_zos_slices_a_data_disk_of_at_least_150_gib_plus_a_small_rootfs():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD)
    assert result.slice.sru >= 150 * GiB
    assert result.slice.rootfs == 500 * MiB


def test_it_keeps_the_zos_reserve_on_node_1774():
    # max(10% of 31 GiB, 2 GiB) = 3.1 GiB, and the proxy's 20 GiB of SSD for zos-cache.
    assert carve(NODE_1774, ZOS, pools=ONE_SSD).reserve == Resources(mru=3328599654, sru=20 * GiB)


@pytest.mark.parametrize(
    ("cache", "kept", "disk"),
    [
        # (931.5 GiB - kept) / 6 - 500 MiB rootfs, rounded down to 1 GiB.
        (None, 20 * GiB, 151 * GiB),  # the cache's quota unknown: the proxy's 20 GiB
        (5 * GiB, 10 * GiB, 153 * GiB),  # first boot: 5 GiB and its next step
        (20 * GiB, 25 * GiB, 150 * GiB),  # a cache grown to 20 GiB: its next step too
    ],
)
def test_finding_5_node_1774_keeps_the_zos_cache_and_its_next_step(cache, kept, disk):
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, cache=cache)
    assert (result.slices, result.reserve.sru, result.slice.sru) == (6, kept, disk)


def test_it_leaves_less_than_one_slice_of_memory_unallocated_on_node_1774():
    unallocated = carve(NODE_1774, ZOS, pools=ONE_SSD).unallocated
    assert 0 <= unallocated.mru < 4 * GiB


def test_it_reproduces_the_legacy_carve_of_node_1774_exactly():
    result = carve(NODE_1774, LEGACY, pools=ONE_SSD)
    assert (result.slices, result.slice.mru, result.slice.sru) == (7, 4 * GiB, 133 * GiB)


def test_it_says_the_legacy_carve_cannot_all_be_deployed():
    assert "not every slice can be deployed" in carve(NODE_1774, LEGACY, pools=ONE_SSD).notes[0]


def test_it_carves_node_1774_into_four_slices_under_the_flat_overhead_guess():
    result = carve(NODE_1774, FLAT, pools=ONE_SSD)
    assert (result.slices, result.slice.mru) == (4, 4 * GiB)


def test_it_counts_node_1774_deployable_slices_per_policy():
    assert [capacity.deployable_slices(NODE_1774, p, pools=ONE_SSD) for p in (ZOS, LEGACY, FLAT)] == [6, 7, 4]


def test_it_refuses_the_seventh_legacy_slice_on_memory_and_disk_when_six_are_deployed():
    used = proxy_used(NODE_1774, [LEGACY_SLICE] * 6)
    verdict = fits(LEGACY_SLICE, NODE_1774, used, ZOS)
    assert [s.resource for s in verdict.shortfalls] == ["mru", "sru"]


# --- parse_size and format_size ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GiB", 4 * GiB),
        ("931.5GiB", 1000190509056),
        ("31GiB", 33285996544),
        ("512MiB", 512 * MiB),
        ("0.5GiB", 512 * MiB),
        ("1 TiB", TiB),
        ("  4 GiB  ", 4 * GiB),
        ("4gib", 4 * GiB),
        ("1024", 1024),
        ("7B", 7),
        ("1KiB", 1024),
        ("0", 0),
        (4294967296, 4 * GiB),
        ("1.0000000001GiB", GiB),  # whole bytes, rounded down
    ],
)
def test_it_parses_sizes_in_1024_based_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("-4GiB", "negative"),
        (-1, "negative"),
        ("4XiB", "unknown unit"),
        ("4GB", "decimal unit"),
        ("500 MB", "decimal unit"),
        ("4G", "decimal unit"),
        ("nan", "not a size"),
        ("NaN GiB", "not a size"),
        ("inf", "not a size"),
        ("", "not a size"),
        ("   ", "not a size"),
        ("4GiBx", "unknown unit"),
        ("4 GiB 2", "not a size"),
        ("1e3", "not a size"),
        ("2000TiB", "absurd"),
        (True, "not a size"),
    ],
)
def test_it_refuses_what_is_not_a_size_and_says_why(text, words):
    with pytest.raises(SizeError, match=words):
        parse_size(text, what="--mru")


def test_it_names_the_value_in_a_size_error():
    with pytest.raises(SizeError, match=r"^--sru: '4GB'"):
        parse_size("4GB", what="--sru")


def test_it_suggests_the_binary_unit_for_a_decimal_one():
    with pytest.raises(SizeError, match="write 31GiB"):
        parse_size("31GB")


def test_it_refuses_zero_when_told_to():
    with pytest.raises(SizeError, match="more than zero"):
        parse_size("0GiB", allow_zero=False)


def test_a_size_error_is_a_value_error():
    # Callers that only know ValueError (argparse, forms) still catch it.
    assert issubclass(SizeError, ValueError) and issubclass(SizeError, CapacityError)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1000190509056, "931.5 GiB"),
        (4 * GiB, "4 GiB"),
        (500 * MiB, "500 MiB"),
        (TiB, "1 TiB"),
        (1536, "1.5 KiB"),
        (7, "7 B"),
        (0, "0 B"),
        (-4 * GiB, "-4 GiB"),
        (3328599654, "3.1 GiB"),
        (4187593114, "3.9 GiB"),
    ],
)
def test_it_formats_sizes_with_the_largest_unit_that_keeps_the_number_whole(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("text", ["931.5GiB", "500MiB", "4GiB", "1.25TiB", "7B"])
def test_it_reads_back_what_it_formats(text):
    assert parse_size(format_size(parse_size(text))) == parse_size(text)


# --- policies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"slice_mru": 249 * MiB}, "below ZOS's minimum of 250 MiB"),
        ({"slice_cru": 0}, "vCPUs per slice must be at least 1"),
        ({"reserve_mru_percent": 91}, "between 0 and 90"),
        ({"reserve_mru_percent": -1}, "between 0 and 90"),
        ({"reserve_mru_floor": -1}, "reserve_mru_floor must not be negative"),
        ({"reserve_sru": -GiB}, "reserve_sru must not be negative"),
        ({"overhead_mru_per_vm": -1}, "overhead_mru_per_vm must not be negative"),
        ({"min_slice_sru": -1}, "min_slice_sru must not be negative"),
        ({"sru_step": 0}, "sru_step must be at least 1 byte"),
        ({"rootfs": "big"}, "rootfs rule must be one of zos, none"),
        ({"arithmetic": "float"}, "arithmetic must be one of bytes, whole-gib"),
    ],
)
def test_it_refuses_a_policy_with_a_bad_parameter(changes, words):
    with pytest.raises(PolicyError, match=words):
        capacity.Policy(name="custom", **changes)


def test_it_names_every_problem_of_a_policy_at_once():
    with pytest.raises(PolicyError) as excinfo:
        capacity.Policy(name="custom", slice_cru=0, sru_step=0)
    assert str(excinfo.value).startswith("policy 'custom': ")
    assert "vCPUs" in str(excinfo.value) and "sru_step" in str(excinfo.value)


def test_it_validates_a_policy_changed_with_overrides():
    with pytest.raises(PolicyError, match="250 MiB"):
        capacity.with_overrides(ZOS, slice_mru=MiB)


def test_it_keeps_the_profile_unchanged_when_overriding():
    bigger = capacity.with_overrides(ZOS, slice_mru=8 * GiB)
    assert (bigger.slice_mru, ZOS.slice_mru) == (8 * GiB, 4 * GiB)


def test_it_refuses_an_unknown_profile_and_lists_the_known_ones():
    with pytest.raises(PolicyError, match="unknown policy 'zos2'; choose one of: zos, legacy, flat-overhead"):
        capacity.profile("zos2")


def test_it_uses_the_larger_of_ten_percent_and_two_gib_as_the_memory_reserve():
    # max(), not min(): zos provisiond getNodeReserved.
    assert ZOS.reserve(Resources(mru=8 * GiB)).mru == 2 * GiB
    assert ZOS.reserve(Resources(mru=64 * GiB)).mru == 64 * GiB // 10


@pytest.mark.parametrize(
    ("cru", "mru", "rootfs"),
    [
        (1, 4 * GiB, 500 * MiB),  # cu = 4 // 8 = 0
        (1, 8 * GiB, 2 * GiB),
        (2, 4 * GiB, 2 * GiB),
        (1, 8 * GiB - 1, 500 * MiB),
        # ZOS divides bytes, not whole GiB: 3 * 2.75 GiB / 8 GiB = 1.03 -> cu 1.
        (3, 2 * GiB + 768 * MiB, 2 * GiB),
    ],
)
def test_it_sizes_the_rootfs_as_zos_does(cru, mru, rootfs):
    assert capacity.zos_rootfs(cru, mru) == rootfs


def test_it_charges_no_rootfs_under_a_policy_without_one():
    assert LEGACY.vm_charge(1, 4 * GiB, 133 * GiB) == Resources(cru=1, mru=4 * GiB, sru=133 * GiB)


# --- fits ----------------------------------------------------------------------------


def test_it_fits_a_slice_on_an_empty_node():
    verdict = fits(LEGACY_SLICE, NODE_1774, proxy_used(NODE_1774, []), ZOS)
    assert verdict.fits and verdict.shortfalls == ()
    assert verdict.words.startswith("fits: needs 4 GiB memory and 133.49 GiB disk")


def test_it_names_every_short_resource_with_needed_available_and_shortfall():
    used = proxy_used(NODE_1774, [LEGACY_SLICE] * 6)
    verdict = fits(LEGACY_SLICE, NODE_1774, used, ZOS)
    memory, disk = verdict.shortfalls
    assert (memory.resource, memory.needed, memory.available) == ("mru", 4 * GiB, 4187593114)
    assert memory.shortfall == 4 * GiB - 4187593114
    assert (disk.resource, disk.needed, disk.available) == ("sru", 133 * GiB + 500 * MiB, NODE_1774.sru - used.sru)
    assert disk.shortfall == disk.needed - disk.available


def test_it_words_a_refusal_with_the_numbers_for_support_staff():
    used = proxy_used(NODE_1774, [LEGACY_SLICE] * 6)
    verdict = fits(LEGACY_SLICE, NODE_1774, used, ZOS)
    assert verdict.words == (
        "does not fit: memory: needs 4 GiB, 3.9 GiB available, short by 102.4 MiB; "
        "SSD disk: needs 133.49 GiB, 110.57 GiB available, short by 22.92 GiB"
    )


def test_it_fits_a_slice_that_takes_exactly_what_is_left():
    # ZOS refuses only when memory exceeds what is usable; equal is fine.
    used = Resources(mru=NODE_1774.mru - 4 * GiB, sru=0)
    assert fits(SliceSize(cru=1, mru=4 * GiB, sru=0), NODE_1774, used, ZOS).fits


def test_it_refuses_a_slice_one_byte_too_big():
    used = Resources(mru=NODE_1774.mru - 4 * GiB + 1, sru=0)
    assert not fits(SliceSize(cru=1, mru=4 * GiB, sru=0), NODE_1774, used, ZOS).fits


def test_it_does_not_check_the_sum_of_vcpus_because_zos_over_provisions_cores():
    used = Resources(cru=64, mru=0, sru=0)
    assert fits(SliceSize(cru=8, mru=4 * GiB, sru=GiB), NODE_1774, used, ZOS).fits


def test_it_refuses_one_vm_of_more_vcpus_than_the_node_has_threads():
    # zosbase pkg/vm.go VM.Validate: vm.CPU > uint8(cpu.Counts(true)) -> "invalid cpu must be between 1 and 8"
    verdict = fits(SliceSize(cru=16, mru=4 * GiB, sru=GiB), NODE_1774, Resources(), ZOS)
    assert not verdict.fits
    assert verdict.shortfalls[0].resource == "cru"
    assert "at most 8" in verdict.words


def test_it_refuses_memory_below_zos_minimum():
    verdict = fits(SliceSize(cru=1, mru=100 * MiB, sru=GiB), NODE_1774, Resources(), ZOS)
    assert [(s.resource, s.needed) for s in verdict.shortfalls] == [("mru", 250 * MiB)]


def test_it_never_shows_negative_availability_in_words():
    used = Resources(mru=NODE_1774.mru + GiB, sru=0)
    verdict = fits(LEGACY_SLICE, NODE_1774, used, ZOS)
    assert "0 B available" in verdict.words and verdict.shortfalls[0].available == -GiB


def test_it_gives_a_verdict_as_a_plain_dict():
    used = proxy_used(NODE_1774, [LEGACY_SLICE] * 6)
    data = fits(LEGACY_SLICE, NODE_1774, used, ZOS).as_dict()
    assert data["fits"] is False
    assert data["shortfalls"][0]["shortfall"] == 4 * GiB - 4187593114


# --- placeable_count -----------------------------------------------------------------


def test_it_counts_five_more_legacy_slices_on_node_1774_with_one_deployed():
    used = proxy_used(NODE_1774, [LEGACY_SLICE])
    assert placeable_count(LEGACY_SLICE, NODE_1774, used, ZOS, live=ONE_SSD_LIVE) == 5


def test_it_counts_what_fits_by_the_scarcer_resource():
    total = Resources(cru=4, mru=64 * GiB, sru=120 * GiB)
    size = SliceSize(cru=1, mru=4 * GiB, sru=20 * GiB)
    # memory: 64 / 4 = 16; disk: (120 - 20 for zos-cache) / 20.49 = 4.
    used = Resources(sru=20 * GiB)
    assert placeable_count(size, total, used, ZOS, live=capacity.LiveNode(pools=(total.sru,))) == 4


def test_it_counts_nothing_on_an_overfull_node():
    used = Resources(mru=NODE_1774.mru + GiB, sru=NODE_1774.sru)
    assert placeable_count(LEGACY_SLICE, NODE_1774, used, ZOS) == 0


def test_it_counts_by_memory_alone_for_a_slice_without_disk():
    size = SliceSize(cru=1, mru=4 * GiB, sru=0)
    assert placeable_count(size, Resources(mru=40 * GiB), Resources(), LEGACY) == 10


# --- precheck ------------------------------------------------------------------------


def legacy_catalog_with_one_deployed():
    """Node 1774 as the marketplace has it: 7 legacy slices, slice 0 deployed, 1-6 free."""
    free = [(index, LEGACY_SLICE) for index in range(1, 7)]
    return free, proxy_used(NODE_1774, [LEGACY_SLICE])


def test_it_finds_five_placeable_slices_of_six_free_on_node_1774():
    free, used = legacy_catalog_with_one_deployed()
    result = precheck(free, NODE_1774, used, ZOS, live=ONE_SSD_LIVE)
    assert (result.free_slices, result.placeable_now) == (6, 5)


def test_it_names_the_last_free_slice_of_node_1774_as_phantom():
    free, used = legacy_catalog_with_one_deployed()
    assert precheck(free, NODE_1774, used, ZOS, live=ONE_SSD_LIVE).phantom_slices == (6,)


def test_it_says_the_phantom_slice_is_short_of_memory_and_disk():
    free, used = legacy_catalog_with_one_deployed()
    last = precheck(free, NODE_1774, used, ZOS, live=ONE_SSD_LIVE).verdicts[-1]
    assert last.phantom and [s.resource for s in last.verdict.shortfalls] == ["mru", "sru"]


def test_it_places_free_slices_in_index_order_whatever_order_they_come_in():
    free, used = legacy_catalog_with_one_deployed()
    result = precheck(list(reversed(free)), NODE_1774, used, ZOS, live=ONE_SSD_LIVE)
    assert [v.index for v in result.verdicts] == [1, 2, 3, 4, 5, 6]
    assert result.phantom_slices == (6,)


def test_it_finds_no_phantom_in_a_zos_catalog():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD)
    free = [(i, result.slice) for i in range(result.slices)]
    checked = precheck(free, NODE_1774, proxy_used(NODE_1774, []), ZOS, live=ONE_SSD_LIVE)
    assert (checked.placeable_now, checked.phantom_slices) == (6, ())


def test_it_gives_a_precheck_as_a_plain_dict():
    free, used = legacy_catalog_with_one_deployed()
    data = precheck(free, NODE_1774, used, ZOS, live=ONE_SSD_LIVE).as_dict()
    assert (data["free_slices"], data["placeable_now"], data["phantom_slices"]) == (6, 5, [6])
    assert data["verdicts"][-1]["slice"] == 6


def test_it_prechecks_an_empty_catalog():
    assert precheck([], NODE_1774, Resources(), ZOS, live=ONE_SSD_LIVE).as_dict()["verdicts"] == []


# --- carve with occupied slices --------------------------------------------------------


def test_it_re_carves_node_1774_around_one_deployed_legacy_slice_to_six_in_all():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, occupied=[LEGACY_SLICE.resources])
    assert (result.slices, result.new_slices, result.occupied) == (6, 5, 1)


def test_it_re_carves_node_1774_with_new_slices_that_all_deploy_beside_the_old_one():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, occupied=[LEGACY_SLICE.resources])
    used = proxy_used(NODE_1774, [LEGACY_SLICE] + [result.slice] * (result.new_slices - 1))
    assert fits(result.slice, NODE_1774, used, ZOS).fits


def test_it_keeps_occupied_slices_that_already_overcommit_the_node_and_adds_none():
    # All 7 legacy slices rented: 28 GiB of VMs where ZOS lets 27.9 GiB be used.
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, occupied=[LEGACY_SLICE.resources] * 7)
    assert (result.overcommitted, result.slices, result.new_slices) == (True, 7, 0)


def test_it_says_why_an_overcommitted_node_gets_no_new_slice():
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, occupied=[LEGACY_SLICE.resources] * 7)
    assert "already need more than the node can host" in result.notes[0]
    assert "they are kept" in result.notes[0]


def test_it_counts_a_node_full_of_occupied_slices_as_full_not_overcommitted():
    six = carve(NODE_1774, ZOS, pools=ONE_SSD)
    result = carve(NODE_1774, ZOS, pools=ONE_SSD, occupied=[six.slice.resources] * 6)
    assert (result.overcommitted, result.slices, result.new_slices, result.notes) == (False, 6, 0, ())


def test_it_keeps_the_legacy_count_with_occupied_slices():
    result = carve(NODE_1774, LEGACY, pools=ONE_SSD, occupied=[LEGACY_SLICE.resources])
    assert (result.slices, result.new_slices) == (7, 6)


def test_it_says_when_a_node_cannot_hold_one_slice():
    result = carve(Resources(cru=2, mru=5 * GiB, sru=500 * GiB), ZOS, pools=[500 * GiB])
    assert (result.slices, result.limited_by) == (0, "mru")
    assert result.notes == ("the node cannot hold even one slice: short of memory",)


def test_it_carves_by_disk_when_disk_is_scarcer():
    result = carve(Resources(cru=16, mru=128 * GiB, sru=100 * GiB), ZOS, pools=[100 * GiB])
    # (100 - 20) GiB / (10 GiB + 500 MiB) = 7 slices of at least 10 GiB.
    assert (result.slices, result.limited_by) == (7, "sru")
    assert result.slice.sru >= 10 * GiB


def test_it_refuses_a_negative_node():
    with pytest.raises(CapacityError, match="must not be negative"):
        carve(Resources(cru=1, mru=-1, sru=0), ZOS)


def test_it_gives_a_carve_as_a_plain_dict():
    data = carve(NODE_1774, ZOS, pools=ONE_SSD).as_dict()
    assert data["slice"]["mru"] == 4 * GiB and data["notes"] == []


# --- pools: ZOS places each disk in one pool ----------------------------------------------


def test_it_keeps_a_data_disk_inside_one_pool():
    # One big slice on two 465.75 GiB SSDs: without pools the disk would be ~909 GiB.
    policy = capacity.with_overrides(ZOS, slice_mru=64 * GiB)
    total = Resources(cru=8, mru=80 * GiB, sru=NODE_1774.sru)
    result = carve(total, policy, pools=[NODE_1774.sru // 2, NODE_1774.sru // 2])
    assert result.slices == 1 and result.slice.sru <= NODE_1774.sru // 2


def test_it_gives_one_reported_pool_the_disks_of_the_ssd_total():
    known = carve(NODE_1774, ZOS, pools=ONE_SSD)
    assert (known.slices, known.slice.sru >= 150 * GiB, known.pools_known, known.disk_given_up) == (6, True, True, 0)


# --- pools hidden: every plausible layout of the SSD total ---------------------------------


def test_it_counts_the_plausible_layouts_of_a_1_tb_total():
    # 1 to 4 equal drives always (3 x 333 GB is no drive sold, but the total cannot rule it out);
    # 5 to 8 only as drives sold: 8 x 128 GB is 2.4% off. Each pool 2% below its share.
    share = [NODE_1774.sru // k for k in (1, 2, 3, 4)]
    assert capacity.plausible_layouts(NODE_1774.sru) == tuple(
        (s - s // 50,) * k for s, k in zip(share, (1, 2, 3, 4), strict=True)
    )


def test_it_splits_a_total_no_standard_drive_makes_into_1_to_8_equal_pools():
    total = 1300 * GiB  # 1,395.9 GB: no k x S within 2% (3 x 480 GB is 3.2% off)
    assert [len(layout) for layout in capacity.plausible_layouts(total)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_it_carves_node_1774_without_pools_into_as_many_slices_with_smaller_disks():
    known, blind = carve(NODE_1774, ZOS, pools=ONE_SSD), carve(NODE_1774, ZOS)
    assert (blind.slices, blind.pools_known) == (known.slices, False)
    # Six disks must also fit four 228.2 GiB pools, one holding zos-cache: 113 GiB each (the third
    # disk fills the second pool, its rootfs goes back to the first).
    assert blind.slice.sru == 113 * GiB
    assert blind.disk_given_up == 6 * (known.slice.sru - blind.slice.sru)
    assert "sized to deploy under each of 4 plausible pool layouts" in blind.notes[-1]


def test_it_counts_fewer_legacy_slices_placeable_without_pools_than_with_one_reported_ssd():
    free, used = legacy_catalog_with_one_deployed()
    # Reported as one SSD, five of the six fit; four 228.2 GiB pools hold one 133 GiB disk each,
    # the deployed one's among them: three more.
    deployed = capacity.LiveNode(occupied_disks=((133 * GiB, 500 * MiB),), running=1)
    assert precheck(free, NODE_1774, used, ZOS, live=ONE_SSD_LIVE).placeable_now == 5
    assert precheck(free, NODE_1774, used, ZOS, live=deployed).placeable_now == 3


def test_it_narrows_the_layouts_by_a_disk_refusal():
    # A 240 GiB disk refused on an empty 1 TB node: only four 250 GB pools leave no room for it.
    observed = capacity.Observed(pool_room_below=240 * GiB)
    layouts = capacity.pool_layouts(NODE_1774.sru, None, cache=20 * GiB, observed=observed)
    assert [len(layout) for layout in layouts] == [4]


def test_it_counts_a_rootfs_that_lands_in_another_pool():
    # In this device order ZOS puts zos-cache and the first data disk in the 30.3 GiB pool,
    # the first rootfs in the 1 GiB one (the first unmounted pool that holds it), and the
    # second VM in the 10.3 GiB pool with its rootfs back in the 1 GiB pool: two VMs.
    pools = [int(30.3 * GiB), GiB, int(10.3 * GiB)]
    state = capacity.pools_at_boot(pools, 20 * GiB)
    assert capacity.place_vm_disks(state, 10 * GiB, 500 * MiB) == ""
    assert capacity.place_vm_disks(state, 10 * GiB, 500 * MiB) == ""
    assert [p.used for p in state] == [20 * GiB + 10 * GiB, 2 * 500 * MiB, 10 * GiB]


def test_it_carves_only_what_deploys_in_every_device_order():
    # With the 10.3 GiB pool first, the first rootfs mounts it and the second data disk
    # finds no pool: the device order is unknown, so only one slice is offered.
    pools = [int(30.3 * GiB), GiB, int(10.3 * GiB)]
    result = carve(Resources(cru=4, mru=64 * GiB, sru=sum(pools)), ZOS, pools=pools)
    assert (result.slices, result.slice.sru) == (1, 10 * GiB)


def test_it_places_occupied_disks_in_the_pools_before_sizing_new_ones():
    # Pool 0 keeps 100 GiB after zos-cache and the occupied 90 GiB disk takes most of it,
    # so both new data disks must share pool 1, and the first new rootfs goes there too (it
    # has the most room left): 59 GiB each, not the 64 GiB the bytes allow.
    pools = [120 * GiB, 120 * GiB]
    total = Resources(cru=4, mru=16 * GiB, sru=sum(pools))
    occupied = [Resources(cru=1, mru=4 * GiB, sru=90 * GiB)]
    result = carve(total, ZOS, occupied=occupied, pools=pools)
    assert (result.new_slices, result.slice.sru) == (2, 59 * GiB)
