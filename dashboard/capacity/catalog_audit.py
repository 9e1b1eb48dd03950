"""The slice audit's rules, pure: one node's catalog, outcomes and live contracts matched.

Three stories tell what occupies a node: the catalog (slices marked rented or deployed), the
outcomes reported (a live deployment record, which names its VM's workload id when it was
given: "<twin>-<contract>-<name>", ZOS's own form) and the grid (the node's live contracts that
hold capacity). `node_match` lines them up and says where they part:

- an **orphan**: a taken slice whose record names a contract that is no longer live: its VM is
  gone (the marketplace did not report the release). Fixable once taken longer ago than the grace
  (the proxy indexes new contracts late): the record is released and the slice freed, as a release
  report would (dashboard.capacity.outcomes).
- a **foreign** VM: a live contract no taken slice accounts for. When every taken slice is named,
  each unnamed contract is one; when some taken slices name no contract, the slices and the
  contracts left are matched by count, and only the excess of contracts is foreign (the newest
  ones: a VM the catalog has not heard of is most likely the latest). Fixable: a free slice is
  counted as occupied by it, so "free" and "placeable now" are true again.
- **counts** that disagree: two slices naming one contract; more deployed slices naming no
  contract than contracts left (a rented slice naming none need not run a VM, so it only takes up
  contracts left, never counts short; some of
  those slices hold nothing, but which ones is not known: freeing the wrong one would free a
  running VM's slice, so this is listed, not fixed), or more live records than taken slices.

Nothing here imports Django; tests/capacity/test_catalog_audit_rules.py checks the cases one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class FindingKind(StrEnum):
    ORPHAN = "orphan"
    FOREIGN = "foreign"
    COUNT = "count"
    NOT_CHECKED = "not-checked"


# ZOS's workload id: "<twin>-<contract>-<name>" (gridtypes.WorkloadID).
_WORKLOAD_ID = re.compile(r"^(\d{1,10})-(\d{1,20})-(.+)$")


def contract_of(workload_id: str) -> int | None:
    """The contract id a ZOS workload id names, or None when it is not in ZOS's form."""
    match = _WORKLOAD_ID.match(workload_id or "")
    return int(match.group(2)) if match else None


@dataclass(frozen=True)
class TakenSlice:
    """A slice the catalog marks rented or deployed, with what its live record says."""

    index: int
    state: str
    taken_since: datetime | None = None
    contract_id: int | None = None  # from its live record's workload id; None: no record names one


@dataclass(frozen=True)
class GridVm:
    """A live contract on the node that holds capacity (grid.types.Contract.holds_capacity)."""

    contract_id: int
    workload_id: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    node_id: int
    words: str
    slice_index: int | None = None
    contract_id: int | None = None
    workload_id: str = ""
    since: datetime | None = None  # when the disagreement can be dated from (a VM's contract, a slice taken)
    fixable: bool = False

    @property
    def key(self) -> str:
        """Stable across audits, so a finding seen again keeps its first sighting."""
        if self.kind == FindingKind.ORPHAN:
            return f"orphan:{self.node_id}:{self.slice_index}:{self.contract_id}"
        if self.kind == FindingKind.FOREIGN:
            return f"foreign:{self.node_id}:{self.contract_id}"
        if self.kind == FindingKind.COUNT and self.contract_id is not None:
            return f"count:{self.node_id}:{self.contract_id}"
        return f"{self.kind}:{self.node_id}"


@dataclass(frozen=True)
class NodeMatch:
    node_id: int
    taken: int
    records: int
    vms: int
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def clean(self) -> bool:
        return not self.findings


def node_match(
    *,
    node_id: int,
    taken: Sequence[TakenSlice],
    records: int,
    vms: Sequence[GridVm],
    free_slices: int,
    fixable_before: datetime | None = None,
) -> NodeMatch:
    """One node's three stories matched; see the module doc. `records` counts its live deployment
    records, `free_slices` the catalog's free slices no live hold keeps (what a foreign VM can be
    counted against). An orphan taken after `fixable_before` is listed, not fixable: the proxy's
    indexer lags the chain, so a VM deployed a moment ago may not be listed yet."""
    named = _named_slices_matched(node_id, taken, {vm.contract_id for vm in vms}, fixable_before)
    left = sorted((vm for vm in vms if vm.contract_id not in named.claimed), key=_newest_first)
    findings = [
        *named.findings,
        *_vms_left_findings(
            node_id, left, unnamed=len(named.unnamed), rented=len(named.rented), free_slices=free_slices
        ),
    ]
    if records > len(taken):
        findings.append(
            Finding(
                kind=FindingKind.COUNT,
                node_id=node_id,
                words=(
                    f"node {node_id} has {records} live deployment record(s) for {len(taken)} taken slice(s): the "
                    "outcomes reported and the catalog disagree"
                ),
            )
        )
    return NodeMatch(node_id=node_id, taken=len(taken), records=records, vms=len(vms), findings=tuple(findings))


