"""The product's parsers against documents generated from the schemas (grid/schemas/), by a generator
nobody here wrote (hypothesis-jsonschema): every valid document is read, and what it says is what the
product keeps; an invalid one in a field the product reads is refused, the words naming the field; a
field it does not read never stops a node.

One rule cannot be said in JSON Schema: `used` memory and disk past 4x the total plus the node reserve
(2 GiB memory, 20 GiB SSD, 0 HDD) is a broken record (the schemas' UsedCapacity says so). It is written
here again by hand, and a document that breaks it must be refused naming `used`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from dashboard.grid.proxy.farms import parse_farm_ips
from dashboard.grid.proxy.parse import parse_contracts, parse_node, parse_statistics
from dashboard.grid.rmb.parse import parse_pools, parse_version, parse_zos_statistics
from dashboard.grid.types import MalformedPayload
from tests.contracts_support import documents, examples, problems

GIB = 1024**3
RESERVE = {"mru": 2 * GIB, "sru": 20 * GIB, "hru": 0}
TODAY = json.loads((Path(__file__).parents[1] / "data" / "gridproxy" / "node-today.json").read_text())
BIG = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
SMALL = settings(
    max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def over_reserve(total: dict, used: dict) -> str | None:
    """The first of mru, sru, hru whose use is past 4x the total plus the reserve, or None."""
    return next((k for k in ("mru", "sru", "hru") if used[k] > 4 * total[k] + RESERVE[k]), None)


def light_of(features: list[str]) -> bool | None:
    # tfgrid-sdk-go validators.go: light lists zmachine-light/network-light and no ipv4/ip; [] says nothing.
    if {"ipv4", "ip"} & set(features):
        return False
    return True if {"zmachine-light", "network-light"} & set(features) else None


def assert_read_as_sent(node, document: dict, total: dict, used: dict) -> None:
    assert (node.node_id, node.farm_id, node.status) == (document["nodeId"], document["farmId"], document["status"])
    assert node.total.as_dict() == {k: total[k] for k in ("cru", "mru", "sru", "hru")}
    assert node.used.as_dict() == {k: used[k] for k in ("cru", "mru", "sru", "hru")}
    assert node.twin_id == (document["twinId"] or None)
    assert node.rented_by_twin_id == (document["rentedByTwinId"] or None)
    assert node.features == tuple(document["features"]) and node.light == light_of(document["features"])
    assert node.num_gpu == document["num_gpu"] and len(node.gpus) == len(document["gpus"] or [])
    assert node.power_state == document["power"]["state"].lower()


def read_or_refused(document: dict, total: dict, used: dict, path: str, *, listed: bool = False) -> None:
    broken = over_reserve(total, used)
    if broken:
        with pytest.raises(MalformedPayload, match=rf"{path}\.{broken} is"):
            parse_node(document, listed=listed)
        return
    assert_read_as_sent(parse_node(document, listed=listed), document, total, used)


@pytest.mark.slow
@BIG
@given(documents("gridproxy", "Node"))
def test_every_valid_node_of_the_list_is_read_as_sent(document):
    # As GET /nodes' pages are read (grid.proxy.node_list): a list entry's capacity is flat.
    read_or_refused(document, document["total_resources"], document["used_resources"], "used_resources", listed=True)


@pytest.mark.slow
@BIG
@given(documents("gridproxy", "NodeWithNestedCapacity"))
def test_every_valid_single_node_is_read_as_sent(document):
    capacity = document["capacity"]
    read_or_refused(document, capacity["total_resources"], capacity["used_resources"], "capacity.used_resources")


@SMALL
@given(documents("gridproxy", "NodeStatistics"))
def test_every_valid_statistics_answer_is_read(document):
    broken = over_reserve(document["total"], document["used"])
    if broken:
        with pytest.raises(MalformedPayload, match=rf"used\.{broken} is"):
            parse_statistics(document, node_id=1)
        return
    statistics = parse_statistics(document, node_id=1)
    assert statistics.system.mru == document["system"]["mru"] and statistics.used.sru == document["used"]["sru"]
    assert (statistics.deployments, statistics.workloads) == (
        document["users"]["deployments"],
        document["users"]["workloads"],
    )


@SMALL
@given(documents("zos", "Counters"))
def test_every_valid_zos_statistics_answer_is_read(document):
    broken = over_reserve(document["total"], document["used"])
    if broken:
        with pytest.raises(MalformedPayload, match=rf"used\.{broken} is"):
            parse_zos_statistics(document, node_id=1)
        return
    assert parse_zos_statistics(document, node_id=1).total.cru == document["total"]["cru"]


@pytest.mark.slow
@SMALL
@given(documents("zos", "StoragePools"))
def test_every_valid_pools_answer_is_read(document):
    names = [p["name"] for p in document]
    # Two rules across fields: names are unique, and a pool holds at most its size.
    why = [
        *(["two pools have the same name"] if len(set(names)) < len(names) else []),
        *([r"uses \d+ bytes of"] if any(p["used"] > p["size"] for p in document) else []),
    ]
    if why:
        with pytest.raises(MalformedPayload, match="|".join(why)):
            parse_pools(document, node_id=1)
        return
    pools = parse_pools(document, node_id=1)
    assert [(p.name, p.type, p.size, p.used) for p in pools] == [
        (p["name"], p["type"], p["size"], p["used"]) for p in document
    ]


@SMALL
@given(documents("zos", "Version"))
def test_every_valid_version_answer_is_read(document):
    version = parse_version(document, node_id=1)
    assert (version.zos, version.zinit) == (document["zos"].strip(), document["zinit"].strip())


@SMALL
@given(documents("gridproxy", "Farm"))
def test_every_valid_farm_is_read(farm):
    read = parse_farm_ips([farm], farm_id=farm["farmId"])
    assert [(ip.ip, ip.contract_id) for ip in read.ips] == [(ip["ip"], ip["contract_id"]) for ip in farm["publicIps"]]


@pytest.mark.slow
@SMALL
@given(documents("gridproxy", "ContractList"))
def test_every_valid_contract_list_of_a_node_is_read(contracts):
    # The dashboard asks for one node's contracts: each is that node's (the proxy's filter).
    for contract in contracts:
        contract["details"]["nodeId"] = 1774
    ids = [c.contract_id for c in parse_contracts(contracts, node_id=1774)]
    assert ids == [c["contract_id"] for c in contracts]


# --- refused, naming the field; or read, when the product does not need it --------------------


def changed(path: str, value):
    document = copy.deepcopy(TODAY)
    *parents, key = path.split(".")
    holder = document
    for part in parents:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]
    if value is KeyError:
        del holder[key]
    else:
        holder[key] = value
    return document


def test_the_base_document_is_valid_and_read():
    assert problems("gridproxy", "Node", TODAY) == [] and parse_node(TODAY).light is False


REFUSED = [
    ("nodeId", "x", "nodeId"),
    ("nodeId", 0, "nodeId"),
    ("farmId", None, "farmId"),
    ("status", "sleeping", "status"),
    ("status", KeyError, "status"),
    ("twinId", -3, "twinId"),
    ("total_resources", KeyError, "total_resources"),
    ("total_resources.mru", -1, r"total_resources\.mru"),
    ("total_resources.cru", 1.5, r"total_resources\.cru"),
    ("total_resources.sru", "1000204886016", r"total_resources\.sru"),
    ("used_resources.mru", None, r"used_resources\.mru"),
    ("used_resources.sru", 10**18, r"used_resources\.sru"),
    ("rentedByTwinId", "7", "rentedByTwinId"),
    ("rentContractId", True, "rentContractId"),
    ("dedicated", "no", "dedicated"),
    ("inDedicatedFarm", 1, "inDedicatedFarm"),
    ("extraFee", -1, "extraFee"),
    ("healthy", "yes", "healthy"),
    ("power", "Up", "power"),
    ("power.state", "Off", r"power\.state"),
    ("uptime", -5, "uptime"),
    ("updatedAt", "yesterday", "updatedAt"),
    ("num_gpu", 1000, "num_gpu"),
    ("gpus", {"0": {}}, "gpus"),
    ("gpus", [{"id": "a", "contract": -1}], r"gpus\[0\]\.contract"),
    ("features", {"wireguard": True, "yggdrasil": True, "public_ip": True}, "features"),
    ("features", ["ipv4", 4], r"features\[1\]"),
    ("farmName", 42, "farmName"),
    ("city", "Gh\x00ent", "city"),
]


@pytest.mark.parametrize(("path", "value", "field"), REFUSED, ids=[f"{p}={v!r}"[:40] for p, v, _ in REFUSED])
def test_a_field_the_product_reads_is_refused_by_name(path, value, field):
    document = changed(path, value)
    assert problems("gridproxy", "Node", document), "the schema must refuse it too"
    with pytest.raises(MalformedPayload, match=rf"^node (8204|payload): {field} "):
        parse_node(document)


IGNORED = [
    ("dmi", "none"),
    ("dmi.processor", None),
    ("speed", []),
    ("cpu_benchmark", 5),
    ("location", {"longitude": "east"}),
    ("location.latitude", None),
    ("publicConfig", None),
    ("price_usd", "cheap"),
    ("farm_free_ips", -2),
    ("serialNumber", 7),
    ("certificationType", None),
    ("gridVersion", "3"),
    ("created", KeyError),
    ("rented", "perhaps"),
    ("rentable", None),
    ("id", 9),
    ("a_field_of_tomorrow", {"nested": [1, 2]}),
]


@pytest.mark.parametrize(("path", "value"), IGNORED, ids=[f"{p}={v!r}"[:40] for p, v in IGNORED])
def test_a_field_the_product_does_not_read_never_stops_the_node(path, value):
    assert parse_node(changed(path, value)).node_id == TODAY["nodeId"]


def test_a_list_entry_with_a_capacity_field_of_its_own_is_read_by_its_flat_capacity():
    # Found by Hypothesis (2026-12-07): GET /nodes' `Node` defines no `capacity` (tfgrid-sdk-go grid-proxy
    # pkg/types), so a list entry that carries one, here a list, is read by the flat capacity the list
    # defines, as any field it does not know; GET /nodes/{id}'s `capacity` is its nested shape, and a list
    # is not one.
    entry = {**TODAY, "capacity": []}
    assert parse_node(entry, listed=True) == parse_node(TODAY, listed=True) == parse_node(TODAY)
    with pytest.raises(MalformedPayload, match=r"capacity is a list, must be an object"):
        parse_node(entry)
    # A list entry with only a nested capacity is not the list's shape: refused, naming what it lacks.
    nested_only = {key: value for key, value in TODAY.items() if key not in ("total_resources", "used_resources")}
    nested_only["capacity"] = {"total_resources": TODAY["total_resources"], "used_resources": TODAY["used_resources"]}
    with pytest.raises(MalformedPayload, match=r"has neither capacity.total_resources .* nor total_resources"):
        parse_node(nested_only, listed=True)
    assert parse_node(nested_only) == parse_node(TODAY)
