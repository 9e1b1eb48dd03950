"""What is stored: nodes, their slice catalogs, policies, deployments, jobs and the audit trail.

Invariants live in the database as constraints, not only in Python: a catalog slot is
unique per node, sizes are never negative, and a node has at most one active job.
"""

import dataclasses
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from dashboard import capacity
from dashboard.alerts.rules import TITLES as ALERT_TITLES
from dashboard.capacity import node_events
from dashboard.jobs import kinds as job_kinds
from dashboard.jobs.results import JobResult
from dashboard.nodes.reading_age import reading_is_uncertain, reading_uncertain_after

# The largest value an IntegerField (PositiveIntegerField included) holds in PostgreSQL: every
# whole number that comes in and is stored, or compared with a stored one, is bounded by it first.
INTEGER_MAX = 2**31 - 1


# A reading's age: the rules live in dashboard.nodes.reading_age (named once); these names are its, kept for
# the many readers of the model module.
reading_max_age = reading_uncertain_after


class Policy(models.Model):
    """A named, versioned set of capacity parameters; the fleet default or an override."""

    class Scope(models.TextChoices):
        FLEET = "fleet", "Fleet default"
        FARM = "farm", "Farm override"
        NODE = "node", "Node override"

    name = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.FLEET)
    farm_id = models.PositiveIntegerField(null=True, blank=True)
    node = models.OneToOneField("Node", null=True, blank=True, on_delete=models.CASCADE, related_name="policy_override")
    # Bumped on every change of a capacity parameter; catalogs carved under an older one are stale.
    version = models.PositiveIntegerField(default=1)
    slice_mru = models.BigIntegerField(default=4 * capacity.GiB)
    slice_cru = models.PositiveIntegerField(default=1)
    reserve_mru_percent = models.PositiveSmallIntegerField(default=10)
    reserve_mru_floor = models.BigIntegerField(default=2 * capacity.GiB)
    reserve_sru = models.BigIntegerField(default=20 * capacity.GiB)
    overhead_mru_per_vm = models.BigIntegerField(default=0)
    overhead_sru_per_vm = models.BigIntegerField(default=0)
    rootfs = models.CharField(max_length=8, choices=[(r, r) for r in capacity.ROOTFS_RULES], default="zos")
    min_slice_sru = models.BigIntegerField(default=10 * capacity.GiB)
    sru_step = models.BigIntegerField(default=capacity.GiB)
    arithmetic = models.CharField(max_length=12, choices=[(a, a) for a in capacity.ARITHMETICS], default="bytes")
    # What a slice carries besides its size (the carve is unchanged by them): the public IPv4s every slice
    # takes from its farm's pool, whether one may be added on at deploy, and whether a slice may take one
    # GPU (only on a node the marketplace rents). Not capacity parameters: changing them stales no catalog.
    public_ipv4 = models.PositiveSmallIntegerField(default=0)
    ipv4_addon = models.BooleanField(default=False)
    gpu_slices = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    PARAMETERS = (
        "slice_mru",
        "slice_cru",
        "reserve_mru_percent",
        "reserve_mru_floor",
        "reserve_sru",
        "overhead_mru_per_vm",
        "overhead_sru_per_vm",
        "rootfs",
        "min_slice_sru",
        "sru_step",
        "arithmetic",
    )
    # What a slice carries (above): saved and audited like the parameters, but no new version, since no
    # catalog goes stale by them.
    CARRIES = ("public_ipv4", "ipv4_addon", "gpu_slices")

    class Meta:
        verbose_name_plural = "policies"
        constraints = [
            models.UniqueConstraint(fields=["scope"], condition=Q(scope="fleet"), name="one_fleet_default_policy"),
            models.UniqueConstraint(fields=["farm_id"], condition=Q(scope="farm"), name="one_policy_per_farm"),
            models.CheckConstraint(
                condition=(Q(scope="farm", farm_id__isnull=False) | ~Q(scope="farm")),
                name="farm_policy_names_farm",
            ),
            models.CheckConstraint(
                condition=(Q(scope="node", node__isnull=False) | ~Q(scope="node")),
                name="node_policy_names_node",
            ),
            models.CheckConstraint(
                condition=Q(slice_mru__gte=capacity.MIN_VM_MRU)
                & Q(reserve_mru_floor__gte=0)
                & Q(reserve_sru__gte=0)
                & Q(overhead_mru_per_vm__gte=0)
                & Q(overhead_sru_per_vm__gte=0)
                & Q(min_slice_sru__gte=0)
                & Q(sru_step__gte=1)
                & Q(reserve_mru_percent__lte=90),
                name="policy_sizes_sane",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    def to_capacity(self) -> capacity.Policy:
        return capacity.Policy(name=self.name, version=self.version, **{p: getattr(self, p) for p in self.PARAMETERS})

    @classmethod
    def parameters_from(cls, policy: capacity.Policy) -> dict:
        return {p: getattr(policy, p) for p in cls.PARAMETERS}


# The capacity a node reports to the grid, total and used: what a reading brings, column by column.
NODE_CAPACITY_FIELDS = (
    "total_cru",
    "total_mru",
    "total_sru",
    "total_hru",
    "used_cru",
    "used_mru",
    "used_sru",
    "used_hru",
)


class Node(models.Model):
    class Status(models.TextChoices):
        UP = "up", "Up"
        DOWN = "down", "Down"
        STANDBY = "standby", "Standby"
        UNKNOWN = "unknown", "Unknown"

    # The grid's node id (nodeId). Not `node_id`: on every model with a `node` key that name is the key.
    grid_id = models.PositiveIntegerField(unique=True, help_text="The grid's node id")
    farm_id = models.PositiveIntegerField(db_index=True)
    farm_name = models.CharField(max_length=128, blank=True)
    twin_id = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.UNKNOWN, db_index=True)
    # The proxy's `dedicated`, kept as it says it: true for ANY node with no contracts (or rented, or
    # with an extra fee), not only for dedicated farms, so it is never shown as "a dedicated node".
    dedicated = models.BooleanField(
        default=False,
        verbose_name="proxy's dedicated flag",
        help_text="The Grid Proxy's `dedicated`: true for any node without contracts, not only dedicated farms",
    )
    rented_by_twin_id = models.PositiveIntegerField(null=True, blank=True)
    # The rent contract on the whole node (proxy's rentContractId) and its state when read ("Created",
    # "GracePeriod"; "" unknown or none), and what makes the chain keep the node for a renter: the
    # farm is dedicated (inDedicatedFarm) or the node has an extra fee (capacity.closures decides).
    rent_contract_id = models.PositiveBigIntegerField(null=True, blank=True)
    rent_state = models.CharField(max_length=16, blank=True, default="")
    in_dedicated_farm = models.BooleanField(default=False, help_text="The farm is dedicated (the chain's flag)")
    extra_fee = models.PositiveBigIntegerField(default=0, help_text="A dedicated node's extra fee (the chain's)")
    # What the last reading said besides capacity: the proxy's health verdict, the farm's power
    # manager (state, and the state it was asked to take: target up with state down is a wake asked
    # for), and the seconds since the node booted (back to small on a reboot). Blank/None: not said.
    healthy = models.BooleanField(null=True, blank=True)
    power_state = models.CharField(max_length=8, blank=True)
    power_target = models.CharField(max_length=8, blank=True)
    uptime = models.BigIntegerField(null=True, blank=True, help_text="Seconds since the node booted (last reading)")
    country = models.CharField(max_length=64, blank=True)
    city = models.CharField(max_length=64, blank=True)
    # ZOS-light from the proxy's `features` (grid.proxy.features.zos_light): True takes no public IPv4,
    # False does, None (null) is not known: an older proxy, or features that do not say. Never a guess.
    light = models.BooleanField(null=True, blank=True, default=None)
    gpus = models.PositiveSmallIntegerField(default=0, help_text="GPUs the node reports (the proxy's num_gpu)")

    total_cru = models.PositiveIntegerField()
    total_mru = models.BigIntegerField()
    total_sru = models.BigIntegerField()
    total_hru = models.BigIntegerField(default=0)
    # SSD pool sizes when known (the Grid Proxy does not report them); ZOS places a disk in one pool.
    # Written with the latest PoolReport (nodes.services.pools), which keeps who reported them, when, from where.
    pools_sru = models.JSONField(null=True, blank=True)
    # What each pool held as ZOS reported it (same order as pools_sru), used as it is by the precheck.
    pools_used = models.JSONField(null=True, blank=True)
    pools_reported_at = models.DateTimeField(null=True, blank=True)
    pools_source = models.CharField(
        max_length=16, blank=True, help_text="Where the pools came from (PoolReport.Source)"
    )
    # The node's own last pools answer that was not taken, and why (malformed, not its SSD total, refused
    # by the registration's checks): the node page and the API say it; cleared when one is taken.
    pools_refused = models.CharField(max_length=300, blank=True)
    pools_refused_at = models.DateTimeField(null=True, blank=True)
    # A bound on the zos-cache's quota and the pool (index into pools_sru) holding it, from the latest
    # pool report beside the reading (capacity.cache_bound: ZOS does not report the cache on its own).
    # None: not known, and the carve and precheck keep the policy's fixed reserve_sru.
    zos_cache_sru = models.BigIntegerField(null=True, blank=True)
    zos_cache_pool = models.PositiveSmallIntegerField(null=True, blank=True)
    # The node's own build (`zos.system.version`) and when it said it: "" until it answers; and how it was
    # asked: "rmb" (the node over RMB, through rmb-peer), "simulated" (the simulated grid's node, asked in
    # process), "" (not kept: set before this was, or by hand).
    zos_version = models.CharField(max_length=128, blank=True)
    zos_version_at = models.DateTimeField(null=True, blank=True)
    # The node lost its zos-cache subvolume, so ZOS refuses every workload (zos#2043): ZOS's words as last
    # heard ("" while it has its cache), who said them (zos.statistics.get over RMB, the proxy's
    # /statistics, a refused deploy) and when. Kept by nodes.services.zos_cache until it answers its statistics again.
    zos_cache_missing = models.CharField(max_length=120, blank=True, default="")
    zos_cache_missing_source = models.CharField(max_length=40, blank=True, default="")
    zos_cache_missing_at = models.DateTimeField(null=True, blank=True)
    zos_version_source = models.CharField(max_length=16, blank=True, default="")
    # The node's contracts in their grace period (unpaid) that still hold a VM's capacity, as the slice audit
    # last read them (catalogs.services.catalog_audit), and when: None until it does (capacity.warnings).
    grace_contracts = models.PositiveIntegerField(null=True, blank=True)
    contracts_read_at = models.DateTimeField(null=True, blank=True)

    # The live used capacity last read from the grid (reserve included, as the proxy reports it).
    used_cru = models.PositiveIntegerField(null=True, blank=True)
    used_mru = models.BigIntegerField(null=True, blank=True)
    used_sru = models.BigIntegerField(null=True, blank=True)
    used_hru = models.BigIntegerField(null=True, blank=True)
    # When the product read that capacity (seen_at) and when the node itself last reported to the
    # grid (the proxy's updatedAt): a reading has two ages, and an old one is a guess.
    seen_at = models.DateTimeField(null=True, blank=True)
    reported_at = models.DateTimeField(
        null=True, blank=True, help_text="The node's last report (the proxy's updatedAt)"
    )
    # The node's latest answer that could not be read (the parser refused it) and why, by which reader:
    # everything above stays the last good reading's. One reason a node, cleared by the next good reading
    # (lessons.services.refused_readings writes it, nodes.services.readings clears it).
    refused_reading = models.CharField(max_length=300, blank=True, default="")
    refused_reading_by = models.CharField(max_length=16, blank=True, default="")
    refused_reading_at = models.DateTimeField(null=True, blank=True)

    # The policy the stored catalog was carved with; compared with the effective one to find stale catalogs.
    carved_policy_name = models.CharField(max_length=64)
    carved_policy_version = models.PositiveIntegerField(default=1)
    carved_slice_sru = models.BigIntegerField(default=0)
    carved_deployable = models.PositiveIntegerField(default=0)
    # Carved with the pools known; a catalog carved without them is sized for every plausible layout,
    # and is stale once the pools are reported (the larger disks come back with a re-register).
    carved_pools_known = models.BooleanField(default=False)
    catalog_generation = models.PositiveIntegerField(default=1)
    # Slice numbers are never reused: a re-carve numbers its new slices from here, so a failure row
    # (Deployment.slice_index) names the same slice forever, shown as retired once it is gone.
    slice_index_next = models.PositiveIntegerField(default=0)
    # When the reading the placeable and phantom figures come from was taken (nodes.services.readings).
    prechecked_at = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # ------------------------------------------------------------------------------------------------
    # Above: the facts (what the grid and the node said, what the product did). Below: derived and copied
    # columns, never facts of their own: each is worked out from other rows by its one writer, in the
    # transaction that changed those rows, so every page reads a column instead of working it out.
    # ------------------------------------------------------------------------------------------------

    # Copies of other tables, each kept by that table's writer. What ZOS's refusals taught about this node, distilled from its live Observations by
    # lessons.services.observations (the evidence stays in those rows): hidden memory each running VM
    # really uses, and a disk size no pool had room for, valid while nothing has been freed
    # (while the used SSD is at least what it was then).
    hidden_mru_per_vm = models.BigIntegerField(default=0)
    pool_room_below = models.BigIntegerField(null=True, blank=True)
    pool_room_below_used_sru = models.BigIntegerField(null=True, blank=True)
    # ZOS's own memory use on the host, from the fleet's overhead model (lessons.services.memory_model):
    # null when only a per-VM figure is known (counted on top of the reserve). The lesson that
    # decides the node's memory, and whose: its own observations, its build's, or the fleet's.
    zos_own_mru = models.BigIntegerField(null=True, blank=True)
    memory_lesson = models.ForeignKey(
        "MemoryLesson", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    memory_lesson_scope = models.CharField(max_length=8, blank=True)  # "", own, build, fleet

    # The live holds on the node's free slices as the last write of a hold or a slice left them
    # (figures.services.held_figures): how many, their charges summed (memory with each held VM's hidden use),
    # a key of their sizes in slice order, and
    # the first and last of their expiries. A hold ends by time with no write, so placement's first cut
    # charges them on the stored room while all are live (now < held_first_expiry), forgets them once
    # all have expired (now >= held_last_expiry), and judges the node alone between the two.
    held_slices = models.PositiveIntegerField(default=0)
    held_mru = models.BigIntegerField(default=0)
    held_sru = models.BigIntegerField(default=0)
    held_sizes = models.CharField(max_length=16, blank=True, default="")
    held_first_expiry = models.DateTimeField(null=True, blank=True)
    held_last_expiry = models.DateTimeField(null=True, blank=True, db_index=True)
    # The withhold window in force (NodeWithhold), copied here by nodes.services.withholds when a window is
    # made, released, or opens or ends by itself (the beat's withhold edges), so every figure reads the
    # node row: "" when nothing withholds the node; until None: until released.
    withheld_reason = models.CharField(max_length=160, blank=True, default="")
    withheld_until = models.DateTimeField(null=True, blank=True)

    # The catalog's figures (figures.services.figures.FIGURE_FIELDS), worked out from the facts above, the slices and
    # the policies; stored only on the exit of a figures.services.node_writes block (`manage.py figures_refresh
    # --check` finds any that drifted), so the fleet overview sorts, filters and totals plain columns.
    slices_free = models.PositiveIntegerField(default=0)
    slices_rented = models.PositiveIntegerField(default=0)
    slices_deployed = models.PositiveIntegerField(default=0)
    slices_failed = models.PositiveIntegerField(default=0)
    deployable = models.PositiveIntegerField(default=0, help_text="Slices the effective policy carves now")
    stale = models.BooleanField(default=False)
    stale_reason = models.TextField(blank=True)
    effective_policy = models.CharField(max_length=80, blank=True, help_text='"name vN" of the effective policy')
    # What the placement answer's first cut compares (deployments.selectors.placement), worked out by capacity on the
    # last reading: the memory and SSD one more VM can be charged (capacity.room_now; None without a
    # reading), and which nodes only the pool model can judge: "" when the pools cannot refuse what
    # memory and SSD allow (capacity.pools_decide), else a key shared by the nodes whose pools judge
    # alike (pools, policy, the refused-disk bound in force, the occupied slices in order). NOT_WORKED_OUT
    # before its figures were computed with these columns (then judged in Python).
    NOT_WORKED_OUT = "?"
    room_mru = models.BigIntegerField(null=True, blank=True)
    room_sru = models.BigIntegerField(null=True, blank=True)
    pools_shape = models.CharField(max_length=16, blank=True, default=NOT_WORKED_OUT)
    # The free slices placed on the last reading (figures.services.figures: the precheck's own arithmetic) and
    # the slices that would fail now, by reason.
    placeable_now = models.PositiveIntegerField(null=True, blank=True)
    phantom_slices = models.PositiveIntegerField(null=True, blank=True)
    # Phantom slices by reason (capacity.PHANTOM_REASONS: down, standby, memory, disk, pool).
    phantom_reasons = models.JSONField(default=dict, blank=True)
    # Why the node offers nothing now, whatever its numbers (capacity.closures: "down", "standby", ...;
    # "" open), with the closure's detail; decided by dashboard.figures.closure from this row and the
    # settings, stored by the figures writer so the placement cut and the pages read a column.
    closure = models.CharField(max_length=32, blank=True, default="", db_index=True)
    closure_detail = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["grid_id"]
        permissions = [
            ("reregister_node", "Can re-register a node (re-carve its catalog)"),
            ("precheck_node", "Can run a capacity precheck"),
            ("bulk_reregister", "Can re-register all stale nodes"),
            ("deploy_slice", "Can deploy a slice"),
            ("onboard_nodes", "Can add nodes from the grid"),
            ("fix_catalog", "Can fix the catalog from the slice audit"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(total_mru__gte=0) & Q(total_sru__gte=0) & Q(total_hru__gte=0),
                name="node_total_not_negative",
            ),
            models.CheckConstraint(
                condition=(Q(used_mru__gte=0) | Q(used_mru__isnull=True))
                & (Q(used_sru__gte=0) | Q(used_sru__isnull=True)),
                name="node_used_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"node {self.grid_id}"

    @property
    def total(self) -> capacity.Resources:
        return capacity.Resources(cru=self.total_cru, mru=self.total_mru, sru=self.total_sru, hru=self.total_hru)

    @property
    def pools(self) -> tuple[int, ...] | None:
        """The SSD pool sizes when known (the Grid Proxy does not report them)."""
        return tuple(self.pools_sru) if self.pools_sru else None

    @property
    def zos_cache(self) -> int | None:
        """The zos-cache's quota bound when the pools are known with it (what carve and precheck take)."""
        return self.zos_cache_sru if self.pools_sru else None

    @property
    def away(self) -> bool:
        """A down or standby node can place nothing, whatever its numbers say (capacity.node_is_away)."""
        return capacity.node_is_away(self.status)

    @property
    def closed(self) -> capacity.Closure | None:
        """Why the node offers nothing, as the figures writer stored it (None: open)."""
        return capacity.stored_closure(self.closure, self.closure_detail)

    def reading_age(self, now: datetime) -> timedelta | None:
        """How long ago the product read this node's capacity; None when never read."""
        return None if self.seen_at is None else max(now - self.seen_at, timedelta(0))

    def report_age(self, now: datetime) -> timedelta | None:
        """How long ago the node last reported to the grid (as of the last reading); None when unknown."""
        return None if self.reported_at is None else max(now - self.reported_at, timedelta(0))

    def reading_uncertain(self, now: datetime) -> bool:
        """The figures rest on a reading older than READING_MAX_AGE_MINUTES (or on none): neither
        phantom nor fine can be said of them. The one rule for "is this reading too old"."""
        return reading_is_uncertain(self.seen_at, now)

    @property
    def uncertain(self) -> bool:
        """reading_uncertain now, for templates."""
        return self.reading_uncertain(timezone.now())

    @property
    def observed(self) -> capacity.Observed:
        """What refusals taught, as the capacity model takes it, on the stored reading."""
        return self.observed_on(self.used_sru)

    def observed_on(self, used_sru: int | None) -> capacity.Observed:
        """What refusals taught, judged on a reading whose used SSD is `used_sru`.

        The disk bound holds until something is freed: once the used SSD is below what it was
        at the refusal, a disk of that size may fit again.
        """
        return observed_of_columns({name: getattr(self, name) for name in OBSERVED_COLUMNS}, used_sru=used_sru)

    @property
    def used(self) -> capacity.Resources | None:
        if self.used_mru is None or self.used_sru is None:
            return None
        return capacity.Resources(cru=self.used_cru or 0, mru=self.used_mru, sru=self.used_sru, hru=self.used_hru or 0)


# The Node columns a node's lessons are read from (observed_of_columns).
OBSERVED_COLUMNS = ("hidden_mru_per_vm", "pool_room_below", "pool_room_below_used_sru", "zos_own_mru", "zos_version")


def observed_of_columns(columns: Mapping[str, Any], *, used_sru: int | None) -> capacity.Observed:
    """What a node's refusals taught, from its lesson columns (OBSERVED_COLUMNS of a row or its values()),
    judged on a reading whose used SSD is `used_sru`: the one reading of those columns."""
    return capacity.observed_now(
        hidden_mru_per_vm=columns["hidden_mru_per_vm"],
        pool_room_below=columns["pool_room_below"],
        bound_used_sru=columns["pool_room_below_used_sru"],
        used_sru=used_sru,
        zos_own_mru=columns["zos_own_mru"],
        zos_version=columns["zos_version"],
    )


class NodeWithhold(models.Model):
    """A window in which a node's free slices are off offer, with its reason: a maintenance an operator
    asked for (manual) or a quarantine the failures of unknown cause started (nodes.services.withholds).

    Open while starts_at <= now < ends_at (ends_at None: until released) and not released. Rented and
    deployed slices are untouched. Never deleted: a release stamps released_at/by.
    """

    class Source(models.TextChoices):
        MANUAL = "manual", "Maintenance"
        QUARANTINE = "quarantine", "Quarantine"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="withholds")
    reason = models.CharField(max_length=160)
    starts_at = models.DateTimeField(db_index=True)
    ends_at = models.DateTimeField(null=True, blank=True, db_index=True, help_text="None: until released")
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.MANUAL)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_via = models.CharField(max_length=8, default="web", help_text="web, api, command or auto")
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A quarantine: the failed deployments that caused it, and which repeat it is (1: the first, 6 h).
    failures = models.JSONField(default=list, blank=True, help_text="Deployment ids behind a quarantine")
    repeat = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-starts_at", "-pk"]
        permissions = [("withhold_node", "Can withhold a node (maintenance) and lift a quarantine")]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=F("starts_at")), name="withhold_ends_after_start"
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="withhold_has_reason"),
        ]
        indexes = [models.Index(fields=["node", "released_at"], name="withhold_node_released")]

    def __str__(self) -> str:
        return f"{self.get_source_display().lower()} of {self.node}: {self.reason}"

    def is_open(self, now: datetime) -> bool:
        """In force at `now`: the one rule for "does this window withhold its node now"."""
        return self.released_at is None and self.starts_at <= now and (self.ends_at is None or self.ends_at > now)


