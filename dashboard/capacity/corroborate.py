"""Belief in proportion to evidence: when a refusal's point reaches its group, and how far it moves it.

What one source tells changes its node alone; its group (capacity.overhead's line, applied to every
node of a build) takes it only once a second, independent source agrees (issue 44). A source is a
node and who vouches for the reading there: an account (every token of one user is one account), the
dashboard's own deploy, or a probe the product proposed and saw answered. Two readings are independent
when they differ in node or in who vouches; they agree when one line ZOS could have drawn goes through
both (`agree`). Once admitted, a point moves the group no further than the doubt its line carries
(`admitted_point`). Pure: plain values in and out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dashboard.capacity.hidden import AGREE_MRU, OWN_MAX_MRU, PER_VM_MAX_MRU, PER_VM_PRIOR_MRU
from dashboard.capacity.overhead import OWN_PRIOR_MRU, OWN_PRIOR_SD, PER_VM_PRIOR_SD, MemoryPoint, OverheadFit
from dashboard.capacity.plausible import Expected
from dashboard.capacity.sizes import MiB

# Before a line is measured, builds' per-VM overheads differ from the prior's by up to about this: two
# readings at VM counts far apart may then lie that much a VM apart from the prior's line and agree.
UNMEASURED_PER_VM_MRU = 512 * MiB
# A point admitted to its group moves the line at most this many of the line's doubts at its VM count.
MOVE_SD = 3.0


@dataclass(frozen=True)
class Witness:
    """One live reading of the group: its observation, node, who vouches for it, and its point."""

    observation: int
    node: int
    vouched_by: str  # "account 7", "the dashboard", "a proposed probe"
    point: MemoryPoint


def independent(a: Witness, b: Witness) -> bool:
    """Two sources: another node, or the same node with someone else vouching."""
    return a.node != b.node or a.vouched_by != b.vouched_by


def agree(
    a: MemoryPoint,
    b: MemoryPoint,
    *,
    expects: Callable[[MemoryPoint], Expected | None] = lambda p: None,
    tolerance_mru: int = AGREE_MRU,
) -> bool:
    """Whether the two readings tell one story: where the group expects something (`expects`), both lie as
    far from its line (within `tolerance_mru`, and UNMEASURED_PER_VM_MRU a VM apart while no line is
    measured); else one line ZOS could draw goes through both."""
    ea, eb = expects(a), expects(b)
    if ea is not None and eb is not None:
        apart = abs((a.beyond_vms - ea.beyond_mru) - (b.beyond_vms - eb.beyond_mru))
        measured = ea.measured and eb.measured
        return apart <= tolerance_mru + (0 if measured else abs(a.vms - b.vms) * UNMEASURED_PER_VM_MRU)
    return _one_line(a, b, tolerance_mru)


def _one_line(a: MemoryPoint, b: MemoryPoint, tolerance_mru: int) -> bool:
    """Whether one line ZOS could draw goes through both points (within `tolerance_mru`)."""
    if a.vms == b.vms:
        return abs(a.beyond_vms - b.beyond_vms) <= tolerance_mru
    low, high = sorted((a, b), key=lambda p: p.vms)
    run = high.vms - low.vms
    # The steepest and flattest lines through the two points' tolerance bands.
    steep = (high.beyond_vms - low.beyond_vms + 2 * tolerance_mru) / run
    flat = (high.beyond_vms - low.beyond_vms - 2 * tolerance_mru) / run
    if steep < 0 or flat > PER_VM_MAX_MRU:
        return False
    slope = min(max((high.beyond_vms - low.beyond_vms) / run, 0.0), PER_VM_MAX_MRU)
    own = low.beyond_vms - low.vms * slope
    return -tolerance_mru <= own <= OWN_MAX_MRU + tolerance_mru


def second_source(
    candidate: Witness, others: Sequence[Witness], *, expects: Callable[[MemoryPoint], Expected | None] = lambda p: None
) -> Witness | None:
    """The first of `others` (oldest first) that is another source agreeing with `candidate`; None: the
    candidate stays its node's alone until one comes.

    One voice on two nodes (the same account, or two proposed probes) may make its group more careful but
    never less: its two readings count only where neither lies below what the group expects (`expects`: the
    line and its doubt at a point's VM count). A line too low refuses buyers; a line too high only sells
    less. Lowering it takes another voice: a hostile token agrees with itself on every node it names, never
    with the marketplace's true refusals or the product's own probes."""
    for other in others:
        if other.observation == candidate.observation or not independent(candidate, other):
            continue
        if not agree(candidate.point, other.point, expects=expects):
            continue
        if other.vouched_by == candidate.vouched_by and (
            below(candidate.point, expects(candidate.point)) or below(other.point, expects(other.point))
        ):
            continue
        return other
    return None


def below(point: MemoryPoint, expected: Expected | None) -> bool:
    """Whether a reading tells less hidden use than its group's line expects, by more than AGREE_MRU and one
    of the line's doubts (None: nothing expected, nothing below)."""
    if expected is None:
        return False
    return expected.beyond_mru - point.beyond_vms > AGREE_MRU + expected.sd_mru


def admitted_point(point: MemoryPoint, expected: Expected | None, *, bound_sd: float = MOVE_SD) -> MemoryPoint:
    """The point as its group's fit takes it: no further from the line than `bound_sd` of its doubt, so
    one reading moves the group in proportion to what is known (None: nothing known, taken as told)."""
    if expected is None or expected.sd_mru <= 0:
        return point
    reach = bound_sd * expected.sd_mru
    beyond = min(max(point.beyond_vms, expected.beyond_mru - reach), expected.beyond_mru + reach)
    if beyond == point.beyond_vms:
        return point
    return replace(point, actual_mru=round(point.vm_mru + beyond))


def group_expects(
    fit: OverheadFit | None,
    *,
    vms: int,
    total_mru: int,
    own_prior_mru: int = OWN_PRIOR_MRU,
    per_vm_prior_mru: int = PER_VM_PRIOR_MRU,
    per_vm_prior_sd: int = PER_VM_PRIOR_SD,
) -> Expected:
    """What the group's lesson (`fit`; None: the priors) expects beyond the VMs' memory at `vms` VMs. A judge
    of plausibility passes `per_vm_prior_sd` 0: its own allowance for a node's deviation per VM stands for it."""
    if fit is None:
        return Expected(
            beyond_mru=own_prior_mru + vms * per_vm_prior_mru, sd_mru=math.hypot(OWN_PRIOR_SD, vms * per_vm_prior_sd)
        )
    return Expected(
        beyond_mru=fit.predicted(vms=vms, total_mru=total_mru),
        sd_mru=fit.predicted_sd(vms=vms),
        measured=fit.own_mru is not None and not fit.on_prior,
    )
