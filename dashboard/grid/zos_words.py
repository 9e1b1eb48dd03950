"""ZOS's own words beyond memory and disk: the zos-cache, VM validation, storage faults, the flist path.

Each family is written from the source (zosbase 063d895 unless said), with the path it comes from and
its format verbs, so a test can write the string as ZOS would:

zos-cache (the node's cache subvolume; zosbase pkg/storage/storage.go, zos cmds/modules/provisiond):
- missing: `path()` -> `subvolume '%s' not found: file does not exist` (errors.Wrapf(os.ErrNotExist, ...)),
  through `Cache()` -> provisiond `getNodeReserved` -> primitives/statistics.go: every workload is refused
  with `failed to satisfy required capacity: failed to get available memory: <it>`, and
  `zos.statistics.get` answers it as an error (the proxy: 500 `failed to get get node statistics from
  relay: <it>`); zos#2043 listed ~75 such main-net nodes. Cause `cache-missing`.
- full: flistd keeps images in the cache, under its quota; `failed to mount flist: %s: ro mount of flist
  failed: failed to create flist mountpoint: mkdir <path>: disk quota exceeded` (primitives/vm/vm.go,
  flist/flist.go mountRO; zos#2147), and the image then unreadable: `failed to write image to disk:
  failed to write disk image: read /var/cache/modules/flistd/...: input/output error`. Transient: storaged
  grows the quota by 5 GiB when it is 60% full, checked every 5 minutes. Cause `cache-full`.

VM validation (cause `validation`; nothing about the node's room):
- vmd, pkg/vm.go `VM.Validate`, wrapped by pkg/vm/manager.go `Run` as `machine configuration validation
  failed: <it>`: `invalid cpu must be between 1 and %d` (%d: the node's logical CPUs), `invalid cpu must
  be 1`, `invalid memory must not be less than 250M`, `name is required`, `kernel-image is required`,
  `validating virtiofs %s: mount target can't be /`, `validating disk %s: mount target can't be /`;
- pkg/gridtypes/zos/zmachine.go (and zmachine_light.go) `Valid`: `cpu capacity can't be 0` (`cpu capcity`
  before the typo's fix), `mem capacity can't be less that 250M`, `disk size can't be less that %d. Set to
  0 for minimum` (%d: bytes), `only one network private network is supported at the moment`, `invalid IP`,
  `public ip is not found`, `workload of name '%s' is not a public ip`, `public ip is assigned to multiple
  vms`, `'%s' is reserved network name`, `invalid mycelium seed length expected 6 bytes`;
  zmount.go / volume.go `Valid`: `invalid size`;
- primitives/vm/utils.go: `at least one mount has to be attached for Vm mode`, `mount is not a valid disk
  workload`; storage/disk.go `DiskWrite`: `failed to write image to disk: image size is bigger than disk`;
  primitives/vm/vm.go: `only one private network is support`;
- updates: primitives/zmount `not safe to shrink a disk`, `disk is mounted, please delete the VM first`;
  primitives/volume `cannot shrink volume to be less than provisioned space. old: %d, requested: %d`;
  storage.go VolumeCreate `invalid volume name. zdb prefix is reserved`;
- flist: flist.go `unknown extension: '%s'` (a URL not ending .flist or .fl), `fail to download flist: %v`
  with a 404 (the image is not on the hub).

Not the node's room, not the request's fault (cause `unknown`, words that say where to look):
- storage.go findCandidates `failed to search candidate on mounted pools: <mount error>` (a pool that
  would not mount), createSubvol `failed to create subvolume, logs might have more information`;
- primitives/vm/utils.go `boot disk was not deployed correctly` (the disk workload failed first);
- vmd `a vm with same name already exists`, pkg/vm.go `failed to get count of cpus`, pkg/vm/ch.go
  `failed to spawn vm machine process '%s'` (zos#2355: tmpfs full on the node).
The hub (cause `grid-unavailable`): `fail to download flist: %v` other than 404, `failed to get flist hash`.
And `public ipv4 is requested, but not supported on this node` (primitives/vm/vm.go: a ZOS-light node) is
cause `public-ip`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dashboard.capacity import GiB, format_size

# --- the zos-cache ---------------------------------------------------------------------------------

CACHE_MISSING = re.compile(r"subvolume '?zos-cache'? not found(?:: file does not exist)?", re.IGNORECASE)
# EDQUOT from the cache subvolume's quota, on the flist path (or anywhere: no other subvolume of a
# deployment is written while it is created), and the image that could not be read out of it.
CACHE_FULL = re.compile(
    r"disk\s+quota\s+exceeded"
    r"|failed to write disk image:\s*read\s+/var/cache/modules/flistd/\S*:\s*input/output error",
    re.IGNORECASE,
)
_FLIST = re.compile(r"failed to mount flist|failed to write image to disk|failed to mount cloud container", re.I)
# zosbase pkg/storage/storage.go: the quota grows by 5 GiB (cacheSize) when 60% full, every 5 minutes.
CACHE_STEP = 5 * GiB
CACHE_GROW_PERCENT = 60
CACHE_CHECK_MINUTES = 5

CACHE_MISSING_WORDS = (
    "ZOS refused the VM because the node has lost its zos-cache (\"subvolume 'zos-cache' not found\"): without "
    "it ZOS cannot count its own reserve, so it refuses every workload, whatever its free memory and disk. The "
    "node is closed until it answers for its statistics again (usually after its farmer reboots it); pick "
    "another node. The catalog itself is right: do not re-register."
)
CACHE_MISSING_DETAIL = (
    "zos provisiond getNodeReserved asks storaged for the zos-cache subvolume (zosbase pkg/storage/storage.go "
    "Cache -> path: subvolume '%s' not found); its error fails every deploy (primitives/statistics.go "
    "hasEnoughCapacity) and zos.statistics.get (zos#2043). The node stops reporting its uptime too, so it "
    "turns down within about 80 minutes."
)
CACHE_FULL_DETAIL = (
    "flistd keeps a full VM's image in the zos-cache subvolume (zosbase pkg/flist/flist.go mountRO, "
    "primitives/vm/vm.go 'failed to mount flist'); its quota refused the write (EDQUOT, zos#2147). storaged's "
    "checkAndResizeCache grows the quota by 5 GiB each 5 minutes while it is 60% full or more."
)


def cache_grow_wait(image: int, quota: int, in_use: int) -> tuple[int, int]:
    """(5 GiB steps, minutes) the zos-cache needs before an image of `image` bytes fits beside the `in_use`
    bytes it holds under `quota`: one step per 5-minute check while it is 60% full (a refused pull
    leaves it full); (0, 0) when it fits now."""
    short = image + in_use - quota
    if short <= 0:
        return 0, 0
    steps = -(-short // CACHE_STEP)
    return steps, steps * CACHE_CHECK_MINUTES


def cache_full_words(*, image: int | None = None, quota: int | None = None, in_use: int | None = None) -> str:
    """A full VM's image refused by the zos-cache's quota: transient, in plain words; with the image's size
    and the cache's quota (and what it holds) when they are known, how long the growth takes."""
    head = (
        "ZOS could not fetch the VM's image: flistd keeps images in the node's zos-cache, and the cache hit its "
        'quota ("disk quota exceeded"). This is transient, not a full node: ZOS grows the cache by 5 GiB '
        "whenever it is 60% full, checking every 5 minutes, so retry the same node after about 5 minutes"
    )
    if image is not None and quota is not None:
        held = in_use if in_use is not None else quota * CACHE_GROW_PERCENT // 100
        steps, minutes = cache_grow_wait(image, quota, held)
        known = "" if in_use is not None else f" (assuming it holds {format_size(held)}, 60% of it)"
        if steps:
            head += (
                f". The image is {format_size(image)} and the cache's quota {format_size(quota)}{known}: it needs "
                f"{steps} step{'s' if steps != 1 else ''} of 5 GiB, about {minutes} minutes of growth"
            )
        else:
            head += f". The image ({format_size(image)}) fits the cache's {format_size(quota)} quota{known} now"
    elif quota is not None:
        head += f"; the node's cache quota was {format_size(quota)} at its last pool report, and a larger image waits longer"
    return head + ". The catalog is right: do not re-register, and nothing needs freeing."


