"""The fleet's memory lessons in the month: lessons.services.memory_model's rules on in-memory points.

Each memory refusal is a point of its group's line (capacity.MemoryPoint); the group is the ZOS
version the node told over RMB, or one fleet-wide group when it told none. After each point the
group is fitted again (capacity.overhead_fit, ZOS's own use a prior from the other groups' lines
until a line parts it) and the lesson written onto every node of the group as memory_model_apply
writes it: a node that refused itself while the points are all at one VM count keeps its own reading,
the others the fit's `observed_for` at their carved slices. The odds (capacity.slices_odds) come from
the same fit, weighted by the deployments ZOS took (capacity.hidden: each bounds the line from above
at its VM count), or where a told build has no fit yet from its prior (capacity.build_prior); a node
of no told build and no fit has odds 1 (lessons.selectors.odds.beliefs_for). Headlines count only
slices at or above `min_odds` (SLICE_MIN_ODDS).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.capacity.hidden import PER_VM_PRIOR_MRU, median_or
from dashboard.capacity.overhead import OWN_PRIOR_MRU, OWN_PRIOR_SD

MIN_ODDS = 0.95  # settings.SLICE_MIN_ODDS's default
MARGIN_SD = 1.0  # settings.MEMORY_MODEL_MARGIN_SD's default


@dataclass
class FleetMemory:
    """Every group's points, fit and the per-VM figure each refused node read itself."""

    margin_sd: float = MARGIN_SD
    points: dict[str, list[capacity.MemoryPoint]] = field(default_factory=dict)
    fits: dict[str, capacity.OverheadFit] = field(default_factory=dict)
    own_reading: dict[str, dict[int, int]] = field(default_factory=dict)
    # (node, VMs running) -> the least room beyond the VMs' memory of a deployment ZOS took there.
    taken: dict[str, dict[tuple[int, int], int]] = field(default_factory=dict)
    beliefs: dict[str, object] = field(default_factory=dict)
    # Groups whose line reaches no node: the fleet-wide one, once probes read its nodes apart from it.
    apart: set[str] = field(default_factory=set)

    def observe(self, group: str, point: capacity.MemoryPoint, *, per_vm: int) -> capacity.OverheadFit | None:
        """One refusal's point: the group fitted again (None when the point cannot fit a line)."""
        self.points.setdefault(group, []).append(point)
        reading = self.own_reading.setdefault(group, {})
        reading[point.node] = max(reading.get(point.node, 0), per_vm)
        accepted = [capacity.Accepted(node, vms, room) for (node, vms), room in self.taken.get(group, {}).items()]
        fit = capacity.overhead_fit(
            self.points[group], prior_own_mru=self.own_prior(group), bounds=capacity.tightest(accepted)
        )
        if fit is not None:
            self.fits[group] = fit
            self.beliefs.pop(group, None)
        return fit

    def accept(self, group: str, accepted: capacity.Accepted) -> bool:
        """A deployment ZOS took; True when it moved the group's belief (a bound it did not hold yet)."""
        taken = self.taken.setdefault(group, {})
        key = (accepted.node, accepted.vms)
        if key in taken and taken[key] <= accepted.room_mru:
            return False
        taken[key] = accepted.room_mru
        belief = self.belief(group)
        if not isinstance(belief, capacity.HiddenUse):
            return False
        # Only the least room at each VM count weighs the belief (capacity.tightest).
        fit = self.fits.get(group)
        room = accepted.room_mru - (fit.residuals.get(accepted.node, 0) if fit is not None else 0)
        if accepted.vms in belief.bounds and belief.bounds[accepted.vms] <= room:
            return False
        # A bound the belief already holds (nearly all of it below) tells nothing new: no refresh.
        if belief.odds(vms=accepted.vms, room=accepted.room_mru, node=accepted.node) > 0.999:
            return False
        self.beliefs.pop(group, None)
        return True

    def belief(self, group: str):
        """What the odds of the group's nodes are judged by (lessons.selectors.odds.beliefs_for)."""
        if group in self.apart:
            return None
        if group in self.beliefs:
            return self.beliefs[group]
        fit = self.fits.get(group)
        accepted = [capacity.Accepted(node, vms, room) for (node, vms), room in self.taken.get(group, {}).items()]
        if fit is None:
            belief = (
                capacity.build_prior(
                    own_mru=self.own_prior(group),
                    per_vm_mru=self.per_vm_prior(group),
                    bounds=capacity.tightest(accepted),
                )
                if group
                else None
            )
        else:
            belief = capacity.fit_belief(fit, bounds=capacity.tightest(accepted, fit.residuals)) or fit
        self.beliefs[group] = belief
        return belief

    def per_vm_prior(self, group: str) -> int:
        """lessons.selectors.odds.per_vm_prior: the median per-VM overhead the other groups' lines measured."""
        return median_or(
            (f.per_vm_mru for g, f in self.fits.items() if g != group and f.own_mru is not None and not f.on_prior),
            PER_VM_PRIOR_MRU,
        )

    def own_prior(self, group: str) -> int:
        """lessons.selectors.odds.own_prior: the median ZOS own use the other groups' lines measured."""
        measured = sorted(
            f.own_mru for g, f in self.fits.items() if g != group and f.own_mru is not None and f.own_sd < OWN_PRIOR_SD
        )
        return measured[len(measured) // 2] if measured else OWN_PRIOR_MRU

    def observed_for(self, group: str, *, node: int, carved: int, pool_room_below: int | None) -> capacity.Observed:
        """The memory lesson memory_model_apply writes onto one node of the group (disk lesson kept)."""
        fit = self.fits.get(group)
        if fit is None or group in self.apart:
            return capacity.Observed(pool_room_below=pool_room_below)
        own = self.own_reading.get(group, {})
        if fit.on_prior and node in own:
            memory = capacity.Observed(hidden_mru_per_vm=own[node])
        else:
            memory = fit.observed_for(node=node, vms=max(carved, 1), margin_sd=self.margin_sd)
        return capacity.Observed(
            hidden_mru_per_vm=memory.hidden_mru_per_vm, zos_own_mru=memory.zos_own_mru, pool_room_below=pool_room_below
        )

    def expected_beyond(self, group: str, *, vms: int, total_mru: int) -> float | None:
        """The use beyond the VMs' memory the group's belief expects at `vms` VMs (capacity.expected_beyond)."""
        return capacity.expected_beyond(self.belief(group), vms=vms, total_mru=total_mru)

    def odds(
        self,
        group: str,
        *,
        node: int,
        total_mru: int,
        vm_mru: int,
        running: int,
        sizes_mru: list[int],
        differs: tuple[float, tuple[int, ...]] | None = None,
    ) -> tuple[float, ...]:
        """The free slices' odds on the group's belief; for a node no reading tells, with the chance its group's
        nodes probes read were seen to differ (`differs`: capacity.differs, capacity.unread_belief)."""
        belief = capacity.unread_belief(self.belief(group), differs)
        return capacity.slices_odds(
            belief, total_mru=total_mru, vm_mru=vm_mru, running=running, sizes_mru=sizes_mru, node=node
        )
