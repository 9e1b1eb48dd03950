"""The API's shapes: what comes in and what goes out, one typed schema each (bytes are integers).

Outputs are read from the selectors' own dataclasses and models by attribute, so a field here
is a field there; nothing is a dict whose keys a client has to guess.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from django.core.paginator import Paginator
from ninja import Field, Schema

from dashboard.api.inputs import Line, ReportTime, Text, Whole
from dashboard.api.node_room import RoomOut, WakeOut, WarningOut
from dashboard.deployments.services.outcomes import MARKETPLACE_ID_MAX, MAX_ERROR_TEXT, WORKLOAD_ID_MAX


class ErrorOut(Schema):
    detail: str = Field(description="What went wrong and what to do, in words")
    field: str | None = Field(None, description="The input at fault, when one is")


# The refusals of every endpoint that reads an input: a bad input, no token, a token without the scope;
# and those of one that names a row (a node, a job), which may not be there.
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut}
ERRORS_OR_404 = {**ERRORS, 404: ErrorOut}


class PageOut(Schema):
    """One page of a paged list: the count over all pages, the page, how many pages, and their size."""

    count: int
    page: int
    pages: int
    per_page: int


def page_out(listed, *, page: int, per_page: int, items: str, out: Callable[[Any], Any]) -> dict:
    """The page asked for of `listed` (a query or a list) as a PageOut: its rows under `items`, each `out`."""
    shown = Paginator(listed, per_page).get_page(page)
    return {
        "count": shown.paginator.count,
        "page": shown.number,
        "pages": shown.paginator.num_pages,
        "per_page": per_page,
        items: [out(row) for row in shown],
    }


class ResourcesOut(Schema):
    cru: int = Field(description="cores")
    mru: int = Field(description="memory, bytes")
    sru: int = Field(description="SSD, bytes")
    hru: int = Field(description="HDD, bytes")


class FleetTotalsOut(Schema):
    nodes: int
    nominal: int = Field(description="slices in the stored catalogs")
    deployable: int = Field(description="slices the policies in force carve")
    gap: int = Field(description="nominal - deployable; above 0, catalogs offer more than the nodes hold")
    free: int = Field(description="free slices on offer (those held for a buyer are in held)")
    held: int = Field(0, description="free slices held for a buyer now (live holds)")
    rented: int
    deployed: int
    failed: int
    placeable_now: int = Field(description="free slices that fit the last live reading, over the prechecked nodes")
    phantom: int = Field(description="free slices that do not fit the last live reading, over the prechecked nodes")
    phantom_on_up_nodes: int = Field(
        0, description="the phantom slices on nodes that are up: offered, refused now, and fixable by a re-register"
    )
    phantom_waiting: int = Field(
        0,
        description="the phantom slices on nodes on standby, down or closed (rented by another twin, ...): "
        "they wait on a wake, a repair or the rent",
    )
    stale: int = Field(description="nodes whose catalog differs from what their policy carves now")
    unprechecked: int = Field(description="nodes never prechecked: placeable and phantom unknown")
    deployable_now: int = Field(0, description="deployable slices on nodes that are up and open")
    deployable_after_wake: int = Field(
        0, description="deployable slices on nodes on standby (their farm can wake them)"
    )
    deployable_blocked: int = Field(
        0, description="deployable slices on nodes that are down (or whose status is unknown)"
    )
    deployable_closed: int = Field(
        0,
        description="deployable slices on nodes closed for a reason of their own (withheld, rented by another "
        "twin, ...); the four tiers add up to deployable",
    )
    deployable_closed_by_reason: dict[str, int] = Field(
        default_factory=dict, description="deployable_closed by closure (capacity.CLOSURE_REASONS keys)"
    )


class NodeRowOut(Schema):
    node_id: int
    farm_id: int
    farm_name: str
    status: str
    nominal: int
    deployable: int
    tier: str = Field(
        description='when its deployable slices can be used: "now" (up and open), "after-wake" (standby), '
        '"blocked" (down, unknown), "closed" (withheld, rented by another twin, ...)'
    )
    gap: int
    free: int = Field(description="free slices on offer (those held for a buyer are in held)")
    held: int = Field(0, description="free slices held for a buyer now (live holds)")
    rented: int
    deployed: int
    failed: int
    placeable_now: int | None = Field(description="null: never prechecked")
    phantom: int | None = Field(description="null: never prechecked")
    phantom_by_reason: dict[str, int] = Field(
        default_factory=dict, description="phantom slices by reason (closures first, then memory, disk, pool)"
    )
    closure: str = Field(
        "", description='why the node offers nothing now: "down", "standby", ... (docs/zos.md); "" when it is open'
    )
    closure_detail: str = Field("", description="the closure's detail (the renting twin, ...)")
    warnings: list[WarningOut] = Field(
        default_factory=list, description="why a deploy may fail there though it looks free (capacity.warnings)"
    )
    stale: bool
    stale_reason: str
    seen_at: datetime | None = Field(description="when the grid was last read for this node")
    policy: str = Field(description='the effective policy, "name vN"')
    uptime_percent_30d: float | None = Field(
        default=None, description="share of the last 30 days the node was up, from its readings; null: never read"
    )


class NodesPageOut(PageOut):
    count: int = Field(description="nodes matching the filters, on all pages")
    totals: FleetTotalsOut = Field(description="totals over every matching node, not only this page")
    nodes: list[NodeRowOut]


class PolicyRefOut(Schema):
    name: str
    version: int


class ReadingOut(Schema):
    seen_at: datetime | None = Field(description="last live capacity reading")
    seen_age_seconds: float | None
    prechecked_at: datetime | None = Field(description="when placeable/phantom were last worked out")
    prechecked_age_seconds: float | None
    reported_at: datetime | None = Field(
        default=None,
        description="when the node last reported to the grid, as of the last reading (the proxy's updatedAt)",
    )
    reported_age_seconds: float | None = None
    uncertain: bool = Field(
        default=False,
        description="the figures rest on no reading or one older than READING_MAX_AGE_MINUTES: neither phantom nor fine",
    )


class NodeFiguresOut(Schema):
    nominal: int
    deployable: int
    gap: int
    free: int = Field(description="free slices on offer (those a buyer holds are counted in held, not here)")
    held: int = Field(0, description="free slices held for a buyer until their hold ends (POST /api/v1/holds)")
    occupied: int = Field(description="rented or deployed slices")
    placeable_now: int | None
    phantom: int | None
    phantom_by_reason: dict[str, int] = Field(
        description="phantom slices by reason: the node's closure (down, standby, ...) or memory, disk, pool"
    )
    closure: str = Field("", description='why the node offers nothing now ("down", "standby", ...); "" open')
    closure_words: str = Field("", description="the closure in a sentence, for people")
    warnings: list[WarningOut] = Field(
        default_factory=list, description="why a deploy may fail there though it looks free (capacity.warnings)"
    )
    stale: bool
    stale_reason: str


class ObservationOut(Schema):
    kind: str = Field(description="memory (hidden use per VM) or disk (no pool held a disk of that size)")
    seen_at: datetime
    source: str = Field(description="deploy (seen by slice_deploy) or reported (by another program)")
    vm_count: int = Field(description="VMs running when ZOS refused")
    hidden_mru_per_vm: int
    disk_size: int | None
    raw_error: str
    standing: str = Field(
        description="how far a memory reading is believed: group (taught its ZOS build), node (its node alone, "
        "waiting for a second source) or held (held aside, not applied: see held_why)"
    )
    held_why: str = Field(description="why it is held aside, in plain words; empty otherwise")
    vouched_by: str = Field(description="who vouches for it: the dashboard, a proposed probe, or account <user id>")


class MemoryLessonOut(Schema):
    scope: str = Field(description="own (the node's refusals), build (its ZOS build's) or fleet (version unknown)")
    lesson: int
    build: str = Field(description="the ZOS version of the group; empty for the fleet-wide group")
    zos_own_mru: int | None = Field(description="bytes ZOS itself uses on the node; null: per VM over the reserve")
    per_vm_mru: int = Field(description="bytes each VM uses beyond its memory, by the group's fit")
    learnt_at: datetime
    learnt_from: list[int] = Field(description="the grid ids of the nodes whose refusals taught it")
    points: int


class LessonsOut(Schema):
    hidden_mru_per_vm: int = Field(description="bytes of memory each running VM really uses beyond its size")
    zos_own_mru: int | None = Field(default=None, description="ZOS's own memory use counted, with the margin")
    memory_lesson: MemoryLessonOut | None = Field(default=None, description="which lesson decides the memory")
    pool_room_below: int | None = Field(description="a disk this size found no pool, until something is freed")
    pools_known: bool
    observations: list[ObservationOut]


class CatalogSliceOut(Schema):
    index: int
    cru: int
    mru: int
    sru: int = Field(description="data disk, bytes; the rootfs comes on top")
    state: str = Field(
        description='"free" (on offer), "held" (free, kept for one buyer until held_until: not on offer), '
        '"rented", "deployed" or "failed"'
    )
    held_until: datetime | None = Field(None, description="held slices: when the hold ends")
    held_for: str | None = Field(
        None,
        description="held slices: the buyer's marketplace id (to a token whose user may deploy; null otherwise)",
    )
    generation: int
    fits_now: bool | None = Field(
        description="free slices on offer: fits the last live reading; null otherwise (held) or never read"
    )
    odds: float | None = Field(
        None,
        description="a free slice's probability of deploying at the first try now (the memory lesson's "
        "uncertainty, the free slices before it deployed first); at or above SLICE_MIN_ODDS it counts in "
        "deployable and placeable_now; 0 on a closed node (odds_closed_by); null when not free",
    )
    odds_closed_by: str | None = Field(
        None,
        description="a free slice of a closed node: the closure's key (figures.closure: rented, withheld, down, ...) "
        "that makes its odds 0; null when the node is open or the slice is not free",
    )
    last_deployment_state: str | None
    last_deployment_cause: str | None


class SliceVerdictOut(Schema):
    index: int
    fits: bool
    words: str


class JobTokenOut(Schema):
    prefix: str = Field(description="the token's first characters, as the tokens page lists it")
    name: str


class JobOut(Schema):
    id: int
    kind: str
    state: str
    node_id: int | None
    farm_id: int | None
    source: str
    dry_run: bool
    step: str
    progress_done: int
    progress_total: int
    requested_by: str | None
    requested_token: JobTokenOut | None = Field(
        None, description="the API token that asked, when one did (its holder is requested_by)"
    )
    target: str = Field("", description="what the job is about, in words: node 1774, all stale nodes, ...")
    described: str = Field("", description="the job in one line: kind, target and number")
    attempts: int
    error: str
    summary: str = Field(
        description="the result in one sentence (empty while the job runs or when it failed without one)"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class WaveOut(Schema):
    label: str = Field(description='"canary: farm 3", "canary: 10% of the stale nodes", "batch 2"')
    nodes: int
    done: int
    failed: int
    state: str = Field(
        description="pending, running or done; once the run ended before it: stopped (the wave in hand when it "
        "was stopped or its job failed) or not reached"
    )


class WavesOut(Schema):
    job_id: int
    job_state: str
    state: str | None = Field(description="awaiting, running, paused, stopping, stopped, done; null: not in waves")
    paused_reason: str
    budget: int | None = Field(
        description="refusals and failures allowed before it pauses (counted again from a resume)"
    )
    refusals: int = Field(description="deployments failed or refused on its re-carved nodes since it started")
    failures: int = Field(description="nodes it could not re-register")
    budget_left: int | None
    approved_by: str | None
    waves: list[WaveOut]
    kept: int = Field(description="nodes whose previous catalog this job kept (to roll back)")
    rolled_back: int
    rolled_back_nodes: list[int] = Field(description="the first 50 rolled back, by node id")
    blocked: dict[int, str] = Field(description="the last run rollback's blocked nodes: node id -> why")


class GridConditionOut(Schema):
    healthy: bool | None = Field(description="the Grid Proxy's health verdict; null: not said")
    power_state: str = Field(description='the farm power manager\'s view: "up", "down", "" (not reported)')
    power_target: str = Field(
        description='the state it was asked to take; target "up" with state "down": a wake asked for'
    )
    wake_pending: bool = Field(description="a wake was asked for and the node is not up yet")
    uptime_seconds: int | None = Field(description="seconds since the node booted, as of the last reading")
    uptime_percent_30d: float | None = Field(description="share of the last 30 days the node was up; null: never read")
    no_contracts: bool = Field(
        description="the proxy's `dedicated`: true for any node without contracts (or rented), not only dedicated farms"
    )


class PoolsOut(Schema):
    known: bool = Field(
        description="the node's SSD pools are known; false: its disks are sized for every plausible layout"
    )
    source: str | None = Field(
        description="where they came from: rmb (the node itself over RMB), simulated (the simulated grid's node, "
        "over its RMB loopback, not rmb-peer), api, form, cli, or registration (given when it was registered); null while "
        "unknown"
    )
    at: datetime | None = Field(description="when they were reported")
    age_seconds: float | None
    sizes: list[int] | None = Field(description="SSD pool sizes in bytes, in ZOS's order")
    zos_version: str | None = Field(description="the node's ZOS build as it said it (zos.system.version)")
    zos_version_source: str | None = Field(
        None,
        description="how the build was heard: rmb (the node over RMB), simulated (the simulated grid's node, in "
        "process); null when not kept",
    )
    refused: str | None = Field(
        None,
        description="the node's own last pools answer that was not taken, and why (malformed, refused, not its SSD "
        "total, refused by the registration's checks): its carve stays as it was; null when none",
    )
    refused_at: datetime | None = Field(None, description="when that answer came")


class CarriesOut(Schema):
    light: bool | None = Field(
        description="ZOS-light (true: its features list zmachine-light/network-light and no ipv4/ip, it takes no "
        "public IPv4; false: full ZOS); null when not known (the Grid Proxy did not list the node's features)"
    )
    gpus: int = Field(description="GPUs the node reports (num_gpu)")
    ipv4_slices: int | None = Field(
        description="of its placeable slices, those deployable with a public IPv4 now; null: its farm's IPs were "
        "never read (none is offered until they are)"
    )
    ipv4_words: str
    farm_ips_total: int | None = Field(
        description="its farm's public IPv4s, as last read (the pool all its nodes share); null: never read"
    )
    farm_ips_free: int | None = Field(description="of them free now, less those live holds keep; null: never read")
    farm_ipv4_slices: int | None = Field(
        description="IPv4 slices in the whole farm: min(its nodes' placeable, free IPs); null: never read"
    )
    farm_ips_read_at: datetime | None
    gpu_slices: int = Field(description="GPU slices offered: only on a node the marketplace rents")
    gpu_words: str


class NodeDetailOut(Schema):
    node_id: int
    farm_id: int
    farm_name: str
    status: str
    pools: PoolsOut = Field(description="the node's SSD pools and where they came from")
    total: ResourcesOut
    used: ResourcesOut | None = Field(description="live used capacity at the last reading (reserve included)")
    policy: PolicyRefOut
    figures: NodeFiguresOut
    carries: CarriesOut | None = None
    reading: ReadingOut
    catalog: list[CatalogSliceOut]
    verdicts: list[SliceVerdictOut] | None = Field(
        description="free slices against the last reading; null if never read"
    )
    active_job: JobOut | None
    failed_deployments: int = Field(description="deployments of this node ZOS refused or the grid failed")
    turned_away_deployments: int = Field(
        description="deployments the precheck turned away before the grid (nothing was sent)"
    )
    lessons: LessonsOut = Field(description="what ZOS's refusals taught about this node")
    grid_condition: GridConditionOut | None = None
    room: RoomOut | None = Field(
        None, description="what ZOS keeps for itself and the rest, its SSD pools now and the largest disk it takes now"
    )
    wake: WakeOut | None = Field(
        None,
        description="on standby: how long a wake takes in its farm (measured by the watch) and wait or go elsewhere",
    )


class JobsPageOut(PageOut):
    jobs: list[JobOut]


class DeploymentOut(Schema):
    id: int
    node_id: int
    farm_id: int
    slice_index: int = Field(description="the slice's number on its node; numbers are never reused")
    slice_retired: bool = Field(description="the slice is no longer in the catalog (a re-carve removed it)")
    cru: int
    mru: int
    sru: int
    state: str = Field(description="deploying, deployed, failed, refused (by our precheck) or deleted (released)")
    cause: str = Field(
        description="memory, disk, validation, node-offline, grid-unavailable, the chain's node-closed, not-authorized, "
        "contract-grace, chain-capacity, or unknown; empty if none"
    )
    raw_error: str = Field(description="ZOS's own message, as reported")
    needed_bytes: int | None
    usable_bytes: int | None
    words: str = Field(description="what happened and what to do, for support staff")
    capacity_seen: dict = Field(description="what the node reported then: status, total, used (and when it was read)")
    marketplace_id: str
    workload_id: str
    started_at: datetime
    finished_at: datetime | None


class DeploymentsPageOut(PageOut):
    deployments: list[DeploymentOut]


class DeploymentReportIn(Schema):
    node_id: Whole = Field(description="the grid's node id")
    slice_index: Whole | None = Field(
        None, description="the slice's index in the node's catalog (required, but for a probe, which is no slice)"
    )
    marketplace_id: Line = Field(
        min_length=1,
        max_length=MARKETPLACE_ID_MAX,
        description="the marketplace's deployment or contract id; reports are idempotent on it",
    )
    outcome: Literal["deployed", "failed", "released"]
    probe: bool = Field(
        False,
        description="a probe's refusal (GET /api/v1/probes): outcome failed with ZOS's memory refusal; it teaches "
        "the node's memory and counts as no failure",
    )
    error: Text = Field("", max_length=MAX_ERROR_TEXT, description="ZOS's raw error text, for a failure")
    at: ReportTime = Field(
        description="when it happened, with its UTC offset; at most REPORT_MAX_AGE_DAYS (30) days back and 5 minutes "
        "ahead of the dashboard's clock; stored in UTC"
    )
    workload_id: Line = Field("", max_length=WORKLOAD_ID_MAX, description="the grid workload, when known")


class DeploymentReportOut(Schema):
    created: bool = Field(
        description="false: this marketplace id was reported before (a repeat, or deployed -> released)"
    )
    effect: Literal["take", "release", "record", "history", "repeat"] = Field(
        description="take: the slice is deployed by this id; release: it is free again; record: a failure recorded, "
        "the slice unchanged; history: a failure older than the slice's last move, recorded without changing "
        "anything; repeat: already recorded, nothing written"
    )
    words: str = Field(description="what was done and why, in words")
    deployment: DeploymentOut


class PrecheckIn(Schema):
    slice_index: Whole | None = Field(None, description="ask about this slice only; all free slices otherwise")
    marketplace_id: Line | None = Field(
        None, max_length=128, description="the buyer asking: a slice held for another buyer is refused (409)"
    )
    max_age_seconds: Whole | None = Field(
        None,
        description="answer from the stored reading when it is at most this old (never past READING_MAX_AGE_MINUTES: "
        "an older one is read again first, within PRECHECK_REREAD_DEADLINE); leave out for a fresh read",
    )


class PrecheckVerdictOut(Schema):
    slice: int
    fits: bool
    needed: ResourcesOut
    available: ResourcesOut
    words: str


class HeldSliceOut(Schema):
    slice: int
    hold_id: int
    marketplace_id: str
    expires_at: datetime


class PrecheckOut(Schema):
    node_id: int
    status: str
    cause: str = Field(
        description='"node-offline" when the node is down or on standby, "node-closed" when another closure holds (rented by another twin, ...)'
    )
    closure: str = Field("", description='why the node offered nothing (capacity.closures key); "" when open')
    closure_detail: str = Field("", description="the closure's detail (the renting twin, the rent contract, ...)")
    policy: PolicyRefOut
    checked_at: datetime = Field(description="when the reading the answer rests on was taken")
    read_now: bool = Field(True, description="false: answered from the stored reading, reading_age_seconds old")
    reading_age_seconds: float = Field(0.0, description="the age of that reading when answering")
    total: ResourcesOut
    used: ResourcesOut
    free_slices: int
    placeable_now: int
    phantom_slices: list[int]
    verdicts: list[PrecheckVerdictOut]
    words: str
    counters_words: str = Field(
        "", description="with an rmb-peer: the node's own counters (zos.statistics.get) beside the proxy's, in words"
    )
    pools_words: str = Field(
        "",
        description="the node's own pools answer, asked by this precheck, when it was not taken: why (malformed, "
        "refused, not its SSD total); its carve stays as it was",
    )
    slice: PrecheckVerdictOut | None = Field(None, description="the asked slice's verdict, when one was asked")
    held_slices: list[HeldSliceOut] = Field(
        default_factory=list, description="free slices off offer now: held for a buyer until their expiry"
    )


class ReregisterIn(Schema):
    dry_run: bool = Field(False, description="work out the new catalog without swapping it in")


class NodeRollbackOut(Schema):
    job_id: int = Field(description="the re-register job whose catalog of the node was put back")
    node_id: int
    removed: int = Field(description="slices the re-register had added, removed (all free)")
    restored: int = Field(description="free slices the re-register had removed, put back at their indices and sizes")
    kept: int = Field(description="occupied slices (rented, deployed) left exactly as they were")


class JobStartedOut(Schema):
    created: bool = Field(description="false: a job was already active for this node and is returned instead")
    job: JobOut


class PolicyOut(Schema):
    name: str
    version: int
    scope: str = Field(description='fleet, farm, node, or "builtin" when no fleet default is stored')
    farm_id: int | None
    node_id: int | None
    nodes: int = Field(description="nodes it is in force on")
    parameters: dict = Field(description="the capacity parameters, bytes as integers")
    carries: dict = Field(
        description="what its slices carry besides their size: public_ipv4 (a slice's IPs, from the farm's pool), "
        "ipv4_addon (one more sold on demand), gpu_slices (one GPU, only on nodes the marketplace rents)"
    )


class ExplainIn(Schema):
    error: Text = Field(min_length=1, max_length=MAX_ERROR_TEXT, description="a ZOS error message, as logged")


class DiagnosisOut(Schema):
    cause: str
    reason: str = Field(description="ZOS's own reason, unwrapped")
    words: str
    needed_bytes: int | None
    usable_bytes: int | None
    workload: str | None
    deployment_id: int | None
