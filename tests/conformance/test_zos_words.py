"""Every refusal string on ZOS's capacity, storage, VM-validation and flist paths, written from the source
(zosbase 063d895 unless said; path:line of the format string, its verbs filled as Go would), bare and as
the Go deployer wraps it, classified with its cause (grid/classify.py, grid/zos_words.py).
"""

from __future__ import annotations

import pytest

from dashboard.grid.classify import CAUSES, classify

GiB = 1024**3
WL = "81-27043-vm"  # a workload id, "<twin>-<contract>-<name>" (%s in "failed to mount flist: %s")
NOT_FOUND = "subvolume 'zos-cache' not found: file does not exist"  # storage.go:560 Wrapf(os.ErrNotExist, ...)
NO_SPACE = "not enough space left in pools of this type ssd"  # pkg/storage.go:24 %s of zos.SSDDevice

WORDS = [
    # --- memory and the zos-cache (primitives/statistics.go, storage.go, provisiond getNodeReserved) ---
    # statistics.go:155 (%d %d) wrapped by :171
    (
        f"failed to satisfy required capacity: cannot fulfil required memory size {4 * GiB} bytes out of usable 3221225472 bytes",
        "memory",
    ),
    # statistics.go:151 wrapping the reserve's error (getNodeReserved -> Cache() -> path())
    (f"failed to satisfy required capacity: failed to get available memory: {NOT_FOUND}", "cache-missing"),
    (NOT_FOUND, "cache-missing"),  # zos.statistics.get's error over RMB (zos#2043)
    # tfgrid-sdk-go grid-proxy internal/explorer/server.go:527 (%w) answered as {"error": ...}
    (f"failed to get get node statistics from relay: {NOT_FOUND}", "cache-missing"),
    ("failed to satisfy required capacity: failed to get available memory: failed to list deployments", "unknown"),
    ("failed to satisfy required capacity: failed to calculate workload needed capacity: bad data", "unknown"),
    # --- the flist path and the cache's quota (primitives/vm/vm.go:245, flist.go:227,453) ---
    (
        f"failed to mount flist: {WL}: ro mount of flist failed: failed to create flist mountpoint: "
        "mkdir /var/cache/modules/flistd/ro/e4b87e423369bbd1a5550a1ca99a69a6: disk quota exceeded",
        "cache-full",
    ),
    (
        f"failed to mount flist: {WL}: ro mount of flist failed: write /var/cache/modules/flistd/flist/x: disk quota exceeded",
        "cache-full",
    ),
    # primitives/vm/utils.go:67 wrapping storage/disk.go:150 (zos#2147's first error)
    (
        "failed to write image to disk: failed to write disk image: "
        "read /var/cache/modules/flistd/mountpoint/81-26953-vm/image.raw: input/output error",
        "cache-full",
    ),
    ("failed to mount cloud container base image: ro mount of flist failed: disk quota exceeded", "cache-full"),
    # flist.go:264 (%s in quotes) and :688 (%v of resp.Status) and :645
    (f"failed to mount flist: {WL}: ro mount of flist failed: unknown extension: '.tar'", "validation"),
    (f"failed to mount flist: {WL}: ro mount of flist failed: fail to download flist: 404 Not Found", "validation"),
    (
        f"failed to mount flist: {WL}: ro mount of flist failed: fail to download flist: 502 Bad Gateway",
        "grid-unavailable",
    ),
    ("failed to get cloud-container flist hash: failed to get flist hash: 503 Service Unavailable", "grid-unavailable"),
    # storage/disk.go:145 through primitives/vm/utils.go:67
    ("failed to write image to disk: image size is bigger than disk", "validation"),
    # --- disk (storage.go, disk.go, primitives) ---
    (NO_SPACE, "disk"),
    ("not enough space left in pools of this type hdd", "disk"),
    (f"failed to find a candidate to host vdisk of size '{151 * GiB}': {NO_SPACE}", "disk"),  # disk.go:165 (%d)
    (f"failed to create vm rootfs: {NO_SPACE}", "disk"),  # primitives/vm/utils.go:111
    ("failed to truncate disk to size: no space left on device", "disk"),  # disk.go:194 (fallocate ENOSPC)
    (f"failed to create read-write subvolume for 0-fs: {NO_SPACE}", "disk"),  # flist.go:372
    (f'failed to create new volume with name "vol1": {NO_SPACE}', "disk"),  # primitives/volume/volume.go:49 (%q %w)
    # storage.go:746 and :733: a pool that would not mount, btrfs refusing: the node's fault, not its room
    ("failed to create vm rootfs: failed to search candidate on mounted pools: failed to mount pool", "unknown"),
    ("failed to create vm rootfs: failed to create subvolume, logs might have more information", "unknown"),
    # --- VM validation (gridtypes/zos/zmachine.go Valid, zmount.go, volume.go) ---
    ("cpu capacity can't be 0", "validation"),  # zmachine.go:124
    ("cpu capcity can't be 0", "validation"),  # the same before zosbase fixed the typo
    ("mem capacity can't be less that 250M", "validation"),  # :127
    ("disk size can't be less that 2147483648. Set to 0 for minimum", "validation"),  # :131 (%d)
    ("only one network private network is supported at the moment", "validation"),  # :115
    ("invalid IP", "validation"),  # :120
    ("public ip is not found", "validation"),  # :136
    # :140 `errors.Wrapf(err, "workload of name '%s' is not a public ip", ...)` wraps a nil err there, and
    # pkg/errors' Wrapf(nil) is nil: ZOS never says it (still classified, should a build fix it).
    ("workload of name 'ip1' is not a public ip", "validation"),
    ("public ip is assigned to multiple vms", "validation"),  # :161
    ("'ygg' is reserved network name", "validation"),  # :167 (%s)
    ("invalid mycelium seed length expected 6 bytes", "validation"),  # :174
    ("invalid size", "validation"),  # zmount.go:19, volume.go:24
    # --- vmd (pkg/vm.go Validate, wrapped by pkg/vm/manager.go:426) ---
    ("machine configuration validation failed: invalid cpu must be between 1 and 2", "validation"),  # :184 (%d)
    ("machine configuration validation failed: invalid cpu must be between 1 and 64", "validation"),
    ("machine configuration validation failed: invalid cpu must be 1", "validation"),  # :182
    ("machine configuration validation failed: invalid memory must not be less than 250M", "validation"),  # :172
    ("machine configuration validation failed: name is required", "validation"),  # :164
    ("machine configuration validation failed: kernel-image is required", "validation"),  # :168
    ("machine configuration validation failed: validating virtiofs /: mount target can't be /", "validation"),  # :189
    ("machine configuration validation failed: validating disk /: mount target can't be /", "validation"),  # :195
    ("machine configuration validation failed: failed to get count of cpus", "unknown"),  # :177
    ("a vm with same name already exists", "unknown"),  # manager.go:432
    ("failed to spawn vm machine process '26-121634-vmj3a98'", "unknown"),  # vm/ch.go:311 (zos#2355)
    # --- primitives/vm (vm.go, utils.go) ---
    ("at least one mount has to be attached for Vm mode", "validation"),  # utils.go:40
    ("mount is not a valid disk workload", "validation"),  # utils.go:50
    ("boot disk was not deployed correctly", "unknown"),  # utils.go:54: the disk's own error says why
    ("only one private network is support", "validation"),  # vm.go:164
    ("public ipv4 is requested, but not supported on this node", "public-ip"),  # vm.go:170 (ZOS-light)
    ("usage of GPU is not allowed unless node is rented", "gpu"),  # vm.go:140
    # --- updates (primitives/zmount, primitives/volume, storage.go) ---
    ("not safe to shrink a disk", "validation"),  # zmount.go:89
    ("disk is mounted, please delete the VM first", "validation"),  # zmount.go:113
    ("cannot shrink volume to be less than provisioned space. old: 10737418240, requested: 5368709120", "validation"),
    ("invalid volume name. zdb prefix is reserved", "validation"),  # storage.go:394
]


@pytest.mark.parametrize(("raw", "cause"), WORDS, ids=[w[0][:60] for w in WORDS])
def test_each_zos_refusal_is_classified_with_its_cause(raw, cause):
    assert cause in CAUSES
    for text in (raw, f"workload vm within deployment 4711 failed with error: {raw}"):
        diagnosis = classify(text)
        assert diagnosis.cause == cause, text
        assert diagnosis.words  # plain words for support staff
        if diagnosis.cause != "unknown":
            assert "not an error the dashboard knows" not in diagnosis.words


@pytest.mark.parametrize(("raw", "cause"), WORDS, ids=[w[0][:60] for w in WORDS])
def test_zos_own_reason_is_kept_whole_from_its_own_first_words(raw, cause):
    reason = classify(f"error waiting deployment: workload vm within deployment 9 failed with error: {raw}").reason
    assert reason and reason in raw  # the deployer's wrappers are dropped, ZOS's words are not changed


def test_a_reason_that_is_not_zos_stays_unknown():
    assert classify("the moon is made of cheese").cause == "unknown"
