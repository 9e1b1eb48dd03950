"""What each kind of job returns: one typed model per kind, stored as JSON on Job.result and read back typed.

The job that writes a result builds its model (validation catches a wrong shape before it is
stored); the job page (one template partial per kind), the jobs list, the commands' text and JSON,
the API and the audit trail all read it back through `dashboard.jobs.kinds.result_of` and say it
with `sentence()`. Which kind returns which model is its declaration's (dashboard.jobs.kinds).

Models allow extra keys and default the missing ones: a result stored by an older or newer version
of the product is still read (and one that cannot be read is shown as it is stored).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from dashboard import capacity


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class Figures(_Part):
    """One node's (or a sum of nodes') figures at a moment: the meanings of figures.services.figures."""

    slices: int = 0
    free: int = 0
    deployable: int | None = None
    placeable: int | None = None
    phantom: int | None = None


class SliceItem(_Part):
    index: int
    cru: int = 0
    mru: int = 0
    sru: int = 0
    state: str = ""


class PolicyRef(_Part):
    name: str = ""
    version: int = 0


class JobResult(_Part):
    """What every kind's result has: notes for people. `sentence()` is its one line."""

    notes: list[str] = []

    # Keys left out of the audit trail's copy: lists that grow with the catalog or the fleet.
    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset(
        {"removed", "added", "kept", "nodes", "verdicts", "capacity_seen", "notes"}
    )
    # Keys the jobs list never reads, left out by PostgreSQL before the row is sent: lists whose
    # size follows the fleet (jobs.selectors.jobs).
    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset()

    def sentence(self) -> str:
        return getattr(self, "words", "") or ""

    def audit_summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude=set(self.AUDIT_LEAVES_OUT))

    def stored(self) -> dict[str, Any]:
        """As Job.result keeps it."""
        return self.model_dump(mode="json")


class ReregisterResult(JobResult):
    node_id: int | None = None
    dry_run: bool = False
    changed: bool = False
    up_to_date: bool = False
    policy: PolicyRef = PolicyRef()
    slice: dict[str, int] = {}
    limited_by: str | None = None
    generation: dict[str, int] = {}
    capacity_seen: dict[str, Any] = {}
    before: Figures = Figures()
    after: Figures = Figures()
    removed: list[SliceItem] = []
    added: list[SliceItem] = []
    kept: list[SliceItem] = []

    def sentence(self) -> str:
        """ "7 → 6 slices: 6 free removed, 5 added, 1 deployed kept" (what would happen, for a dry run)."""
        if self.up_to_date:
            return f"already up to date: {self.after.slices} slice{_s(self.after.slices)}, nothing changed"
        parts = []
        if self.removed:
            parts.append(f"{len(self.removed)} free removed")
        if self.added:
            parts.append(f"{len(self.added)} added")
        kept: dict[str, int] = {}
        for item in self.kept:
            kept[item.state or "free"] = kept.get(item.state or "free", 0) + 1
        parts.extend(f"{n} {state} kept" for state, n in sorted(kept.items()))
        change = f"{self.before.slices} → {self.after.slices} slices"
        if not parts:  # a dry run records nothing: it never says "recorded"
            return f"{change}: {'would be recorded' if self.dry_run else 'recorded'} as carved by {self.policy.name}"
        words = f"{change}: {', '.join(parts)}"
        return f"would be {words}" if self.dry_run else words


class BulkNode(_Part):
    node_id: int | None = None
    changed: bool = False
    before: Figures = Figures()
    after: Figures = Figures()
    removed: int = 0
    added: int = 0
    kept: int = 0


class Failure(_Part):
    node_id: int | None = None
    error: str


class SliceCounts(_Part):
    removed: int = 0
    added: int = 0
    kept: int = 0


class FleetFigures(_Part):
    before: Figures = Figures()
    after: Figures = Figures()


class BulkResult(JobResult):
    dry_run: bool = False
    farm_id: int | None = None
    stale: int = 0
    seen: int = 0
    reregistered: int = 0
    unchanged: int = 0
    failed: int = 0
    slices: SliceCounts = SliceCounts()
    fleet: FleetFigures = FleetFigures()
    failures: list[Failure] = []
    failures_more: int = 0
    nodes: list[BulkNode] = []
    nodes_total: int = 0
    nodes_truncated: bool = False

    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset({"nodes", "failures"})
    # How the run read the grid: pages by id (farm order), nodes a page lacked or failed on read alone,
    # plans read again because their reading was past BULK_READING_MAX_AGE; every request counted.
    pages: int = 0
    pages_failed: int = 0
    read_alone: int = 0
    reread: int = 0
    requests: int = 0
    reads: str = ""
    words: str = ""


class VerdictLine(_Part):
    slice: int
    fits: bool
    words: str = ""


