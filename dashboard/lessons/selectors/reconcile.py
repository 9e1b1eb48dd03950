"""Reconciliation: what the catalog says, what the grid says and what refusals taught, side by side.

Three sources describe one node's use of memory and SSD, each with its own age:

- the catalog: the node's reserve (by its policy) plus the charge of every rented and deployed
  slice; what the Grid Proxy ought to report if the catalog were the whole truth;
- the grid: the proxy's `used` (workloads of contracts in Created or GracePeriod plus ZOS's
  reserve), as of the node's last reading;
- the lessons: memory the host really used, learnt from ZOS's refusals (hidden use per VM, and
  the latest refusal's own figure), and the SSD in use at the latest disk refusal.

A pair that differs by more than RECONCILE_TOLERANCE_PERCENT of the node's total is flagged in
words a person can act on. Pure apart from reading settings: the node page passes what it loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from dashboard import capacity
from dashboard.models import Node, Observation, Slice, reading_is_uncertain


@dataclass(frozen=True)
class Reconciled:
    """One resource: the three figures (bytes; None when the source says nothing) and their times."""

    resource: str  # "mru" or "sru"
    label: str
    total: int
    catalog: int
    grid: int | None
    grid_at: datetime | None
    learnt: int | None
    learnt_at: datetime | None
    learnt_words: str
    tolerance: int
    disagreements: tuple[str, ...] = field(default_factory=tuple)

    @property
    def agrees(self) -> bool:
        return not self.disagreements


@dataclass(frozen=True)
class Reconciliation:
    rows: tuple[Reconciled, ...]
    grid_uncertain: bool  # the grid's figures rest on a reading past READING_MAX_AGE_MINUTES (or none)
    occupied: int  # rented and deployed slices the catalog counts

    @property
    def disagreements(self) -> int:
        return sum(len(row.disagreements) for row in self.rows)


def node_reconcile(
    *,
    node: Node,
    policy: capacity.Policy,
    occupied: Sequence[Slice],
    observations: Sequence[Observation],
    now: datetime,
) -> Reconciliation:
    """The node's memory and SSD as the catalog, the grid and the lessons see them; no query."""
    percent = settings.RECONCILE_TOLERANCE_PERCENT
    reserve = policy.reserve(node.total)
    charges = [policy.vm_charge(s.cru, s.mru, s.sru) for s in occupied]
    grid_at = node.prechecked_at or node.seen_at
    latest = {kind: next((o for o in observations if o.kind == kind), None) for kind in Observation.Kind.values}
    rows = []
    for resource, label in (("mru", "Memory"), ("sru", "SSD")):
        total = getattr(node.total, resource)
        catalog = getattr(reserve, resource) + sum(getattr(c, resource) for c in charges)
        grid = getattr(node, f"used_{resource}")
        learnt, learnt_at, learnt_words = _learnt(
            resource, node=node, catalog=catalog, vms=len(occupied), latest=latest
        )
        tolerance = total * percent // 100
        rows.append(
            Reconciled(
                resource=resource,
                label=label,
                total=total,
                catalog=catalog,
                grid=grid,
                grid_at=grid_at if grid is not None else None,
                learnt=learnt,
                learnt_at=learnt_at,
                learnt_words=learnt_words,
                tolerance=tolerance,
                disagreements=tuple(
                    _disagreements(
                        label.lower(),
                        catalog=catalog,
                        grid=grid,
                        learnt=learnt if resource == "mru" else None,
                        tolerance=tolerance,
                    )
                ),
            )
        )
    return Reconciliation(rows=tuple(rows), grid_uncertain=reading_is_uncertain(grid_at, now), occupied=len(occupied))


def _learnt(
    resource: str, *, node: Node, catalog: int, vms: int, latest: dict
) -> tuple[int | None, datetime | None, str]:
    if resource == "mru":
        seen = latest.get(Observation.Kind.MEMORY)
        if not node.hidden_mru_per_vm or seen is None:
            return None, None, "no refusal has shown hidden memory use"
        really = catalog + node.hidden_mru_per_vm * vms
        return (
            really,
            seen.seen_at,
            (
                f"{capacity.format_size(node.hidden_mru_per_vm)} hidden per VM × {vms} VM{'s' if vms != 1 else ''}, "
                "on top of the catalog's figure"
            ),
        )
    seen = latest.get(Observation.Kind.DISK)
    if seen is None or seen.used_sru is None:
        return None, None, "no disk refusal has been seen"
    return (
        seen.used_sru,
        seen.seen_at,
        f"SSD in use when ZOS refused a {capacity.format_size(seen.disk_size or 0)} disk",
    )


def _disagreements(what: str, *, catalog: int, grid: int | None, learnt: int | None, tolerance: int) -> list[str]:
    said = []
    if grid is not None and abs(grid - catalog) > tolerance:
        gap = capacity.format_size(abs(grid - catalog))
        if grid > catalog:
            said.append(
                f"the grid counts {gap} more {what} in use than the catalog's rented and deployed slices and "
                "reserve: VMs outside the catalog, or a reserve the policy does not count"
            )
        else:
            said.append(
                f"the grid counts {gap} less {what} in use than the catalog: slices marked rented or deployed "
                "that hold no contract on the grid (not deployed yet, or deleted)"
            )
    if learnt is not None and grid is not None and learnt - grid > tolerance:
        said.append(
            f"the host really uses about {capacity.format_size(learnt - grid)} more {what} than the grid "
            "accounts (learnt from refusals): slices that look placeable may be refused"
        )
    return said
