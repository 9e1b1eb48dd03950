"""zosbase 063d895 pkg/storage/storage.go, the zos-cache's quota:

    35  cacheSize = 5 * gib; 36 cacheGrowPercent = 60; 37 cacheShrinkPercent = 20; 38 cacheCheckDuration = 5 * time.Minute
    640 func (s *Module) checkAndResizeCache(cache filesystem.Volume, sizeMultiplier uint64) error {
    645     if usage.Size == 0 { usage.Size = max(sizeMultiplier, usage.Excl*2); cache.Limit(usage.Size) }
    653     percent := usage.Excl * 100 / usage.Size
    655     if percent >= cacheGrowPercent { size += sizeMultiplier }
    657     else if percent < cacheShrinkPercent && size > sizeMultiplier {
    661         size = usage.Excl * 2; size = ((size / sizeMultiplier) * sizeMultiplier) + sizeMultiplier }
    667     if size < sizeMultiplier { size = sizeMultiplier }

storage_test.go:407 TestCacheResize uses a multiplier of 5 bytes; the arithmetic is integer and scales,
so its cases are run here with ZOS's real 5 GiB (every figure times 1 GiB). The simulated node
(sim/grid/storaged.py resized_cache) is judged by them; the product (capacity.cache_keep) keeps the
quota and one step beside it, which these cases bound.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard import capacity
from dashboard.grid import zos_words
from sim.grid.storaged import resized_cache

GiB = capacity.GiB

TEST_CACHE_RESIZE = [
    # storage_test.go, in order: (Size, Excl) -> the Limit the mock expects (None: no Limit call)
    (100, 1, 5),  # :413 resize down to cacheSize
    (100, 19, 40),  # :428 19*2 = 38, floored to 35, + 5 = 40
    (100, 0, 5),  # :442 no files
    (1000, 16, 35),  # :455
    (100, 91, 105),  # :468 resize up: 100 + 5
    (100, 50, None),  # :481 leave as is
]


@pytest.mark.parametrize(("size", "excl", "limit"), TEST_CACHE_RESIZE)
def test_the_simulated_node_resizes_the_cache_as_test_cache_resize_expects(size, excl, limit):
    expected = size if limit is None else limit
    assert resized_cache(size * GiB, excl * GiB) == expected * GiB


def test_a_cache_without_a_quota_gets_one_first():
    # storage.go:645: usage.Size == 0 -> max(multiplier, Excl*2), then judged as any quota.
    assert resized_cache(0, 3 * GiB) == 6 * GiB
    assert resized_cache(0, 0) == 5 * GiB
    assert resized_cache(0, GiB) == 5 * GiB


@given(quota_steps=st.integers(1, 200), in_use=st.integers(0, 1000 * GiB))
def test_the_product_keeps_room_for_any_one_check(quota_steps, in_use):
    # One check grows the quota by one step at most: what the carve keeps on the cache's pool
    # (capacity.cache_keep: the quota and its next step) holds it. Deliberate: between two pool reports
    # the cache may grow more than one step (a check every 5 minutes): docs/zos.md says so.
    quota = quota_steps * capacity.CACHE_STEP
    assert resized_cache(quota, min(in_use, quota)) <= capacity.cache_keep(quota)


def test_the_constants_are_zos_own():
    assert capacity.CACHE_STEP == zos_words.CACHE_STEP == 5 * GiB
    assert (zos_words.CACHE_GROW_PERCENT, zos_words.CACHE_CHECK_MINUTES) == (60, 5)


@pytest.mark.parametrize(
    ("image", "quota", "in_use", "wait"),
    [
        (GiB, 10 * GiB, 5 * GiB, (0, 0)),  # fits the headroom now
        (8 * GiB, 10 * GiB, 6 * GiB, (1, 5)),  # 4 GiB short: one step, one check
        (25 * GiB, 5 * GiB, 3 * GiB, (5, 25)),  # zos#2147's 25 GB image on a young cache: five steps
    ],
)
def test_how_long_a_full_vm_image_waits_for_the_cache_to_grow(image, quota, in_use, wait):
    assert zos_words.cache_grow_wait(image, quota, in_use) == wait
    words = zos_words.cache_full_words(image=image, quota=quota, in_use=in_use)
    assert "transient" in words and "do not re-register" in words
    if wait[0]:
        assert f"about {wait[1]} minutes" in words