class PrecheckResult(JobResult):
    node_id: int | None = None
    status: str = ""
    cause: str = ""  # "node-offline": closed (down, standby, ...), said in one line (away_words), not per slice
    closure: str = ""  # capacity.closures key ("" open; results stored before closures: from status)
    closure_detail: str = ""
    policy: PolicyRef = PolicyRef()
    checked_at: str = ""
    read_now: bool = True  # False: answered from the stored reading (it was young enough)
    reading_age_seconds: float | None = None
    total: dict[str, int] = {}
    used: dict[str, int] = {}
    free_slices: int = 0
    placeable_now: int = 0
    phantom_slices: list[int] = []
    verdicts: list[VerdictLine] = []
    words: str = ""

    @property
    def closed(self) -> capacity.Closure | None:
        """Why the node offered nothing (capacity.closures); a result older than closures: its status."""
        return capacity.stored_closure(self.closure, self.closure_detail) or capacity.status_closure(self.status)

    @property
    def away(self) -> bool:
        """The node was closed (down, on standby, ...): nothing is placeable, whatever each slice's numbers."""
        return self.closed is not None

    @property
    def away_words(self) -> str:
        closed = self.closed
        return closed.sentence(free_slices=self.free_slices, node_id=self.node_id) if closed else ""

    @property
    def away_badge(self) -> str:
        closed = self.closed
        return closed.badge if closed else ""


class PolicyTrialResult(JobResult):
    """A policy trial's month: the policy in force against the candidate (policies.services.policy_trial)."""

    words: str = ""
    candidate: str = ""
    in_force: str = ""
    in_force_mixed: int = 0
    nodes_in_scope: int = 0
    nodes: int = 0
    sampled: bool = False
    skipped: int = 0
    hidden_use: int = 0
    events: int = 0
    seed: int = 0
    days: int = 0
    policies: dict[str, dict[str, Any]] = {}

    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = JobResult.AUDIT_LEAVES_OUT | {"policies"}


# Nodes listed by id in an onboarding's result; the counts cover all of them.
LISTED = 200


def _listed(entries: list, entry: Any) -> None:
    """Keep `entry` among the first LISTED of its list (the caller counts every one in its `_total`)."""
    if len(entries) < LISTED:
        entries.append(entry)


def _unreadable_words(total: int, listed: list[list[str]]) -> str:
    """ "; 3 node(s) could not be read (first: label: reason)" for the grid's entries refused, "" for none."""
    if not total:
        return ""
    first = f" (first: {listed[0][0]}: {listed[0][1]})" if listed else ""
    return f"; {total} node(s) could not be read{first}"


class _SaidInWords(JobResult):
    """A result whose one line is its words(), stored with it: the jobs list shows them without reading
    the lists back."""

    def stored(self) -> dict[str, Any]:
        return {**super().stored(), "words": self.words()}

    def sentence(self) -> str:
        return self.words()

    def words(self) -> str:
        raise NotImplementedError


class OnboardResult(_SaidInWords):
    """What adding nodes from the grid did (or, in a dry run, would do)."""

    dry_run: bool = False
    finished: bool = False  # False: a read failed, `stopped` says where; running it again finishes
    stopped: str = ""
    reads: int = 0  # pages read, and nodes read one by one
    requests: int = 0
    registered: int = 0  # new nodes (would be, in a dry run)
    refreshed: int = 0  # known nodes whose reading was written
    changed: int = 0  # of those, how many reported other capacity or status than stored
    deployable: int = 0  # slices the new nodes' catalogs hold (would hold)
    pools_heard: int = 0  # new nodes whose pools they answered over RMB (0 without an rmb-peer)
    new_nodes: list[dict[str, Any]] = []  # the first LISTED: node_id, farm_id, status, deployable, policy
    skipped: list[list[str]] = []  # entries the grid sent that could not be read: [label, reason]
    skipped_total: int = 0
    # Every entry the grid sent was refused and none was read: the run failed (the command exits non-zero).
    refused_all: bool = False
    not_found: list[int] = []  # ids the grid does not know (the first LISTED)
    not_found_total: int = 0
    left_out: list[list[Any]] = []  # [node_id, why]: wrong status, unreadable, refused
    left_out_total: int = 0
    pages_done: list[str] = []

    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = JobResult.AUDIT_LEAVES_OUT | {
        "new_nodes",
        "skipped",
        "not_found",
        "left_out",
        "pages_done",
    }
    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset(
        {"new_nodes", "skipped", "left_out", "not_found", "pages_done"}
    )

    def leave_out(self, node_id: int, why: str) -> None:
        self.left_out_total += 1
        _listed(self.left_out, [node_id, why])

    @property
    def nodes_read(self) -> int:
        return self.registered + self.refreshed

    def words(self) -> str:
        verb = "would register" if self.dry_run else "registered"
        text = (
            f"{verb} {self.registered} new node(s) with {self.deployable} deployable slice(s); "
            f"{'would refresh' if self.dry_run else 'refreshed'} {self.refreshed} known node(s)"
            f"{f' ({self.changed} changed)' if self.changed else ''}; {self.reads} read(s), {self.requests} request(s)"
        )
        text += _unreadable_words(self.skipped_total, self.skipped)
        if self.not_found_total:
            text += f"; {self.not_found_total} id(s) not on the grid"
        if self.left_out_total:
            text += f"; {self.left_out_total} left out"
        if self.refused_all:
            text += ". Nothing was read: the grid's answers are not in a shape this dashboard reads"
        elif not self.finished:
            text += f". Stopped at {self.stopped}; run it again to finish the rest (what was read is committed)"
        return text


