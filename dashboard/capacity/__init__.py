"""The capacity model: how many fixed-size VM slices a ZOS node can really host.

Pure arithmetic with no Django import; integer bytes throughout (1024-based GiB, as
ZOS and the Grid Proxy count). Everything else in the product asks this package, through
the names below (`from dashboard import capacity; capacity.carve(...)`). The rules and
their sources are in docs/domain.md (ZOS accounting). The package imports nothing of ours
outside itself; its parts, each importing only those listed before it:

- `sizes`: the byte units, parse_size / format_size, `Resources`, the model's errors;
- `placement`: where ZOS's storaged puts each disk, in every device order of the pools;
- `layouts`: the plausible pool layouts of an SSD total nobody reported the pools of;
- `closures`: a node that offers nothing for a node-level reason (down, standby, ...): `CLOSURE_REASONS`,
  `node_closure(ClosureFacts)`; each reason one entry there (dashboard/figures/closure.py fills the facts);
- `vcpus`: ZOS's bound on one VM's vCPUs (the node's logical CPUs, zosbase pkg/vm.go VM.Validate);
- `words`: every sentence the model says (verdicts, carve notes, a node that is away);
- `policy`: `Policy`, the profiles, ZOS's rootfs rule, what a VM's disks are;
- `lessons`: what ZOS's refusals teach (`Observed`), ZOS's memory check;
- `line`: the one least-squares line (`least_squares`), for every fit and trend;
- `overhead`: the fleet's memory line per ZOS build (`overhead_fit`), with its uncertainty;
- `test_vm`: how often ZOS's test VM runs on a build (`test_vm_schedule`), and the memory kept for it;
- `hidden`: the belief over a build's hidden use (a fit or a prior) weighted by the deployments ZOS took;
- `odds`: the chance a free slice deploys at the first try now (`slices_odds`), and their calibration;
- `carve`: the slices a node can host (`carve`, `carve_memoised`);
- `precheck`: what fits on a live node now (`fits`, `placeable_count`, `precheck`), closed nodes;
- `carries`: a slice's public IPv4 and GPU, refused when the farm's pool or the node's rent cannot give them.

The functions `carve` and `precheck` share their modules' names: here the names are the
functions, so import from those modules as `from dashboard.capacity.carve import ...`.
"""

from dashboard.capacity.carries import CarriesVerdict, gpu_refusal, ipv4_refusal
from dashboard.capacity.carve import Carve, SliceSize, carve, carve_memoised, deployable_slices, pool_layouts
from dashboard.capacity.carve import _carve_memo as _carve_memo  # its cache, counted by a test
from dashboard.capacity.closures import (
    AWAY_STATUSES,
    CLOSURE_REASONS,
    GRACE_PERIOD,
    Closure,
    ClosureFacts,
    ClosureReason,
    away_badge,
    away_sentence,
    node_closure,
    node_is_away,
    status_closure,
    stored_closure,
)
from dashboard.capacity.hidden import Accepted, HiddenUse, build_prior, fit_belief, tightest
from dashboard.capacity.layouts import (
    MAX_DRIVES,
    MODEL_TOLERANCE_PERCENT,
    POOL_OVERHEAD_PERMILLE,
    STANDARD_SSD_GB,
    in_plausible_set,
    narrowed,
    plausible_layouts,
)
from dashboard.capacity.lessons import (
    NOTHING_OBSERVED,
    Lesson,
    Observed,
    RefusalReading,
    hidden_use_per_vm,
    memory_more_cautious,
    observed_after,
    observed_now,
    refusal_lesson,
    refusal_reading,
    vms_by_memory,
    zos_build_key,
    zos_reserve_mru,
)
from dashboard.capacity.line import Line, least_squares
from dashboard.capacity.odds import (
    Unread,
    expected_beyond,
    memory_odds,
    odds_calibration,
    odds_on_reading,
    slices_odds,
    sure_slices,
    unread_belief,
)
from dashboard.capacity.overhead import (
    PRIOR_SPREAD_MRU,
    PROBE_BEYOND_MRU,
    MemoryPoint,
    OverheadFit,
    overhead_fit,
    probe_need,
)
from dashboard.capacity.placement import (
    MAX_POOL_SIZES,
    MAX_POOLS,
    POOLS_TOLERANCE_PERMILLE,
    Blurred,
    PoolState,
    largest_pool_room,
    largest_room,
    place_disk,
    place_vm_disks,
    pools_after,
    pools_at_boot,
    pools_bounded,
    pools_match_total,
    vms_placed_in_every_order,
)
from dashboard.capacity.policy import (
    ARITHMETICS,
    CACHE_STEP,
    DEFAULT_PROFILE,
    MIN_VM_MRU,
    PROFILES,
    PROXY_CACHE_SRU,
    ROOTFS_LARGE,
    ROOTFS_RULES,
    ROOTFS_SMALL,
    Policy,
    PolicyError,
    cache_bound,
    cache_keep,
    cache_pool_of,
    cache_reported,
    cache_room,
    profile,
    vm_disks,
    with_overrides,
    zos_rootfs,
)
from dashboard.capacity.precheck import (
    NOTHING_KNOWN,
    PHANTOM_REASONS,
    SHORTFALL_REASONS,
    AwayVerdict,
    ClosedVerdict,
    LiveNode,
    Precheck,
    Shortfall,
    SliceVerdict,
    Verdict,
    fits,
    live_node,
    placeable_count,
    pools_decide,
    pools_used_agreeing,
    precheck,
    room_now,
)
from dashboard.capacity.sizes import (
    CapacityError,
    GiB,
    KiB,
    MiB,
    Resources,
    SizeError,
    TiB,
    format_size,
    gib,
    parse_size,
)
from dashboard.capacity.spread import (
    NOTHING_READ,
    Spread,
    below_line,
    differs,
    excess_per_vm,
    probe_first,
    probe_rank,
    read_apart,
)
from dashboard.capacity.test_vm import TEST_VM_MRU, TestVmSchedule, test_vm_reserve_mru, test_vm_schedule
from dashboard.capacity.vcpus import MAX_VM_CRU, vcpus_refused, zos_cpu_refusal, zos_vcpu_limit
from dashboard.capacity.words import RESOURCE_WORDS

