"""manage.py demo_fleet [--tour] [--reset] [--print-logins] [--force]: a demo fleet on the simulated grid, for `make run`.

Built once per database: the build is one transaction and leaves an audit event (DEMO_BUILT), and
every later run keeps the demo as the operator left it (a node registered, a farm onboarded, a
re-register, a deployment, the audit trail) and only prechecks again the nodes whose reading is older
than KEPT_READINGS_FRESH, and refreshes the logins.
`--reset` (`make demo-reset`) removes the demo's own nodes from the database and the simulated grid
and builds them again, on purpose. Nodes that are not the demo's are never touched. `--tour`
(`make run`) ends with the logins and a short tour of the special nodes, a command to try on each.

The failed deployments are real: they are produced by deploying through slice_deploy (without
the precheck) on the simulator, so their raw errors are what the simulated ZOS said.

Demo logins get passwords generated once (secrets.token_urlsafe) and kept in
VAR_DIR/demo-logins.json (mode 0600); no password is ever in the repository. The command
refuses to run with DEBUG off unless --force: demo logins must never reach production.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import CommandError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.capacity import PROFILES, GiB
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.deploy import slice_deploy, slices_deploy_all_free
from dashboard.deployments.services.deploy_delete import deployment_delete
from dashboard.figures.selectors.fleet import fleet_page
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.figures.services.figures import figures_refresh_all
from dashboard.figures.services.figures_settings import (
    figures_settings_differ,
    figures_settings_store,
    figures_settings_words,
)
from dashboard.figures.services.node_writes import figures_follow, node_writes
from dashboard.figures.services.snapshots import snapshot_take
from dashboard.grid.types import GridError
from dashboard.management.cli import ProductCommand
from dashboard.models import AuditEvent, Deployment, Node, Policy, PolicyVersion, Slice
from dashboard.nodes.services.registration import node_register_from_grid
from dashboard.policies.services.policy import policy_version_record
from sim.grid import SimulatedGrid

LOGINS_FILE = "demo-logins.json"
DEMO_LOGINS = (("admin", "admins"), ("support", "support"))

FARMS = {
    4242: ("mitana", "Egypt", "Cairo"),
    1: ("freefarm", "Belgium", "Lochristi"),
    58: ("ghent-coop", "Belgium", "Ghent"),
    317: ("kiwi-labs", "New Zealand", "Wellington"),
    902: ("andes-compute", "Chile", "Santiago"),
    1210: ("nile-edge", "Egypt", "Alexandria"),
}

# (cru, memory GiB, SSD GiB): machines as the grid lists them (a "32 GB" box shows 31 GiB).
MACHINES = (
    (2, 4, 120),
    (4, 8, 250),
    (4, 8, 465),
    (8, 16, 465),
    (8, 15, 931.5),
    (8, 31, 931.5),
    (12, 32, 931.5),
    (16, 62, 1863),
    (24, 64, 1863),
    (32, 125, 1863),
    (32, 128, 3726),
    (48, 251, 3726),
    (64, 256, 7452),
)


@dataclass(frozen=True)
class DemoNode:
    node_id: int
    farm_id: int
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...] | None = None
    status: str = "up"
    dedicated: bool = False
    per_vm_overhead_mru: int = 0
    policy: str | None = None  # None: the fleet default; "legacy": an old, stale catalog
    registered: bool = True
    rented: tuple[int, ...] = ()  # slice indices rented out in the catalog
    # Registered as if from the Grid Proxy, which does not report SSD pools.
    pools_known: bool = True
    # The twin holding a rent contract on the whole node (the chain's); BY_MARKETPLACE: the marketplace's.
    rented_by: int | None = None
    # The ZOS version the node tells (zos.system.version): the group its memory is learnt in.
    zos_version: str = ""


BY_MARKETPLACE = 0  # DemoNode.rented_by: whichever twin the marketplace deploys with (demo_marketplace_twin)
# The twin the demo's marketplace deploys with, unless MARKETPLACE_TWIN_ID names one (`make run` sets it to this).
DEMO_MARKETPLACE_TWIN = 7
# Farm 4242 is dedicated on the chain: its nodes take contracts only under a rent contract. The marketplace
# rents 1774 (and the farm's other nodes but one, which then needs our rent contract).
DEDICATED_FARM = 4242
NODE_1774 = DemoNode(
    1774, 4242, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), dedicated=True, policy="legacy", rented_by=BY_MARKETPLACE
)
# Rented by someone else's twin: with MARKETPLACE_TWIN_ID set it offers nothing, and the chain refuses us.
RENTED_NODE = DemoNode(3150, 1210, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), dedicated=True, rented_by=4711)
# Two 465 GiB SSDs nobody reported: carved for every plausible layout of its 930 GiB, every slice
# deploys (carved on the total alone, the sixth 151 GiB disk would fit in neither pool).
TWO_POOL_NODE = DemoNode(2310, 58, cru=8, mru=31 * GiB, sru=930 * GiB, pools=(465 * GiB, 465 * GiB), pools_known=False)
DOWN_NODE = DemoNode(3021, 317, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), status="down")
# Each VM really costs 1 GiB more than its size: only calibration can see it. Its ZOS version is its
# own, so what its refusals teach stays with its build (the others' version is unknown: one group).
OVERHEAD_NODE = DemoNode(
    2877, 902, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB, zos_version="v3.12.9-demo"
)
SAMPLED_NODE = DemoNode(1995, 1, cru=12, mru=32 * GiB, sru=int(931.5 * GiB), pools=(int(465.5 * GiB), 466 * GiB))
# Three SSDs of near-equal size, known to the catalog: ZOS puts zos-cache in the largest and each
# disk where most room is left, in a device order nobody reports; the carve holds in every order.
MULTI_POOL_NODE = DemoNode(2456, 58, cru=16, mru=62 * GiB, sru=1397 * GiB, pools=(465 * GiB, 466 * GiB, 466 * GiB))
# A legacy catalog whose slice count is right (3 either way) but whose disks are too big: 3 x 310 GiB
# on 931.5 GiB less the 20 GiB zos-cache. "3 -> 3" must not read as "matches the catalog".
OVERSIZED_NODE = DemoNode(2601, 317, cru=8, mru=16 * GiB, sru=int(931.5 * GiB), policy="legacy")
# Switched off by the farm's power manager: its free slices could be placed once it is woken.
STANDBY_NODE = DemoNode(2733, 902, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), status="standby")
# The audit event that says this database has its demo: a restart keeps it from then on.
DEMO_BUILT = "demo.built"
# A kept demo's nodes read again on a restart when their reading is older than this.
KEPT_READINGS_FRESH = timedelta(minutes=10)
SPECIAL = (
    NODE_1774,
    TWO_POOL_NODE,
    DOWN_NODE,
    OVERHEAD_NODE,
    SAMPLED_NODE,
    MULTI_POOL_NODE,
    OVERSIZED_NODE,
    STANDBY_NODE,
    RENTED_NODE,
)
# What `make run` names for a newcomer: the special node, what it shows, a command to try on it.
TOUR = (
    (
        NODE_1774,
        "a legacy 7-slice catalog (stale) holding one VM; the 7th slice is refused for memory; its farm is "
        "dedicated and the marketplace rents it (the node page shows the rent contract)",
        "precheck 1774",
    ),
    (
        OVERHEAD_NODE,
        "hidden memory use: each VM costs 1 GiB more than its size, which calibration finds",
        "calibrate 2877",
    ),
    (
        TWO_POOL_NODE,
        "two 465 GiB SSDs the Grid Proxy does not report: carved for every plausible layout, all 6 slices deploy; "
        "its precheck then asked the node for its pools",
        "precheck 2310",
    ),
    (MULTI_POOL_NODE, "three SSDs known to the catalog: the carve holds in every device order", "precheck 2456"),
    (
        OVERSIZED_NODE,
        "3 -> 3 slices, yet its legacy disks are too big for the SSD",
        "node_reregister 2601 --dry-run --wait",
    ),
    (STANDBY_NODE, "on standby: its free slices wait on a wake, not a repair", "precheck 2733"),
    (DOWN_NODE, "down: nothing is placeable on it until it is back", "precheck 3021"),
    (
        RENTED_NODE,
        "rented by twin 4711: offers nothing to the marketplace (MARKETPLACE_TWIN_ID), the chain refuses it",
        "precheck 3150",
    ),
)
# Nodes on the simulated grid. More than a page of the fleet table (50), so a newcomer sees paging.
# The ids are drawn by one seeded sample whose first draws do not depend on its length, so growing
# the fleet adds nodes and leaves the first fifty as they were.
FLEET_SIZE = 90


def demo_nodes() -> list[DemoNode]:
    """The same nodes every time (a fixed seed), the special ones included."""
    rng = random.Random(1774)
    taken = {n.node_id for n in SPECIAL}
    ids = [i for i in rng.sample(range(110, 4800), FLEET_SIZE + len(SPECIAL)) if i not in taken]
    nodes = list(SPECIAL)
    farms = list(FARMS)
    for position, node_id in enumerate(ids[: FLEET_SIZE - len(SPECIAL)]):
        cru, mem, ssd = MACHINES[position % len(MACHINES)]
        sru = int(ssd * GiB)
        pools = None
        if position % 9 == 4 and ssd >= 465:
            pools = (sru // 2, sru - sru // 2)  # two SSDs of half the size
        status = "down" if position % 13 == 7 else "standby" if position % 11 == 5 else "up"
        nodes.append(
            DemoNode(
                node_id,
                farms[position % len(farms)],
                cru=cru,
                mru=mem * GiB,
                sru=sru,
                pools=pools,
                status=status,
                dedicated=position % 10 == 3,
                policy="legacy" if position % 8 == 2 else None,
                registered=position % 15 != 14,  # a few only on the grid, to register from it
                rented=(0,) if position % 6 == 1 else (0, 1) if position % 17 == 3 else (),
            )
        )
    return nodes


class Command(ProductCommand):
    help = (
        "Build (once) a demo fleet of about ninety nodes on the simulated grid and register most of them: node 1774 "
        "with its legacy 7-slice catalog and one VM, stale and current catalogs, rented slices, failed "
        "deployments with real causes, capacity samples for calibration. Creates the demo logins admin and "
        "support with generated passwords kept in VAR_DIR/demo-logins.json. Safe to run again. "
        "Refuses to run with DEBUG off unless --force."
    )

    def add_arguments(self, parser):
        parser.add_argument("--print-logins", action="store_true", help="only print the demo logins")
        parser.add_argument(
            "--reset",
            action="store_true",
            help="remove the demo's nodes (and what was done to them) and build the demo again",
        )
        parser.add_argument("--tour", action="store_true", help="end with the logins and a tour of the special nodes")
        parser.add_argument(
            "--force", action="store_true", help="run even with DEBUG off (never on a production database)"
        )

    def handle(self, *args, print_logins, force, reset=False, tour=False, **options):
        if not settings.DEBUG and not force:
            raise CommandError(
                "DEBUG is off: refusing to create demo nodes and demo logins, which must never reach production "
                "(use --force only on a throwaway machine)"
            )
        logins_path = Path(settings.VAR_DIR) / LOGINS_FILE
        if print_logins:
            self._print_logins(logins_path)
            return
        if settings.GRID_BACKEND != "simulator":
            raise CommandError(
                f"GRID_BACKEND is {settings.GRID_BACKEND!r}: the demo fleet lives on the simulated grid; "
                "run it with GRID_BACKEND=simulator"
            )
        started = time.monotonic()
        grid = SimulatedGrid(settings.SIMGRID_PATH, deployer_twin=demo_marketplace_twin())
        nodes = demo_nodes()
        try:
            kept = self._keep_or_build(grid, nodes, reset=reset)
            # Which nodes are registered as the database says, not as the demo meant: the fleet page's count.
            registered = set(Node.objects.values_list("grid_id", flat=True))
            self.stdout.write(unregistered_words([replace(n, registered=n.node_id in registered) for n in nodes]))
            # Kept figures computed under other settings (MARKETPLACE_TWIN_ID changed between runs) are stored
            # again under this run's, and the run's settings recorded with them (figures.services.figures_settings).
            differ = figures_settings_differ() if kept else None
            if differ:
                figures_refresh_all()
                self.stdout.write(
                    f"settings changed since the last run: every node's figures stored again under {figures_settings_words()}"
                )
            figures_settings_store()
            # A restart soon after the last run reads only what has aged since: it starts in seconds.
            checked = _demo_precheck(grid, nodes, read_before=timezone.now() - KEPT_READINGS_FRESH if kept else None)
            # The first point of capacity over time; the beat adds one every SNAPSHOT_EVERY seconds.
            snapshot_take(trigger="demo")
        except GridError as exc:
            raise CommandError(f"simulated grid: {exc}") from None
        _demo_users(logins_path)
        self.stdout.write(f"prechecked {checked} nodes; logins in {logins_path} ({time.monotonic() - started:.1f}s)")
        # The tiles' own selector: the counts printed at start are the fleet page's.
        self.stdout.write(fleet_page(per_page=1).totals.tiles_words)
        if tour:
            self._print_logins(logins_path)
            self.stdout.write(tour_words())

    def _keep_or_build(self, grid: SimulatedGrid, nodes: list[DemoNode], *, reset: bool) -> bool:
        """Keep the demo as it was left (True), or build it anew in one transaction (False)."""
        kept = _demo_built() and not reset
        if kept:
            self.stdout.write(
                f"demo fleet kept as you left it: {len(nodes)} nodes on the simulated grid "
                "(make demo-reset builds it anew, and forgets what was done to it)"
            )
            missing = sorted({n.node_id for n in nodes} - set(grid.node_ids()))
            if missing:
                self.stdout.write(f"  not on the simulated grid any more: {len(missing)} of its nodes")
        else:
            with transaction.atomic():
                _demo_remove(grid, nodes)
                _demo_build(grid, nodes)
                audit_record(source="command", action=DEMO_BUILT, message=f"demo fleet built: {len(nodes)} nodes")
            self.stdout.write(
                f"demo fleet {'rebuilt' if reset else 'built'}: {len(nodes)} nodes on the simulated grid "
                f"at {settings.SIMGRID_PATH}"
            )
        return kept

    def _print_logins(self, path: Path) -> None:
        passwords = _read_logins(path)
        if passwords is None:
            raise CommandError(f"no demo logins yet ({path} is missing); run manage.py demo_fleet first")
        for username, group in DEMO_LOGINS:
            self.stdout.write(f"Login: {username} / {passwords[username]}  ({group})")


# --- building ----------------------------------------------------------------------------


def unregistered_words(nodes: list[DemoNode]) -> str:
    """Why the fleet page shows fewer nodes than the grid has: which ones, and what they are for."""
    left = sorted(n.node_id for n in nodes if not n.registered)
    if not left:
        return f"all {len(nodes)} registered"
    ids = ", ".join(str(i) for i in left)
    first = left[0]
    return (
        f"{len(nodes) - len(left)} registered (the fleet page shows these); {len(left)} left on the grid unregistered on "
        f"purpose, so you can register one from what the grid reports: {ids} "
        f"(e.g. .venv/bin/python manage.py node_register {first})"
    )


def tour_words() -> str:
    """The special nodes, what each shows and a command to try on it, for the console."""
    lines = ["Tour: the demo's special nodes (their pages: /nodes/ID/), a command to try on each:"]
    for spec, shows, command in TOUR:
        lines.append(f"  {spec.node_id:>5}  {shows}")
        lines.append(f"         .venv/bin/python manage.py {command}")
    return "\n".join(lines)


def _demo_built() -> bool:
    """This database has its demo: built once (or by a version before the mark, node 1774 registered)."""
    return (
        AuditEvent.objects.filter(action=DEMO_BUILT).exists() or Node.objects.filter(grid_id=NODE_1774.node_id).exists()
    )


def _demo_remove(grid: SimulatedGrid, nodes: list[DemoNode]) -> None:
    ids = [n.node_id for n in nodes]
    AuditEvent.objects.filter(node__grid_id__in=ids).delete()
    Deployment.objects.filter(node__grid_id__in=ids).delete()  # protected: they go before their nodes
    Node.objects.filter(grid_id__in=ids).delete()
    farm_totals_refresh_on_commit()
    on_grid = set(grid.node_ids())
    for node_id in ids:
        if node_id in on_grid:
            grid.remove_node(node_id)


def demo_marketplace_twin() -> int:
    """The twin the demo's marketplace rents and deploys with: MARKETPLACE_TWIN_ID's first, or the demo's."""
    return settings.MARKETPLACE_TWIN_ID[0] if settings.MARKETPLACE_TWIN_ID else DEMO_MARKETPLACE_TWIN


