"""The audit's matcher, case by case: catalog, records and live contracts of one node."""

from datetime import UTC, datetime

from dashboard.audit_rules import FindingKind, GridVm, TakenSlice, contract_of, node_match

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
        node_id=1, taken=[TakenSlice(0, "rented"), TakenSlice(1, "rented")], records=0, vms=[GridVm(5)], free_slices=4
    )

    assert _kinds(match) == [(FindingKind.COUNT, None, None, False)]


def test_a_foreign_vm_with_no_free_slice_left_is_listed_not_fixable():
    match = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5), GridVm(6)], free_slices=1)

    assert sorted(f.fixable for f in match.findings) == [False, True]


def test_more_live_records_than_taken_slices_is_a_count_finding():
    match = node_match(node_id=1, taken=[], records=1, vms=[], free_slices=4)

    assert _kinds(match) == [(FindingKind.COUNT, None, None, False)]


def test_two_slices_naming_one_contract_leave_the_second_an_orphan():
    match = node_match(
        node_id=1,
        taken=[TakenSlice(0, "deployed", contract_id=10), TakenSlice(1, "deployed", contract_id=10)],
        records=2,
        vms=[GridVm(10)],
        free_slices=4,
    )

    assert _kinds(match) == [(FindingKind.ORPHAN, 1, 10, True)]


def test_keys_are_stable_for_the_same_disagreement():
    one = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5)], free_slices=1).findings[0]
    again = node_match(node_id=1, taken=[], records=0, vms=[GridVm(5, created_at=T1)], free_slices=1).findings[0]

    assert one.key == again.key == "foreign:1:5"
