"""Writes to capacity policies: every change bumps the version and leaves an audit event.

A catalog carved under an older version is stale, so the version is what lets the fleet
page find the nodes a change affects.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from dashboard import capacity
from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.models import Node, Policy, PolicyVersion
from dashboard.nodes.services.farm_ips import farm_ips_read_for_nodes
from dashboard.policies.selectors.policy import policy_figures_active, policy_node_pks
from dashboard.policies.selectors.policy_history import SIZE_PARAMETERS
from dashboard.policies.selectors.policy_history import WORDS as PARAMETER_WORDS
from dashboard.policies.services.policy_figures import policy_figures_follow


class PolicyConflict(capacity.PolicyError):
    """The policy changed since the person looked at it, or the name/target is already taken."""


def policy_update(
    *,
    policy: Policy,
    parameters: dict,
    expected_version: int | None = None,
    by=None,
    source: str = "web",
    reverted_from: int | None = None,
    carries: dict | None = None,
) -> tuple[Policy, bool]:
    """Apply new parameters; returns (policy, changed). No change means no new version and no event.

    `carries` (Policy.CARRIES: what a slice carries besides its size) are saved and audited too, but a
    change of them alone keeps the version: no catalog goes stale by them and no figure is rewritten.

    `expected_version` refuses to overwrite a change someone else saved after the preview was made.
    `reverted_from`: the new version is an old one's parameters (the policy history's revert), said
    in its history entry and audit event. Bad parameters raise capacity.PolicyError and write nothing.
    The nodes' figures follow in this transaction for a few nodes, else in a job queued on commit
    (policies.services.policy_figures); an edit while that job is active is refused (PolicyConflict).
    """
    unknown = set(parameters) - set(Policy.PARAMETERS)
    if unknown:
        raise capacity.PolicyError(f"unknown policy parameter(s): {', '.join(sorted(unknown))}")
    carries = policy_carries_checked(carries or {})
    with transaction.atomic():
        locked = _policy_locked(policy, expected_version=expected_version)
        before = {p: getattr(locked, p) for p in Policy.PARAMETERS}
        changes = {p: (before[p], value) for p, value in parameters.items() if before[p] != value}
        carried = {c: (getattr(locked, c), value) for c, value in carries.items() if getattr(locked, c) != value}
        if carried:
            _farm_ips_read_when_ipv4_starts(locked, carried)
        if not changes:
            if carried:
                _carries_save(locked, carried, by=by, source=source)
                return locked, True
            return locked, False
        _check_not_rewriting(locked)
        # Validates the combination (raises PolicyError) before anything is written.
        capacity.Policy(name=locked.name, version=locked.version + 1, **{**before, **parameters})
        for name, (_old, new) in {**changes, **carried}.items():
            setattr(locked, name, new)
        locked.version += 1
        locked.save()
        reverted = _reverted_words(reverted_from) + _catalogs_restamped(locked)
        policy_figures_follow(locked, policy_node_pks(locked), by=by, source=source)
        _policy_changed_record(
            locked, changes={**changes, **carried}, reverted=reverted, reverted_from=reverted_from, by=by, source=source
        )
    return locked, True


def _policy_locked(policy: Policy, *, expected_version: int | None) -> Policy:
    """The policy's row, locked; PolicyConflict when it is no longer the version the person previewed."""
    locked = Policy.objects.select_for_update().get(pk=policy.pk)
    if expected_version is not None and locked.version != expected_version:
        raise PolicyConflict(
            f"policy {locked.name!r} was changed by someone else meanwhile (now v{locked.version}, "
            f"you previewed v{expected_version}); review the preview again"
        )
    return locked


def _check_not_rewriting(locked: Policy) -> None:
    """PolicyConflict while a job still rewrites the figures of the policy's current version."""
    rewriting = policy_figures_active([locked.pk]).get(locked.pk)
    if rewriting is not None:
        raise PolicyConflict(
            f"the figures of policy {locked.name!r} v{locked.version} are still being rewritten "
            f"(job #{rewriting.pk}, {rewriting.progress_done:,} of {rewriting.progress_total:,} nodes); "
            "edit it again when that job ends"
        )


def _policy_changed_record(
    locked: Policy, *, changes: dict, reverted: str, reverted_from: int | None, by, source: str
) -> None:
    """The audit event and the history entry of the policy's new version."""
    _policy_audited(
        locked,
        "policy.reverted" if reverted_from is not None else "policy.changed",
        f"policy {locked.name} v{locked.version - 1} -> v{locked.version}{reverted}: {policy_changes_words(changes)}",
        by=by,
        source=source,
        version=locked.version,
        changes={name: [old, new] for name, (old, new) in changes.items()},
        reverted_from=reverted_from,
    )
    policy_version_record(
        locked,
        action=PolicyVersion.Action.REVERTED if reverted_from is not None else PolicyVersion.Action.CHANGED,
        by=by,
        source=source,
        reverted_from=reverted_from,
    )