class PoolReport(models.Model):
    """One report of a node's storage pools, in ZOS's `zos.storage.pools` shape, kept as it came."""

    class Source(models.TextChoices):
        API = "api", "API token (a deployer that reads them over RMB)"
        OPERATOR = "operator", "An operator (node page or node_register)"
        ZOS = "zos", "The node itself (asked by a reading)"
        RMB = "rmb", "The node itself, over RMB (through rmb-peer)"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="pool_reports")
    pools = models.JSONField(help_text='[{"name", "type", "size", "used"}], bytes, as reported')
    source = models.CharField(max_length=16, choices=Source.choices)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    token = models.ForeignKey("ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    origin = models.CharField(max_length=255, blank=True, help_text="The address or host it came from")
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ["-reported_at", "-pk"]
        indexes = [models.Index(fields=["node", "-reported_at"])]

    def __str__(self) -> str:
        return f"pools of {self.node} from {self.source} at {self.reported_at:%Y-%m-%d %H:%M}"


class Slice(models.Model):
    class State(models.TextChoices):
        FREE = "free", "Free"
        RENTED = "rented", "Rented"
        DEPLOYED = "deployed", "Deployed"
        FAILED = "failed", "Failed"

    # A rented or deployed slice is someone's VM: re-registering never deletes or resizes it.
    OCCUPIED_STATES = (State.RENTED, State.DEPLOYED)

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="slices")
    index = models.PositiveIntegerField()
    cru = models.PositiveIntegerField()
    mru = models.BigIntegerField()
    sru = models.BigIntegerField(help_text="Data disk in bytes; the rootfs comes on top")
    state = models.CharField(max_length=10, choices=State.choices, default=State.FREE, db_index=True)
    rented_by_twin_id = models.PositiveIntegerField(null=True, blank=True)
    generation = models.PositiveIntegerField(default=1, help_text="Catalog generation that created it")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="slice_index_unique_per_node"),
            models.CheckConstraint(condition=Q(mru__gt=0) & Q(sru__gte=0), name="slice_sizes_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.node} slice {self.index}"

    @property
    def size(self) -> capacity.SliceSize:
        return capacity.SliceSize(cru=self.cru, mru=self.mru, sru=self.sru)

    @property
    def is_occupied(self) -> bool:
        return self.state in self.OCCUPIED_STATES


class HoldQuerySet(models.QuerySet):
    def live(self, now: datetime) -> "HoldQuerySet":
        """Holds in force at `now`: not ended, not expired. The one definition every reader applies (an
        expired hold is free at once, with no worker to end it; hold_create ends it lazily)."""
        return self.filter(ended_at__isnull=True, expires_at__gt=now)


class Hold(models.Model):
    """One free slice kept for one buyer (a marketplace id) until `expires_at`: off offer to everyone else.

    A hold changes what is on offer, not what is true: the slice stays free in the catalog and the
    stored figures do not count it; every reader takes the live holds off what it shows at its own
    `now`, from the sums on the node row (Node.held_*, figures.services.held_figures) or, for a node whose holds
    partly ended by time since, from `Hold.objects.live(now)` (docs/architecture.md says why). At most one open hold per slice is a
    partial unique index; hold_create ends an expired one under the node's and slice's locks first.
    """

    class End(models.TextChoices):
        RELEASED = "released", "Released"
        DEPLOYED = "deployed", "Turned into its deployment"
        EXPIRED = "expired", "Expired"
        RETIRED = "retired", "Its slice was re-carved away"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="holds")
    # A re-register keeps a free slice under a live hold. When it removes a slice with an open hold, the
    # hold had expired ("expired") or its slice was marked failed ("retired"); it is kept without its slice.
    slice = models.ForeignKey(Slice, null=True, blank=True, on_delete=models.SET_NULL, related_name="holds")
    slice_index = models.PositiveIntegerField()
    marketplace_id = models.CharField(max_length=128)
    # What the held VM will be charged on the node (its policy's vm_charge when the hold was made):
    # placement takes it off the node's room, since the grid's reading does not count it yet.
    charge_mru = models.BigIntegerField()
    charge_sru = models.BigIntegerField()
    # Public IPv4s the held VM will take from its farm's pool: held off the farm's free IPs until it ends.
    public_ipv4 = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end = models.CharField(max_length=10, choices=End.choices, blank=True, default="")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    token = models.ForeignKey("ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = HoldQuerySet.as_manager()

    class Meta:
        ordering = ["expires_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["slice"], condition=Q(ended_at__isnull=True), name="one_open_hold_per_slice"
            ),
            models.CheckConstraint(condition=Q(expires_at__gt=F("created_at")), name="hold_expires_after_made"),
            models.CheckConstraint(
                condition=(Q(ended_at__isnull=True) & Q(end="")) | (Q(ended_at__isnull=False) & ~Q(end="")),
                name="hold_end_with_its_time",
            ),
        ]
        indexes = [
            models.Index(fields=["expires_at"], condition=Q(ended_at__isnull=True), name="hold_open_expiry"),
            models.Index(fields=["node", "expires_at"], condition=Q(ended_at__isnull=True), name="hold_open_node"),
        ]

    def __str__(self) -> str:
        return f"hold of {self.node} slice {self.slice_index} for {self.marketplace_id!r}"

    def state_at(self, now: datetime) -> str:
        """live, expired, released or deployed."""
        if self.end:
            return self.end
        return "live" if self.expires_at > now else self.End.EXPIRED