def _demo_build(grid: SimulatedGrid, nodes: list[DemoNode]) -> None:
    _fleet_policy()
    grid.farm_dedicated(DEDICATED_FARM)
    ours = demo_marketplace_twin()
    # The dedicated farm's other nodes are rented by the marketplace too, but its first one: it needs our rent.
    unrented = next(n.node_id for n in nodes if n.farm_id == DEDICATED_FARM and n not in SPECIAL)
    for spec in nodes:
        farm_name, country, city = FARMS[spec.farm_id]
        grid.add_node(
            spec.node_id,
            cru=spec.cru,
            mru=spec.mru,
            sru=spec.sru,
            pools=list(spec.pools) if spec.pools else None,
            farm_id=spec.farm_id,
            farm_name=farm_name,
            twin_id=spec.node_id + 7000,
            status=spec.status,
            dedicated=spec.dedicated,
            per_vm_overhead_mru=spec.per_vm_overhead_mru,
            country=country,
            city=city,
        )
        if spec.rented_by is not None and spec.rented_by > 0:
            grid.rent(spec.node_id, spec.rented_by)
        elif spec.rented_by is not None or (spec.farm_id == DEDICATED_FARM and spec.node_id != unrented):
            grid.rent(spec.node_id, ours)  # rented_by=BY_MARKETPLACE: by the marketplace, whichever twin that is
    registered = {}
    for spec in nodes:
        if not spec.registered:
            continue
        live = grid.node(spec.node_id)
        # Most demo nodes' pools are reported (one SSD of the whole total unless told); some are
        # registered as from the Grid Proxy alone, which reports none. Not asked over the simulated grid's
        # RMB: the spec says each node's pools and build.
        pools = tuple(spec.pools or (spec.sru,)) if spec.pools_known else None
        registered[spec.node_id] = node_register_from_grid(
            live=replace(live, pools_sru=pools), policy_name=spec.policy, source="command", ask_rmb=False
        )
        if spec.zos_version:
            Node.objects.filter(pk=registered[spec.node_id].pk).update(
                zos_version=spec.zos_version, zos_version_source="simulated"
            )
            registered[spec.node_id].zos_version = spec.zos_version
        if spec.rented:
            with node_writes([registered[spec.node_id].pk]):
                Slice.objects.filter(node=registered[spec.node_id], index__in=spec.rented).update(
                    state=Slice.State.RENTED, rented_by_twin_id=spec.node_id + 20000
                )
    _demo_deployments(grid, registered)