def policy_create(
    *,
    name: str,
    scope: str,
    parameters: dict,
    farm_id: int | None = None,
    node: Node | None = None,
    by=None,
    source: str = "web",
    carries: dict | None = None,
) -> Policy:
    """A new fleet default or override. One fleet default, one override per farm and per node.
    `carries`: what its slices carry (Policy.CARRIES), the model's defaults (nothing) where left out."""
    if scope not in Policy.Scope.values:
        raise capacity.PolicyError(f"unknown scope {scope!r}; use one of: {', '.join(Policy.Scope.values)}")
    if scope == Policy.Scope.FARM and farm_id is None:
        raise capacity.PolicyError("a farm override needs a farm id")
    if scope == Policy.Scope.NODE and node is None:
        raise capacity.PolicyError("a node override needs a node")
    name = name.strip()
    if not name:
        raise capacity.PolicyError("a policy needs a name")
    if name in capacity.PROFILES:
        raise PolicyConflict(f"{name!r} is the name of a built-in profile; choose another name")
    capacity.Policy(name=name, **{p: parameters[p] for p in Policy.PARAMETERS})  # raises PolicyError
    carries = policy_carries_checked(carries or {})
    row = Policy(
        name=name,
        scope=scope,
        farm_id=farm_id if scope == Policy.Scope.FARM else None,
        node=node if scope == Policy.Scope.NODE else None,
        **{p: parameters[p] for p in Policy.PARAMETERS},
        **carries,
    )
    try:
        with transaction.atomic():
            row.save()
            policy_figures_follow(row, policy_node_pks(row), by=by, source=source)
            _policy_audited(
                row,
                "policy.created",
                f"policy {row.name} v1 created as {row.get_scope_display().lower()}"
                + (f" for farm {farm_id}" if row.scope == Policy.Scope.FARM else "")
                + (f" for node {node.grid_id}" if row.scope == Policy.Scope.NODE else ""),
                by=by,
                source=source,
                parameters={p: parameters[p] for p in Policy.PARAMETERS},
                carries={c: getattr(row, c) for c in Policy.CARRIES},
            )
            policy_version_record(row, action=PolicyVersion.Action.CREATED, by=by, source=source)
            _farm_ips_read_when_ipv4_starts(row, {c: (None, getattr(row, c)) for c in Policy.CARRIES})
    except IntegrityError:
        raise PolicyConflict(_taken_words(name=name, scope=scope, farm_id=farm_id, node=node)) from None
    return row


def policy_delete(*, policy: Policy, by=None, source: str = "web") -> None:
    """Remove a policy; its nodes fall back to the next one (without a fleet default, the built-in "zos")."""
    with transaction.atomic():
        locked = Policy.objects.select_for_update().get(pk=policy.pk)
        rewriting = policy_figures_active([locked.pk]).get(locked.pk)
        if rewriting is not None:
            raise PolicyConflict(
                f"the figures of policy {locked.name!r} v{locked.version} are still being rewritten "
                f"(job #{rewriting.pk}); delete it when that job ends"
            )
        node_pks = policy_node_pks(policy)
        _policy_audited(
            policy,
            "policy.deleted",
            f"policy {policy.name} v{policy.version} deleted; its nodes fall back to the next policy",
            by=by,
            source=source,
            version=policy.version,
        )
        gone = Policy(pk=policy.pk, version=policy.version, scope=policy.scope, farm_id=policy.farm_id)
        policy.delete()
        # After the delete, so the nodes read their next policy; for many nodes a job does it.
        policy_figures_follow(gone, node_pks, by=by, source=source, deleted=True)


def _sells_ipv4(public_ipv4, ipv4_addon) -> bool:
    return bool(public_ipv4) or bool(ipv4_addon)


def _farm_ips_read_when_ipv4_starts(policy: Policy, carried: dict[str, tuple]) -> None:
    """A policy that starts selling a public IPv4 has its nodes' farms' IPs read once it is saved (never read
    is not 0 free: until they are read, no IPv4 slice is offered), within the request budget like any read."""

    def value(name: str, which: int):
        return carried[name][which] if name in carried else getattr(policy, name)

    if _sells_ipv4(value("public_ipv4", 1), value("ipv4_addon", 1)) and not _sells_ipv4(
        value("public_ipv4", 0), value("ipv4_addon", 0)
    ):
        node_pks = policy_node_pks(policy)
        transaction.on_commit(lambda: farm_ips_read_for_nodes(node_pks))


