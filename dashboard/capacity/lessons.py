"""What ZOS's refusals teach about a node, and ZOS's memory check that they are read against.

The node's statistics tell only the accounted use, workloads plus the reserve (zosbase
pkg/primitives/statistics.go, GetCounters). ZOS's deploy-time check (the same file) refuses a
VM whose memory exceeds total - max(accounted + reserve, memory really in use), so the memory
really in use shows in one place only: a refusal's "out of usable Y bytes". A disk no pool
could hold shows in a disk refusal where the accounting had room (docs/domain.md "What the
node's statistics really say"). `Observed` is what is kept of those lessons.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from dashboard.capacity.policy import PROXY_CACHE_SRU
from dashboard.capacity.sizes import CapacityError, GiB, Resources
from dashboard.capacity.test_vm import test_vm_reserve_mru


def zos_build_key(zos_version: str | None) -> str:
    """The group a node's memory is learnt in: its ZOS version, or "" (the whole fleet) when unknown."""
    return (zos_version or "").strip()


def zos_reserve_mru(total_mru: int) -> int:
    """The memory ZOS counts for itself: max(10% of total, 2 GiB) (zosbase getUsableMemoryBytes)."""
    return max(total_mru * 10 // 100, 2 * GiB)


@dataclass(frozen=True)
class Observed:
    """What ZOS's own refusals taught about one node (the evidence is kept beside the node).

    `hidden_mru_per_vm`: memory each running VM really uses beyond its size, seen only in a
    memory refusal's `usable` figure. `zos_own_mru`: what ZOS itself really uses on the host (the
    fleet model's intercept, capacity.overhead); None when only the per-VM figure is known, which
    then counts on top of the reserve. `pool_room_below`: a disk of this size was refused where
    the accounting had room, so no pool had that much room then (valid until something is freed).
    `test_vm_mru`: ZOS's test VM kept as always there, on a build that boots it every 15 minutes
    (capacity.test_vm); 0 where it runs once a day.
    """

    hidden_mru_per_vm: int = 0
    pool_room_below: int | None = None
    zos_own_mru: int | None = None
    test_vm_mru: int = 0

    def __post_init__(self) -> None:
        if self.hidden_mru_per_vm < 0:
            raise CapacityError("hidden memory per VM must not be negative")
        if self.zos_own_mru is not None and self.zos_own_mru < 0:
            raise CapacityError("ZOS's own memory use must not be negative")
        if self.pool_room_below is not None and self.pool_room_below < 1:
            raise CapacityError("a refused disk size must be above zero")
        if self.test_vm_mru < 0:
            raise CapacityError("the test VM's memory must not be negative")

    @property
    def anything(self) -> bool:
        learnt = self.pool_room_below is not None or self.zos_own_mru is not None
        return bool(self.hidden_mru_per_vm) or learnt or bool(self.test_vm_mru)

    def own_beyond_reserve(self, total_mru: int) -> int:
        """ZOS's own use less the reserve it counts (negative when the reserve covers it), with its
        test VM where that is always there (outside the count too)."""
        own = 0 if self.zos_own_mru is None else self.zos_own_mru - zos_reserve_mru(total_mru)
        return own + self.test_vm_mru

    def hidden_mru(self, running: int, total_mru: int) -> int:
        """Memory really used beyond ZOS's count with `running` VMs: used = max(counted, actual),
        and actual - counted = own - reserve + running x per-VM overhead."""
        return max(self.own_beyond_reserve(total_mru) + running * self.hidden_mru_per_vm, 0)


NOTHING_OBSERVED = Observed()


def hidden_use_per_vm(*, total_mru: int, usable_mru: int, accounted_mru: int, running: int) -> int:
    """The hidden memory per running VM that a memory refusal reveals (0 when it reveals none).

    ZOS refuses with "... out of usable Y bytes", Y = total - max(accounted, really used); so
    total - Y above the accounted use (workloads + reserve) is memory the host really used,
    spread over the VMs running then. Rounded up: the precheck must never say yes wrongly.
    """
    hidden = (total_mru - usable_mru) - accounted_mru
    if hidden <= 0 or running <= 0:
        return 0
    return -(-hidden // running)


@dataclass(frozen=True)
class Lesson:
    """What one ZOS refusal teaches: hidden memory per running VM, or a disk no pool could hold."""

    kind: str  # "memory" or "disk"
    hidden_mru_per_vm: int = 0
    disk_size: int | None = None
    used_sru: int | None = None  # SSD in use when the disk was refused: the bound holds while no less is used


def refusal_lesson(
    *,
    cause: str,
    needed: int | None,
    usable: int | None,
    total: Resources,
    used: Resources,
    vm_count: int,
    data_disk: int,
    rootfs: int,
) -> Lesson | None:
    """What a refusal teaches, from its cause ("memory" or "disk"), ZOS's figures and the accounted
    reading taken just before; None when the accounting alone explains it."""
    if cause == "memory" and usable is not None:
        hidden = hidden_use_per_vm(
            total_mru=total.mru, usable_mru=usable, accounted_mru=used.mru, running=max(vm_count, 1)
        )
        return Lesson("memory", hidden_mru_per_vm=hidden) if hidden > 0 else None
    if cause == "disk":
        if data_disk + rootfs > total.sru - used.sru:
            return None  # the accounting had no room either: nothing about the pools
        # "failed to find a candidate to host vdisk of size N" names the disk; a rootfs refusal does not.
        return Lesson("disk", disk_size=max(needed or rootfs, 1), used_sru=used.sru)
    return None


class RefusalReading(NamedTuple):
    """What a memory refusal says the host used, beside what it hosted: one calibration sample
    (policies.services.calibration fits `used - vm = reserve + VMs x overhead`)."""

    vm_count: int
    vm_mru: int  # the VMs' memory: the accounted use less ZOS's reserve
    used_mru: int  # what the host really used: total - ZOS's usable
    vm_sru: int | None  # the VMs' disks: the accounted SSD less the proxy's fixed reserve; None if not read
    used_sru: int | None


def refusal_reading(
    *, vm_count: int, total_mru: int, accounted_mru: int, usable_mru: int, used_sru: int | None
) -> RefusalReading:
    """A memory refusal's figures as a calibration sample: the one conversion for a refusal kept as an
    Observation and for one that taught nothing (kept as a CapacitySample)."""
    return RefusalReading(
        vm_count=vm_count,
        vm_mru=max(accounted_mru - zos_reserve_mru(total_mru), 0),
        used_mru=max(total_mru - usable_mru, 0),
        vm_sru=None if used_sru is None else max(used_sru - PROXY_CACHE_SRU, 0),
        used_sru=None if used_sru is None else max(used_sru, 0),
    )


def used_is_the_count(*, total_mru: int, vm_mru: int, actual_mru: int) -> bool:
    """Whether ZOS's `usable` told its own count (used = the VMs and the reserve to the byte), not what the
    host used: only that it used no more. One rule for the fit (capacity.overhead.count_decided) and the
    judge of plausibility (capacity.plausible)."""
    return actual_mru == vm_mru + zos_reserve_mru(total_mru)


def observed_after(observed: Observed, lesson: Lesson, *, running: int, total_mru: int) -> Observed:
    """The node's lessons with one more: the more cautious memory lesson (`memory_more_cautious`), the
    latest disk bound."""
    if lesson.kind == "memory":
        return memory_more_cautious(observed, lesson.hidden_mru_per_vm, running=running, total_mru=total_mru)
    return replace(observed, pool_room_below=lesson.disk_size)


def memory_more_cautious(observed: Observed, per_vm_mru: int, *, running: int, total_mru: int) -> Observed:
    """The node's memory lesson beside its own reading `per_vm_mru` (per VM over the reserve, as a refusal
    tells it): whichever holds back more with `running` VMs (at least one), the disk lesson kept. The two
    are not mixed: a reading over the reserve beside a group's own use below the reserve would count the
    difference off, and promise what the node just refused (issue 44's worlds)."""
    mine = replace(observed, hidden_mru_per_vm=per_vm_mru, zos_own_mru=None)
    running = max(running, 1)
    return mine if mine.hidden_mru(running, total_mru) > observed.hidden_mru(running, total_mru) else observed


def observed_now(
    *,
    hidden_mru_per_vm: int,
    pool_room_below: int | None,
    bound_used_sru: int | None,
    used_sru: int | None,
    zos_own_mru: int | None = None,
    zos_version: str | None,
) -> Observed:
    """What still holds of a node's lessons: a refused disk size bounds the pools only while
    nothing has been freed since (the used SSD is at least what it was at the refusal). With the
    test VM kept where the node's build (`zos_version`) boots it every 15 minutes (capacity.test_vm)."""
    if pool_room_below is not None and None not in (bound_used_sru, used_sru) and used_sru < bound_used_sru:
        pool_room_below = None
    return Observed(
        hidden_mru_per_vm=hidden_mru_per_vm,
        pool_room_below=pool_room_below,
        zos_own_mru=zos_own_mru,
        test_vm_mru=test_vm_reserve_mru(zos_version, hidden_mru_per_vm=hidden_mru_per_vm),
    )


def vms_by_memory(
    free_mru: int, per_vm_mru: int, *, hidden_per_vm: int = 0, running: int = 0, own_beyond_reserve: int = 0
) -> int:
    """How many more VMs of `per_vm_mru` ZOS accepts one after another with `free_mru` unaccounted.

    ZOS refuses a VM when its memory exceeds total - max(accounted, really used); really used is
    beyond the accounted by c + (VMs running) x hidden, c = ZOS's own use less its reserve
    (`own_beyond_reserve`, 0 when only the per-VM figure is known), but not for the VM being
    checked. So VM k (0-based) needs (k + 1) * per_vm <= free and
    (k + 1) * per_vm + c + (running + k) * hidden <= free: the max of the two, both must hold.
    """
    if per_vm_mru <= 0:
        return 0
    by_count = (free_mru - per_vm_mru) // per_vm_mru
    by_actual = (free_mru - per_vm_mru - own_beyond_reserve - running * hidden_per_vm) // (per_vm_mru + hidden_per_vm)
    return max(min(by_count, by_actual) + 1, 0)
