"""The Grid Proxy's answers read into capacity types: GET /nodes, /nodes/{id}, /nodes/{id}/statistics.

The parsers are strict: the capacity numbers decide what we sell, so a figure that is
missing, null, of the wrong type, negative or absurd stops that node instead of being
read as zero. Fields the product does not need are ignored; optional ones get a safe
default. Every refusal is a MalformedPayload naming the node and the field. Pure: no I/O.
The shapes are the schemas of grid/schemas/gridproxy.json (written from tfgrid-sdk-go's types, each
field with its source; docs/contracts.md): today's proxy and older ones (no `features`, `gpus`, `dmi`)
are read alike, and a field the product does not read (location, dmi, speed, prices ...) never stops a node.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dashboard.capacity import GiB, Resources, format_size
from dashboard.grid.proxy.answers import describe
from dashboard.grid.proxy.features import parse_features, parse_gpus, parse_num_gpu, zos_light
from dashboard.grid.text import text_problem
from dashboard.grid.types import (
    LIVE_CONTRACT_STATES,
    MAX_NODE_CRU,
    MAX_NODE_HRU,
    MAX_NODE_MRU,
    MAX_NODE_SRU,
    NODE_STATUSES,
    Contract,
    MalformedPayload,
    NodeCapacity,
    NodeStatistics,
)

# How far `used` may exceed `total` before the record is broken rather than merely
# over-provisioned. SSD is NOT over-provisioned: ZOS places every disk in a pool that holds it
# in full (its own SSDOverProvisionFactor is 1, zos pkg/storage), and the proxy only reports
# used = the contracts' disks + 20 GiB (the SSDOverProvisionFactor = 2 that grid-proxy declares is
# read by nothing). Legitimate excess still exists: CPU cores are over-provisioned without limit,
# the 2 GiB memory reserve floor exceeds a tiny node's memory, the fixed 20 GiB SSD reserve a
# tiny disk, and contracts stay on a node whose hardware shrank (a failed DIMM or disk).
# Four times the total plus the fixed reserve covers all of those; beyond it the
# figure cannot describe the machine and would only make every slice look phantom.
USED_OVER_TOTAL_FACTOR = 4
USED_FLOOR = {"mru": 2 * GiB, "sru": 20 * GiB, "hru": 0}
# Cores are over-provisioned freely, so used.cru only gets an absolute bound.
MAX_USED_CRU = 16 * MAX_NODE_CRU

_LIMITS = {"cru": MAX_NODE_CRU, "mru": MAX_NODE_MRU, "sru": MAX_NODE_SRU, "hru": MAX_NODE_HRU}
_KINDS = {
    "cru": "a non-negative core count",
    "mru": "a non-negative byte count",
    "sru": "a non-negative byte count",
    "hru": "a non-negative byte count",
}
_TEXT_LIMITS = {"farmName": 128, "country": 64, "city": 64}
TEXT_REFUSE_AFTER = 1024


# --- strict field readers ----------------------------------------------------------------


def _whole_number(value: Any, *, where: str, path: str, kind: str) -> int:
    """An int from JSON: ints, or floats with no fraction; never bools or strings."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedPayload(f"{where}: {path} is {describe(value)}, must be {kind}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise MalformedPayload(f"{where}: {path} is {value!r}, must be {kind} (a whole number)")
        value = int(value)
    return value


def _amount(block: dict, key: str, *, where: str, path: str, required: bool, limit: int) -> int:
    kind = _KINDS[key]
    full = f"{path}.{key}"
    if key not in block:
        if required:
            raise MalformedPayload(f"{where}: {full} is missing")
        return 0
    value = block[key]
    if value is None:
        raise MalformedPayload(f"{where}: {full} is null, must be {kind}")
    number = _whole_number(value, where=where, path=full, kind=kind)
    if number < 0:
        raise MalformedPayload(f"{where}: {full} is {number}, must be {kind}")
    if number > limit:
        shown = f"{number}" if key == "cru" else f"{format_size(number)} ({number} bytes)"
        bound = f"{limit}" if key == "cru" else format_size(limit)
        raise MalformedPayload(f"{where}: {full} is {shown}, more than any single node has (limit {bound})")
    return number