class PolicyFiguresResult(JobResult):
    """What a figures rewrite after a policy edit did (policies.services.policy_figures)."""

    policy: str = ""  # "name vN"
    nodes: int = 0  # nodes it rewrote (those the policy may govern)
    changed: int = 0  # of those, how many had other figures afterwards
    words: str = ""


class WatchResult(_SaidInWords):
    """What one fleet watch read: every registered node, a page at a time (nodes.services.watch)."""

    skipped: str = ""  # not run: why (the previous watch was still running)
    nodes: int = 0  # registered nodes when it started
    read: int = 0  # nodes whose reading was written
    changed: int = 0  # of those, how many reported another status or capacity than stored
    events: int = 0  # node events the readings made (services.node_events)
    pages: int = 0
    requests: int = 0
    by_farm: bool = False  # the proxy refused `node_ids` (older than v0.15.6): read by farm pages
    missed: list[list[Any]] = []  # [node_id, why]: nodes the grid did not answer for (the first LISTED)
    missed_total: int = 0
    oldest_reading_at: str | None = None  # after the run, the oldest reading of any registered node
    # With an rmb-peer: nodes asked their pools (unknown, or older than POOLS_MAX_AGE) and how many answered.
    pools_asked: int = 0
    pools_heard: int = 0
    # Entries the grid sent that could not be read ([label, reason], the first LISTED): the node keeps its
    # last reading, and the page, /metrics and an alert say how many and why.
    refused: list[list[str]] = []
    refused_total: int = 0

    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = JobResult.AUDIT_LEAVES_OUT | {"missed", "refused"}
    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset({"missed", "refused"})

    def refuse(self, label: str, why: str) -> None:
        self.refused_total += 1
        _listed(self.refused, [label, why])

    def miss(self, node_id: int, why: str) -> None:
        self.missed_total += 1
        _listed(self.missed, [node_id, why])

    def words(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        text = (
            f"read {self.read} of {self.nodes} node(s) in {self.pages} page(s), {self.requests} request(s)"
            f"{' by farm (the grid proxy refused node_ids)' if self.by_farm else ''}; "
            f"{self.changed} changed, {self.events} event(s)"
        )
        text += _unreadable_words(self.refused_total, self.refused)
        if self.missed_total:
            text += f"; the grid did not answer for {self.missed_total} node(s)"
        return text


def _s(n: int) -> str:
    return "" if n == 1 else "s"


class AuditFindingItem(_Part):
    """One disagreement the slice audit found (dashboard.capacity.catalog_audit.Finding, stored)."""

    key: str
    kind: str  # orphan, foreign, count, not-checked
    node_id: int
    words: str = ""
    slice_index: int | None = None
    contract_id: int | None = None
    workload_id: str = ""
    since: str | None = None  # ISO time the disagreement can be dated from, when known
    first_seen: str | None = None  # the first audit that saw it (ISO)
    fixable: bool = False


class CatalogAuditResult(JobResult):
    """What a slice audit found and, with the fix, what it changed (catalogs.services.catalog_audit)."""

    dry_run: bool = True
    nodes: int = 0
    checked: int = 0
    requests: int = 0
    counts: dict[str, int] = {}  # findings by kind (not-checked included)
    findings: list[AuditFindingItem] = []
    fixed: list[str] = []  # keys of the findings the fix changed
    not_fixed: list[list[str]] = []  # [key, why]
    fix_of: int | None = None  # the dry run a fix followed
    words: str = ""

    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = JobResult.AUDIT_LEAVES_OUT | {"findings", "not_fixed"}
    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset({"findings", "fixed", "not_fixed"})

    @property
    def disagreements(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind != "not-checked")


class RunRollbackResult(JobResult):
    """What a rollback of a re-register's run did (catalogs.services.reregister.rollback): every node it put back,
    and every node it left as it was with why (a slice changed hands, the catalog changed again ...)."""

    of_job: int | None = None  # the re-register job rolled back
    nodes: int = 0  # nodes it tried (those whose previous catalog was still kept)
    rolled_back: list[int] = []  # grid ids
    blocked: dict[str, str] = {}  # grid id -> why it was left untouched
    words: str = ""

    AUDIT_LEAVES_OUT: ClassVar[frozenset[str]] = JobResult.AUDIT_LEAVES_OUT | {"rolled_back", "blocked"}
    LIST_LEAVES_OUT: ClassVar[frozenset[str]] = frozenset({"rolled_back", "blocked"})
