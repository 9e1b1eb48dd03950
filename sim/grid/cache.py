"""The simulated node's zos-cache as the grid keeps it: storaged's periodic check, run on demand.

A real node's quota starts at 5 GiB and `checkAndResizeCache` moves it every 5 minutes (storaged.py);
the simulated grid keeps each node's quota in its row (`sim_node.cache_sru`, schema 5), so every process
and both of its RMB faces (the stand-in rmb-peer and its loopback, rmb_loopback.py) answer what it has grown
to. A stored node starts at 20 GiB, the figure the Grid Proxy assumes (as before schema 5); one check
with little in it shrinks it to ZOS's first 5 GiB (below 20% full).

A node can also lose its zos-cache subvolume (zos#2043: about 75 main-net nodes at once; schema 7,
`sim_node.cache_missing`). ZOS then refuses everything as it does (zos provisiond getNodeReserved ->
zosbase storage.go path(): `subvolume 'zos-cache' not found: file does not exist`): every deploy with
`failed to satisfy required capacity: failed to get available memory: <it>` (primitives/statistics.go),
`zos.statistics.get` with an RMB `err` of those words, and so the proxy's /statistics with its 500
`failed to get get node statistics from relay: <it>` (http.py). `cache_lose(node, missing=False)`
gives it back (the reboot that recreates it).

`CacheAdmin` is mixed into SimulatedGrid (it uses the grid's transaction and row readers).
"""

from __future__ import annotations

import sqlite3

from sim.grid.machine import ZosMachine

# Before schema 5 a stored node's cache was taken as grown to 20 GiB: it keeps that quota.
CACHE_COLUMN = "cache_sru INTEGER NOT NULL DEFAULT 21474836480 CHECK (cache_sru > 0)"
# Schema 7: the node lost its zos-cache subvolume (1) or has it (0).
CACHE_MISSING_COLUMN = "cache_missing INTEGER NOT NULL DEFAULT 0"


def cache_upgrade(conn: sqlite3.Connection, version: int) -> None:
    """A file of schema 1 to 4 gets the quota's column, one of 1 to 6 the missing flag (a new file has both)."""
    if 1 <= version < 5:
        conn.execute(f"ALTER TABLE sim_node ADD COLUMN {CACHE_COLUMN}")
    if 1 <= version < 7:
        conn.execute(f"ALTER TABLE sim_node ADD COLUMN {CACHE_MISSING_COLUMN}")


class CacheAdmin:
    def cache_check(self, node_id: int, in_use: int) -> int:
        """storaged's `checkAndResizeCache` on the node with `in_use` bytes in its zos-cache: the new
        quota, kept in the node's row."""
        if isinstance(in_use, bool) or not isinstance(in_use, int) or in_use < 0:
            raise ValueError(f"what the zos-cache holds must be a whole number of bytes, zero or more (got {in_use!r})")
        with self._transaction() as conn:
            node = self._node(conn, node_id)
            size = ZosMachine(node, self._vms(conn, node.node_id)).cache_check(in_use)
            conn.execute("UPDATE sim_node SET cache_sru = ? WHERE node_id = ?", (size, node.node_id))
            return size

    def cache_lose(self, node_id: int, *, missing: bool = True) -> None:
        """The node loses its zos-cache subvolume (`missing`), or gets it back (a reboot recreated it)."""
        if not isinstance(missing, bool):
            raise ValueError(f"missing must be true or false (got {missing!r})")
        with self._transaction() as conn:
            node = self._node(conn, node_id)
            conn.execute("UPDATE sim_node SET cache_missing = ? WHERE node_id = ?", (int(missing), node.node_id))

    def zos_cache(self, node_id: int) -> tuple[int, int]:
        """(the zos-cache's quota now, the pool holding it) of the node."""
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            return node.cache_sru, node.cache_pool