def _resources(container: dict, key: str, *, where: str, prefix: str = "", used: bool = False) -> Resources:
    path = f"{prefix}{key}"
    if key not in container:
        raise MalformedPayload(f"{where}: {path} is missing")
    block = container[key]
    if not isinstance(block, dict):
        raise MalformedPayload(f"{where}: {path} is {describe(block)}, must be an object with cru, mru and sru")
    limits = dict(_LIMITS, cru=MAX_USED_CRU) if used else _LIMITS
    return Resources(
        cru=_amount(block, "cru", where=where, path=path, required=True, limit=limits["cru"]),
        mru=_amount(block, "mru", where=where, path=path, required=True, limit=limits["mru"]),
        sru=_amount(block, "sru", where=where, path=path, required=True, limit=limits["sru"]),
        # HDD is optional: most nodes have none and some answers leave it out.
        hru=_amount(block, "hru", where=where, path=path, required=False, limit=limits["hru"]),
    )


def _check_used(total: Resources, used: Resources, *, where: str, path: str) -> None:
    for key, floor in USED_FLOOR.items():
        have, use = getattr(total, key), getattr(used, key)
        bound = USED_OVER_TOTAL_FACTOR * have + floor
        if use > bound:
            raise MalformedPayload(
                f"{where}: {path}.{key} is {format_size(use)} but the node has only {format_size(have)}; "
                f"more than {USED_OVER_TOTAL_FACTOR}x the total plus the node reserve is a broken record, "
                "not over-provisioning"
            )


def _identifier(payload: dict, key: str, *, where: str, required: bool) -> int | None:
    """A grid id (node, farm, twin): ids start at 1; 0 is Go's zero value for 'none'."""
    value = payload.get(key)
    if value is None:
        if required:
            raise MalformedPayload(
                f"{where}: {key} is {'null' if key in payload else 'missing'}, must be a positive id"
            )
        return None
    number = _whole_number(value, where=where, path=key, kind="a positive id")
    if number < 0 or number > 2**32 - 1:
        raise MalformedPayload(f"{where}: {key} is {number}, must be a positive id")
    if number == 0:
        if required:
            raise MalformedPayload(f"{where}: {key} is 0, must be a positive id")
        return None
    return number


def _text(payload: dict, key: str, *, where: str) -> str:
    value = payload.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedPayload(f"{where}: {key} is {describe(value)}, must be text")
    # A little over the column is cut; far over it is not a name but a broken or hostile answer.
    if len(value) > TEXT_REFUSE_AFTER:
        raise MalformedPayload(
            f"{where}: {key} is {len(value):,} characters long; no name is longer than {TEXT_REFUSE_AFTER:,}, refusing it"
        )
    problem = text_problem(value)
    if problem:
        # PostgreSQL refuses a NUL in text and UTF-8 cannot encode a lone surrogate: refused here,
        # with the field's name, instead of as a traceback from the write (grid.text: the API's rule too).
        raise MalformedPayload(f"{where}: {key} contains {problem}; refusing it")
    # Stored in bounded columns; a runaway name must not fail the write later.
    return " ".join(value.split())[: _TEXT_LIMITS.get(key, 128)]


def _flag(payload: dict, key: str, *, where: str) -> bool:
    value = payload.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise MalformedPayload(f"{where}: {key} is {describe(value)}, must be true or false")
    return value


def _optional_flag(payload: dict, key: str, *, where: str) -> bool | None:
    """A flag whose absence means "not said" (None), not false."""
    if payload.get(key) is None:
        return None
    return _flag(payload, key, where=where)


# What farmerbot reports for a node's power (tfchain's PowerState and PowerTarget: Up or Down).
POWER_STATES = ("up", "down")


def _power(payload: dict, key: str, *, where: str) -> str:
    """power.state or power.target, lower-cased: "up", "down", or "" when the answer does not say.

    An older proxy has no `power` at all, and a node whose farm runs no power manager reports
    empty strings: both are "not said". Anything else is a broken answer, refused by name.
    """
    power = payload.get("power")
    if power is None:
        return ""
    if not isinstance(power, dict):
        raise MalformedPayload(f"{where}: power is {describe(power)}, must be an object with state and target")
    value = power.get(key)
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or value.strip().lower() not in POWER_STATES:
        raise MalformedPayload(f"{where}: power.{key} is {describe(value)}, must be Up or Down")
    return value.strip().lower()


# A node that has run longer than this has not been running since: a broken counter.
MAX_UPTIME_SECONDS = 20 * 365 * 86400


def _uptime(payload: dict, *, where: str) -> int | None:
    value = payload.get("uptime")
    if value is None:
        return None
    number = _whole_number(value, where=where, path="uptime", kind="a number of seconds")
    if number < 0 or number > MAX_UPTIME_SECONDS:
        raise MalformedPayload(f"{where}: uptime is {number} s, must be 0 to {MAX_UPTIME_SECONDS} s (20 years)")
    return number


