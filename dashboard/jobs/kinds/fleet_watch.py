"""The fleet watch: every registered node read again, a page at a time, by the beat (nodes.services.watch)."""

from dashboard.jobs.kinds.declaration import JobKind
from dashboard.jobs.results import WatchResult


def watch_target(_job, _asked) -> str:
    return "every registered node"


KIND = JobKind(
    value="fleet-watch",
    label="Fleet watch",
    result=WatchResult,
    runner="dashboard.nodes.services.watch:fleet_watch_job",
    target="fleet",
    describe=watch_target,
    dry_run=False,
    takes="a fleet watch reads every registered node; it takes no node or farm",
    one_at_a_time="one_active_fleet_watch_job",
    progress_label="Nodes read",
    counts_failures=True,
    when_lost="the pages read before it are written; the next watch reads every node again",
    background=True,
)
