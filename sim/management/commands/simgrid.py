"""manage.py simgrid: run the simulated ZOS grid (settings.SIMGRID_PATH).

simgrid add-node NODE_ID --cru 8 --mru 31GiB --sru 931.5GiB [--farm-id N] [--farm-name X]
                 [--pools 465GiB,465GiB] [--per-vm-overhead-mru SIZE] [--status up|down|standby] [--replace]
                 [--rented-by TWIN] [--farm-dedicated]
simgrid rent NODE_ID TWIN [--grace]     a rent contract of TWIN on the node (--grace: in its grace period)
simgrid rent-end NODE_ID                the node's rent contract cancelled
simgrid farm FARM_ID --dedicated|--shared   the farm's dedicated flag (the chain's)
simgrid list [--json]
simgrid status NODE_ID up|down|standby
simgrid remove-node NODE_ID
simgrid reset
simgrid serve [--host 127.0.0.1] [--port 8081]
simgrid rmb-peer --redis URL [--delay SECONDS] [--error-rate 0.0-1.0]
                                        a stand-in rmb-peer: the simulated nodes answer RMB over that Redis
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import CommandError

from dashboard.capacity import SizeError, format_size, parse_size
from dashboard.grid.types import NODE_STATUSES, GridError
from dashboard.management.cli import ProductCommand, refused, usage_error
from sim.grid import ZOS_BUILDS, SimulatedGrid, serve_simulator


class Command(ProductCommand):
    help = (
        "Run the simulated ZOS grid the dashboard uses with GRID_BACKEND=simulator: add nodes, list them, "
        "change a node's status, reset it, or serve it on the Grid Proxy's HTTP paths."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        _add_node_arguments(actions.add_parser("add-node", help="put a node on the simulated grid"))
        _chain_arguments(actions)
        _grid_state_arguments(actions)
        _serving_arguments(actions)

    def handle(self, *args, action, **options):
        grid = SimulatedGrid(settings.SIMGRID_PATH)
        try:
            getattr(self, "_" + action.replace("-", "_"))(grid, **options)
        except ValueError as exc:
            raise usage_error(str(exc)) from None
        except GridError as exc:
            raise refused(str(exc)) from None

    def _add_node(self, grid: SimulatedGrid, *, node_id, cru, mru, sru, pools, per_vm_overhead_mru, **options) -> None:
        total_sru = _size(sru, "--sru")
        node = grid.add_node(
            node_id,
            cru=cru,
            mru=_size(mru, "--mru"),
            sru=total_sru,
            pools=[_size(p, "--pools") for p in pools.split(",")] if pools else None,
            farm_id=options["farm_id"],
            farm_name=options["farm_name"],
            twin_id=options["twin_id"],
            status=options["status"],
            dedicated=options["dedicated"],
            per_vm_overhead_mru=_size(per_vm_overhead_mru, "--per-vm-overhead-mru"),
            country=options["country"],
            city=options["city"],
            replace=options["replace"],
            zos_build=options["zos_build"],
            light=options["light"],
            gpus=options["gpus"],
        )
        if options["farm_dedicated"]:
            grid.farm_dedicated(node.farm_id, True)
        if options["rented_by"] is not None:
            grid.rent(node.node_id, options["rented_by"])
        pool_words = ", ".join(format_size(p) for p in grid.pool_sizes(node.node_id))
        self.stdout.write(
            f"node {node.node_id} on the simulated grid: {node.total.cru} cores, {format_size(node.total.mru)} memory, "
            f"{format_size(node.total.sru)} SSD (pools {pool_words}), farm {node.farm_id}, {node.status}"
        )

    def _list(self, grid: SimulatedGrid, *, as_json, **options) -> None:
        rows = []
        page = 1
        while True:
            nodes = grid.nodes(page=page, size=500).nodes
            rows.extend(nodes)
            if len(nodes) < 500:
                break
            page += 1
        if as_json:
            self.stdout.write(json.dumps([_node_dict(grid, n) for n in rows], indent=2))
            return
        if not rows:
            self.stdout.write(f"the simulated grid at {grid.path} has no nodes")
            return
        self.stdout.write(
            f"{'node':>6}  {'farm':>6}  {'status':<8}{'cores':>6}  {'memory used / total':>24}  {'SSD used / total':>26}  vms"
        )
        for n in rows:
            self.stdout.write(
                f"{n.node_id:>6}  {n.farm_id:>6}  {n.status:<8}{n.total.cru:>6}  "
                f"{format_size(n.used.mru) + ' / ' + format_size(n.total.mru):>24}  "
                f"{format_size(n.used.sru) + ' / ' + format_size(n.total.sru):>26}  {len(grid.vms(n.node_id))}"
            )

    def _rent(self, grid: SimulatedGrid, *, node_id, twin_id, grace, **options) -> None:
        contract_id = grid.rent(node_id, twin_id, state="GracePeriod" if grace else "Created")
        self.stdout.write(
            f"node {node_id} is rented by twin {twin_id} (rent contract {contract_id}{', in grace' if grace else ''})"
        )

    def _rent_end(self, grid: SimulatedGrid, *, node_id, **options) -> None:
        grid.rent_end(node_id)
        self.stdout.write(f"node {node_id} has no rent contract")

    def _farm(self, grid: SimulatedGrid, *, farm_id, dedicated, ips, **options) -> None:
        if dedicated is None and ips is None:
            raise ValueError("say --dedicated, --shared or --ips N")
        if dedicated is not None:
            grid.farm_dedicated(farm_id, dedicated)
            self.stdout.write(f"farm {farm_id} is {'dedicated' if dedicated else 'shared'}")
        if ips is not None:
            pool = grid.farm_ips_set(farm_id, ips)
            self.stdout.write(f"farm {farm_id} has {len(pool.ips)} public IPv4s, {pool.free} free")

    def _status(self, grid: SimulatedGrid, *, node_id, state, **options) -> None:
        grid.set_status(node_id, state)
        self.stdout.write(f"node {node_id} is now {state}")

    def _cache_check(self, grid: SimulatedGrid, *, node_id, in_use, **options) -> None:
        size = grid.cache_check(node_id, _size(in_use, "SIZE"))
        self.stdout.write(f"node {node_id}: its zos-cache's quota is now {format_size(size)}")

    def _cache_lose(self, grid: SimulatedGrid, *, node_id, back, **options) -> None:
        grid.cache_lose(node_id, missing=not back)
        self.stdout.write(
            f"node {node_id} has its zos-cache again"
            if back
            else f"node {node_id} lost its zos-cache: ZOS refuses every workload and its statistics (zos#2043)"
        )

    def _remove_node(self, grid: SimulatedGrid, *, node_id, **options) -> None:
        grid.remove_node(node_id)
        self.stdout.write(f"node {node_id} is off the simulated grid")

    def _reset(self, grid: SimulatedGrid, **options) -> None:
        count = len(grid.node_ids())
        grid.reset()
        self.stdout.write(f"the simulated grid at {grid.path} is empty ({count} nodes removed)")

    def _serve(self, grid: SimulatedGrid, *, host, port, **options) -> None:
        try:
            server = serve_simulator(grid, host=host, port=port)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        bound_host, bound_port = server.server_address[:2]
        self.stdout.write(
            f"Simulated Grid Proxy on http://{bound_host}:{bound_port}/ serving {grid.path} "
            f"(GRID_BACKEND=gridproxy GRID_PROXY_URL=http://{bound_host}:{bound_port}); Ctrl-C stops it"
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()

    def _rmb_peer(self, grid: SimulatedGrid, *, redis, delay, error_rate, seed, **options) -> None:
        from dashboard.grid.text import url_redacted
        from sim.grid.rmb_peer import StandInPeer

        peer = StandInPeer(grid, redis, delay=delay, error_rate=error_rate, seed=seed)
        self.stdout.write(
            f"Stand-in rmb-peer on {url_redacted(redis)} answering for {grid.path} (delay {delay:g} s, "
            f"error rate {error_rate:g}; RMB_REDIS_URL={url_redacted(redis)}); Ctrl-C stops it"
        )
        self.stdout.flush()
        try:
            peer.serve_forever()
        except KeyboardInterrupt:
            pass
        except redis_errors() as exc:
            raise refused(f"the stand-in peer lost its Redis ({url_redacted(redis)}): {exc}") from None
        self.stdout.write(f"the stand-in peer sent {peer.served} answer(s)")


def redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError,)


def _size(text: str, what: str) -> int:
    try:
        return parse_size(text, what=what)
    except SizeError as exc:
        raise usage_error(str(exc)) from None


def _node_dict(grid: SimulatedGrid, node) -> dict:
    vms = grid.vms(node.node_id)
    return {
        "node_id": node.node_id,
        "farm_id": node.farm_id,
        "farm_name": node.farm_name,
        "status": node.status,
        "total": node.total.as_dict(),
        "used": node.used.as_dict(),
        "pools_sru": list(grid.pool_sizes(node.node_id)),
        "zos_cache_sru": grid.zos_cache(node.node_id)[0],
        "vms": [
            {
                "workload_id": vm.workload_id,
                "name": vm.name,
                "cru": vm.cru,
                "mru": vm.mru,
                "sru": vm.sru,
                "rootfs": vm.rootfs,
            }
            for vm in vms
        ],
    }


def _add_node_arguments(add) -> None:
    """add-node: the node's capacity, pools, build, farm and what it carries."""
    add.add_argument("node_id", type=int, metavar="NODE_ID")
    add.add_argument("--cru", type=int, required=True, help="CPU cores")
    add.add_argument("--mru", required=True, help="memory, e.g. 31GiB")
    add.add_argument("--sru", required=True, help="SSD total, e.g. 931.5GiB")
    add.add_argument("--farm-id", type=int, default=1)
    add.add_argument("--farm-name", default="")
    add.add_argument("--twin-id", type=int, default=None)
    add.add_argument(
        "--pools", default=None, help="SSD pool sizes in order, e.g. 465GiB,465GiB (default: one pool of --sru)"
    )
    add.add_argument(
        "--per-vm-overhead-mru",
        default="0",
        help="hidden memory each VM really uses on top (this node's own, beyond its build's), e.g. 512MiB",
    )
    add.add_argument(
        "--zos-build",
        default="",
        choices=["", *ZOS_BUILDS],
        help="the ZOS version it runs: ZOS's own use and each VM's overhead come from it (default: none)",
    )
    add.add_argument("--status", choices=NODE_STATUSES, default="up")
    add.add_argument("--dedicated", action="store_true")
    add.add_argument("--country", default="")
    add.add_argument("--city", default="")
    add.add_argument("--replace", action="store_true", help="overwrite an existing node (its VMs are dropped)")
    add.add_argument("--rented-by", type=int, default=None, metavar="TWIN", help="a rent contract of this twin")
    add.add_argument(
        "--farm-dedicated", action="store_true", help="its farm is dedicated: contracts only under a rent contract"
    )
    add.add_argument("--light", action="store_true", help="ZOS-light: its features lack ipv4, it takes no public IP")
    add.add_argument("--gpus", type=int, default=0, help="GPUs the node carries (used only under a rent)")