def _extra_fee(payload: dict, *, where: str) -> int:
    value = payload.get("extraFee")
    if value is None:
        return 0
    number = _whole_number(value, where=where, path="extraFee", kind="a whole number")
    if number < 0 or number > 2**63 - 1:
        raise MalformedPayload(f"{where}: extraFee is {number}, must be 0 or more")
    return number


def _status(payload: dict, *, where: str) -> str:
    if "status" not in payload or payload["status"] is None:
        state = "missing" if "status" not in payload else "null"
        raise MalformedPayload(f"{where}: status is {state}, must be one of {', '.join(NODE_STATUSES)}")
    value = payload["status"]
    if not isinstance(value, str) or value.strip().lower() not in NODE_STATUSES:
        raise MalformedPayload(f"{where}: status is {describe(value)}, must be one of {', '.join(NODE_STATUSES)}")
    return value.strip().lower()


def _timestamp(payload: dict, key: str, *, where: str) -> int | None:
    value = payload.get(key)
    if value is None:
        return None
    number = _whole_number(value, where=where, path=key, kind="a unix timestamp")
    return number if number > 0 else None


# --- pure parsers ------------------------------------------------------------------------


def parse_node(payload: Any, *, listed: bool = False) -> NodeCapacity:
    """One node from GET /nodes/{id} (nested `capacity`) or one entry of GET /nodes (flat).

    `listed`: an entry of GET /nodes, whose capacity is flat (tfgrid-sdk-go grid-proxy pkg/types `Node`, which
    has no `capacity`): a `capacity` key there is a field the list does not define, not read, as any other
    unknown field. Without it, a payload with `capacity` is read as GET /nodes/{id}'s
    `NodeWithNestedCapacity`.
    """
    if not isinstance(payload, dict):
        raise MalformedPayload(f"node payload is {describe(payload)}, must be a JSON object")
    node_id = _identifier(payload, "nodeId", where="node payload", required=True)
    where = f"node {node_id}"
    if "capacity" in payload and not listed:
        capacity = payload["capacity"]
        if not isinstance(capacity, dict):
            raise MalformedPayload(f"{where}: capacity is {describe(capacity)}, must be an object")
        total = _resources(capacity, "total_resources", where=where, prefix="capacity.")
        used = _resources(capacity, "used_resources", where=where, prefix="capacity.", used=True)
        used_path = "capacity.used_resources"
    elif "total_resources" in payload or "used_resources" in payload:
        total = _resources(payload, "total_resources", where=where)
        used = _resources(payload, "used_resources", where=where, used=True)
        used_path = "used_resources"
    else:
        raise MalformedPayload(
            f"{where}: has neither capacity.total_resources (GET /nodes/{{id}}) nor total_resources (GET /nodes)"
        )
    _check_used(total, used, where=where, path=used_path)
    features = parse_features(payload, where=where)
    return NodeCapacity(
        node_id=node_id,
        farm_id=_identifier(payload, "farmId", where=where, required=True),
        farm_name=_text(payload, "farmName", where=where),
        twin_id=_identifier(payload, "twinId", where=where, required=False),
        status=_status(payload, where=where),
        dedicated=_flag(payload, "dedicated", where=where),
        rented_by_twin_id=_identifier(payload, "rentedByTwinId", where=where, required=False),
        total=total,
        used=used,
        country=_text(payload, "country", where=where),
        city=_text(payload, "city", where=where),
        updated_at=_timestamp(payload, "updatedAt", where=where),
        healthy=_optional_flag(payload, "healthy", where=where),
        power_state=_power(payload, "state", where=where),
        power_target=_power(payload, "target", where=where),
        uptime=_uptime(payload, where=where),
        rent_contract_id=_identifier(payload, "rentContractId", where=where, required=False),
        in_dedicated_farm=_flag(payload, "inDedicatedFarm", where=where),
        extra_fee=_extra_fee(payload, where=where),
        features=features,
        light=zos_light(features),
        num_gpu=parse_num_gpu(payload, where=where),
        gpus=parse_gpus(payload, where=where),
    )


def parse_statistics(payload: Any, *, node_id: int | None = None) -> NodeStatistics:
    """GET /nodes/{id}/statistics: the node's own view (system = its reserve)."""
    where = f"node {node_id} statistics" if node_id is not None else "statistics"
    if not isinstance(payload, dict):
        raise MalformedPayload(f"{where}: payload is {describe(payload)}, must be a JSON object")
    total = _resources(payload, "total", where=where)
    used = _resources(payload, "used", where=where, used=True)
    system = _resources(payload, "system", where=where)
    _check_used(total, used, where=where, path="used")
    users = payload.get("users")
    if users is None:
        users = {}
    if not isinstance(users, dict):
        raise MalformedPayload(f"{where}: users is {describe(users)}, must be an object")
    counts = {}
    for key in ("deployments", "workloads"):
        value = users.get(key)
        if value is None:
            counts[key] = 0
            continue
        number = _whole_number(value, where=where, path=f"users.{key}", kind="a non-negative count")
        if number < 0:
            raise MalformedPayload(f"{where}: users.{key} is {number}, must be a non-negative count")
        counts[key] = number
    return NodeStatistics(system=system, total=total, used=used, **counts)


