"""The one place a node's closure is decided: its row and the settings, handed to capacity.closures.

`capacity.node_closure` is pure; this module fills its `ClosureFacts` from a node (a model instance
or a values() row holding `CLOSURE_FIELDS`) and from the settings. The figures writer
(figures.services.figures) stores the answer on the node (`Node.closure`, `closure_detail`); the live
precheck, the deploy and the re-register plan ask here with the status they have just read.

A new closure reason that needs another input: add the Node column to CLOSURE_FIELDS and fill the
new ClosureFacts field in `closure_facts` (see capacity/closures.py for the rest).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from dashboard import capacity

# The Node columns the closure is decided from (figures.services.figures reads them with the figures' own).
CLOSURE_FIELDS = (
    "status",
    "withheld_reason",
    "withheld_until",
    "rented_by_twin_id",
    "rent_contract_id",
    "rent_state",
    "in_dedicated_farm",
    "extra_fee",
    "zos_cache_missing",
    "zos_cache_missing_source",
    "zos_cache_missing_at",
)


def closure_facts(values: Mapping[str, Any], *, live: Any = None) -> capacity.ClosureFacts:
    """The facts of one node row (`values` holds CLOSURE_FIELDS). `live`: a reading just taken
    (grid.types.NodeCapacity); its fields of the same names are fresher than the row's."""
    row = {name: getattr(live, name, values[name]) if live is not None else values[name] for name in CLOSURE_FIELDS}
    if live is not None and not row["rent_state"] and row["rent_contract_id"] == values["rent_contract_id"]:
        row["rent_state"] = values["rent_state"]  # a node page does not say it: kept while the contract is the same
    return capacity.ClosureFacts(
        status=row["status"],
        withheld=withheld_detail(row["withheld_reason"], row["withheld_until"]),
        marketplace_twins=frozenset(settings.MARKETPLACE_TWIN_ID),
        rented_by_twin_id=row["rented_by_twin_id"],
        rent_contract_id=row["rent_contract_id"],
        rent_state=row["rent_state"] or "",
        dedicated_by_chain=bool(row["in_dedicated_farm"]) or (row["extra_fee"] or 0) > 0,
        cache_missing=cache_missing_detail(
            row["zos_cache_missing"], row["zos_cache_missing_source"], row["zos_cache_missing_at"]
        ),
    )


def cache_missing_detail(words: str, source: str, at: datetime | None) -> str:
    """The no-cache closure's detail: ZOS's words, who heard them, when ("" while the node has its cache)."""
    if not words:
        return ""
    heard = f" from {source}" if source else ""
    when = f" at {at.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if at else ""
    return f'"{words}"{heard}{when}'[:200]


def withheld_detail(reason: str, until: datetime | None) -> str:
    """The withheld closure's detail: "disk swap, until 2026-12-01 18:00 UTC" ("" when not withheld)."""
    if not reason:
        return ""
    return f"{reason}, until {until.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if until else f"{reason}, until released"


def closure_of_values(values: Mapping[str, Any], *, live: Any = None) -> capacity.Closure | None:
    """The closure of a node row given as values (CLOSURE_FIELDS)."""
    return capacity.node_closure(closure_facts(values, live=live))


def closure_of(node: Any, *, live: Any = None) -> capacity.Closure | None:
    """The closure of a Node now (its row and the settings; `live`: a reading just taken of it)."""
    return closure_of_values({name: getattr(node, name) for name in CLOSURE_FIELDS}, live=live)
