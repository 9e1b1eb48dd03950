"""What an onboarding was asked (OnboardRequest) and what a run did or would do (OnboardResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.grid.types import NODE_STATUSES
from dashboard.services.catalog import policy_named

# Nodes listed by id in a result; the counts cover all of them (a result of 10,000 rows helps nobody).
LISTED = 200


class OnboardError(ValueError):
    """The request itself is wrong (no farm and no node, an unknown policy or status)."""


@dataclass(frozen=True)
class OnboardRequest:
    farm_ids: tuple[int, ...] = ()
    node_ids: tuple[int, ...] = ()
    status: str | None = None  # only nodes the grid reports with this status
    policy: str | None = None  # for new nodes; default: each node's effective policy
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not self.farm_ids and not self.node_ids:
            raise OnboardError("give at least one farm id or node id")
        for what, ids in (("farm id", self.farm_ids), ("node id", self.node_ids)):
            for value in ids:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise OnboardError(f"{what} {value!r} is not a whole number above zero")
        if self.status is not None and self.status not in NODE_STATUSES:
            raise OnboardError(f"status must be one of {', '.join(NODE_STATUSES)}, not {self.status!r}")
        if self.policy:
            try:
                policy_named(self.policy)
            except capacity.PolicyError as exc:
                raise OnboardError(str(exc)) from None

    def as_parameters(self) -> dict:
        return {"farm_ids": list(self.farm_ids), "node_ids": list(self.node_ids), "status": self.status,
                "policy": self.policy}  # fmt: skip

    @classmethod
    def from_parameters(cls, parameters: dict, *, dry_run: bool) -> OnboardRequest:
        return cls(farm_ids=tuple(parameters.get("farm_ids") or ()), node_ids=tuple(parameters.get("node_ids") or ()),
                   status=parameters.get("status"), policy=parameters.get("policy") or None, dry_run=dry_run)  # fmt: skip

    def words(self) -> str:
        parts = []
        if self.farm_ids:
            parts.append(f"farm{'s' if len(self.farm_ids) > 1 else ''} {', '.join(map(str, self.farm_ids))}")
        if self.node_ids:
            shown = ", ".join(map(str, self.node_ids[:10])) + (" …" if len(self.node_ids) > 10 else "")
            parts.append(f"node{'s' if len(self.node_ids) > 1 else ''} {shown}")
        return " and ".join(parts) + (f" ({self.status} only)" if self.status else "")


@dataclass
class OnboardResult:
    """What a run did (or, in a dry run, would do); the job's result, read back by the pages."""

    dry_run: bool = False
    finished: bool = False  # False: a read failed, `stopped` says where; running it again finishes
    stopped: str = ""
    reads: int = 0  # pages read, and nodes read one by one
    requests: int = 0
    registered: int = 0  # new nodes (would be, in a dry run)
    refreshed: int = 0  # known nodes whose reading was written
    changed: int = 0  # of those, how many reported other capacity or status than stored
    deployable: int = 0  # slices the new nodes' catalogs hold (would hold)
    new_nodes: list[dict] = field(default_factory=list)  # the first LISTED: node_id, farm_id, deployable, policy
    skipped: list[list[str]] = field(default_factory=list)  # malformed entries: [label, reason]
    skipped_total: int = 0
    not_found: list[int] = field(default_factory=list)  # ids the grid does not know (the first LISTED)
    not_found_total: int = 0
    left_out: list[list] = field(default_factory=list)  # [node_id, why]: wrong status, unreadable, refused
    left_out_total: int = 0
    pages_done: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        # The words too: the jobs list shows them without reading the lists back.
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "words": self.words()}

    def leave_out(self, node_id: int, why: str) -> None:
        self.left_out_total += 1
        if len(self.left_out) < LISTED:
            self.left_out.append([node_id, why])

    @classmethod
    def from_dict(cls, data: dict) -> OnboardResult:
        return cls(**{k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__})

    @property
    def nodes_read(self) -> int:
        return self.registered + self.refreshed

    def words(self) -> str:
        verb = "would register" if self.dry_run else "registered"
        text = (f"{verb} {self.registered} new node(s) with {self.deployable} deployable slice(s); "
                f"{'would refresh' if self.dry_run else 'refreshed'} {self.refreshed} known node(s)"
                f"{f' ({self.changed} changed)' if self.changed else ''}; {self.reads} read(s), {self.requests} request(s)")  # fmt: skip
        if self.skipped_total:
            text += f"; {self.skipped_total} malformed entr{'y' if self.skipped_total == 1 else 'ies'} skipped"
        if self.not_found_total:
            text += f"; {self.not_found_total} id(s) not on the grid"
        if self.left_out_total:
            text += f"; {self.left_out_total} left out"
        if not self.finished:
            text += f". Stopped at {self.stopped}; run it again to finish the rest (what was read is committed)"
        return text


class OnboardStopped(Exception):
    """A read failed part-way; every page before it is committed. `result` says how far it got."""

    def __init__(self, result: OnboardResult):
        super().__init__(result.words())
        self.result = result
