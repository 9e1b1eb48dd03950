"""What an onboarding was asked (OnboardRequest); what a run did is job_results.OnboardResult."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from dashboard import capacity
from dashboard.grid.types import NODE_STATUSES
from dashboard.jobs.results import OnboardResult
from dashboard.models import INTEGER_MAX
from dashboard.policies.selectors.policy_book import policy_named


class OnboardError(ValueError):
    """The request itself is wrong (no farm and no node, an unknown policy or status)."""


@dataclass(frozen=True)
class OnboardRequest:
    farm_ids: tuple[int, ...] = ()
    node_ids: tuple[int, ...] = ()
    status: str | None = None  # only nodes the grid reports with this status
    policy: str | None = None  # for new nodes; default: each node's effective policy
    dry_run: bool = False
    # How many new nodes an admin confirmed this run may register, past ONBOARD_MAX_NEW_NODES.
    max_new_nodes: int | None = None

    def __post_init__(self) -> None:
        if not self.farm_ids and not self.node_ids:
            raise OnboardError("give at least one farm id or node id")
        for what, ids in (("farm id", self.farm_ids), ("node id", self.node_ids)):
            for value in ids:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise OnboardError(f"{what} {value!r} is not a whole number above zero")
        if self.max_new_nodes is not None and (
            isinstance(self.max_new_nodes, bool)
            or not isinstance(self.max_new_nodes, int)
            or not 1 <= self.max_new_nodes <= INTEGER_MAX
        ):
            raise OnboardError(
                f"the confirmed number of new nodes must be 1 to {INTEGER_MAX}, not {self.max_new_nodes!r}"
            )
        if self.status is not None and self.status not in NODE_STATUSES:
            raise OnboardError(f"status must be one of {', '.join(NODE_STATUSES)}, not {self.status!r}")
        if self.policy:
            try:
                policy_named(self.policy)
            except capacity.PolicyError as exc:
                raise OnboardError(str(exc)) from None

    def new_nodes_limit(self) -> int:
        """How many new nodes this run may register: ONBOARD_MAX_NEW_NODES, or more if an admin confirmed it."""
        return max(settings.ONBOARD_MAX_NEW_NODES, self.max_new_nodes or 0)

    def limit_words(self) -> str:
        if self.max_new_nodes and self.max_new_nodes > settings.ONBOARD_MAX_NEW_NODES:
            return f"the {self.max_new_nodes} an admin confirmed"
        return f"ONBOARD_MAX_NEW_NODES={settings.ONBOARD_MAX_NEW_NODES}"

    def as_parameters(self) -> dict:
        parameters = {
            "farm_ids": list(self.farm_ids),
            "node_ids": list(self.node_ids),
            "status": self.status,
            "policy": self.policy,
        }
        if self.max_new_nodes is not None:
            parameters["max_new_nodes"] = self.max_new_nodes
        return parameters

    @classmethod
    def from_parameters(cls, parameters: dict, *, dry_run: bool) -> OnboardRequest:
        return cls(
            farm_ids=tuple(parameters.get("farm_ids") or ()),
            node_ids=tuple(parameters.get("node_ids") or ()),
            status=parameters.get("status"),
            policy=parameters.get("policy") or None,
            dry_run=dry_run,
            max_new_nodes=parameters.get("max_new_nodes"),
        )

    def words(self) -> str:
        parts = []
        if self.farm_ids:
            parts.append(f"farm{'s' if len(self.farm_ids) > 1 else ''} {', '.join(map(str, self.farm_ids))}")
        if self.node_ids:
            shown = ", ".join(map(str, self.node_ids[:10])) + (" …" if len(self.node_ids) > 10 else "")
            parts.append(f"node{'s' if len(self.node_ids) > 1 else ''} {shown}")
        return " and ".join(parts) + (f" ({self.status} only)" if self.status else "")


class OnboardStopped(Exception):
    """A read failed part-way; every page before it is committed. `result` says how far it got."""

    def __init__(self, result: OnboardResult):
        super().__init__(result.words())
        self.result = result