CONTRACT_TYPES = ("node", "rent", "name")
# deployment_data is the deployer's JSON text ({"version": 0, "type": "vm", "name": ..., "projectName": ...});
# a few KiB at most. Far beyond it is not a deployment's description.
DEPLOYMENT_DATA_MAX = 64 * 1024
_NAME_MAX = 128


def parse_contract(payload: Any, *, node_id: int, states: tuple[str, ...] = LIVE_CONTRACT_STATES) -> Contract:
    """One entry of GET /contracts?node_id=N&state=...; MalformedPayload naming the contract and the field.

    Strict like the node parser: a contract that cannot be read would make its VM look gone (an
    orphan that is not one), so the caller gives up on the node rather than skip the entry.
    """
    if not isinstance(payload, dict):
        raise MalformedPayload(f"node {node_id}'s contract list: an entry is {describe(payload)}, must be an object")
    contract_id = _identifier(payload, "contract_id", where=f"node {node_id}'s contract", required=True)
    where = f"node {node_id}'s contract {contract_id}"
    twin_id = _identifier(payload, "twin_id", where=where, required=True)
    state = payload.get("state")
    if not isinstance(state, str) or state.lower() not in {s.lower() for s in states}:
        raise MalformedPayload(f"{where}: state is {describe(state)}, asked for {' or '.join(states)} only")
    kind = payload.get("type")
    if kind not in CONTRACT_TYPES:
        raise MalformedPayload(f"{where}: type is {describe(kind)}, must be one of {', '.join(CONTRACT_TYPES)}")
    created_at = _timestamp(payload, "created_at", where=where)
    details = payload.get("details")
    if details is None:
        details = {}
    if not isinstance(details, dict):
        raise MalformedPayload(f"{where}: details is {describe(details)}, must be an object")
    if kind in ("node", "rent"):
        on = _identifier(details, "nodeId", where=where, required=True)
        if on != node_id:
            raise MalformedPayload(
                f"{where}: details.nodeId is {on}, but the contracts of node {node_id} were asked for"
            )
    elif kind == "name":
        raise MalformedPayload(
            f"{where}: a name contract is on no node, but the contracts of node {node_id} were asked for"
        )
    deployment_type, name = (
        _deployment_data(details.get("deployment_data"), where=where) if kind == "node" else ("", "")
    )
    return Contract(
        contract_id=contract_id,
        twin_id=twin_id,
        node_id=node_id,
        state=state,
        type=kind,
        created_at=created_at,
        deployment_type=deployment_type,
        name=name,
    )


def parse_contracts(payload: Any, *, node_id: int) -> list[Contract]:
    """A page of GET /contracts: a JSON array of contracts of this node, each read by parse_contract."""
    if not isinstance(payload, list):
        raise MalformedPayload(f"node {node_id}'s contract list is {describe(payload)}, must be a JSON array")
    return [parse_contract(item, node_id=node_id) for item in payload]


def _deployment_data(value: Any, *, where: str) -> tuple[str, str]:
    """(type, name) from a node contract's deployment_data; ("", "") when it says nothing readable.

    The deployer writes it and ZOS never reads it, so it is a hint, not a record: text that is not
    JSON (older deployers) means "kind not said", and such a contract counts as holding capacity.
    """
    if value is None or value == "":
        return "", ""
    if not isinstance(value, str):
        raise MalformedPayload(f"{where}: details.deployment_data is {describe(value)}, must be text")
    if len(value) > DEPLOYMENT_DATA_MAX:
        raise MalformedPayload(
            f"{where}: details.deployment_data is {len(value):,} characters long, more than {DEPLOYMENT_DATA_MAX:,}; "
            "refusing it"
        )
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    found = []
    for key in ("type", "name"):
        text = data.get(key)
        if not isinstance(text, str) or text_problem(text) or len(text) > _NAME_MAX:
            found.append("")
            continue
        found.append(text.strip())
    return found[0].lower(), found[1]


__all__ = ["describe", "parse_contract", "parse_contracts", "parse_node", "parse_statistics"]
