"""A test-only hook: make a worker sleep at a named point of a job, so a test can SIGKILL it there.

With settings.DEBUG on, JOB_TEST_PAUSE="<point>:<seconds>[:<n>]" makes the worker
sleep at a named point, or only the n-th time it gets there (`job_test_pause`; catalogs.services.reregister
names "claimed", "planned", and "swapped", the last one INSIDE a transaction that writes
catalogs, after its writes: one node's, or a bulk batch's) and, if JOB_TEST_PAUSE_MARKER names
a file, write the point's name to it first. tests/jobs/test_jobs_kill.py uses it to SIGKILL a worker
at those points.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)


_test_pause_reached: Counter[str] = Counter()


def job_test_pause(point: str) -> None:
    """Sleep at a named point when JOB_TEST_PAUSE says so; inert unless settings.DEBUG (see module doc).

    "<point>:<seconds>:<n>" sleeps only the n-th time this process reaches the point (a bulk
    job's second batch, say); without n, every time.
    """
    raw = os.environ.get("JOB_TEST_PAUSE", "")
    if not raw or not settings.DEBUG:
        return
    name, _, rest = raw.partition(":")
    if name != point:
        return
    seconds, _, nth = rest.partition(":")
    _test_pause_reached[point] += 1
    if nth and _test_pause_reached[point] != int(nth):
        return
    marker = os.environ.get("JOB_TEST_PAUSE_MARKER")
    if marker:
        Path(marker).write_text(point)
    log.warning("JOB_TEST_PAUSE: sleeping %s s at %r", seconds or "60", point)
    time.sleep(float(seconds or 60))
