"""A bulk run's limits and hooks: how it cuts its work, and where a caller may watch or step in.

catalogs.services.reregister.bulk reads these; tests and callers pass their own BulkLimits or BulkHooks
through jobs.services.job_run.job_execute(job=..., limits=..., hooks=...) instead of patching the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the plan module is the bulk run's, not these seams'
    from dashboard.catalogs.services.reregister.plan import ReregisterPlan
    from dashboard.models import Node
# Bulk runs read, plan and apply at most this many nodes per batch (one round of queries, one
# transaction), and split a smaller run into about BULK_PROGRESS_STEPS batches so its progress moves.
BULK_CHUNK = 100
BULK_PROGRESS_STEPS = 10
# Bulk runs stop when this many nodes in a row could not be read because the grid is unreachable:
# going on would only spend the time limit on timeouts.
BULK_GRID_DOWN_AFTER = 5
# A bulk result keeps counts and totals, every failure up to BULK_FAILURES_KEPT, and the first
# BULK_SAMPLE changed nodes: its size (the worker's memory, the job page) must not grow with the
# fleet. Each node's own detail is in its AuditEvent ("job.node-reregistered"), written with its catalog.
BULK_SAMPLE = 100
BULK_FAILURES_KEPT = 1000


@dataclass(frozen=True)
class BulkLimits:
    """How a bulk run cuts its work and bounds its result; the module's constants unless a caller says."""

    chunk: int = field(default_factory=lambda: BULK_CHUNK)
    progress_steps: int = field(default_factory=lambda: BULK_PROGRESS_STEPS)
    sample: int = field(default_factory=lambda: BULK_SAMPLE)
    failures_kept: int = field(default_factory=lambda: BULK_FAILURES_KEPT)


@dataclass(frozen=True)
class BulkHooks:
    """Where a bulk run lets its caller watch or step in, each called with what the run has then.

    The seam for tests (a node that changes after its plan, a batch whose write fails, a worker that
    dies between batches) and for callers that pace a run themselves; every hook is optional.

    - planned(node): right after a node's plan is made (None or not), before its batch is applied;
    - writing(plans): inside a batch's transaction, before its catalogs are written (raising there
      fails the batch: it is applied again one node at a time);
    - progressed(fields): each progress the run writes (job_progress's step, done, total, failed);
    - batch_done(done): after a batch is committed, with the number of nodes handled so far;
    - paused(wave): while a run in waves is paused, in place of each wait (the WaveRun).
    """

    planned: Callable[[Node], None] | None = None
    writing: Callable[[list[ReregisterPlan]], None] | None = None
    progressed: Callable[[dict], None] | None = None
    batch_done: Callable[[int], None] | None = None
    # A run in waves, paused (catalogs.services.reregister.waves): called instead of the wait between two looks at
    # its WaveRun; a test's admin resumes or stops it there.
    paused: Callable[[object], None] | None = None


NO_HOOKS = BulkHooks()
