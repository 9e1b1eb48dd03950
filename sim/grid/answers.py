"""What a simulated node answers about itself over RMB beyond its pools: its ZOS build.

`zos.system.version` is the node's own build (records.ZOS_BUILDS), so the dashboard's memory
groups by version are the simulated fleet's real ones. A node whose build nobody set answers
the call with an `err`, as a ZOS that does not know the command would: its version stays
unknown, and it learns in the fleet-wide group, never beside the nodes of a known build.
The stand-in rmb-peer (rmb_peer.py) reads it here, for Redis and for the RMB loopback (rmb_loopback.py).
"""

from __future__ import annotations

from dashboard.grid.types import NodeAway, RmbRefused, ZosVersion

SIM_ZINIT_VERSION = "v0.2.14"


class ZosRefused(RmbRefused):
    """ZOS itself answered the call with an error (a handler's `err.Error()`; rmb-sdk-go peer.go sends it with
    no code): the stand-in peer answers `{"code": 0, "message": <it>}`, the proxy a 500 (http.py)."""

    code = 0


class NodeAnswers:
    """Mixed into SimulatedGrid (store.py), whose `_transaction` and `_node` it reads."""

    def zos_version(self, node_id: int) -> ZosVersion:
        """The node's answer to `zos.system.version`; RmbRefused when it has no build to tell, and
        NodeAway when it is down or asleep (it answers nothing then)."""
        with self._transaction(write=False) as conn:  # type: ignore[attr-defined]
            node = self._node(conn, node_id)  # type: ignore[attr-defined]
        if node.status != "up":
            raise NodeAway(f"node {node_id} is {node.status}: it cannot answer for its version until it is up again")
        if not node.zos_build:
            raise RmbRefused(f"node {node_id} has no ZOS build set on the simulated grid: unknown command")
        return ZosVersion(zos=node.zos_build, zinit=SIM_ZINIT_VERSION)


def version_body(version: ZosVersion) -> dict:
    """The answer's body as the node sends it (`{"zos": ..., "zinit": ...}`)."""
    return {"zos": version.zos, "zinit": version.zinit}
