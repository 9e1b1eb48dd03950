"""A node's rent contract read from the Grid Proxy: its state is on no node page, only on GET /contracts.

tfgrid-sdk-go grid-proxy: GET /contracts takes node_id, type ("rent") and state (ContractFilter);
the answer is a list of types.Contract ({"contract_id", "twin_id", "state", "created_at", "type",
"details": {"nodeId", "farm_name", "farm_id"}}). A node holds one rent contract at most (tfchain
NodeHasRentContract), kept by the proxy until it is Deleted, so in GracePeriod too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dashboard.grid.proxy.parse import parse_contracts
from dashboard.grid.types import LIVE_CONTRACT_STATES, Contract


def rent_contract_read(get_json: Callable[..., tuple[Any, str]], node_id: int, *, parsed: Callable) -> Contract | None:
    """One request under the client's deadlines and budget; a malformed answer fails as the client's do."""
    params = {"node_id": node_id, "type": "rent", "state": ",".join(LIVE_CONTRACT_STATES), "size": 2}
    payload, url = get_json("/contracts", params=params, node_id=None)
    found = [c for c in parsed(lambda p: parse_contracts(p, node_id=node_id), payload, url) if c.type == "rent"]
    return found[0] if found else None
