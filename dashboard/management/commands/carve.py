"""manage.py carve: what would this node's catalog be? A what-if that touches no database.

    manage.py carve --cru 8 --mru 31GiB --sru 931.5GiB [--pools 465.75GiB 465.75GiB] [--light]
                    [--policy zos|legacy|flat-overhead|SAVED] [--json]   (default: the fleet's policy)

The flag parsing here is shared with node_register.
"""

from __future__ import annotations

import argparse
import json

from django.core.management.base import CommandError

from dashboard import capacity
from dashboard.management.cli import EXIT_USAGE, ProductCommand, usage_error

# Bad input is a usage error, as argparse's own.
USAGE_ERROR = EXIT_USAGE


def add_capacity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cru", metavar="CORES", help="CPU cores, e.g. 8")
    parser.add_argument("--mru", metavar="SIZE", help="memory in 1024-based units, e.g. 31GiB")
    parser.add_argument("--sru", metavar="SIZE", help="SSD total, e.g. 931.5GiB (defaults to the sum of --pools)")
    parser.add_argument(
        "--pools",
        nargs="+",
        metavar="SIZE",
        help="SSD pool sizes, one per disk, e.g. --pools 465.75GiB 465.75GiB (or comma-separated)",
    )


def capacity_flags_given(options: dict) -> bool:
    return any(options.get(flag) is not None for flag in ("cru", "mru", "sru", "pools"))


def capacity_from_flags(options: dict) -> tuple[capacity.Resources, list[int] | None]:
    """The node's total and pools from --cru/--mru/--sru/--pools; CommandError with one clear line."""
    missing = [f"--{flag}" for flag in ("cru", "mru") if options.get(flag) is None]
    if options.get("sru") is None and not options.get("pools"):
        missing.append("--sru")
    if missing:
        raise CommandError(f"give --cru, --mru and --sru (missing {', '.join(missing)})", returncode=USAGE_ERROR)
    try:
        cru = _cores(options["cru"])
        mru = capacity.parse_size(options["mru"], what="--mru", allow_zero=False)
        pools = pools_from_flag(options.get("pools"))
        sru = capacity.parse_size(options["sru"], what="--sru") if options.get("sru") is not None else sum(pools)
    except capacity.CapacityError as exc:
        raise CommandError(str(exc), returncode=USAGE_ERROR) from None
    if pools and sum(pools) > sru:
        raise CommandError(
            f"--pools add up to {capacity.format_size(sum(pools))}, more than --sru {capacity.format_size(sru)}",
            returncode=USAGE_ERROR,
        )
    return capacity.Resources(cru=cru, mru=mru, sru=sru), pools


def policy_named(name: str) -> capacity.Policy:
    """A built-in profile, else the policy saved under that name (the policy in force, an override)."""
    if name in capacity.PROFILES:
        return capacity.PROFILES[name]
    from django.db import DatabaseError

    from dashboard.models import Policy

    try:
        row = Policy.objects.filter(name=name).first()
        saved = list(Policy.objects.order_by("name").values_list("name", flat=True))
    except DatabaseError:
        raise usage_error(
            f"unknown policy {name!r}: it is no profile ({', '.join(capacity.PROFILES)}) and the saved "
            "policies could not be read (is the database up?)"
        ) from None
    if row is None:
        raise usage_error(f"unknown policy {name!r}; choose one of: {', '.join([*capacity.PROFILES, *saved])}")
    return row.to_capacity()


def fleet_policy() -> capacity.Policy:
    """The fleet's policy (the saved fleet default), as node_register would carve with it; the built-in
    default profile when none is saved or the database cannot be read (a what-if works without it)."""
    from django.db import DatabaseError

    from dashboard.models import Policy

    try:
        row = Policy.objects.filter(scope=Policy.Scope.FLEET).first()
    except DatabaseError:
        row = None
    return row.to_capacity() if row is not None else capacity.PROFILES[capacity.DEFAULT_PROFILE]


def _cores(text: str) -> int:
    raw = str(text).strip()
    if not raw.isdigit() or len(raw) > 6 or int(raw) < 1:  # bounded before int(): a 400-digit count
        raise capacity.CapacityError(f"--cru: {text!r} is not a number of CPU cores; give a whole number of 1 or more")
    return int(raw)


