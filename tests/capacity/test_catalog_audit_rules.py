"""The audit's matcher, case by case: catalog, records and live contracts of one node."""

from datetime import UTC, datetime

from dashboard.capacity.catalog_audit import FindingKind, GridVm, TakenSlice, contract_of, node_match

T0 = datetime(2026, 11, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 20, tzinfo=UTC)


def _kinds(match):
    return [(f.kind, f.slice_index, f.contract_id, f.fixable) for f in match.findings]


def test_the_contract_is_read_from_zos_workload_ids_only():
    assert [contract_of("4721-81724-s1774_2"), contract_of("contract-81724"), contract_of("")] == [81724, None, None]


def test_named_slices_with_their_vms_are_clean():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "deployed", contract_id=10), TakenSlice(1, "deployed", contract_id=11)],
        records=2,
        vms=[GridVm(10), GridVm(11)],
        free_slices=4,
    )

    assert match.clean


def test_a_named_slice_whose_contract_is_gone_is_an_orphan():
    match = node_match(
        node_id=1, taken=[TakenSlice(3, "deployed", taken_since=T0, contract_id=10)], records=1, vms=[], free_slices=4
    )

    assert (_kinds(match), match.findings[0].since) == ([(FindingKind.ORPHAN, 3, 10, True)], T0)


def test_a_contract_no_slice_names_is_foreign_when_every_taken_slice_is_named():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "deployed", contract_id=10)],
        records=1,
        vms=[GridVm(10), GridVm(12, "9-12-x", created_at=T1)],
        free_slices=4,
    )

    assert (_kinds(match), match.findings[0].since) == ([(FindingKind.FOREIGN, None, 12, True)], T1)


def test_unnamed_slices_and_contracts_left_are_matched_by_count():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "rented"), TakenSlice(1, "deployed")],
        records=0,
        vms=[GridVm(20), GridVm(21)],
        free_slices=4,
    )

    assert match.clean


def test_past_the_count_the_newest_contracts_are_foreign():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "rented")],
        records=0,
        vms=[GridVm(20, created_at=T0), GridVm(21, created_at=T1), GridVm(22, created_at=T0)],
        free_slices=4,
    )

    assert sorted(f.contract_id for f in match.findings) == [21, 22]


def test_more_unnamed_slices_than_vms_is_a_count_finding_never_fixed():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "deployed"), TakenSlice(1, "deployed")],
        records=0,
        vms=[GridVm(5)],
        free_slices=4,
    )

    assert _kinds(match) == [(FindingKind.COUNT, None, None, False)]


def test_rented_slices_naming_no_vm_need_not_run_one():
    """Issue 34 item 6: a renter may not have deployed yet; the demo's rented slices audit clean."""
    taken = [TakenSlice(0, "rented"), TakenSlice(1, "rented")]
    assert node_match(node_id=1, taken=taken, records=0, vms=[], free_slices=4).clean
    assert node_match(node_id=1, taken=taken, records=0, vms=[GridVm(5), GridVm(6)], free_slices=4).clean
    extra = node_match(node_id=1, taken=taken, records=0, vms=[GridVm(5), GridVm(6), GridVm(7)], free_slices=4)
    assert [f.kind for f in extra.findings] == [FindingKind.FOREIGN]


def test_finding_5_an_orphan_taken_within_the_grace_is_listed_not_fixable():
    taken = [TakenSlice(0, "deployed", taken_since=T1, contract_id=10)]
    young = node_match(node_id=1, taken=taken, records=1, vms=[], free_slices=4, fixable_before=T0)
    old = node_match(node_id=1, taken=taken, records=1, vms=[], free_slices=4, fixable_before=T1)
    assert _kinds(young) == [(FindingKind.ORPHAN, 0, 10, False)]
    assert "CATALOG_AUDIT_ORPHAN_GRACE" in young.findings[0].words
    assert _kinds(old) == [(FindingKind.ORPHAN, 0, 10, True)]


def test_a_foreign_vm_with_no_free_slice_left_is_listed_not_fixable():
    match = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5), GridVm(6)], free_slices=1)

    assert sorted(f.fixable for f in match.findings) == [False, True]


def test_more_live_records_than_taken_slices_is_a_count_finding():
    match = node_match(node_id=1, taken=[], records=1, vms=[], free_slices=4)

    assert _kinds(match) == [(FindingKind.COUNT, None, None, False)]


def test_finding_4_a_contract_claimed_by_two_slices_is_a_count_never_an_orphan():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "deployed", contract_id=10), TakenSlice(1, "deployed", contract_id=10)],
        records=2,
        vms=[GridVm(10)],
        free_slices=4,
    )

    assert _kinds(match) == [(FindingKind.COUNT, 1, 10, False)]
    assert "slices 0 and 1 of node 1 both name contract 10" in match.findings[0].words


def test_keys_are_stable_for_the_same_disagreement():
    one = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5)], free_slices=1).findings[0]
    again = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5, created_at=T1)], free_slices=1).findings[0]

    assert one.key == again.key == "foreign:1:5"