class NodeEvent(models.Model):
    """A change one reading of a node showed against the one before (dashboard.capacity.node_events says which).

    Written by nodes.services.readings, the one writer of a node's reading, in the same transaction; never
    edited. The node page's timeline, the uptime (nodes.selectors.uptime) and the node alerts read them.
    """

    Kind = models.TextChoices(
        "Kind", [(k.upper().replace("-", "_"), (k, label)) for k, label in node_events.KINDS.items()]
    )

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField(help_text="When the reading that showed it was taken")
    words = models.CharField(max_length=300)
    # For status changes (uptime is counted from them); blank for the others.
    status_before = models.CharField(max_length=8, blank=True)
    status_after = models.CharField(max_length=8, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [
            models.Index(fields=["node", "-at"], name="node_event_timeline"),
            models.Index(fields=["kind", "-at"], name="node_event_by_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.node} {self.kind} at {self.at:%Y-%m-%d %H:%M}"


class Deployment(models.Model):
    """One attempt to deploy a slice's VM, kept with the grid's own reason when it failed."""

    class State(models.TextChoices):
        DEPLOYING = "deploying", "Deploying"
        DEPLOYED = "deployed", "Deployed"
        FAILED = "failed", "Failed"
        REFUSED = "refused", "Refused by precheck"
        DELETED = "deleted", "Deleted"
        # A probe (GET /api/v1/probes): a VM larger than the node, which ZOS always refuses; its refusal
        # teaches the node's memory and counts as no failure (no failure count reads this state).
        PROBED = "probed", "Probe refused (it teaches)"

    class Cause(models.TextChoices):
        NONE = "", "—"
        MEMORY = "memory", "Memory"
        DISK = "disk", "Disk"
        VALIDATION = "validation", "Validation"
        NODE_AWAY = "node-offline", "Node offline"  # the stored value and label kept
        GRID_UNAVAILABLE = "grid-unavailable", "Grid unavailable"
        # The chain refused the contract (grid.classify): ZOS never saw the VM.
        NODE_CLOSED = "node-closed", "Node not available to us (chain)"
        NOT_AUTHORIZED = "not-authorized", "Twin not authorized (chain)"
        CONTRACT_GRACE = "contract-grace", "Contract in grace (chain)"
        CHAIN_CAPACITY = "chain-capacity", "Not enough resources (chain)"
        PUBLIC_IP = "public-ip", "No free public IPv4 (farm)"
        GPU = "gpu", "GPU needs a rented node"
        # ZOS's own (grid.zos_words): the node lost its zos-cache and refuses everything (zos#2043); a full
        # VM's image hit the zos-cache's quota, which grows within minutes (zos#2147).
        CACHE_MISSING = "cache-missing", "Node without its zos-cache"
        CACHE_FULL = "cache-full", "zos-cache full (transient)"
        UNKNOWN = "unknown", "Unknown"

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="deployments")
    # The slice may be re-carved away later; the record keeps its index and size regardless.
    slice = models.ForeignKey(Slice, null=True, blank=True, on_delete=models.SET_NULL, related_name="deployments")
    slice_index = models.PositiveIntegerField()
    cru = models.PositiveIntegerField()
    mru = models.BigIntegerField()
    sru = models.BigIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.DEPLOYING, db_index=True)
    raw_error = models.TextField(blank=True)
    cause = models.CharField(max_length=16, choices=Cause.choices, blank=True, default="", db_index=True)
    needed_bytes = models.BigIntegerField(null=True, blank=True)
    usable_bytes = models.BigIntegerField(null=True, blank=True)
    public_ipv4 = models.PositiveSmallIntegerField(default=0, help_text="Public IPv4s the VM asked of its farm")
    gpus = models.PositiveSmallIntegerField(default=0, help_text="GPUs the VM asked of its node")
    # The slice's odds of deploying at the first try when it was sent (capacity.odds): calibration.
    odds = models.FloatField(null=True, blank=True)
    # {"total": {...}, "used": {...}, "status": "up"} as the grid reported it at that moment.
    capacity_seen = models.JSONField(default=dict, blank=True)
    grid_workload_id = models.CharField(max_length=64, blank=True)
    # The marketplace's own deployment (contract) id when it reported this outcome through the API;
    # unique, so a report sent twice is one record. Empty for the dashboard's own deploys.
    marketplace_id = models.CharField(max_length=128, blank=True, default="")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(condition=Q(mru__gte=0) & Q(sru__gte=0), name="deployment_sizes_not_negative"),
            models.UniqueConstraint(
                fields=["marketplace_id"], condition=~Q(marketplace_id=""), name="one_deployment_per_marketplace_id"
            ),
            # A slice holds one VM: at most one live deployment per node and slice number (numbers are
            # never reused, so a retired slice keeps its own). dashboard.capacity.outcomes relies on it.
            models.UniqueConstraint(
                fields=["node", "slice_index"], condition=Q(state="deployed"), name="one_live_deployment_per_slice"
            ),
        ]
        # /metrics counts failures by cause and state on every scrape: read from this index alone.
        indexes = [models.Index(fields=["state", "cause"], name="deployment_state_cause")]

    def __str__(self) -> str:
        return f"deployment of {self.node} slice {self.slice_index} ({self.state})"

    @staticmethod
    def of_slice(slice_: Slice) -> dict[str, Any]:
        """The fields that say which slice a new record is of and its size then (kept if it is re-carved)."""
        return {"slice": slice_, "slice_index": slice_.index, "cru": slice_.cru, "mru": slice_.mru, "sru": slice_.sru}


