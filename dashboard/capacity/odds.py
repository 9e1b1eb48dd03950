"""The odds that a free slice deploys at the first try now, from the memory model's uncertainty.

ZOS refuses a VM whose memory is above total - max(counted, actual) (capacity.overhead). The count
is known; actual is the build's fitted line (capacity.OverheadFit) with its standard deviation, so
the chance ZOS takes a VM is the chance actual stays at or under total - the VM's memory: a normal
tail, Phi((total - memory - predicted actual) / sd). Where the caller has a belief
(capacity.hidden.HiddenUse: the fit, or a build's prior where it was never refused, weighted by the
deployments ZOS took) the odds are the belief's. Free slices are taken one after another (as
placeable now counts them), so the k-th is judged with the k before it running. Without either
(`None`: a node whose ZOS version is not known and whose group has no fit) the odds are 1 where the
count allows: nothing says the node's ZOS hides any use (lessons.selectors.odds.beliefs_for says why).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dashboard.capacity.hidden import HiddenUse
from dashboard.capacity.lessons import zos_reserve_mru
from dashboard.capacity.overhead import OverheadFit


@dataclass(frozen=True)
class Unread:
    """The belief for a node no reading tells yet, in a group whose nodes probes read were seen to differ
    (capacity.spread.differs): its group's `belief`, or, with the chance `share`, a use of its own too, one
    of `per_vm_mru` (as much more a VM running as the nodes that differed were read to use, each as
    likely). Such a use refuses a node's last slices first, so they stay uncertain until a reading tells it."""

    belief: OverheadFit | HiddenUse | None  # None: ZOS's count alone (nodes that share no line)
    share: float
    per_vm_mru: tuple[int, ...]

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("the share of nodes that differ is a probability")
        if not self.per_vm_mru or min(self.per_vm_mru) < 0:
            raise ValueError("a use of its own is one or more figures, none negative")


Belief = OverheadFit | HiddenUse | Unread | None


def expected_beyond(belief: Belief, *, vms: int, total_mru: int) -> float | None:
    """The use beyond the VMs' memory a group's belief expects with `vms` VMs on a node of no residual (None
    without a belief: nothing expected)."""
    if isinstance(belief, Unread):
        belief = belief.belief
    if isinstance(belief, HiddenUse):
        return belief.mean(vms)
    if isinstance(belief, OverheadFit):
        return float(belief.predicted(vms=vms, total_mru=total_mru, node=None))
    return None


def unread_belief(belief: Belief, differs_now: tuple[float, Sequence[int]] | None) -> Belief:
    """What a node no reading tells is judged by: its group's belief, with the chance its nodes were seen to
    differ by (capacity.spread.differs) where they were; the group's belief alone where none was or where
    there is none (odds 1 where the count allows)."""
    if differs_now is None or isinstance(belief, Unread):
        return belief
    share, per_vm = differs_now
    return Unread(belief, share=share, per_vm_mru=tuple(per_vm))


def memory_odds(
    fit: Belief, *, total_mru: int, vm_mru: int, running: int, slice_mru: int, node: int | None = None
) -> float:
    """The probability ZOS takes a VM of `slice_mru` now, with `running` VMs of `vm_mru` memory on the node."""
    if slice_mru > total_mru - vm_mru - zos_reserve_mru(total_mru):
        return 0.0  # ZOS's count alone refuses it
    if fit is None:
        return 1.0
    if isinstance(fit, Unread):
        alike = _odds_beyond(
            fit.belief, total_mru=total_mru, vm_mru=vm_mru, running=running, slice_mru=slice_mru, node=node
        )
        # The VM asked for is not running yet: the use of its own is the running VMs'.
        differs = sum(
            _odds_beyond(
                fit.belief,
                total_mru=total_mru,
                vm_mru=vm_mru + running * per_vm,
                running=running,
                slice_mru=slice_mru,
                node=node,
            )
            for per_vm in fit.per_vm_mru
        ) / len(fit.per_vm_mru)
        return (1.0 - fit.share) * alike + fit.share * differs
    return _odds_beyond(fit, total_mru=total_mru, vm_mru=vm_mru, running=running, slice_mru=slice_mru, node=node)


def _odds_beyond(
    fit: OverheadFit | HiddenUse | None, *, total_mru: int, vm_mru: int, running: int, slice_mru: int, node: int | None
) -> float:
    """The chance the host's actual use leaves room for the VM (ZOS's count allows it)."""
    if fit is None:  # ZOS's count alone: the VMs and the reserve
        return 1.0 if total_mru - slice_mru - vm_mru - zos_reserve_mru(total_mru) >= 0 else 0.0
    if isinstance(fit, HiddenUse):
        return fit.odds(vms=running, room=total_mru - slice_mru - vm_mru, node=node)
    room = total_mru - slice_mru - vm_mru - fit.predicted(vms=running, total_mru=total_mru, node=node)
    sd = fit.predicted_sd(vms=running, node=node)
    if sd <= 0:
        return 1.0 if room >= 0 else 0.0
    return 0.5 * (1.0 + math.erf(room / (sd * math.sqrt(2.0))))


def slices_odds(
    fit: Belief,
    *,
    total_mru: int,
    vm_mru: int,
    running: int,
    sizes_mru: Sequence[int],
    node: int | None = None,
) -> tuple[float, ...]:
    """Each free slice's odds, in order, each with the ones before it deployed."""
    odds = []
    for size in sizes_mru:
        odds.append(memory_odds(fit, total_mru=total_mru, vm_mru=vm_mru, running=running, slice_mru=size, node=node))
        vm_mru, running = vm_mru + size, running + 1
    return tuple(odds)


def odds_on_reading(
    fit: Belief,
    *,
    total_mru: int,
    used_mru: int | None,
    occupied_mru: Sequence[int],
    sizes_mru: Sequence[int],
    node: int | None = None,
) -> tuple[float, ...]:
    """The free slices' odds now: on the node's last reading (its accounted use less the reserve is the
    VMs' memory) with its occupied slices running, or on the occupied slices alone without a reading."""
    vm_mru = sum(occupied_mru) if used_mru is None else max(used_mru - zos_reserve_mru(total_mru), 0)
    return slices_odds(
        fit, total_mru=total_mru, vm_mru=vm_mru, running=len(occupied_mru), sizes_mru=sizes_mru, node=node
    )


def sure_slices(odds: Iterable[float], min_odds: float) -> int:
    """How many of these slices a headline may promise: those at or above `min_odds`."""
    return sum(1 for o in odds if o >= min_odds)


def odds_calibration(pairs: Iterable[tuple[float, bool]], *, bins: int = 10) -> tuple[int, float | None, float | None]:
    """(outcomes, Brier score, expected calibration error) of odds against what happened (True: deployed).

    ECE: the outcomes in `bins` equal bins of odds, each bin's |mean odds - share deployed| weighted by
    its share of the outcomes. None for both without an outcome."""
    pairs = list(pairs)
    if not pairs:
        return 0, None, None
    brier = sum((o - (1.0 if ok else 0.0)) ** 2 for o, ok in pairs) / len(pairs)
    grouped: dict[int, list[tuple[float, bool]]] = {}
    for o, ok in pairs:
        grouped.setdefault(min(int(o * bins), bins - 1), []).append((o, ok))
    ece = sum(
        abs(sum(o for o, _ in group) / len(group) - sum(1 for _, ok in group if ok) / len(group)) * len(group)
        for group in grouped.values()
    ) / len(pairs)
    return len(pairs), brier, ece