def _fleet_policy() -> None:
    if Policy.objects.filter(scope=Policy.Scope.FLEET).exclude(name="fleet-default").exists():
        return  # someone chose their own fleet default; the demo does not replace it
    with transaction.atomic():
        row, created = Policy.objects.get_or_create(
            name="fleet-default", defaults={"scope": Policy.Scope.FLEET, **Policy.parameters_from(PROFILES["zos"])}
        )
        if created:
            policy_version_record(row, action=PolicyVersion.Action.CREATED, source="command")
            figures_follow(Node.objects.values_list("pk", flat=True))  # nodes registered before it


def _demo_deployments(grid: SimulatedGrid, registered: dict[int, Node]) -> None:
    """Real deploys on the simulator, so the failures carry what ZOS itself said."""
    node_1774 = registered[NODE_1774.node_id]
    slice_deploy(node=node_1774, slice_index=0, grid=grid, source="command")
    # Fill 1774 the way its legacy catalog invites, then try the seventh slice: the precheck refuses
    # it (memory, with the numbers); sent anyway, ZOS refuses it too. The filler VMs are then removed:
    # what remains is one VM, both records, and a calibration series at six VM counts.
    fillers = [
        slice_deploy(node=node_1774, slice_index=i, precheck=False, grid=grid, source="command") for i in range(1, 6)
    ]
    slice_deploy(node=node_1774, slice_index=6, grid=grid, source="command")
    slice_deploy(node=node_1774, slice_index=6, precheck=False, grid=grid, source="command")
    for deployment in fillers:
        if deployment.state == Deployment.State.DEPLOYED:
            deployment_delete(deployment=deployment, grid=grid, source="command")

    # The precheck passes each slice; ZOS refuses the last ones of the node with hidden memory use.
    for spec in (TWO_POOL_NODE, OVERHEAD_NODE):
        slices_deploy_all_free(node=registered[spec.node_id], grid=grid, source="command")

    slice_deploy(node=registered[DOWN_NODE.node_id], slice_index=0, precheck=False, grid=grid, source="command")

    # The legacy catalog of disks too big, sent past the precheck: ZOS refuses the third on disk.
    for index in range(3):
        slice_deploy(
            node=registered[OVERSIZED_NODE.node_id], slice_index=index, precheck=False, grid=grid, source="command"
        )

    for index in range(3):  # a clean series for calibration to compare with
        slice_deploy(node=registered[SAMPLED_NODE.node_id], slice_index=index, grid=grid, source="command")

    # Half the multi-pool node's catalog in use: the rest is still placeable in every device order.
    multi = registered[MULTI_POOL_NODE.node_id]
    for index in range(multi.slices.count() // 2):
        slice_deploy(node=multi, slice_index=index, grid=grid, source="command")


def _demo_precheck(grid: SimulatedGrid, nodes: list[DemoNode], *, read_before: datetime | None = None) -> int:
    # Down and standby nodes too: the overview then shows their free slices as phantom, as it should.
    # The demo's nodes registered now, as the operator left them (one removed from the grid is skipped).
    checked = 0
    demo = Node.objects.filter(grid_id__in=[n.node_id for n in nodes])
    if read_before is not None:
        demo = demo.filter(Q(seen_at__isnull=True) | Q(seen_at__lt=read_before))
    for node in demo:
        try:
            precheck_run(node=node, grid=grid)
        except GridError:
            continue
        checked += 1
    return checked


# --- logins ------------------------------------------------------------------------------


def _read_logins(path: Path) -> dict[str, str] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path} is unreadable ({exc}); delete it and run manage.py demo_fleet again") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(u), str) and data.get(u) for u, _ in DEMO_LOGINS):
        raise CommandError(f"{path} does not hold the demo logins; delete it and run manage.py demo_fleet again")
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)  # someone widened it: passwords are for this user only
    return data


