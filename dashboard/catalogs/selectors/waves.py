"""What the job page shows of a re-register's waves and generations: the waves, the budget, what was rolled back."""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboard.models import CatalogGeneration, Job, WaveRun

# The job page lists at most this many nodes rolled back or kept (the rest are counted).
LISTED = 50


@dataclass
class WavesView:
    run: WaveRun | None
    generations: int = 0  # nodes whose previous catalog this job kept
    rolled_back: list[int] = field(default_factory=list)  # grid ids, the first LISTED
    rolled_back_total: int = 0
    can_roll_back: list[int] = field(default_factory=list)  # grid ids still kept, the first LISTED
    blocked: dict = field(default_factory=dict)  # the last run rollback's blocked nodes: grid id -> why
    rollback_job: Job | None = None  # the run's latest rollback job (active, or the last one)

    @property
    def kept_total(self) -> int:
        return self.generations - self.rolled_back_total


def waves_view(job: Job) -> WavesView | None:
    """The job's waves and kept generations; None for a job that has neither (four queries at most)."""
    if job.kind not in (Job.Kind.BULK_REREGISTER, Job.Kind.REREGISTER):
        return None
    run = WaveRun.objects.filter(job=job).select_related("approved_by", "stopped_by").first()
    generations = CatalogGeneration.objects.filter(job=job)
    total = generations.count()
    if run is None and total == 0:
        return None
    back = generations.filter(rolled_back_at__isnull=False)
    return WavesView(
        run=run,
        generations=total,
        rolled_back=list(back.order_by("node__grid_id").values_list("node__grid_id", flat=True)[:LISTED]),
        rolled_back_total=back.count() if total else 0,
        can_roll_back=list(
            generations.filter(rolled_back_at__isnull=True)
            .order_by("node__grid_id")
            .values_list("node__grid_id", flat=True)[:LISTED]
        ),
        blocked=(run.rollback or {}).get("blocked", {}) if run is not None else {},
        rollback_job=(
            Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK, parameters__job_id=job.pk).order_by("-pk").first()
            if total
            else None
        ),
    )
