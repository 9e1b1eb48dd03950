"""A build never refused is judged by a prior, and every deployment ZOS took weighs it (capacity.hidden)."""

from dashboard import capacity
from dashboard.capacity import GiB, MiB

MIN_ODDS = 0.95  # SLICE_MIN_ODDS's default


def _odds(belief, *, total, running, slice_mru=4 * GiB):
    """A node of `total` running `running` 4 GiB VMs, asked for one more."""
    return capacity.memory_odds(belief, total_mru=total, vm_mru=running * 4 * GiB, running=running, slice_mru=slice_mru)


def test_an_untaught_builds_near_full_slice_is_uncertain():
    # 16 GiB, two VMs: the third fits ZOS's count, and fits actual only if the hidden use is under 4 GiB.
    assert _odds(capacity.build_prior(), total=16 * GiB, running=2) < MIN_ODDS


def test_a_slice_that_fits_even_a_pessimistic_hidden_use_stays_sure():
    assert _odds(capacity.build_prior(), total=16 * GiB, running=0) >= 0.999


def test_what_the_count_refuses_has_odds_zero_under_the_prior_too():
    assert _odds(capacity.build_prior(), total=16 * GiB, running=3) == 0.0


def test_deployments_taken_raise_the_odds_without_a_refusal():
    before = _odds(capacity.build_prior(), total=16 * GiB, running=2)
    # Two other nodes of the build took their third VM with this room: actual beyond their VMs' memory was at
    # most 4 GiB.
    taken = [capacity.Accepted(node=9, vms=2, room_mru=4 * GiB), capacity.Accepted(node=10, vms=2, room_mru=4 * GiB)]
    after = _odds(capacity.build_prior(bounds=capacity.tightest(taken)), total=16 * GiB, running=2)
    assert before < MIN_ODDS <= after


def test_one_source_alone_bounds_nothing():
    # One report (true or forged) never moves its group's belief alone: another node, or someone else vouching
    # on the same node, must tell of a bound one line ZOS could draw nearly binds with it (issue 44).
    alone = [
        capacity.Accepted(node=9, vms=2, room_mru=4 * GiB, vouched_by="account 7"),
        capacity.Accepted(node=9, vms=2, room_mru=3 * GiB, vouched_by="account 7"),  # the same source again
        capacity.Accepted(node=9, vms=3, room_mru=4 * GiB, vouched_by="account 7"),  # and at another count
    ]
    assert capacity.tightest(alone) == {}
    with_another_voice = [*alone, capacity.Accepted(node=9, vms=2, room_mru=4 * GiB, vouched_by="account 8")]
    assert capacity.tightest(with_another_voice) == {2: 3 * GiB, 3: 4 * GiB}


def test_bounds_agree_where_one_line_zos_could_draw_nearly_binds_both():
    # own + 2 per_vm <= 4 GiB on a small node, own + 5 per_vm <= 8 GiB on a big one: the line of 1.33 GiB own
    # and 1.33 GiB a VM nearly binds both (a build of 1.5 GiB and 1 GiB a VM, nodes filled to their last slice).
    small, big = capacity.Accepted(node=1, vms=2, room_mru=4 * GiB), capacity.Accepted(node=2, vms=5, room_mru=8 * GiB)
    assert capacity.tightest([small, big]) == {2: 4 * GiB, 5: 8 * GiB}
    # A bound no line ZOS could draw (a VM's overhead of 4 GiB at the most) brings to the small one is alone.
    far = capacity.Accepted(node=2, vms=5, room_mru=30 * GiB)
    assert capacity.tightest([small, far]) == {}


def test_a_forged_tight_bound_moves_the_belief_no_further_than_the_second_source():
    honest = [capacity.Accepted(node=1, vms=2, room_mru=8 * GiB), capacity.Accepted(node=2, vms=2, room_mru=7 * GiB)]
    forged = capacity.Accepted(node=3, vms=2, room_mru=1, vouched_by="account 9")
    assert capacity.tightest([*honest, forged]) == {2: 7 * GiB}


def test_a_loose_bound_tells_nothing():
    loose = capacity.build_prior(bounds={2: 40 * GiB})
    assert (
        abs(_odds(loose, total=16 * GiB, running=2) - _odds(capacity.build_prior(), total=16 * GiB, running=2)) < 1e-3
    )


def test_the_tightest_agreed_bound_per_vm_count_decides_and_a_nodes_residual_comes_off():
    taken = [
        capacity.Accepted(node=1, vms=2, room_mru=8 * GiB),
        capacity.Accepted(node=2, vms=2, room_mru=5 * GiB),
        capacity.Accepted(node=4, vms=2, room_mru=6 * GiB),
        capacity.Accepted(node=3, vms=4, room_mru=9 * GiB),
        capacity.Accepted(node=5, vms=4, room_mru=10 * GiB),
    ]
    assert capacity.tightest(taken, {3: 512 * MiB, 5: 2 * GiB}) == {2: 5 * GiB, 4: 8 * GiB}


def test_a_fits_belief_agrees_with_the_fits_own_odds_without_bounds():
    fit = capacity.overhead_fit(
        [
            capacity.MemoryPoint(node=1, total_mru=16 * GiB, vms=2, vm_mru=8 * GiB, actual_mru=8 * GiB + 3584 * MiB),
            capacity.MemoryPoint(node=2, total_mru=32 * GiB, vms=6, vm_mru=24 * GiB, actual_mru=24 * GiB + 7680 * MiB),
        ]
    )
    belief = capacity.fit_belief(fit)
    for running in (1, 3, 5):
        gauss = _odds(fit, total=32 * GiB, running=running)
        assert abs(_odds(belief, total=32 * GiB, running=running) - gauss) < 0.02