# --- the other families, one table ----------------------------------------------------------------


@dataclass(frozen=True)
class ZosWord:
    """One family of ZOS's words: what it is (`cause`), where it comes from, and what to tell support."""

    key: str
    cause: str
    pattern: re.Pattern[str]
    source: str  # the zosbase path (and function) that says it
    words: str
    # ZOS's own outer wrap, when it has one: the reason is read from there ("machine configuration ...").
    wrap: re.Pattern[str] | None = None


_VMD_WRAP = re.compile(r"machine configuration validation failed: ", re.IGNORECASE)
VM_CPU = re.compile(r"invalid cpu must be (?:between 1 and (?P<threads>\d+)|(?P<one>1)\b)", re.IGNORECASE)

_VALIDATION = (
    ZosWord(
        "vm-memory",
        "validation",
        re.compile(r"invalid memory must not be less than 250M", re.I),
        "zosbase pkg/vm.go (VM.Validate)",
        "ZOS refused to start the VM: its memory is below ZOS's minimum of 250 MiB; fix the slice size in the policy.",
        _VMD_WRAP,
    ),
    ZosWord(
        "vm-definition",
        "validation",
        re.compile(
            r"name is required|kernel-image is required|validating (?:virtiofs|disk) \S* ?: ?mount target can't be /",
            re.I,
        ),
        "zosbase pkg/vm.go (VM.Validate)",
        "ZOS refused to start the VM: its definition is incomplete or mounts something on / (the tool that built "
        "the deployment is at fault, not the node); fix the deployment and deploy again.",
        _VMD_WRAP,
    ),
    ZosWord(
        "zmachine-network",
        "validation",
        re.compile(
            r"only one network private network is supported at the moment|only one private network is support\b"
            r"|\binvalid IP\b|public ip is not found|workload of name '[^']*' is not a public ip"
            r"|public ip is assigned to multiple vms|'[^']*' is reserved network name"
            r"|invalid mycelium seed length expected 6 bytes",
            re.I,
        ),
        "zosbase pkg/gridtypes/zos/zmachine.go (ZMachine.Valid), pkg/primitives/vm/vm.go",
        "ZOS rejected the VM's network as the deployment describes it (one private network, a valid IP, a public "
        "IP of its own, no reserved name, a 6-byte mycelium seed); the deploying tool must fix the deployment.",
    ),
    ZosWord(
        "disk-size",
        "validation",
        re.compile(r"(?<![\w-])invalid size\b", re.I),
        "zosbase pkg/gridtypes/zos/zmount.go, volume.go (Valid)",
        "ZOS rejected a disk of size 0; give the slice's disk a size.",
    ),
    ZosWord(
        "vm-needs-disk",
        "validation",
        re.compile(r"at least one mount has to be attached for Vm mode|mount is not a valid disk workload", re.I),
        "zosbase pkg/primitives/vm/utils.go (prepVirtualMachine)",
        "ZOS refused the full VM: a full VM (an image with a disk, not a container) boots from its first mount, "
        "which must be a data disk; deploy it with the slice's disk as its first mount.",
    ),
    ZosWord(
        "image-bigger-than-disk",
        "validation",
        re.compile(r"image size is bigger than disk", re.I),
        "zosbase pkg/storage/disk.go (DiskWrite)",
        "ZOS could not write the VM's image onto its disk: the image is bigger than the slice's data disk. "
        "Choose a smaller image or a slice with a larger disk; the node is fine.",
        re.compile(r"failed to write image to disk: ", re.IGNORECASE),
    ),
    ZosWord(
        "disk-update",
        "validation",
        re.compile(
            r"not safe to shrink a disk|disk is mounted, please delete the VM first"
            r"|cannot shrink volume to be less than provisioned space|invalid volume name\. zdb prefix is reserved",
            re.I,
        ),
        "zosbase pkg/primitives/zmount, pkg/primitives/volume, pkg/storage/storage.go (VolumeCreate)",
        "ZOS refused the change to a disk: a disk may grow but never shrink, and not while a VM uses it; "
        "deploy a new slice instead.",
    ),
    ZosWord(
        "flist-url",
        "validation",
        re.compile(r"unknown extension: '[^']*'|fail to download flist: 404\b", re.I),
        "zosbase pkg/flist/flist.go (mountRO, downloadFlist)",
        "ZOS could not find the VM's image: its URL must end in .flist or .fl and exist on the hub; fix the image "
        "URL and deploy again. The node is fine.",
    ),
)

