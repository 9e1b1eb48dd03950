"""The outside world's shapes as JSON Schemas, each field with the source it was written from.

Three families, one file each beside this module (docs/contracts.md names every schema and its sources):
- `gridproxy.json`: the Grid Proxy's answers (tfgrid-sdk-go grid-proxy pkg/types, converters.go);
- `zos.json`: the bodies ZOS answers over RMB (zosbase pkg/zos_api routes and the types behind them);
- `rmb.json`: rmb-peer's request and answer envelopes on Redis (rmb-rs src/peer/storage).

`schema(family, name)` is one answer's schema as a document of its own (its `definitions` beside it,
so a validator or a generator needs nothing else). With `strict=True` every object the schema
describes refuses keys it does not name: the simulated grid and the stand-in rmb-peer are judged
that way, so they cannot invent a field the real sources never send (the `features` object did).
The product's parsers are judged by the plain form, where an extra field is allowed and ignored.
Pure: reads its own files, imports nothing of ours.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The answers, by family: each a `definitions` entry of the family's file.
ANSWERS: dict[str, tuple[str, ...]] = {
    "gridproxy": (
        "Node",
        "NodeList",
        "NodeWithNestedCapacity",
        "NodeStatistics",
        "Farm",
        "FarmList",
        "Contract",
        "ContractList",
        "Error",
    ),
    "zos": ("StoragePools", "Counters", "Version", "TaskResult", "PerfRequest"),
    "rmb": ("Request", "Response"),
}

# The RMB command each ZOS body answers (zosbase pkg/zos_api/routes.go).
ZOS_COMMANDS: dict[str, str] = {
    "zos.storage.pools": "StoragePools",
    "zos.statistics.get": "Counters",
    "zos.system.version": "Version",
    "zos.perf.get": "TaskResult",
}


class UnknownSchema(KeyError):
    """No such family or answer."""


@cache
def family(name: str) -> dict[str, Any]:
    """The whole file of a family, as written."""
    if name not in ANSWERS:
        raise UnknownSchema(f"no schema family {name!r}; there are {', '.join(ANSWERS)}")
    return json.loads((HERE / f"{name}.json").read_text(encoding="utf-8"))


def schema(family_name: str, name: str, *, strict: bool = False) -> dict[str, Any]:
    """One answer's schema, a document of its own (a fresh copy: the caller may keep or change it)."""
    whole = family(family_name)
    definitions = whole["definitions"]
    if name not in definitions:
        raise UnknownSchema(f"no schema {name!r} in {family_name}.json")
    document = {
        "$schema": whole["$schema"],
        "$comment": whole["$comment"],
        "definitions": copy.deepcopy(definitions),
        **copy.deepcopy(definitions[name]),
    }
    if strict:
        _strict(document, document["definitions"])
    return document


def sources() -> list[tuple[str, str, str, str]]:
    """(family, answer, title, its $comment) for every answer: what docs/contracts.md lists."""
    found = []
    for family_name, names in ANSWERS.items():
        definitions = family(family_name)["definitions"]
        for name in names:
            entry = definitions[name]
            found.append((family_name, name, entry.get("title", name), entry.get("$comment", "")))
    return found


# --- strict: no key the source does not send -------------------------------------------------


def _resolved(node: dict, definitions: dict) -> dict:
    ref = node.get("$ref", "")
    return definitions[ref.rsplit("/", 1)[-1]] if ref.startswith("#/definitions/") else node


def _strict(node: Any, definitions: dict) -> None:
    """Every object with named properties refuses others; an allOf of such objects is merged first,
    so its parts do not refuse each other's keys."""
    if isinstance(node, list):
        for item in node:
            _strict(item, definitions)
        return
    if not isinstance(node, dict):
        return
    parts = node.get("allOf")
    if parts and all("properties" in _resolved(p, definitions) and "if" not in p for p in parts):
        merged = [_resolved(p, definitions) for p in parts]
        node.pop("allOf")
        node["type"] = "object"
        node["required"] = sorted({key for part in merged for key in part.get("required", ())})
        node["properties"] = {k: copy.deepcopy(v) for part in merged for k, v in part["properties"].items()}
    if "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    for key, value in node.items():
        # A condition's branches name some properties of the object they narrow, not all of it.
        if key not in ("if", "then", "else"):
            _strict(value, definitions)


__all__ = ["ANSWERS", "ZOS_COMMANDS", "UnknownSchema", "family", "schema", "sources"]