def _reverted_words(reverted_from: int | None) -> str:
    return f" (reverted to v{reverted_from}'s parameters)" if reverted_from is not None else ""


def _catalogs_restamped(policy: Policy) -> str:
    """A version is its content: catalogs carved under an earlier version with exactly these parameters
    (a revert, an edit back) are relabelled as carved under this one, so they keep the rounding tolerance
    a catalog of the policy in force has (capacity.catalog.slice_is_current) and a later deploy or release
    does not stale them. Returns the words the audit event says it in ("" when none)."""
    now = {p: getattr(policy, p) for p in Policy.PARAMETERS}
    same = sorted(
        version
        for version, parameters in PolicyVersion.objects.filter(policy=policy).values_list("version", "parameters")
        if version != policy.version and {p: parameters.get(p) for p in Policy.PARAMETERS} == now
    )
    if not same:
        return ""
    Node.objects.filter(carved_policy_name=policy.name, carved_policy_version__in=same).update(
        carved_policy_version=policy.version
    )
    return f"; catalogs carved under v{', v'.join(map(str, same))} (the same values) count as v{policy.version}"


def policy_version_record(
    policy: Policy, *, action: str, by=None, source: str = "web", reverted_from: int | None = None
) -> None:
    """The policy's history entry for the version it has now (dashboard.models.PolicyVersion); every write
    of a policy calls it in its own transaction."""
    PolicyVersion.objects.create(
        policy=policy,
        policy_name=policy.name,
        version=policy.version,
        scope=policy.scope,
        farm_id=policy.farm_id,
        parameters={p: getattr(policy, p) for p in Policy.PARAMETERS},
        action=action,
        reverted_from=reverted_from,
        by=actor_of(by),
        source=source,
    )


# A VM takes its public IPv4s in one node contract (the chain's `public_ips`); more than a few a slice is a typo.
MAX_PUBLIC_IPV4 = 4


def policy_carries_checked(carries: dict) -> dict:
    """What a slice carries, as given, or capacity.PolicyError saying what is wrong (nothing written)."""
    unknown = set(carries) - set(Policy.CARRIES)
    if unknown:
        raise capacity.PolicyError(f"unknown policy carries: {', '.join(sorted(unknown))}")
    ips = carries.get("public_ipv4", 0)
    if isinstance(ips, bool) or not isinstance(ips, int) or not 0 <= ips <= MAX_PUBLIC_IPV4:
        raise capacity.PolicyError(f"public IPv4s a slice: {ips!r}; use a whole number from 0 to {MAX_PUBLIC_IPV4}")
    for flag in ("ipv4_addon", "gpu_slices"):
        if flag in carries and not isinstance(carries[flag], bool):
            raise capacity.PolicyError(f"{PARAMETER_WORDS[flag]}: {carries[flag]!r}; use true or false")
    return dict(carries)


def _carries_save(policy: Policy, carried: dict[str, tuple], *, by, source: str) -> None:
    """A change of what its slices carry alone: saved and audited, the version (and every catalog) kept."""
    for name, (_old, new) in carried.items():
        setattr(policy, name, new)
    policy.save(update_fields=[*carried, "updated_at"])
    _policy_audited(
        policy,
        "policy.changed",
        f"policy {policy.name} v{policy.version} (version kept: no catalog goes stale): {policy_changes_words(carried)}",
        by=by,
        source=source,
        version=policy.version,
        changes={name: [old, new] for name, (old, new) in carried.items()},
    )


def _policy_audited(policy: Policy, action: str, message: str, *, by, source: str, **detail) -> None:
    """The policy's audit event: which policy (its detail's first keys), then what the action adds."""
    audit_record(
        action=action,
        actor=by,
        source=source,
        node=policy.node,
        message=message,
        detail={"policy": policy.name, "scope": policy.scope, **detail},
    )


def policy_changes_words(changes: dict[str, tuple]) -> str:
    return "; ".join(
        f"{PARAMETER_WORDS.get(p, p)} {_value_words(p, old)} -> {_value_words(p, new)}"
        for p, (old, new) in changes.items()
    )


def _value_words(parameter: str, value) -> str:
    if parameter in SIZE_PARAMETERS:
        return capacity.format_size(value)
    if parameter == "reserve_mru_percent":
        return f"{value}%"
    return str(value)


def _taken_words(*, name: str, scope: str, farm_id: int | None, node: Node | None) -> str:
    if Policy.objects.filter(name=name).exists():
        return f"a policy named {name!r} already exists; choose another name"
    if scope == Policy.Scope.FLEET:
        return "there is already a fleet default; edit it instead"
    if scope == Policy.Scope.FARM:
        return f"farm {farm_id} already has an override; edit it instead"
    return f"node {node.grid_id if node else '?'} already has an override; edit it instead"
