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
    # Another node of the build took its third VM with this room: actual beyond its VMs' memory was at most 4 GiB.
    taken = [capacity.Accepted(node=9, vms=2, room_mru=4 * GiB)]
    after = _odds(capacity.build_prior(bounds=capacity.tightest(taken)), total=16 * GiB, running=2)
    assert before < MIN_ODDS <= after


def test_a_loose_bound_tells_nothing():
    loose = capacity.build_prior(bounds={2: 40 * GiB})
    assert (
        abs(_odds(loose, total=16 * GiB, running=2) - _odds(capacity.build_prior(), total=16 * GiB, running=2)) < 1e-3
    )


def test_the_tightest_bound_per_vm_count_decides_and_a_nodes_residual_comes_off():
    taken = [
        capacity.Accepted(node=1, vms=2, room_mru=8 * GiB),
        capacity.Accepted(node=2, vms=2, room_mru=5 * GiB),
        capacity.Accepted(node=3, vms=4, room_mru=9 * GiB),
    ]
    assert capacity.tightest(taken, {3: 512 * MiB}) == {2: 5 * GiB, 4: 9 * GiB - 512 * MiB}


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
