"""The re-register plan as a table: which slices are kept, removed and added, and the figures after.

reregister_plan reads nothing and writes nothing (no database here): each row is a catalog, a
reading and a policy, and what the plan must do with them. The carve itself is tested against an
independent ZOS elsewhere (tests/test_capacity_*); here the count of new slices comes from it.
"""

from dataclasses import dataclass, replace

import pytest

from dashboard import capacity
from dashboard.capacity import GiB, Resources
from dashboard.catalogs.services.reregister.plan import reregister_plan
from dashboard.grid.types import NodeCapacity
from dashboard.jobs.services.jobs import JobError
from dashboard.models import Node, Slice

TOTAL = Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
ZOS = capacity.PROFILES["zos"]
LEGACY = capacity.PROFILES["legacy"]
LEGACY_SIZE = (1, 4 * GiB, 133 * GiB)


def node(**fields) -> Node:
    defaults = dict(
        pk=1,
        grid_id=1774,
        farm_id=1,
        status="up",
        total_cru=TOTAL.cru,
        total_mru=TOTAL.mru,
        total_sru=TOTAL.sru,
        total_hru=0,
        carved_policy_name="legacy",
        carved_policy_version=1,
        carved_slice_sru=133 * GiB,
        catalog_generation=3,
    )
    return Node(**(defaults | fields))


def catalog(*states: str, size=LEGACY_SIZE) -> list[Slice]:
    cru, mru, sru = size
    return [
        Slice(pk=100 + i, node_id=1, index=i, cru=cru, mru=mru, sru=sru, state=state) for i, state in enumerate(states)
    ]


def reading(*, status="up", used_mru=2 * GiB, used_sru=20 * GiB, total=TOTAL) -> NodeCapacity:
    return NodeCapacity(
        node_id=1774,
        farm_id=1,
        farm_name="f",
        twin_id=None,
        status=status,
        dedicated=False,
        rented_by_twin_id=None,
        total=total,
        used=Resources(cru=0, mru=used_mru, sru=used_sru),
    )


def carved(policy, occupied=()) -> capacity.Carve:
    return capacity.carve(TOTAL, policy, occupied=[Resources(*size) for size in occupied])


@dataclass(frozen=True)
class Case:
    name: str
    slices: list[Slice]
    policy: capacity.Policy
    seen: NodeCapacity
    kept: list[int]  # indices
    removed: list[int]
    added: int
    node_fields: dict | None = None
    deploying: frozenset[int] = frozenset()
    held: frozenset[int] = frozenset()


FREE7 = ["free"] * 7
CASES = [
    Case(
        "a legacy catalog under zos: every free slice replaced",
        catalog(*FREE7),
        ZOS,
        reading(),
        kept=[],
        removed=list(range(7)),
        added=carved(ZOS).new_slices,
    ),
    Case(
        "a deployed slice stays and counts as occupied",
        catalog("deployed", *FREE7[1:]),
        ZOS,
        reading(),
        kept=[0],
        removed=list(range(1, 7)),
        added=carved(ZOS, [LEGACY_SIZE]).new_slices,
    ),
    Case(
        "a rented slice stays too",
        catalog("rented", *FREE7[1:]),
        ZOS,
        reading(),
        kept=[0],
        removed=list(range(1, 7)),
        added=carved(ZOS, [LEGACY_SIZE]).new_slices,
    ),
    Case(
        "a failed slice holds no VM: treated as free",
        catalog("failed", *FREE7[1:]),
        ZOS,
        reading(),
        kept=[],
        removed=list(range(7)),
        added=carved(ZOS).new_slices,
    ),
    Case(
        "a free slice with a deploy in flight is kept and counted as occupied",
        catalog(*FREE7),
        ZOS,
        reading(),
        kept=[2],
        removed=[0, 1, 3, 4, 5, 6],
        added=carved(ZOS, [LEGACY_SIZE]).new_slices,
        deploying=frozenset({102}),
    ),
    Case(
        "a free slice under a live hold is kept and counted as occupied",
        catalog(*FREE7),
        ZOS,
        reading(),
        kept=[5],
        removed=[0, 1, 2, 3, 4, 6],
        added=carved(ZOS, [LEGACY_SIZE]).new_slices,
        held=frozenset({105}),
    ),
    Case(
        "a held slice and one in flight are both kept",
        catalog("deployed", *FREE7[1:]),
        ZOS,
        reading(),
        kept=[0, 2, 5],
        removed=[1, 3, 4, 6],
        added=carved(ZOS, [LEGACY_SIZE] * 3).new_slices,
        deploying=frozenset({102}),
        held=frozenset({102, 105}),
    ),
    Case(
        "a hold on a slice no longer free protects nothing (a failed slice is replaced)",
        catalog("failed", *FREE7[1:]),
        ZOS,
        reading(),
        kept=[],
        removed=list(range(7)),
        added=carved(ZOS).new_slices,
        held=frozenset({100}),
    ),
    Case(
        "a catalog already carved by its policy is left alone",
        catalog(*FREE7),
        LEGACY,
        reading(),
        kept=list(range(7)),
        removed=[],
        added=0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_plan_keeps_removes_and_adds(case: Case):
    plan = reregister_plan(
        node=node(**(case.node_fields or {})),
        slices=case.slices,
        policy=case.policy,
        seen=case.seen,
        deploying=case.deploying,
        held=case.held,
    )
    assert sorted(s.index for s in plan.kept) == case.kept
    assert sorted(s.index for s in plan.removed) == case.removed
    assert len(plan.added) == case.added
    # New slices are numbered after every number the node used (never a removed slice's), in the next
    # generation, of the carved size.
    first_new = max(s.index for s in case.slices) + 1
    assert [s.index for s in plan.added] == list(range(first_new, first_new + case.added))
    assert all(s.generation == 4 and (s.mru, s.sru) == (plan.carve.slice.mru, plan.carve.slice.sru) for s in plan.added)
    assert plan.after["slices"] == len(case.kept) + case.added


def test_running_the_plan_of_its_own_result_changes_nothing():
    first = reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=reading())
    after = [
        replace_slice(s, pk=200 + i) for i, s in enumerate(sorted(first.kept + first.added, key=lambda s: s.index))
    ]
    carved_node = node(
        carved_policy_name="zos",
        carved_policy_version=ZOS.version,
        carved_slice_sru=first.carved_slice_sru,
        carved_deployable=first.carve.slices,
        catalog_generation=4,
    )
    second = reregister_plan(node=carved_node, slices=after, policy=ZOS, seen=reading())
    assert (second.removed, second.added, second.changes_metadata) == ([], [], False)
    assert second.result(dry_run=False).up_to_date


@pytest.mark.parametrize("status", ["down", "standby"])
def test_on_a_node_that_is_away_every_new_free_slice_is_phantom_for_that_reason(status):
    plan = reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=reading(status=status))
    free_after = plan.after["free"]
    assert (plan.placeable_after, plan.phantom_after, plan.phantom_reasons_after) == (
        0,
        free_after,
        {status: free_after},
    )
    assert any(status in note and "nothing can be placed on it" in note for note in plan.notes)


