"""ZOS's own test VM: how often it runs depends on the node's build (issue 43, item 4).

ZOS boots a 1 vCPU / 512 MiB VM of its own, outside the memory it counts (zosbase
`pkg/perf/provisiontest/`): once a day (with up to 30 min of jitter), for about 30 s plus boot and
teardown (up to ~3 min). On zos v3.14.7 and v3.14.8 (zosbase v1.0.8, February 2026) the healthcheck
(`pkg/perf/healthcheck/`, cron `0 */15 * * * *`) booted it every 15 minutes instead; from
v3.14.8-patch.1 it is the daily provisiontest again (docs/zos.md).

Daily, a refusal beside it is rare and the memory model reads it as such (capacity.overhead). Every
15 minutes, a node's last slice would be refused several minutes an hour: the test VM is then
effectively always there, and its memory (with its per-VM overhead) is reserved like ZOS's own use.

A version the product cannot read (none told, or a string that is not `vX.Y.Z[-suffix]`) is taken as
daily (`UNKNOWN_PERIOD`), `known` False and saying so. Why not reserve it there: the 15-minute
healthcheck lived two releases, replaced by v3.14.8-patch.1 within the month, and a node runs its
network's release; most nodes a marketplace runs without an rmb-peer tell no version, so reserving on
every such node gave up one slice on each node within 512 MiB of a slice boundary (node 1774's
legacy words, a fleet override's 6 slices to 5, the month's utilisation 0.93 -> 0.898 in
tests/sim/test_traffic.py) to guard against a build nobody should run any more. A refusal beside the test
VM on such a node is read by the memory model as on any daily build (capacity.overhead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from dashboard.capacity.sizes import MiB

TEST_VM_MRU = 512 * MiB  # zosbase provisiontest: 1 vCPU / 512 MiB
DAILY = timedelta(days=1)
EVERY_15_MINUTES = timedelta(minutes=15)
# The builds whose healthcheck ran the test VM every 15 minutes: zos v3.14.7 and v3.14.8 (zosbase v1.0.8).
FIFTEEN_MINUTE_RELEASES = ((3, 14, 7), (3, 14, 8))
# A version not told or not understood (the module's words say why daily).
UNKNOWN_PERIOD = DAILY
_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?")
_PATCH = re.compile(r"patch\.(\d+)")


@dataclass(frozen=True)
class TestVmSchedule:
    """How often the node's build boots its test VM, and why the product thinks so."""

    __test__ = False  # a domain word, not a pytest class

    period: timedelta
    known: bool  # False: the version could not be read and the prudent answer stands
    why: str

    @property
    def always_there(self) -> bool:
        """Every few minutes: reserve it as if it never left."""
        return self.period < timedelta(hours=1)


def test_vm_schedule(zos_version: str | None) -> TestVmSchedule:
    """The test VM's schedule on a node running `zos_version` (as zos.system.version tells it)."""
    text = (zos_version or "").strip()
    if not text:
        return TestVmSchedule(UNKNOWN_PERIOD, False, f"ZOS version unknown: taken as {_words(UNKNOWN_PERIOD)}")
    match = _VERSION.fullmatch(text)
    if match is None:
        return TestVmSchedule(
            UNKNOWN_PERIOD, False, f"ZOS version {text!r} not understood: taken as {_words(UNKNOWN_PERIOD)}"
        )
    release = tuple(int(part) for part in match.group(1, 2, 3))
    suffix = match.group(4) or ""
    if release not in FIFTEEN_MINUTE_RELEASES:
        return TestVmSchedule(DAILY, True, f"ZOS {text}: the daily provisiontest")
    patch = _PATCH.fullmatch(suffix)
    if release == (3, 14, 8) and patch is not None and int(patch.group(1)) >= 1:
        return TestVmSchedule(DAILY, True, f"ZOS {text}: the daily provisiontest again (from v3.14.8-patch.1)")
    # v3.14.7 and v3.14.8 themselves; their patches before v3.14.8-patch.1 and any other suffix (a
    # candidate, a local build) are within or beside the two releases: the 15-minute healthcheck.
    return TestVmSchedule(EVERY_15_MINUTES, True, f"ZOS {text}: the healthcheck every 15 minutes (zosbase v1.0.8)")


def _words(period: timedelta) -> str:
    return "daily (the current release's provisiontest)" if period == DAILY else "every 15 minutes (reserved)"


def test_vm_reserve_mru(zos_version: str | None, *, hidden_mru_per_vm: int = 0) -> int:
    """Memory to keep for the test VM beyond ZOS's count: its 512 MiB and a VM's overhead when it is
    effectively always there, else nothing (the daily one is the memory model's, capacity.overhead)."""
    return TEST_VM_MRU + hidden_mru_per_vm if test_vm_schedule(zos_version).always_there else 0


# Not tests: pytest collects module-level names starting with "test" from modules tests import.
test_vm_schedule.__test__ = False  # type: ignore[attr-defined]
test_vm_reserve_mru.__test__ = False  # type: ignore[attr-defined]