class Job(models.Model):
    """A long operation run by a worker; its row is what the page polls."""

    # One member per declared kind (dashboard.jobs.kinds): Job.Kind.PRECHECK == "precheck".
    Kind = models.TextChoices("Kind", [(kind.name, (kind.value, kind.label)) for kind in job_kinds.kinds()])

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    ACTIVE_STATES = (State.QUEUED, State.RUNNING)

    class Source(models.TextChoices):
        WEB = "web", "Web"
        COMMAND = "command", "Command"
        ADMIN = "admin", "Admin"
        API = "api", "API"
        BEAT = "beat", "Beat"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    farm_id = models.PositiveIntegerField(null=True, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # The API token that asked (its holder is requested_by): a token can be made in another user's name.
    requested_token = models.ForeignKey(
        "ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.WEB)
    dry_run = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED, db_index=True)
    step = models.CharField(max_length=200, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    # Of progress_done, how many failed (a bulk job's nodes that could not be re-registered).
    progress_failed = models.PositiveIntegerField(default=0)
    # The steps a person reads, with when each began: [{"step": "...", "at": iso}], one entry each
    # time the step's kind changes (see `steps_with`), at most STEPS_KEPT.
    steps = models.JSONField(default=list, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # What was asked, for a kind that needs more than a node (a policy trial: the candidate policy).
    parameters = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"], condition=Q(state__in=["queued", "running"]), name="one_active_job_per_node"
            ),
            # The fleet-wide kinds of which one at a time may be active (their declaration says so).
            *(
                models.UniqueConstraint(
                    fields=["kind"],
                    condition=Q(kind=kind.value, state__in=["queued", "running"]),
                    name=kind.one_at_a_time,
                )
                for kind in job_kinds.kinds()
                if kind.one_at_a_time
            ),
            # The kinds of which one at a time may be active per value of a parameter (a run's rollback).
            *(
                models.UniqueConstraint(
                    KeyTextTransform(kind.one_active_per, "parameters"),
                    condition=Q(kind=kind.value, state__in=["queued", "running"]),
                    name=kind.one_per_constraint,
                )
                for kind in job_kinds.kinds()
                if kind.one_active_per
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}{self.declared.of if self.declared else ' of '}{self.target} #{self.pk}"

    @property
    def declared(self) -> job_kinds.JobKind | None:
        """This job's kind as declared (dashboard.jobs.kinds): its words, partial, parameters and runner."""
        return job_kinds.kind_of(self.kind)

    @property
    def target(self) -> str:
        """What the job is about, in its kind's words: "node 1774", "all stale nodes", "policy zos-lean"."""
        return self.declared.target_words(self) if self.declared else "?"

    @property
    def asked(self) -> job_kinds.JobParameters:
        """The parameters, typed by the kind; job_kinds.ParametersUnreadable when a stored row cannot be read."""
        if self.declared is None:
            raise job_kinds.ParametersUnreadable(f"unknown job kind {self.kind!r}")
        return self.declared.parameters_read(self.parameters)

    @property
    def asked_by(self) -> str:
        """Who asked, for people: the user, and the API token when one asked ("ops, with token ab12cd34… (deployer)")."""
        who = self.requested_by.get_username() if self.requested_by_id and self.requested_by else ""
        token = self.requested_token if self.requested_token_id else None
        if token is None:
            return who
        return f"{who or 'a deleted user'}, with token {token.prefix}… ({token.name})"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def outcome(self) -> JobResult | None:
        """The result read back typed (dashboard.jobs.results), or None (none yet, or unreadable)."""
        # A jobs list reads `result_brief` (the result without its fleet-sized lists) and defers `result`.
        stored = self.__dict__["result_brief"] if "result_brief" in self.__dict__ else self.result
        return job_kinds.result_of(self.kind, stored)

    @property
    def node_away(self) -> str:
        """A finished precheck that found its node down or on standby: the badge's words, else "".

        Such a job succeeded (it read the grid) but the node is not fine: pages say so, not "Succeeded"."""
        if self.state != self.State.SUCCEEDED:
            return ""
        return getattr(self.outcome, "away_badge", "")  # only a precheck's result says so

    @property
    def described(self) -> str:
        return job_kinds.job_describe(self)

    @property
    def duration(self):
        if self.started_at and self.finished_at:
            return self.finished_at - self.started_at
        return None

    # A job's step list keeps its first steps and its latest ones; the middle of a very long run is dropped.
    STEPS_KEPT = 30

    def steps_with(self, step: str, at: datetime) -> list[dict] | None:
        """The step list with `step` added, or None when it is the same kind of step as the last one.

        The kind is the text without its numbers: "120 of 1000 nodes done" and "130 of 1000 nodes
        done" are one step (its count moves), "planning" after "reading the grid" is a new one.
        """
        steps = list(self.steps or [])
        if steps and _step_kind(steps[-1].get("step", "")) == _step_kind(step):
            return None
        steps.append({"step": step, "at": at.isoformat()})
        if len(steps) > self.STEPS_KEPT:
            steps = steps[:1] + steps[-(self.STEPS_KEPT - 1) :]
        return steps

    @property
    def steps_read(self) -> list[dict]:
        """The steps with `at` as a datetime, for templates."""
        return [{"step": s.get("step", ""), "at": _parse_at(s.get("at"))} for s in (self.steps or [])]

    @property
    def time_left(self) -> timedelta | None:
        """At the pace so far (started_at to now for progress_done of progress_total), how long the rest
        should take; None until something is done, or when there is no total."""
        return self.time_left_at(timezone.now())

    def time_left_at(self, now: datetime) -> timedelta | None:
        if self.state != self.State.RUNNING or not self.started_at or not self.progress_total or not self.progress_done:
            return None
        elapsed = max((now - self.started_at).total_seconds(), 0.0)
        left = max(self.progress_total - self.progress_done, 0)
        return timedelta(seconds=round(elapsed / self.progress_done * left))


def _step_kind(step: str) -> str:
    return re.sub(r"\d[\d,]*", "#", step)


def _parse_at(value) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None


class CapacitySample(models.Model):
    """One reading of a node's real usage beside the VMs it hosted then; calibration fits these."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="capacity_samples")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    source = models.CharField(max_length=16, default="statistics")  # statistics or proxy
    vm_count = models.PositiveIntegerField()
    vm_mru = models.BigIntegerField(help_text="Sum of the hosted VMs' memory")
    vm_sru = models.BigIntegerField(help_text="Sum of the hosted VMs' disks, rootfs included")
    total_mru = models.BigIntegerField()
    total_sru = models.BigIntegerField()
    used_mru = models.BigIntegerField()
    used_sru = models.BigIntegerField()

    class Meta:
        ordering = ["node", "at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(vm_mru__gte=0) & Q(vm_sru__gte=0) & Q(used_mru__gte=0) & Q(used_sru__gte=0),
                name="sample_sizes_not_negative",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node} at {self.at:%Y-%m-%d %H:%M}: {self.vm_count} VMs"


class Observation(models.Model):
    """What one ZOS refusal revealed about a node, with its evidence; it ages and can be cleared.

    A memory refusal's "usable Y bytes" gives the memory the host really used (total - Y);
    above the accounted use, spread over the VMs running then, it is hidden use per VM.
    A disk refusal of a size the accounting had room for says no pool had that much room.
    """

    class Kind(models.TextChoices):
        MEMORY = "memory", "Hidden memory use"
        DISK = "disk", "No pool holds the disk"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="observations")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    seen_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=16, default="deploy")  # deploy (slice_deploy) or reported (API)
    deployment = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="observations"
    )
    raw_error = models.TextField()
    vm_count = models.PositiveIntegerField(help_text="VMs running on the node when ZOS refused")
    total_mru = models.BigIntegerField(null=True, blank=True)
    accounted_mru = models.BigIntegerField(null=True, blank=True, help_text="Workloads + reserve, as reported")
    usable_mru = models.BigIntegerField(null=True, blank=True, help_text="ZOS's usable figure in the refusal")
    hidden_mru_per_vm = models.BigIntegerField(default=0)
    zos_build = models.CharField(max_length=128, blank=True, help_text="The node's ZOS build then (its group)")
    disk_size = models.BigIntegerField(null=True, blank=True, help_text="The disk no pool had room for")
    used_sru = models.BigIntegerField(null=True, blank=True, help_text="SSD in use when it was refused")
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Standing(models.TextChoices):
        """How far a memory reading is believed (issue 44; capacity.plausible, capacity.corroborate)."""

        GROUP = "group", "Taught its group"
        NODE = "node", "Its node alone, waiting for a second source"
        HELD = "held", "Held aside: not plausible"

    standing = models.CharField(max_length=8, choices=Standing.choices, default=Standing.GROUP)
    held_why = models.TextField(blank=True, help_text="Why it is held aside, in plain words")
    # Who vouches for the reading: "account <user id>", "the dashboard" (its own deploy), "a proposed probe".
    vouched_by = models.CharField(max_length=40, blank=True)
    reported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token = models.ForeignKey("ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The actual use its group's fit reads (capacity.corroborate.admitted_point: within the line's doubt
    # when it was admitted); null: total - usable, as told.
    group_actual_mru = models.BigIntegerField(null=True, blank=True)
    # When it was recorded (seen_at is when ZOS refused): reports are bounded in time by this.
    recorded_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["node", "-seen_at"]
        constraints = [
            models.CheckConstraint(condition=Q(hidden_mru_per_vm__gte=0), name="observation_hidden_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.node} at {self.seen_at:%Y-%m-%d %H:%M}"

    @property
    def reading(self) -> capacity.RefusalReading:
        """A memory refusal's figures as calibration's sample (policies.services.calibration)."""
        return capacity.refusal_reading(
            vm_count=self.vm_count,
            total_mru=self.total_mru,
            accounted_mru=self.accounted_mru,
            usable_mru=self.usable_mru,
            used_sru=self.used_sru,
        )


class ProbeProposal(models.Model):
    """A node the probe list proposed to the program that took it (POST /api/v1/probes; GET and the probes
    page only read): a probe's refusal reported there within PROBE_WINDOW_HOURS counts as a probe, the
    product's own question answered."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    proposed_at = models.DateTimeField(db_index=True)
    token = models.ForeignKey("ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["node", "proposed_at"], name="probe_proposal_node_at")]

    def __str__(self) -> str:
        return f"probe of {self.node} proposed at {self.proposed_at:%Y-%m-%d %H:%M}"


# capacity.OverheadFit's fields, each kept in MemoryLesson's column of the same name.
_FIT_FIELDS = tuple(f.name for f in dataclasses.fields(capacity.OverheadFit))


class MemoryLesson(models.Model):
    """One fit of a build's memory overhead model (capacity.overhead), kept as history: the newest
    not reverted decides the memory of every node of its group; an admin may revert it (audited).

    `build` is the group: a ZOS version, or "" for the fleet-wide group of nodes whose version is
    not known. `own_mru` null: a lesson kept before ZOS's own use had a prior (one observation,
    attributed per VM over each node's reserve).
    """

    build = models.CharField(max_length=128, blank=True, db_index=True)
    own_mru = models.BigIntegerField(null=True, blank=True)
    per_vm_mru = models.BigIntegerField()
    own_sd = models.BigIntegerField(default=0)
    per_vm_sd = models.BigIntegerField(default=0)
    spread_mru = models.BigIntegerField(default=0)
    line_sd = models.BigIntegerField(default=0)  # the doubt rival readings of its points leave (capacity.overhead)
    per_vm_doubt = models.BigIntegerField(default=0)
    mean_vms = models.FloatField(default=0)
    points = models.PositiveIntegerField()
    nodes = models.PositiveIntegerField()
    residuals = models.JSONField(default=dict, blank=True)  # node pk (as text) -> bytes
    # Its points all at one VM count: ZOS's own use is a prior (capacity.overhead), the lesson hopeful.
    on_prior = models.BooleanField(default=False)
    observation_ids = models.JSONField(default=list, blank=True)
    learnt_from = models.JSONField(default=list, blank=True)  # the grid ids of the nodes observed
    learnt_at = models.DateTimeField()
    trigger_node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["build", "-learnt_at", "-pk"]

    def __str__(self) -> str:
        return f"memory lesson {self.pk} of {self.build or 'the fleet'} at {self.learnt_at:%Y-%m-%d %H:%M}"

    # Each field of capacity.OverheadFit is a column of the same name: the two ways between them are here,
    # side by side (a field without its column fails the first lesson kept, not silently).

    def fit(self) -> capacity.OverheadFit:
        """The fit as capacity.overhead made it: the line, its uncertainty and each node's residual."""
        values = {name: getattr(self, name) for name in _FIT_FIELDS}
        values["residuals"] = {int(node): value for node, value in self.residuals.items()}  # JSON keys are text
        return capacity.OverheadFit(**values)

    @staticmethod
    def fit_columns(fit: capacity.OverheadFit) -> dict[str, Any]:
        """The columns that keep `fit` (MemoryLesson.objects.create(**fit_columns(fit), ...))."""
        values = {name: getattr(fit, name) for name in _FIT_FIELDS}
        values["residuals"] = {str(node): value for node, value in fit.residuals.items()}
        return values


class AuditEvent(models.Model):
    """Who did what, from where, and with what result. Never edited, only appended."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    source = models.CharField(max_length=8, default="web")
    action = models.CharField(max_length=40)
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    message = models.TextField()
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action}: {self.message}"


class ApiToken(models.Model):
    """A bearer token for the JSON API, held by one user and limited to some scopes.

    Only a SHA-256 of the token is kept (tokens are 256-bit random, so a slow hash adds nothing);
    the token itself is shown once, when it is made. `prefix` (the first characters) names it in
    lists and in the audit trail without revealing it. A token never outlives its user's own
    permissions: each scope is checked against them on every request.
    """

    class Scope(models.TextChoices):
        READ = "read", "Read the fleet, nodes, jobs, deployments and policies"
        PRECHECK = "precheck", "Run a capacity precheck"
        REPORT = "report", "Report deployment outcomes"
        ACT = "act", "Start jobs (re-register)"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to recognise it")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token, hex")
    scopes = models.JSONField(default=list, help_text="Some of read, precheck, report, act")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-pk"]
        permissions = [("manage_apitoken", "Can create and revoke API tokens for any user")]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"], condition=Q(revoked_at__isnull=True), name="api_token_name_unique_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"API token {self.prefix}… ({self.name}) of {self.user}"

    def is_usable(self, now) -> bool:
        """Not revoked and not expired at `now`: the one rule for "does this token still work"."""
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class Alert(models.Model):
    """One alert rule about one subject (dashboard.alerts.rules): firing or resolved, and what was told.

    Rows are kept, not deleted, when a rule resolves: `notified_state` records the last state a
    message was delivered for, so each start and each end is told exactly once.
    """

    class State(models.TextChoices):
        FIRING = "firing", "Firing"
        RESOLVED = "resolved", "Resolved"

    rule = models.CharField(max_length=40)
    subject = models.CharField(max_length=80)
    state = models.CharField(max_length=8, choices=State.choices, default=State.FIRING, db_index=True)
    since = models.DateTimeField(help_text="When the current state began")
    summary = models.CharField(max_length=300)
    detail = models.TextField(blank=True)
    evaluated_at = models.DateTimeField()
    # "" until a message was delivered; then the state that message told.
    notified_state = models.CharField(max_length=8, blank=True, default="")
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # Each route's own delivery: sha256 of its URL (URLs hold secrets) -> the state last told to it,
    # so one route down is retried alone and the others are not told twice.
    told_urls = models.JSONField(default=dict, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-since"]
        permissions = [("acknowledge_alert", "Can acknowledge an alert")]
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], name="one_alert_per_rule_and_subject")]

    def __str__(self) -> str:
        return f"{self.rule} ({self.subject}): {self.state}"

    @property
    def title(self) -> str:
        return ALERT_TITLES.get(self.rule, self.rule)


class GridRequestTally(models.Model):
    """Grid Proxy requests made by every web process and worker, added up (grid.telemetry, /metrics).

    One row per endpoint, outcome and duration bucket (not cumulative); rows only ever grow by
    `count` and `seconds` (an upsert adds a process's tally), so the table stays a few dozen rows.
    """

    endpoint = models.CharField(max_length=40)
    outcome = models.CharField(max_length=16)
    bucket = models.CharField(max_length=8, help_text="Upper bound in seconds of the duration bucket, or +Inf")
    count = models.BigIntegerField(default=0)
    seconds = models.FloatField(default=0.0, help_text="Total duration of these requests")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "outcome", "bucket"], name="one_tally_per_endpoint_outcome_bucket"
            )
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.outcome} <= {self.bucket}: {self.count}"


class FiguresSettings(models.Model):
    """The settings the stored figures were computed under (one row, figures.services.figures_settings): a
    process whose figure-deciding settings differ (a `manage.py` without the web's MARKETPLACE_TWIN_ID)
    refuses to store figures rather than overwrite the others' with figures nobody else would compute."""

    key = models.CharField(max_length=16, primary_key=True, default="fleet")
    values = models.JSONField(help_text="the figure-deciding settings, by name")
    stored_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"figures computed under {self.values}"


class FiguresSnapshot(models.Model):
    """One moment's capacity figures (taken by the beat every SNAPSHOT_EVERY s and after every job);
    its rows are SnapshotFigures. Thinned by figures.services.snapshots so storage stays bounded."""

    at = models.DateTimeField(db_index=True)
    trigger = models.CharField(max_length=40, help_text='"beat", or the job that finished ("job 12")')

    class Meta:
        ordering = ["at"]

    def __str__(self) -> str:
        return f"snapshot at {self.at:%Y-%m-%d %H:%M} ({self.trigger})"


class SnapshotFigures(models.Model):
    """The fleet's, one farm's or one node's figures in a snapshot: the stored Node figure columns
    summed (figures.services.figures' meanings), with the phantom slices by reason."""

    class Scope(models.TextChoices):
        FLEET = "fleet", "Fleet"
        FARM = "farm", "Farm"
        NODE = "node", "Node"

    snapshot = models.ForeignKey(FiguresSnapshot, on_delete=models.CASCADE, related_name="figures")
    scope = models.CharField(max_length=5, choices=Scope.choices)
    # 0 for the fleet, the farm id, or the node's grid id (no foreign key: a removed node's history ages out).
    subject = models.BigIntegerField()
    nodes = models.PositiveIntegerField(default=0)
    nominal = models.PositiveIntegerField(default=0)
    deployable = models.PositiveIntegerField(default=0)
    # Deployable less the slices rented or deployed: what could still be sold.
    free_deployable = models.PositiveIntegerField(default=0)
    free = models.PositiveIntegerField(default=0)
    placeable = models.PositiveIntegerField(default=0)
    phantom = models.PositiveIntegerField(default=0)
    phantom_down = models.PositiveIntegerField(default=0)
    phantom_standby = models.PositiveIntegerField(default=0)
    phantom_memory = models.PositiveIntegerField(default=0)
    phantom_disk = models.PositiveIntegerField(default=0)
    phantom_pool = models.PositiveIntegerField(default=0)
    # Phantom because the node was closed, for any reason of capacity.CLOSURE_REASONS (down and standby too).
    phantom_closed = models.PositiveIntegerField(default=0)
    # `deployable` in its tiers (figures.selectors.tiers, the fleet page's definition): they add up to it.
    deployable_now = models.PositiveIntegerField(default=0)
    deployable_after_wake = models.PositiveIntegerField(default=0)
    deployable_blocked = models.PositiveIntegerField(default=0)
    deployable_closed = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["scope", "subject", "snapshot"], name="snapshot_series")]

    def __str__(self) -> str:
        return f"{self.scope} {self.subject} in snapshot {self.snapshot_id}"


class FarmTotals(models.Model):
    """Each farm's figures summed over its nodes, kept so the fleet's totals cost one row a farm to read.

    Derived data, like an index: a PostgreSQL trigger marks a farm changed (FarmTotalsChanged) in the
    same transaction as any write to its nodes; figures.services.farm_totals sums the marked farms again after
    the writes that changed them (on commit) and on the beat, and figures.selectors.farm_totals reads a farm
    still marked live from its nodes. Never written by hand.
    """

    farm_id = models.PositiveIntegerField(primary_key=True)
    nodes = models.BigIntegerField(default=0)
    nodes_up = models.BigIntegerField(default=0)
    nominal = models.BigIntegerField(default=0)
    deployable = models.BigIntegerField(default=0)
    free = models.BigIntegerField(default=0)
    rented = models.BigIntegerField(default=0)
    deployed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    placeable = models.BigIntegerField(default=0)
    phantom = models.BigIntegerField(default=0)
    phantom_on_up_nodes = models.BigIntegerField(default=0)
    stale = models.BigIntegerField(default=0)
    unprechecked = models.BigIntegerField(default=0)
    never_read = models.BigIntegerField(default=0)
    deployable_now = models.BigIntegerField(default=0)
    deployable_after_wake = models.BigIntegerField(default=0)
    deployable_blocked = models.BigIntegerField(default=0)
    deployable_closed = models.BigIntegerField(default=0)
    oldest_reading_at = models.DateTimeField(null=True, blank=True)
    computed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"farm {self.farm_id} totals"


class FarmTotalsChanged(models.Model):
    """A farm whose nodes changed since its FarmTotals were computed (written by a trigger)."""

    farm_id = models.PositiveIntegerField(db_index=True)

    def __str__(self) -> str:
        return f"farm {self.farm_id} changed"


class WaveRun(models.Model):
    """A bulk re-register's state between its batches: its waves, its budget, paused, stopped, approved.

    One per bulk job that runs in waves or waits for a second admin (catalogs.services.reregister.waves). The
    job's row keeps its life (queued, running, finished); this keeps what an admin steers: the run
    pauses itself when the refusals and failures since it started (or since it was last resumed)
    pass its budget, and an admin resumes or stops it; Stop ends it after the batch in hand.
    """

    class State(models.TextChoices):
        AWAITING_APPROVAL = "awaiting", "Waiting for a second admin's approval"
        RUNNING = "running", "Running"
        PAUSED = "paused", "Paused"
        STOPPING = "stopping", "Stopping after the batch in hand"
        STOPPED = "stopped", "Stopped"
        DONE = "done", "Done"

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="wave_run")
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    canary_farm = models.PositiveIntegerField(null=True, blank=True)
    canary_share = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Percent of the stale nodes")
    batch_size = models.PositiveIntegerField(default=100)
    budget = models.PositiveIntegerField(default=3, help_text="Refusals and failures allowed before it pauses")
    # Refusals and failures counted when it was last resumed: the budget counts again from there.
    spent_at_resume = models.PositiveIntegerField(default=0)
    refusals = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    stale_at_request = models.PositiveIntegerField(default=0)
    # [{"label": "canary: farm 3", "nodes": 12, "done": 12, "failed": 0, "state": "done"}], in order.
    waves = models.JSONField(default=list, blank=True)
    paused_reason = models.CharField(max_length=300, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # What a rollback of the run did: {"at": iso, "by": name, "rolled_back": [ids], "blocked": {id: why}}.
    rollback = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    HELD_STATES = (State.AWAITING_APPROVAL,)

    def __str__(self) -> str:
        return f"waves of job {self.job_id} ({self.state})"

    @property
    def spent(self) -> int:
        """Refusals and failures since it started."""
        return self.refusals + self.failures

    @property
    def budget_left(self) -> int:
        return max(self.budget - (self.spent - self.spent_at_resume), 0)


class CatalogGeneration(models.Model):
    """A node's catalog as it was before a re-register wrote a new one, kept so an admin can roll it back.

    Written in the same transaction as the new catalog (catalogs.services.reregister.bulk). A rollback
    (catalogs.services.reregister.rollback) puts the free slices back as they were while none of the node's
    slices changed hands since; occupied slices are never touched.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="catalog_generations")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="catalog_generations")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    # The node's carve columns before: carved_policy_name, carved_policy_version, carved_slice_sru,
    # carved_deployable, carved_pools_known, catalog_generation.
    before = models.JSONField(default=dict)
    # Every slice before: [{"index", "cru", "mru", "sru", "state"}]; and what the re-register removed.
    slices_before = models.JSONField(default=list)
    removed = models.JSONField(default=list)
    added_indices = models.JSONField(default=list)
    # {index: state} of every slice right after the re-register: a rollback needs the same now.
    slices_after = models.JSONField(default=dict)
    generation_after = models.PositiveIntegerField()
    rolled_back_at = models.DateTimeField(null=True, blank=True)
    rolled_back_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["job", "node"], name="catalog_generation_job_node")]

    def __str__(self) -> str:
        return f"node {self.node_id}'s catalog before job {self.job_id}"


class PolicyVersion(models.Model):
    """Every version of every policy, as it was saved: who, when, from where, and its parameters.

    Written by policies.services.policy with each create, change and revert, in the same transaction. The
    migration that made this table recorded each policy's state at that time as its first entry.
    """

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        CHANGED = "changed", "Changed"
        REVERTED = "reverted", "Reverted"
        RECORDED = "recorded", "Recorded when the history began"

    policy = models.ForeignKey(Policy, null=True, blank=True, on_delete=models.SET_NULL, related_name="versions")
    policy_name = models.CharField(max_length=64, db_index=True)
    version = models.PositiveIntegerField()
    scope = models.CharField(max_length=8, choices=Policy.Scope.choices)
    farm_id = models.PositiveIntegerField(null=True, blank=True)
    parameters = models.JSONField(default=dict)
    action = models.CharField(max_length=10, choices=Action.choices)
    reverted_from = models.PositiveIntegerField(null=True, blank=True)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=8, default="web")
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["policy_name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "version"], condition=Q(policy__isnull=False), name="one_entry_per_policy_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.policy_name} v{self.version}"


class FarmIps(models.Model):
    """A farm's public IPv4 pool as the Grid Proxy last told it (the chain's `{ip, gateway, contract_id}`,
    contract 0 = free): shared by every node of the farm, so it bounds their IPv4 slices together.
    One writer: nodes.services.farm_ips."""

    farm_id = models.PositiveIntegerField(unique=True)
    farm_name = models.CharField(max_length=128, blank=True)
    ips = models.JSONField(default=list, help_text='[{"ip", "gateway", "contract_id"}], as read')
    read_at = models.DateTimeField()
    # The free count over time for the run-out alert's trend: [[read_at ISO, free], ...], oldest first, a
    # point every 6 hours within the trend's 14 days and the latest (nodes.services.farm_ips keeps it bounded).
    free_readings = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "farm public IPs"
        verbose_name_plural = "farms' public IPs"

    def __str__(self) -> str:
        return f"farm {self.farm_id}: {self.free}/{self.total} public IPv4 free"

    @property
    def total(self) -> int:
        return len(self.ips)

    @property
    def free(self) -> int:
        return sum(1 for ip in self.ips if not ip.get("contract_id"))