def test_live_use_above_the_accounting_makes_new_slices_phantom_by_memory():
    seen = reading(used_mru=TOTAL.mru - GiB)  # almost all memory in use
    plan = reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=seen)
    assert plan.phantom_after == plan.after["free"] and set(plan.phantom_reasons_after) == {"memory"}


def test_a_free_slice_of_the_size_carved_then_is_kept_under_the_same_policy():
    target = carved(ZOS).slice
    smaller = (target.cru, target.mru, target.sru - GiB)
    slices = catalog(*["free"] * carved(ZOS).new_slices, size=smaller)
    same = node(carved_policy_name="zos", carved_policy_version=ZOS.version, carved_slice_sru=smaller[2])
    plan = reregister_plan(node=same, slices=slices, policy=ZOS, seen=reading())
    assert (plan.removed, plan.added) == ([], [])


@pytest.mark.parametrize("field", ["mru", "sru"])
def test_it_refuses_to_carve_on_a_reading_with_no_memory_or_disk(field):
    total = replace(TOTAL, **{field: 0})
    with pytest.raises(JobError, match="refusing to re-carve"):
        reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=reading(total=total))


def replace_slice(s: Slice, **fields) -> Slice:
    return Slice(**({f.attname: getattr(s, f.attname) for f in Slice._meta.concrete_fields} | fields))


def test_the_plan_says_how_many_held_slices_it_kept_and_counts_them_free_after():
    plan = reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=reading(), held={103, 105})
    result = plan.result(dry_run=True)
    assert any(note.startswith("2 held slices kept (slices 3, 5)") for note in result.notes)
    # Still free in the catalog (the readers take the live holds off), not placeable in the plan's figures.
    assert plan.after["free"] == len(plan.added) + 2
    assert plan.held == frozenset({103, 105})


def test_a_held_slice_of_the_carved_size_leaves_a_current_catalog_alone():
    first = reregister_plan(node=node(), slices=catalog(*FREE7), policy=ZOS, seen=reading())
    after = [
        replace_slice(s, pk=200 + i) for i, s in enumerate(sorted(first.kept + first.added, key=lambda s: s.index))
    ]
    carved_node = node(
        carved_policy_name="zos",
        carved_policy_version=ZOS.version,
        carved_slice_sru=first.carved_slice_sru,
        carved_deployable=first.carve.slices,
        catalog_generation=4,
    )
    second = reregister_plan(node=carved_node, slices=after, policy=ZOS, seen=reading(), held={after[1].pk})
    assert (second.removed, second.added, second.changes_metadata) == ([], [], False)
