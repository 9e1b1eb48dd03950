"""Every version of every policy, newest first per policy: who, when, the diff and how many nodes it carves."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count

from dashboard import capacity
from dashboard.models import Node, Policy, PolicyVersion

SIZE_PARAMETERS = frozenset(
    {
        "slice_mru",
        "reserve_mru_floor",
        "reserve_sru",
        "overhead_mru_per_vm",
        "overhead_sru_per_vm",
        "min_slice_sru",
        "sru_step",
    }
)
WORDS = {
    "slice_mru": "slice memory",
    "slice_cru": "vCPUs per slice",
    "reserve_mru_percent": "memory reserve percent",
    "reserve_mru_floor": "memory reserve floor",
    "reserve_sru": "disk reserve",
    "overhead_mru_per_vm": "memory overhead per VM",
    "overhead_sru_per_vm": "disk overhead per VM",
    "rootfs": "rootfs rule",
    "min_slice_sru": "smallest slice disk",
    "sru_step": "disk step",
    "arithmetic": "arithmetic",
    "public_ipv4": "public IPv4s a slice",
    "ipv4_addon": "IPv4 add-on",
    "gpu_slices": "GPU slices",
}


@dataclass
class VersionLine:
    entry: PolicyVersion
    diff: list[tuple[str, str, str]]  # (parameter words, before, after) against the version before it
    nodes_carved: int  # nodes whose catalog this version carved (Node.carved_policy_name/version)
    current: bool  # the policy's version now


@dataclass
class PolicyLines:
    name: str
    policy: Policy | None  # None: deleted since
    lines: list[VersionLine] = field(default_factory=list)


def policy_history() -> list[PolicyLines]:
    """Every policy's versions, the policies by name (deleted ones too), each newest first; three queries."""
    carved = {
        (row["carved_policy_name"], row["carved_policy_version"]): row["n"]
        for row in Node.objects.values("carved_policy_name", "carved_policy_version").annotate(n=Count("id"))
    }
    live = {p.name: p for p in Policy.objects.select_related("node")}
    by_name: dict[str, list[PolicyVersion]] = {}
    for entry in PolicyVersion.objects.select_related("by").order_by("policy_name", "version", "at", "pk"):
        by_name.setdefault(entry.policy_name, []).append(entry)
    history = []
    for name in sorted(by_name):
        policy = live.get(name)
        lines, before = [], None
        for entry in by_name[name]:
            diff = _diff(before.parameters, entry.parameters) if before is not None else []
            current = policy is not None and entry.policy_id == policy.pk and entry.version == policy.version
            lines.append(VersionLine(entry, diff, carved.get((name, entry.version), 0), current))
            before = entry
        history.append(PolicyLines(name=name, policy=policy, lines=lines[::-1]))
    return history


def _diff(before: dict, after: dict) -> list[tuple[str, str, str]]:
    return [
        (WORDS.get(p, p), _words(p, before.get(p)), _words(p, after.get(p)))
        for p in Policy.PARAMETERS
        if before.get(p) != after.get(p)
    ]


def _words(parameter: str, value) -> str:
    if value is None:
        return "—"
    if parameter in SIZE_PARAMETERS and isinstance(value, int):
        return capacity.format_size(value)
    if parameter == "reserve_mru_percent":
        return f"{value}%"
    return str(value)