def pools_from_flag(values: list[str] | None) -> list[int] | None:
    """--pools as sizes in bytes (space or comma separated); SizeError names the bad one."""
    if not values:
        return None
    items = [item for value in values for item in value.split(",") if item.strip()]
    if not items:
        raise capacity.SizeError("--pools: give one size per SSD pool, e.g. 465.75GiB 465.75GiB")
    sizes = [capacity.parse_size(item, what="--pools", allow_zero=False) for item in items]
    try:
        capacity.pools_bounded(sizes, what="--pools")
    except ValueError as exc:
        raise capacity.SizeError(str(exc)) from None
    return sizes


def _gib(n: int) -> str:
    return f"{n / capacity.GiB:.2f}".rstrip("0").rstrip(".")


def carve_as_dict(
    total: capacity.Resources, pools: list[int] | None, policy: capacity.Policy, result: capacity.Carve
) -> dict:
    data = result.as_dict()
    data["policy_version"] = policy.version
    data["total"] = total.as_dict()
    data["pools"] = pools
    return data


def carve_as_table(
    total: capacity.Resources, pools: list[int] | None, policy: capacity.Policy, result: capacity.Carve
) -> str:
    s = result.slice
    per_slice_disk = s.sru + s.rootfs + policy.overhead_sru_per_vm
    used = policy.vm_charge(s.cru, s.mru, s.sru).times(result.new_slices)
    cores = f"{total.cru} core" + ("" if total.cru == 1 else "s")
    node = f"{cores}, {_gib(total.mru)} GiB memory, {_gib(total.sru)} GiB SSD"
    if pools:
        node += f" in {len(pools)} pools ({', '.join(_gib(p) for p in pools)} GiB)"
    lines = [
        f"node:    {node}",
        f"policy:  {policy.name} v{policy.version}",
        f"slices:  {result.slices}, limited by {capacity.RESOURCE_WORDS.get(result.limited_by, result.limited_by)}",
    ]
    if result.new_slices:
        rootfs = f" + {capacity.format_size(s.rootfs)} rootfs" if s.rootfs else ""
        lines.append(f"each:    {s.cru} vCPU, {_gib(s.mru)} GiB memory, {_gib(s.sru)} GiB disk{rootfs}")
    lines += [
        "",
        f"{'GiB':<14}{'memory':>10}{'SSD':>12}",
        f"{'total':<14}{_gib(total.mru):>10}{_gib(total.sru):>12}",
        f"{'reserve':<14}{_gib(result.reserve.mru):>10}{_gib(result.reserve.sru):>12}",
        f"{f'{result.new_slices} slices':<14}{_gib(used.mru):>10}{_gib(used.sru):>12}",
        f"{'unallocated':<14}{_gib(result.unallocated.mru):>10}{_gib(result.unallocated.sru):>12}",
    ]
    if result.new_slices and per_slice_disk != s.sru:
        lines.append(
            f"(each slice takes {_gib(per_slice_disk)} GiB of SSD: its data disk plus rootfs and per-VM overhead)"
        )
    lines += [f"note:    {note}" for note in result.notes]
    return "\n".join(lines)


class Command(ProductCommand):
    help = (
        "What if: carve a node of this size with a policy profile, or with a policy saved on the Policy page "
        "(read from the database only then). Writes nothing."
    )
    # A what-if must work with the database down; system checks are not needed for it.
    requires_system_checks: list = []

    def add_arguments(self, parser):
        add_capacity_arguments(parser)
        parser.add_argument(
            "--policy",
            default=None,
            help=f"a profile ({', '.join(capacity.PROFILES)}) or a saved policy's name, e.g. fleet-default; "
            "default: the fleet's policy (the built-in zos when none is saved or the database is down)",
        )
        parser.add_argument(
            "--zos-cache",
            metavar="SIZE",
            help="the zos-cache's quota now, e.g. 15GiB (with --pools: its pool keeps it and its next 5 GiB step "
            "instead of the Grid Proxy's fixed 20 GiB); what a node's pool report bounds it to",
        )
        parser.add_argument(
            "--light",
            action="store_true",
            help="a ZOS-light node: without --pools its disks may be partitions (the light layouts)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options):
        total, pools = capacity_from_flags(options)
        policy = policy_named(options["policy"]) if options["policy"] is not None else fleet_policy()
        try:
            cache = options["zos_cache"] and capacity.parse_size(options["zos_cache"], what="--zos-cache")
            result = capacity.carve(total, policy, pools=pools, cache=cache or None, light=options["light"])
        except capacity.CapacityError as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from None
        if options["json"]:
            self.stdout.write(json.dumps(carve_as_dict(total, pools, policy, result), sort_keys=True))
        else:
            self.stdout.write(carve_as_table(total, pools, policy, result))
