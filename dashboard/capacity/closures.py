"""Node closures: the node offers nothing now, for one node-level reason, whatever its numbers say.

A closure is not a shortfall of one slice (memory, disk, pool: `precheck`): it closes the whole node.
Each reason is ONE entry of `CLOSURE_REASONS`, in the order they are judged (the first that holds
wins): its key (stored in `Node.closure` and in every phantom-reason count), its short label (the
phantom reason's words), what the node "is" in a sentence (with the closure's detail), what would
open it again, and the pure function that decides it from `ClosureFacts`.

Every page, total, map, CSV, API answer, metric, alert and placement answer reads phantom reasons
through `capacity.PHANTOM_REASONS` (these keys first, then the shortfalls), so a new entry here
shows everywhere with no other edit. Its inputs: a field of `ClosureFacts` (default "open"), filled
by `dashboard.figures.closure` from the node row and the settings (the one place that builds them).

Adding a reason: (1) a field on `ClosureFacts` for what decides it (if the ones there do not
suffice), (2) its filling in `dashboard/figures/closure.py` (`CLOSURE_FIELDS` names the Node columns
read), (3) one `ClosureReason` entry below with its `decide`. Nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# The grid reports a node down (gone) or standby (switched off by its farm's power manager, woken
# when needed): either way it places nothing until it is up.
AWAY_STATUSES = ("down", "standby")


@dataclass(frozen=True)
class ClosureFacts:
    """What decides whether a node is closed, handed in: the node's row and the settings, as plain values."""

    status: str = "up"
    # An operator's maintenance or a quarantine holds the node's free slices off offer: "disk swap, until
    # 2026-12-01 18:00 UTC" (Node.withheld_reason and withheld_until, kept by nodes.services.withholds); "": none.
    withheld: str = ""
    # The twin ids the marketplace deploys with (MARKETPLACE_TWIN_ID); empty: rent is not judged at all.
    marketplace_twins: frozenset[int] = frozenset()
    rented_by_twin_id: int | None = None  # the twin holding the rent contract on the node; None: not rented
    rent_contract_id: int | None = None
    rent_state: str = ""  # the rent contract's state when read: "Created", "GracePeriod", "" (not read)
    # The chain keeps the node for a renter (tfchain _create_node_contract: a dedicated farm, or an extra fee).
    dedicated_by_chain: bool = False
    # The node lost its zos-cache subvolume: ZOS refuses every workload (zos provisiond getNodeReserved,
    # zos#2043). What it said, to whom and when ("" while it has its cache): Node.zos_cache_missing*.
    cache_missing: str = ""


@dataclass(frozen=True)
class ClosureReason:
    key: str
    label: str  # the phantom reason's words: "node down"
    what: str  # "is {detail}" part of a sentence about the node: "is down"
    until: str  # what opens it again: "until it is up again"
    decide: Callable[[ClosureFacts], str | None]  # the detail ("" for none) when closed, None when open
    badge: str = ""  # the job badge's short form; default "<label>: nothing placeable <until>"


def _status_is(status: str) -> Callable[[ClosureFacts], str | None]:
    return lambda facts: "" if facts.status == status else None


def _rented_by_another(facts: ClosureFacts) -> str | None:
    """tfchain refuses a node contract on a rented node from any twin but the renter (NodeNotAvailableToDeploy)."""
    if not facts.marketplace_twins or facts.rented_by_twin_id is None:
        return None
    return None if facts.rented_by_twin_id in facts.marketplace_twins else str(facts.rented_by_twin_id)


def _needs_our_rent(facts: ClosureFacts) -> str | None:
    """tfchain refuses a node contract on a dedicated node nobody rents (NodeNotAvailableToDeploy)."""
    if not facts.marketplace_twins or not facts.dedicated_by_chain or facts.rented_by_twin_id is not None:
        return None
    return ""


def _our_rent_in_grace(facts: ClosureFacts) -> str | None:
    """Our rent contract went to grace (the twin cannot pay): the node's contracts go to grace with it,
    and the chain refuses to update a contract in grace (CannotUpdateContractInGraceState)."""
    if not facts.marketplace_twins or facts.rented_by_twin_id not in facts.marketplace_twins:
        return None
    return str(facts.rent_contract_id or "") if facts.rent_state == GRACE_PERIOD else None


# The chain's state of a contract its twin cannot pay (tfchain types::ContractState::GracePeriod).
GRACE_PERIOD = "GracePeriod"