def _chain_arguments(actions) -> None:
    """rent, rent-end and farm: what the chain holds about a node's rent and its farm."""
    rent = actions.add_parser("rent", help="give a node a rent contract (the chain's)")
    rent.add_argument("node_id", type=int, metavar="NODE_ID")
    rent.add_argument("twin_id", type=int, metavar="TWIN")
    rent.add_argument("--grace", action="store_true", help="the rent contract is in its grace period (unpaid)")
    rent_end = actions.add_parser("rent-end", help="cancel a node's rent contract")
    rent_end.add_argument("node_id", type=int, metavar="NODE_ID")
    farm = actions.add_parser("farm", help="set a farm's dedicated flag or its public IPv4s (the chain's)")
    farm.add_argument("farm_id", type=int, metavar="FARM_ID")
    farm.add_argument("--ips", type=int, default=None, metavar="N", help="the farm's public IPv4s (taken ones stay)")
    flag = farm.add_mutually_exclusive_group()
    flag.add_argument("--dedicated", dest="dedicated", action="store_true")
    flag.add_argument("--shared", dest="dedicated", action="store_false")
    farm.set_defaults(dedicated=None)


def _grid_state_arguments(actions) -> None:
    """list, status, cache-check, cache-lose, remove-node and reset: the simulated nodes themselves."""
    listing = actions.add_parser("list", help="list the simulated nodes and what they carry")
    listing.add_argument("--json", action="store_true", dest="as_json")

    status = actions.add_parser("status", help="set a node up, down or on standby")
    status.add_argument("node_id", type=int, metavar="NODE_ID")
    status.add_argument("state", choices=NODE_STATUSES, metavar="STATE", help="up, down or standby")

    cache = actions.add_parser(
        "cache-check", help="run storaged's zos-cache check on a node with this much in its cache (grows at 60%%)"
    )
    cache.add_argument("node_id", type=int, metavar="NODE_ID")
    cache.add_argument("in_use", metavar="SIZE", help="what the cache holds now, e.g. 9GiB")

    lose = actions.add_parser(
        "cache-lose", help="the node loses its zos-cache subvolume (ZOS then refuses everything), or --back gets it"
    )
    lose.add_argument("node_id", type=int, metavar="NODE_ID")
    lose.add_argument("--back", action="store_true", help="the cache is back (the reboot that recreates it)")

    remove = actions.add_parser("remove-node", help="take a node (and its VMs) off the simulated grid")
    remove.add_argument("node_id", type=int, metavar="NODE_ID")

    actions.add_parser("reset", help="remove every node and VM")


def _serving_arguments(actions) -> None:
    """serve and rmb-peer: the two doors the dashboard reads the simulated grid through."""
    serve = actions.add_parser("serve", help="serve the simulated grid on the Grid Proxy's HTTP paths")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8081)

    peer = actions.add_parser(
        "rmb-peer", help="answer RMB calls over Redis as the simulated nodes (rmb-peer's protocol)"
    )
    peer.add_argument("--redis", required=True, help="the Redis the dashboard's RMB_REDIS_URL names")
    peer.add_argument("--delay", type=float, default=0.0, help="seconds every answer is held back")
    peer.add_argument("--error-rate", type=float, default=0.0, help="share of calls answered with an err (0 to 1)")
    peer.add_argument("--seed", type=int, default=None, help="seed of the error draws")