_ELSEWHERE = (
    ZosWord(
        "capacity-count",
        "unknown",
        re.compile(r"failed to get available memory|failed to calculate workload needed capacity", re.I),
        "zosbase pkg/primitives/statistics.go (hasEnoughCapacity)",
        "ZOS could not count the node's own capacity before the VM (its storage or accounting failed), so it "
        "refused it whatever the free memory: a fault of the node. Pick another node; a node that keeps "
        "failing like this is quarantined.",
    ),
    ZosWord(
        "pool-mount",
        "unknown",
        re.compile(r"failed to search candidate on mounted pools|failed to create subvolume, logs might have", re.I),
        "zosbase pkg/storage/storage.go (findCandidates, createSubvol)",
        "ZOS could not use one of the node's disks: a storage pool would not mount (or btrfs refused the volume), "
        "which is a fault of the node, not a lack of room. Pick another node and tell its farmer; the dashboard "
        "quarantines a node that keeps failing like this.",
    ),
    ZosWord(
        "boot-disk",
        "unknown",
        re.compile(r"boot disk was not deployed correctly", re.I),
        "zosbase pkg/primitives/vm/utils.go (prepVirtualMachine)",
        "ZOS refused the VM because its data disk failed first; the disk's own error (the deployment's other "
        "workload) says why, usually no pool with room for it.",
    ),
    ZosWord(
        "vmd",
        "unknown",
        re.compile(
            r"a vm with same name already exists|failed to get count of cpus"
            r"|failed to spawn vm machine process",
            re.I,
        ),
        "zosbase pkg/vm/manager.go (Run), pkg/vm.go, pkg/vm/ch.go",
        "ZOS could not start the VM process on the node (a leftover VM of that name, or the node's own memory "
        "file system full, zos#2355): a fault of the node, not of the slice. Retry later or pick another node.",
    ),
    ZosWord(
        "hub",
        "grid-unavailable",
        re.compile(r"fail to download flist|failed to get flist hash", re.I),
        "zosbase pkg/flist/flist.go (downloadFlist, FlistHash)",
        "The node could not download the VM's image from the hub (a network or hub failure); retry later.",
    ),
    ZosWord(
        "light-ipv4",
        "public-ip",
        re.compile(r"public ipv4 is requested, but not supported on this node", re.I),
        "zosbase pkg/primitives/vm/vm.go",
        "ZOS refused the VM's public IPv4: the node takes none (a ZOS-light node). Deploy the slice without the IP, "
        "or on a full ZOS node; placement leaves such nodes out of IPv4 slices.",
    ),
)