def _write_logins(path: Path, passwords: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(passwords, out, indent=2)
    os.chmod(partial, 0o600)
    os.replace(partial, path)


def _demo_roles() -> None:
    """The two groups with the permissions their migrations give them, if a group is missing or empty
    (a flushed database): every page asks for a permission, so an empty group reads nothing."""
    names = {group_name for _, group_name in DEMO_LOGINS}
    if Group.objects.filter(name__in=names, permissions__isnull=False).distinct().count() == len(names):
        return
    from django.apps import apps

    from dashboard.access.roles import roles_restore

    roles_restore(apps)


def _demo_users(path: Path) -> None:
    passwords = _read_logins(path)
    if passwords is None:
        passwords = {username: secrets.token_urlsafe(12) for username, _ in DEMO_LOGINS}
        _write_logins(path, passwords)
    _demo_roles()
    for username, group_name in DEMO_LOGINS:
        group, _ = Group.objects.get_or_create(name=group_name)
        user, _ = User.objects.get_or_create(username=username)
        is_admin = username == "admin"
        changed = user.is_staff != is_admin or user.is_superuser != is_admin or not user.is_active
        user.is_staff = user.is_superuser = is_admin
        user.is_active = True
        if not user.check_password(passwords[username]):
            user.set_password(passwords[username])
            changed = True
        if changed:
            user.save()
        user.groups.add(group)