@dataclass
class _NamedSlices:
    """The taken slices matched to the live contracts their records name."""

    findings: list[Finding] = field(default_factory=list)  # orphans, and contracts two slices name
    claimed: dict[int, int] = field(default_factory=dict)  # contract -> the slice that claimed it first
    unnamed: list[TakenSlice] = field(default_factory=list)  # deployed, naming no VM
    rented: list[TakenSlice] = field(
        default_factory=list
    )  # rented, naming no VM: the renter may or may not run one yet


def _named_slices_matched(
    node_id: int, taken: Sequence[TakenSlice], live: set[int], fixable_before: datetime | None
) -> _NamedSlices:
    matched = _NamedSlices()
    for slice_ in sorted(taken, key=lambda s: s.index):
        if slice_.contract_id is None:
            (matched.rented if slice_.state == "rented" else matched.unnamed).append(slice_)
        elif slice_.contract_id in matched.claimed:
            # One VM, two slices: which one holds it is not known, so nothing is freed.
            first = matched.claimed[slice_.contract_id]
            matched.findings.append(
                Finding(
                    kind=FindingKind.COUNT,
                    node_id=node_id,
                    slice_index=slice_.index,
                    contract_id=slice_.contract_id,
                    words=(
                        f"slices {first} and {slice_.index} of node {node_id} both name "
                        f"contract {slice_.contract_id}: one VM cannot hold two slices; report the release of "
                        "the one it does not hold"
                    ),
                )
            )
        elif slice_.contract_id in live:
            matched.claimed[slice_.contract_id] = slice_.index
        else:
            matched.findings.append(_orphan(node_id, slice_, fixable_before))
    return matched


def _orphan(node_id: int, slice_: TakenSlice, fixable_before: datetime | None) -> Finding:
    young = fixable_before is not None and (slice_.taken_since is None or slice_.taken_since > fixable_before)
    return Finding(
        kind=FindingKind.ORPHAN,
        node_id=node_id,
        slice_index=slice_.index,
        contract_id=slice_.contract_id,
        since=slice_.taken_since,
        fixable=not young,
        words=(
            f"slice {slice_.index} of node {node_id} is marked {slice_.state} by contract "
            f"{slice_.contract_id}, which is not live on the grid: its VM is gone"
            + (" (or not indexed yet: taken too recently to free, CATALOG_AUDIT_ORPHAN_GRACE)" if young else "")
        ),
    )


def _vms_left_findings(
    node_id: int, left: Sequence[GridVm], *, unnamed: int, rented: int, free_slices: int
) -> list[Finding]:
    """The live VMs no named slice claims (`left`, newest first) against the taken slices naming none."""
    # A rented slice may account for one of the VMs left, and need not: its renter's business.
    excess = len(left) - unnamed - rented
    if excess > 0:
        by_count = bool(unnamed or rented)
        return [
            _foreign(
                node_id,
                vm,
                left=len(left),
                nameless=unnamed + rented,
                by_count=by_count,
                counted=position < free_slices,
            )
            for position, vm in enumerate(left[:excess])
        ]
    if len(left) < unnamed:
        return [
            Finding(
                kind=FindingKind.COUNT,
                node_id=node_id,
                words=(
                    f"node {node_id} has {unnamed} deployed slice(s) naming no VM but only {len(left)} live VM(s) "
                    f"left for them: {unnamed - len(left)} of them hold nothing, and which ones is not known (report "
                    "their releases, or their workload ids)"
                ),
            )
        ]
    return []


def _foreign(node_id: int, vm: GridVm, *, left: int, nameless: int, by_count: bool, counted: bool) -> Finding:
    return Finding(
        kind=FindingKind.FOREIGN,
        node_id=node_id,
        contract_id=vm.contract_id,
        workload_id=vm.workload_id,
        since=vm.created_at,
        fixable=counted,
        words=(
            f"contract {vm.contract_id} on node {node_id}"
            + (f" ({vm.workload_id})" if vm.workload_id else "")
            + (
                f" is one of {left} live VMs for {nameless} taken slice(s) that name none"
                if by_count
                else " is a VM the catalog does not know"
            )
            + ("" if counted else "; no free slice is left to count it against")
        ),
    )


def _newest_first(vm: GridVm):
    # Newest first; a VM with no creation time counts as the oldest; then by contract id, newest first.
    return (-(vm.created_at.timestamp() if vm.created_at else 0), -vm.contract_id)


__all__ = ["Finding", "FindingKind", "GridVm", "NodeMatch", "TakenSlice", "contract_of", "node_match"]
