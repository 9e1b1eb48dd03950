"""What a build's hidden memory use may be: a belief over its line, weighted by what ZOS took.

ZOS takes a VM of `s` on a node of `total` running `n` VMs of `V` memory only if actual (ZOS's own
use + V + n x the per-VM overhead) is at most total - s: so every deployment ZOS took bounds the
build's line from above at `n` VMs (`total - s - V`, the room beyond the VMs' memory), as every
refusal measures it (capacity.overhead). `HiddenUse` is the belief over the line,
`line(n) = at_line + (n - at_vms) x per_vm`, with `at_line` (the line where it is known best) and
`per_vm` independent normals: the refusals' fit (ordinary least squares gives them so), or, for a
build never refused, a prior (`build_prior`: ZOS's own use as capacity.overhead's prior, the per-VM
overhead as other builds measured it, else PER_VM_PRIOR_MRU ± PER_VM_PRIOR_SD). The deployments
taken weigh it (a censored observation: the likelihood Phi((room - line(n)) / spread)), on a grid of
GRID x GRID points, so a slice that fits only if the hidden use is small stays uncertain, and each
deployment taken near the edge of the belief moves the edge down: the odds rise without a refusal.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dashboard.capacity.overhead import OWN_PRIOR_MRU, OWN_PRIOR_SD, OverheadFit
from dashboard.capacity.sizes import GiB, MiB

# The per-VM overhead of a build nobody has measured: cloud-hypervisor, virtiofsd and the console
# beyond the guest (zos#1826 and #1907 report a few hundred MiB to 1 GiB; ZOS ADR 0002 says none is
# meant). Wide on purpose: a slice that fits only if it is small is no promise.
PER_VM_PRIOR_MRU = 512 * MiB
PER_VM_PRIOR_SD = 512 * MiB
# A node's spread around its build's line (capacity.overhead.PRIOR_SPREAD_MRU) before any fit.
PRIOR_SPREAD_MRU = 48 * MiB
# Two readings agree within the test VM (512 MiB and its overhead beside a refusal, zosbase
# provisiontest) and the nodes' spread: more than that apart at one VM count, they tell two stories
# (capacity.corroborate; two bounds of deployments taken likewise, `tightest`).
AGREE_MRU = 768 * MiB
# A line through two readings is one ZOS could draw when ZOS's own use and a VM's overhead are in these
# bounds (the simulated and reported builds: 1.5-2.5 GiB and 0.75-1 GiB, zos#1826, #1907; far wider here).
OWN_MAX_MRU = 8 * GiB
PER_VM_MAX_MRU = 4 * GiB
GRID = 25  # points per axis, over +-GRID_SD standard deviations
GRID_SD = 3.5


@dataclass(frozen=True)
class Accepted:
    """A deployment ZOS took: `vms` VMs ran before it, and its room beyond their memory
    (total - the VM's memory - the VMs' memory) was enough, so actual beyond the VMs' <= room.
    `vouched_by`: who told it (capacity.corroborate's sources: "account 7", ...; "" where unknown)."""

    node: int
    vms: int
    room_mru: int
    vouched_by: str = ""


def tightest(accepted: Iterable[Accepted], residuals: Mapping[int, int] | None = None) -> dict[int, int]:
    """VM count -> the least room a deployment ZOS took had there (less its node's residual) that another
    source agrees with. A source is a node and who vouches for it (capacity.corroborate); two bounds agree
    when one line ZOS could draw nearly binds both (`_agreeing_rooms`), as two readings agree when one line
    goes through both. So one report, true or forged, never moves its group's belief alone (issue 44): an
    absurd bound agrees with no other, and one at a count where none agrees waits for a second source. At
    each VM count the tightest agreed bound implies the looser ones; one bound per count counts no node twice."""
    residuals = residuals or {}
    least: dict[tuple[int, tuple[int, str]], int] = {}  # (VM count, source) -> its least room
    for a in accepted:
        room = a.room_mru - residuals.get(a.node, 0)
        key = (a.vms, (a.node, a.vouched_by))
        if key not in least or room < least[key]:
            least[key] = room
    by_count: dict[int, list[tuple[int, tuple[int, str]]]] = {}
    for (vms, source), room in least.items():
        by_count.setdefault(vms, []).append((room, source))
    for rows in by_count.values():
        rows.sort()
    bounds: dict[int, int] = {}
    for vms, rows in by_count.items():
        agreed = next((room for room, source in rows if _agreed(vms, room, source, by_count)), None)
        if agreed is not None:
            bounds[vms] = agreed
    return bounds


def _agreed(vms: int, room: int, source: tuple[int, str], by_count: Mapping[int, list]) -> bool:
    """Whether another source's bound, at any VM count, lies where a line nearly binding this one would."""
    for other_vms, rows in by_count.items():
        low, high = _agreeing_rooms(vms, room, other_vms)
        for other_room, other in rows[bisect.bisect_left(rows, (low,)) :]:
            if other_room > high:
                break
            if other != source:
                return True
    return False


def _agreeing_rooms(vms: int, room: int, other_vms: int) -> tuple[float, float]:
    """The rooms at `other_vms` a line own + per_vm * n ZOS could draw (0 <= own <= OWN_MAX_MRU, 0 <= per_vm
    <= PER_VM_MAX_MRU) meets within AGREE_MRU, where it meets `room` at `vms` within AGREE_MRU too; (1, 0)
    where no such line meets `room` at all."""
    tol = AGREE_MRU
    if vms == 0:
        if room - tol > OWN_MAX_MRU or room + tol < 0:
            return 1.0, 0.0
        steep_low, steep_high = 0.0, float(PER_VM_MAX_MRU)
    else:
        steep_low = max(0.0, (room - tol - OWN_MAX_MRU) / vms)
        steep_high = min(float(PER_VM_MAX_MRU), (room + tol) / vms)
        if steep_low > steep_high:
            return 1.0, 0.0
    apart = other_vms - vms
    rise_low, rise_high = sorted((steep_low * apart, steep_high * apart))
    return room - 2 * tol + rise_low, room + 2 * tol + rise_high


class HiddenUse:
    """The belief over a build's line, weighted by the deployments ZOS took (`bounds`: VM count ->
    room, from `tightest`). `odds` is the chance a node's actual beyond its VMs' memory is at most
    `room` with `vms` running: the weighted share of the grid, each point blurred by the node's spread."""

    def __init__(
        self,
        *,
        at_line: float,
        at_line_sd: float,
        at_vms: float,
        per_vm: float,
        per_vm_sd: float,
        spread_mru: float,
        residuals: Mapping[int, int] | None = None,
        bounds: Mapping[int, int] | None = None,
    ):
        self.at_vms = at_vms
        self.spread_mru = float(spread_mru)
        self.residuals = dict(residuals or {})
        self.bounds = dict(bounds or {})
        step = 2 * GRID_SD / (GRID - 1)
        zs = [-GRID_SD + i * step for i in range(GRID)]
        weights = [math.exp(-z * z / 2) for z in zs]
        self._cell = (at_line_sd * step, per_vm_sd * step)  # a grid cell's width on each axis
        cells = []
        for zu, wu in zip(zs, weights, strict=True):
            for zv, wv in zip(zs, weights, strict=True):
                # A VM never frees memory, and ZOS's own use is not below nothing.
                per = max(per_vm + per_vm_sd * zv, 0.0)
                line = at_line + at_line_sd * zu
                if line - at_vms * per < 0:
                    line = at_vms * per
                cells.append((line, per, wu * wv))
        for vms, room in self.bounds.items():
            sd = self._sd(vms, self.spread_mru)
            cells = [(c, p, w * _phi((room - c - (vms - at_vms) * p) / sd)) for c, p, w in cells]
        total = sum(w for _c, _p, w in cells)
        if total <= 0:  # the bounds contradict the belief: keep the belief, say nothing new
            cells = [(c, p, 1.0) for c, p, _w in cells]
            total = float(len(cells))
        self._cells = [(c, p, w / total) for c, p, w in cells if w / total > 1e-12]
        self._memo: dict[tuple, float] = {}
        self._lines_at: dict[int, tuple[list[float], list[float]]] = {}
        self._weights_at: dict[int, list[float]] = {}

    def _sd(self, vms: int, spread: float) -> float:
        """A point's blur at `vms` VMs: the node's spread and the grid cell's width there."""
        width_c, width_p = self._cell
        return math.sqrt(spread**2 + (width_c**2 + ((vms - self.at_vms) * width_p) ** 2) / 12) or 1.0

    def odds(self, *, vms: int, room: int, node: int | None = None) -> float:
        """The chance ZOS's actual use beyond the VMs' memory is at most `room` on a node running `vms`."""
        key = (vms, room, node if node in self.residuals else None)
        if key in self._memo:
            return self._memo[key]
        residual = self.residuals.get(node, 0)
        sd = self._sd(vms, 0.0 if node in self.residuals else self.spread_mru)
        edge = room - residual
        lines, prefix = self._at(vms)
        # Points far below the edge count whole, far above not at all; only those near it are blurred.
        low, high = bisect.bisect_left(lines, edge - 6 * sd), bisect.bisect_right(lines, edge + 6 * sd)
        weights = self._weights_at[vms]
        odds = prefix[low] + sum(weights[i] * _phi((edge - lines[i]) / sd) for i in range(low, high))
        odds = min(max(odds, 0.0), 1.0)
        if len(self._memo) < 100_000:
            self._memo[key] = odds
        return odds

    def _at(self, vms: int) -> tuple[list[float], list[float]]:
        """The grid's lines at `vms` VMs in order, and the weight below each (memoised per VM count)."""
        if vms not in self._lines_at:
            ordered = sorted((c + (vms - self.at_vms) * p, w) for c, p, w in self._cells)
            prefix = [0.0]
            for _line, w in ordered:
                prefix.append(prefix[-1] + w)
            self._lines_at[vms] = ([line for line, _w in ordered], prefix)
            self._weights_at[vms] = [w for _line, w in ordered]
        return self._lines_at[vms]

    def mean(self, vms: int) -> float:
        """The belief's mean of the line at `vms` VMs (for words and tests)."""
        return sum(w * (c + (vms - self.at_vms) * p) for c, p, w in self._cells)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def build_prior(
    *,
    own_mru: int = OWN_PRIOR_MRU,
    own_sd: int = OWN_PRIOR_SD,
    per_vm_mru: int = PER_VM_PRIOR_MRU,
    per_vm_sd: int = PER_VM_PRIOR_SD,
    bounds: Mapping[int, int] | None = None,
) -> HiddenUse:
    """The belief for a build never refused: ZOS's own use and the per-VM overhead from priors."""
    return HiddenUse(
        at_line=own_mru,
        at_line_sd=own_sd,
        at_vms=0.0,
        per_vm=per_vm_mru,
        per_vm_sd=per_vm_sd,
        spread_mru=PRIOR_SPREAD_MRU,
        bounds=bounds,
    )


def fit_belief(fit: OverheadFit, *, bounds: Mapping[int, int] | None = None) -> HiddenUse | None:
    """The refusals' fit as a belief (None for a lesson kept before the prior: its line is the node's
    reserve, not one figure): the line at the points' mean VM count known to spread / sqrt(points)
    and its rival readings' doubt (line_sd), the per-VM overhead to its own standard deviation and
    doubt, as OverheadFit.predicted_sd has them."""
    if fit.own_mru is None:
        return None
    return HiddenUse(
        at_line=fit.own_mru + fit.mean_vms * fit.per_vm_mru,
        at_line_sd=math.hypot(fit.spread_mru / math.sqrt(max(fit.points, 1)), fit.line_sd),
        at_vms=fit.mean_vms,
        per_vm=fit.per_vm_mru,
        per_vm_sd=math.hypot(fit.per_vm_sd, fit.per_vm_doubt),
        spread_mru=fit.spread_mru,
        residuals=fit.residuals,
        bounds=bounds,
    )


def median_or(values: Iterable[int], default: int) -> int:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else default