def validation_word(reason: str) -> tuple[ZosWord, re.Match] | None:
    """The validation family ZOS's reason belongs to (beyond memory/rootfs minimums), with its match."""
    return _first(_VALIDATION, reason)


def elsewhere_word(reason: str) -> tuple[ZosWord, re.Match] | None:
    """A ZOS reason that is neither the node's room nor the request's fault: where to look instead."""
    return _first(_ELSEWHERE, reason)


def _first(table: tuple[ZosWord, ...], reason: str) -> tuple[ZosWord, re.Match] | None:
    for word in table:
        match = word.pattern.search(reason)
        if match:
            return word, match
    return None


def reason_from(reason: str, match: re.Match, wrap: re.Pattern[str] | None) -> str:
    """ZOS's reason from its own outer wrap when it has one just before the match, else from the match."""
    if wrap is not None:
        ends = [found for found in wrap.finditer(reason[: match.start()]) if found.end() == match.start()]
        if ends:
            return reason[ends[-1].start() :].strip()
    return reason[match.start() :].strip()


def cpu_words(match: re.Match) -> str:
    """vmd refused a VM of more vCPUs than the node's logical CPUs (pkg/vm.go VM.Validate)."""
    threads = 1 if match.group("one") else int(match.group("threads"))
    most = f"at most {threads & 0xFF} vCPU{'s' if threads & 0xFF != 1 else ''}" if threads & 0xFF else "no VM at all"
    return (
        f"ZOS refused to start the VM: it asks more vCPUs than the node's {threads} logical CPU"
        f"{'s' if threads != 1 else ''}, and one VM may have {most} there (the sum over VMs is not limited). "
        "Deploy it on a node with more threads, or carve this node with a policy of fewer vCPUs per slice; the "
        "precheck and the carve now refuse such a slice there."
    )


VM_CPU_DETAIL = (
    "zosbase pkg/vm.go VM.Validate: vm.CPU == 0 || vm.CPU > uint8(cpu.Counts(true)) -> 'invalid cpu must be "
    "between 1 and %d' (zos#2056, since 2023-09), wrapped by vmd as 'machine configuration validation failed'; "
    "the Grid Proxy's cru is that same count."
)


def flist_context(reason: str) -> bool:
    """The refusal came through the flist path (an image being mounted or written)."""
    return bool(_FLIST.search(reason))


__all__ = [
    "CACHE_FULL",
    "CACHE_MISSING",
    "CACHE_MISSING_WORDS",
    "VM_CPU",
    "ZosWord",
    "cache_full_words",
    "cache_grow_wait",
    "cpu_words",
    "elsewhere_word",
    "reason_from",
    "validation_word",
]
