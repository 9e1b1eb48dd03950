"""The chain's side of the simulated grid: rent contracts, dedicated farms, and TFChain's refusal of a contract.

TFChain decides before ZOS whether a node contract may be created (tfchain pallet-smart-contract,
grid_contract.rs `_create_node_contract`): a node whose power is down or switched down, a rented node
when the deploying twin is not the renter, and a dedicated node (its farm is dedicated, or it has an
extra fee) with no rent contract are refused with `NodeNotAvailableToDeploy`. The Go client returns
the module error's name and the Go deployer wraps it (`failed to create contract on node N: failed to
create contract: NodeNotAvailableToDeploy`): that is what `refusal` says, so the product reads the
chain's own words. A rent contract in GracePeriod (its twin could not pay) moves the node's contracts to
grace with it (billing.rs handle_grace_rent_contract) but does not stop a new one being created: the
simulated grid reports the state (GET /contracts) and refuses nothing for it; the product closes the
node itself ("rent-grace", capacity.closures).

A simulated grid told no signing twin (`deployer_twin` None: MARKETPLACE_TWIN_ID unset) does not play the
chain's rent check, so an unset MARKETPLACE_TWIN_ID keeps today's behaviour end to end.

`ChainAdmin` is the simulated grid's administration of these (mixed into SimulatedGrid).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from sim.grid.records import SimNode, now

SCHEMA = """
CREATE TABLE IF NOT EXISTS sim_rent (
    node_id INTEGER PRIMARY KEY REFERENCES sim_node (node_id) ON DELETE CASCADE,
    twin_id INTEGER NOT NULL CHECK (twin_id > 0),
    contract_id INTEGER NOT NULL UNIQUE,
    state TEXT NOT NULL DEFAULT 'Created' CHECK (state IN ('Created', 'GracePeriod')),
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sim_farm (farm_id INTEGER PRIMARY KEY, dedicated INTEGER NOT NULL DEFAULT 0)
"""
RENT_STATES = ("Created", "GracePeriod")


@dataclass(frozen=True)
class Rent:
    twin_id: int
    contract_id: int
    state: str
    created_at: int


def rents(conn: sqlite3.Connection, node_ids: list[int]) -> dict[int, Rent]:
    if not node_ids:
        return {}
    rows = conn.execute(
        f"SELECT * FROM sim_rent WHERE node_id IN ({', '.join('?' * len(node_ids))})", tuple(node_ids)
    ).fetchall()
    return {r["node_id"]: Rent(r["twin_id"], r["contract_id"], r["state"], r["created_at"]) for r in rows}


def dedicated_farms(conn: sqlite3.Connection) -> set[int]:
    return {row[0] for row in conn.execute("SELECT farm_id FROM sim_farm WHERE dedicated = 1")}


def capacity_fields(node: SimNode, rent: Rent | None, dedicated: set[int]) -> dict:
    """The NodeCapacity fields the chain decides, as the proxy reports them (and the rent's state)."""
    return {
        "rented_by_twin_id": rent.twin_id if rent else None,
        "rent_contract_id": rent.contract_id if rent else None,
        "rent_state": rent.state if rent else "",
        "in_dedicated_farm": node.farm_id in dedicated,
    }


def refusal(node: SimNode, rent: Rent | None, dedicated: set[int], deployer_twin: int | None) -> str | None:
    """The chain's refusal of a node contract from `deployer_twin` on this node, in its words; None: allowed."""
    if deployer_twin is None:
        return None  # told no signing twin (MARKETPLACE_TWIN_ID unset): the chain's rent is not played, as before
    wrapped = f"failed to create contract on node {node.node_id}: failed to create contract: "
    if rent is not None:
        return wrapped + "NodeNotAvailableToDeploy" if rent.twin_id != deployer_twin else None
    if node.farm_id in dedicated:
        return wrapped + "NodeNotAvailableToDeploy"
    return None


class ChainAdmin:
    """Rent contracts and dedicated farms on the simulated grid (needs SimulatedGrid's storage)."""

    def rent(self, node_id: int, twin_id: int, *, state: str = "Created") -> int:
        """Give the node a rent contract of `twin_id` (replacing one there); its contract id."""
        if isinstance(twin_id, bool) or not isinstance(twin_id, int) or not 1 <= twin_id <= 2**32 - 1:
            raise ValueError(f"twin id must be a whole number from 1 (got {twin_id!r})")
        if state not in RENT_STATES:
            raise ValueError(f"a rent contract's state is one of {', '.join(RENT_STATES)} (got {state!r})")
        with self._transaction() as conn:
            self._node(conn, node_id)
            contract_id = self._next_deployment_id(conn)  # the chain's one contract counter
            conn.execute("DELETE FROM sim_rent WHERE node_id = ?", (node_id,))
            conn.execute(
                "INSERT INTO sim_rent (node_id, twin_id, contract_id, state, created_at) VALUES (?, ?, ?, ?, ?)",
                (node_id, twin_id, contract_id, state, now()),
            )
        return contract_id

    def rent_state(self, node_id: int, state: str) -> None:
        """Move the node's rent contract to Created or GracePeriod (its twin paid, or could not)."""
        if state not in RENT_STATES:
            raise ValueError(f"a rent contract's state is one of {', '.join(RENT_STATES)} (got {state!r})")
        with self._transaction() as conn:
            self._node(conn, node_id)
            if not conn.execute("UPDATE sim_rent SET state = ? WHERE node_id = ?", (state, node_id)).rowcount:
                raise ValueError(f"node {node_id} has no rent contract")

    def rent_end(self, node_id: int) -> None:
        """Cancel the node's rent contract (nothing happens to VMs already on it here)."""
        with self._transaction() as conn:
            self._node(conn, node_id)
            conn.execute("DELETE FROM sim_rent WHERE node_id = ?", (node_id,))

    def farm_dedicated(self, farm_id: int, dedicated: bool = True) -> None:
        """Set a farm's dedicated flag: its nodes then take contracts only under a rent contract."""
        if isinstance(farm_id, bool) or not isinstance(farm_id, int) or farm_id < 1:
            raise ValueError(f"farm id must be a whole number from 1 (got {farm_id!r})")
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO sim_farm (farm_id, dedicated) VALUES (?, ?) "
                "ON CONFLICT (farm_id) DO UPDATE SET dedicated = excluded.dedicated",
                (farm_id, int(bool(dedicated))),
            )