# In the order they are judged: the first that holds is the node's closure.
CLOSURE_REASONS: dict[str, ClosureReason] = {
    r.key: r
    for r in (
        # First: whatever else the node is, an operator took it off offer, and says why and until when.
        ClosureReason(
            key="withheld",
            label="withheld (maintenance or quarantine)",
            what="is withheld ({detail})",
            until="until its window ends or an admin releases it",
            decide=lambda facts: facts.withheld or None,
            badge="withheld: nothing placeable until its window ends or is released",
        ),
        ClosureReason(
            key="down",
            label="node down",
            what="is down",
            until="until it is up again",
            decide=_status_is("down"),
            badge="node down: nothing placeable until it is up",
        ),
        ClosureReason(
            key="standby",
            label="node on standby (can be woken)",
            what="is on standby (switched off by its farm's power manager)",
            until="until it is woken",
            decide=_status_is("standby"),
            badge="node on standby: nothing placeable until woken",
        ),
        # Whatever its rent: ZOS itself refuses every workload, and the chain would take the contract first.
        ClosureReason(
            key="no-cache",
            label="no zos-cache (ZOS refuses every workload)",
            what="has lost its zos-cache, so ZOS refuses every workload ({detail})",
            until="until it answers for its statistics again (usually after its farmer reboots it)",
            decide=lambda facts: facts.cache_missing or None,
            badge="no zos-cache: nothing placeable until the node answers again",
        ),
        ClosureReason(
            key="rented",
            label="rented by another twin",
            what="is rented by twin {detail}, not by the marketplace",
            until="while that twin's rent contract lasts (the chain takes contracts on it only from the renter)",
            decide=_rented_by_another,
        ),
        ClosureReason(
            key="needs-rent",
            label="needs our rent contract",
            what="is kept by the chain for a renter (dedicated farm or extra fee) and the marketplace does not rent it",
            until="until the marketplace holds a rent contract on it",
            decide=_needs_our_rent,
        ),
        ClosureReason(
            key="rent-grace",
            label="our rent contract in grace",
            what="is rented by the marketplace under rent contract {detail}, which is in its grace period (unpaid)",
            until="until the rent contract is paid and back in Created",
            decide=_our_rent_in_grace,
        ),
    )
}


@dataclass(frozen=True)
class Closure:
    """Why a node offers nothing: a key of CLOSURE_REASONS and its detail ("42": the renting twin)."""

    key: str
    detail: str = ""

    @property
    def reason(self) -> ClosureReason:
        found = CLOSURE_REASONS.get(self.key)
        if found is None:  # a key stored by a version that knew it: said plainly, never an error
            return ClosureReason(self.key, self.key, f"is closed ({self.key})", "until it is opened", lambda _f: None)
        return found

    @property
    def label(self) -> str:
        """The short words, with the detail: "node down", "rented by another twin (twin 42)"."""
        return self.reason.label

    @property
    def what(self) -> str:
        return self.reason.what.format(detail=self.detail)

    @property
    def verdict_words(self) -> str:
        """One slice on a closed node."""
        return f"does not fit: the node {self.what}; nothing can be placed {self.reason.until}"

    def sentence(self, *, free_slices: int, node_id: int | None = None) -> str:
        """What a precheck says of a closed node, in ONE line (not one verdict per slice)."""
        node = f"node {node_id}" if node_id is not None else "the node"
        slices = "its one free slice cannot" if free_slices == 1 else f"none of its {free_slices} free slices can"
        return f"{node} {self.what}: {slices} be placed {self.reason.until}"

    @property
    def badge(self) -> str:
        return self.reason.badge or f"{self.reason.label}: nothing placeable {self.reason.until}"

    def as_dict(self) -> dict:
        return {"key": self.key, "detail": self.detail, "label": self.label, "words": self.what}


def node_closure(facts: ClosureFacts) -> Closure | None:
    """The node's closure (the first reason that holds), None when it is open."""
    for reason in CLOSURE_REASONS.values():
        detail = reason.decide(facts)
        if detail is not None:
            return Closure(reason.key, detail)
    return None


def status_closure(status: str) -> Closure | None:
    """The closure the status alone decides (down, standby): for callers that know only a status."""
    return node_closure(ClosureFacts(status=status))


def stored_closure(key: str, detail: str = "") -> Closure | None:
    """The closure stored on a row (Node.closure, a job's result), None when blank."""
    return Closure(key, detail) if key else None


def node_is_away(status: str) -> bool:
    """The node places nothing now, whatever its numbers: it is down or on standby."""
    return status in AWAY_STATUSES


def away_sentence(status: str, *, free_slices: int, node_id: int | None = None) -> str:
    """What a precheck says of a node whose status closes it, in ONE line (not one verdict per slice)."""
    return (status_closure(status) or Closure(status)).sentence(free_slices=free_slices, node_id=node_id)


def away_badge(status: str) -> str:
    """The short form for a job's state badge: the precheck ran, but the node is not fine."""
    return (status_closure(status) or Closure(status)).badge