__all__ = [
    # carries
    "CarriesVerdict",
    "gpu_refusal",
    "ipv4_refusal",
    # sizes
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "CapacityError",
    "SizeError",
    "parse_size",
    "format_size",
    "gib",
    "Resources",
    # placement
    "PoolState",
    "pools_at_boot",
    "place_disk",
    "place_vm_disks",
    "pools_after",
    "Blurred",
    "MAX_POOL_SIZES",
    "MAX_POOLS",
    "pools_bounded",
    "POOLS_TOLERANCE_PERMILLE",
    "pools_match_total",
    "largest_room",
    "vms_placed_in_every_order",
    "largest_pool_room",
    # layouts
    "STANDARD_SSD_GB",
    "MAX_DRIVES",
    "MODEL_TOLERANCE_PERCENT",
    "POOL_OVERHEAD_PERMILLE",
    "plausible_layouts",
    "in_plausible_set",
    "narrowed",
    # closures
    "AWAY_STATUSES",
    "node_is_away",
    "CLOSURE_REASONS",
    "GRACE_PERIOD",
    "Closure",
    "ClosureFacts",
    "ClosureReason",
    "node_closure",
    "status_closure",
    "stored_closure",
    "away_sentence",
    "away_badge",
    # vcpus
    "MAX_VM_CRU",
    "vcpus_refused",
    "zos_cpu_refusal",
    "zos_vcpu_limit",
    # words
    "RESOURCE_WORDS",
    # policy
    "ROOTFS_SMALL",
    "ROOTFS_LARGE",
    "MIN_VM_MRU",
    "PolicyError",
    "CACHE_STEP",
    "PROXY_CACHE_SRU",
    "cache_bound",
    "cache_pool_of",
    "cache_room",
    "cache_keep",
    "cache_reported",
    "ROOTFS_RULES",
    "ARITHMETICS",
    "Policy",
    "zos_rootfs",
    "vm_disks",
    "PROFILES",
    "DEFAULT_PROFILE",
    "profile",
    "with_overrides",
    # lessons
    "Observed",
    "NOTHING_OBSERVED",
    "NOTHING_READ",
    "hidden_use_per_vm",
    "zos_build_key",
    "zos_reserve_mru",
    "MemoryPoint",
    "OverheadFit",
    "overhead_fit",
    "Line",
    "least_squares",
    "TEST_VM_MRU",
    "TestVmSchedule",
    "test_vm_reserve_mru",
    "test_vm_schedule",
    "probe_need",
    "probe_first",
    "probe_rank",
    "below_line",
    "read_apart",
    "differs",
    "excess_per_vm",
    "PROBE_BEYOND_MRU",
    "PRIOR_SPREAD_MRU",
    "memory_odds",
    "Accepted",
    "HiddenUse",
    "build_prior",
    "fit_belief",
    "tightest",
    "slices_odds",
    "Unread",
    "unread_belief",
    "expected_beyond",
    "odds_on_reading",
    "sure_slices",
    "odds_calibration",
    "Lesson",
    "refusal_lesson",
    "RefusalReading",
    "refusal_reading",
    "memory_more_cautious",
    "observed_after",
    "observed_now",
    "vms_by_memory",
    # carve
    "SliceSize",
    "Carve",
    "carve",
    "carve_memoised",
    "deployable_slices",
    "pool_layouts",
    # precheck
    "Shortfall",
    "Verdict",
    "LiveNode",
    "NOTHING_KNOWN",
    "live_node",
    "pools_used_agreeing",
    "AwayVerdict",
    "ClosedVerdict",
    "fits",
    "pools_decide",
    "room_now",
    "placeable_count",
    "PHANTOM_REASONS",
    "SHORTFALL_REASONS",
    "SliceVerdict",
    "Spread",
    "Precheck",
    "precheck",
]
