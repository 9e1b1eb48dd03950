"""The month replayed against each policy, and its figures side by side (`simulate`).

Figures, per policy: deploys sent to ZOS, refusals by cause (and on the nodes of several SSDs, by
cause and by whether their drives fit the prudent carve's plausible set), refusals per 1,000
deploys, refusals after the first one on each node, utilisation and phantom slice-hours:
- utilisation: on nodes the marketplace can put nothing more on (full by the dashboard's word, or
  turned away after a refusal), the memory of the VMs running there over what ZOS would hold at best
  under its own rule (those VMs and the node's slices it would still take now), weighted by the time
  each node stays full: at most 1 by construction;
- phantom slice-hours: free catalog slices that ZOS would refuse if deployed now, times hours.
"""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from dashboard import capacity
from dashboard.capacity import GiB
from sim.month.evidence import forge
from sim.month.fleet import (
    HOURS,
    MEAN_LIFETIME_HOURS,
    MEMORY_CHOICES_GIB,
    SSD_CHOICES_GIB,
    NodeSpec,
    allowed_mru,
    event_stream,
    fleet_mix,
    hidden_use_for,
    in_plausible_set,
    pools_reported_for,
)
from sim.month.memory import MIN_ODDS
from sim.month.policies import POLICY_NAMES, Contender, contender
from sim.month.run import PROBE_EVERY_HOURS, RE_REGISTER_EVERY_HOURS, Run

if TYPE_CHECKING:  # sim.month.drift imports this package back at run time
    from sim.month.drift import Drift

TICK_EVERY = 250  # events between two calls of simulate's `tick`


@dataclass(frozen=True)
class PolicyFigures:
    name: str
    requests: int
    deploys: int
    refused: int
    refused_by_cause: dict[str, int]
    refused_per_1000: float
    refused_after_first: int
    nodes_refused: int
    refused_without_hidden_use: int  # refusals on nodes whose memory use is all accounted
    refused_on_several_pools_by_cause: dict[str, int]
    # Disk refusals by what the dashboard knew of the node's pools: reported, or hidden and the
    # drives inside the prudent carve's plausible set (the shipped policy must have none), or outside it.
    disk_refused: dict[str, int]
    # The data disk the registrations' carves gave up to layouts a node may not have (its pools unknown),
    # as a share of the fleet's SSD: what hearing the pools over RMB gives back.
    disk_given_up_share: float
    precheck_stops: int
    unserved: int
    utilisation: float
    phantom_slice_hours: float
    seconds: float
    daily: list[dict]
    drift: dict = field(default_factory=dict)  # catalog_truth and the drift's counts, with simulate(drift=...)
    ipv4_requests: int = 0  # requests asking a public IPv4 (simulate's ipv4_share)
    refused_for_ipv4: int = 0  # of the refusals, the chain's for the farm's IPs (FarmHasNotEnoughPublicIPsFree)

    # Refusals over the month per 1,000 nodes of the fleet, by why (before/after a lesson, test VM,
    # disk), by ZOS build and the nodes of each build refused at least once (their first refusal).
    refused_per_1000_nodes: float = 0.0
    refused_by_reason: dict[str, int] = field(default_factory=dict)
    refused_by_build: dict[str, int] = field(default_factory=dict)
    first_refusals_by_build: dict[str, int] = field(default_factory=dict)
    # The odds of every deploy sent against its outcome: how many, Brier score, expected calibration error.
    odds_calibration: dict = field(default_factory=dict)
    # With probes: the probe contracts made, and buyer refusals on a build a probe had taught then.
    probes: dict = field(default_factory=dict)
    # How far readings were believed (traffic.evidence), by who vouched; with --forged-reports, the forger's.
    evidence: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return (
            {
                "requests": self.requests,
                "deploys": self.deploys,
                "refused": self.refused,
                "refused_by_cause": self.refused_by_cause,
                "ipv4_requests": self.ipv4_requests,
                "refused_for_ipv4": self.refused_for_ipv4,
                "refused_per_1000": self.refused_per_1000,
                "refused_after_first": self.refused_after_first,
                "nodes_refused": self.nodes_refused,
                "refused_without_hidden_use": self.refused_without_hidden_use,
                "refused_on_several_pools_by_cause": self.refused_on_several_pools_by_cause,
                "disk_refused": self.disk_refused,
                "disk_given_up_share": self.disk_given_up_share,
                "precheck_stops": self.precheck_stops,
                "unserved": self.unserved,
                "utilisation": self.utilisation,
                "phantom_slice_hours": self.phantom_slice_hours,
                "seconds": self.seconds,
                "refused_per_1000_nodes": self.refused_per_1000_nodes,
                "refused_by_reason": self.refused_by_reason,
                "refused_by_build": self.refused_by_build,
                "first_refusals_by_build": self.first_refusals_by_build,
                "odds_calibration": self.odds_calibration,
            }
            | ({"probes": self.probes} if self.probes else {})
            | ({"evidence": self.evidence} if self.evidence else {})
            | self.drift
        )


@dataclass(frozen=True)
class Simulation:
    nodes: int
    events: int
    seed: int
    mix: dict
    policies: dict[str, PolicyFigures]
    seconds: float
    peak_memory_mib: float

    def as_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "events": self.events,
            "seed": self.seed,
            "hours": HOURS,
            "mix": self.mix,
            "policies": {name: figures.as_dict() for name, figures in self.policies.items()},
            "seconds": self.seconds,
            "peak_memory_mib": self.peak_memory_mib,
        }


def simulate(
    *,
    nodes: int | None = None,
    events: int,
    seed: int,
    policies: Sequence[str | Contender] = POLICY_NAMES,
    progress=None,
    fleet: Sequence[NodeSpec] | None = None,
    tick: Callable[[str, int, int], None] | None = None,
    pools_reported: float = 0.0,
    drift=None,
    cache_grows: bool = False,
    ipv4_share: float = 0.0,
    hidden_use: str = "builds",
    min_odds: float = MIN_ODDS,
    probes: bool = False,
    forged_reports: int = 0,
) -> Simulation:
    """Replay one fleet and one event stream against each policy; the figures side by side.

    The fleet is the stated mix of `nodes` nodes, or the caller's `fleet` (the seed then draws only
    the events). A policy is a built-in name or a Contender. `progress(figures)` is called as each
    policy finishes; `tick(name, events_done, events)` every TICK_EVERY events, for a heartbeat.
    `pools_reported` is the share of the stated mix's nodes whose pools the dashboard is told (as the
    marketplace's deployer can report them); the others' stay hidden, as from the Grid Proxy. A
    caller's fleet says it node by node (NodeSpec.pools_reported). `drift` (a traffic_drift.Drift)
    adds what the grid does behind the catalog's back, and catalog_truth. `cache_grows`: every node's
    zos-cache boots at 5 GiB and grows with the images pulled (fleet.IMAGES), the pools reports telling it.
    `ipv4_share` of the deploy requests ask a public IPv4 from their farm's pool (traffic.farm_ips: FARM_NODES,
    FARM_IPS).
    `hidden_use` (fleet.HIDDEN_USE_CHOICES) says how the stated mix's memory differs from ZOS's count;
    `min_odds` is SLICE_MIN_ODDS: the learning policy offers only slices at or above it. `probes`: the
    deployer of a learning policy sends what GET /api/v1/probes lists, every PROBE_EVERY_HOURS.
    `forged_reports`: a hostile reporter's token sends that many made-up memory refusals over the month
    (traffic.evidence.Forger), absurd and plausible in turn, to a learning policy.
    """
    if not 0.0 <= ipv4_share <= 1.0:
        raise ValueError(f"the IPv4 share is between 0 and 1, not {ipv4_share}")
    contenders = _contenders(policies)
    nodes = _fleet_size(nodes, fleet, events)
    started = time.perf_counter()
    world = _world(
        nodes, events, seed, fleet, drift, pools_reported=pools_reported, hidden_use=hidden_use, cache_grows=cache_grows
    )
    options = {"min_odds": min_odds, "probes": probes, "forged": forged_reports}
    results = {}
    for entrant in contenders:
        results[entrant.name] = _month(entrant, world, ipv4_share=ipv4_share, tick=tick, options=options)
        if progress is not None:
            progress(results[entrant.name])
    return Simulation(
        nodes=nodes,
        events=events,
        seed=seed,
        mix=_mix(world.specs, stated=fleet is None, hidden_use=hidden_use)
        | ({} if drift is None else {"drift": drift.as_dict()}),
        policies=results,
        seconds=round(time.perf_counter() - started, 2),
        peak_memory_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )


@dataclass(frozen=True)
class _World:
    """What every policy replays alike: the fleet, the memory ZOS lets each node hold, the events, the drift."""

    specs: list[NodeSpec]
    allowed: dict[int, int]  # node_id -> allowed_mru, for utilisation
    stream: Sequence
    drift: Drift | None


def _world(
    nodes: int,
    events: int,
    seed: int,
    fleet: Sequence[NodeSpec] | None,
    drift: Drift | None,
    *,
    pools_reported: float,
    hidden_use: str,
    cache_grows: bool,
) -> _World:
    """The month drawn from the seed: the stated mix (unless the caller's fleet), then the events, in that order."""
    rng = random.Random(seed)
    if fleet is None:
        specs = hidden_use_for(pools_reported_for(fleet_mix(nodes, rng), pools_reported, seed), hidden_use, seed)
    else:
        specs = list(fleet)
    if cache_grows:
        specs = [replace(spec, cache_grows=True) for spec in specs]
    stream = event_stream(events, rng) if drift is None else drift.stream(event_stream(events, rng), rng)
    return _World(specs, {spec.node_id: allowed_mru(spec) for spec in specs}, stream, drift)


def _month(
    entrant: Contender, world: _World, *, ipv4_share: float, tick: Callable[[str, int, int], None] | None, options: dict
) -> PolicyFigures:
    """One policy's month: its Run (the drift's, with a drift) replayed over the world's events, and its figures."""
    started = time.perf_counter()  # the policy's own seconds count its Run's setup too
    specs, allowed, drift = world.specs, world.allowed, world.drift
    run = Run(entrant, specs, allowed, **options) if drift is None else drift.run(entrant, specs, allowed, **options)
    run.ipv4_share = ipv4_share
    probes = options["probes"]
    _replay(run, world.stream, probes=probes, tick=None if tick is None else partial(tick, entrant.name))
    seconds = round(time.perf_counter() - started, 2)
    return _policy_figures(entrant.name, run, specs, drifted=drift is not None, seconds=seconds)


def _contenders(policies: Sequence[str | Contender]) -> list[Contender]:
    contenders = [p if isinstance(p, Contender) else contender(p) for p in policies]
    names = [c.name for c in contenders]
    if len(set(names)) != len(names):
        raise ValueError(f"each policy needs its own name; got {', '.join(names)}")
    return contenders


def _fleet_size(nodes: int | None, fleet: Sequence[NodeSpec] | None, events: int) -> int:
    """The number of nodes replayed: the caller's fleet's, checked, or the stated mix's."""
    if fleet is not None:
        if not fleet:
            raise ValueError("the fleet needs at least one node")
        if len({spec.node_id for spec in fleet}) != len(fleet):
            raise ValueError("each node of the fleet needs its own node_id")
        nodes = len(fleet)
    if nodes is None or nodes < 1 or events < 0:
        raise ValueError("nodes must be at least 1 and events zero or more")
    return nodes


def _replay(run: Run, stream: Sequence, *, probes: bool, tick: Callable[[int, int], None] | None) -> None:
    """Play the month's events through `run`, re-registering, probing and forging on their own clocks between them."""
    next_reregister = RE_REGISTER_EVERY_HOURS
    next_probe = 0.0 if probes else math.inf
    forgeries = run.forger.due(HOURS) if run.forger is not None else []
    for done, event in enumerate(stream):
        if tick is not None and done % TICK_EVERY == 0:
            tick(done, len(stream))
        # The periodic work due before this event happens at its own hour, after what was released by then.
        while next_reregister <= event.at:
            run.release_until(next_reregister)
            run.reregister_stale(next_reregister)
            next_reregister += RE_REGISTER_EVERY_HOURS
        while next_probe <= event.at:
            run.release_until(next_probe)
            run.probe(next_probe)
            next_probe += PROBE_EVERY_HOURS
        while forgeries and forgeries[0] <= event.at:
            at = forgeries.pop(0)
            run.release_until(at)
            forge(run, at)
        run.release_until(event.at)
        if event.kind == "deploy":
            run.deploy(event)
        else:
            run.status(event)
    run.release_until(HOURS)
    run.finish()


def _policy_figures(name: str, run: Run, specs: Sequence[NodeSpec], *, drifted: bool, seconds: float) -> PolicyFigures:
    refused = sum(run.refused_by_cause.values())
    return PolicyFigures(
        name=name,
        requests=run.requests,
        deploys=run.deploys,
        refused=refused,
        refused_by_cause=dict(sorted(run.refused_by_cause.items())),
        refused_per_1000=round(1000 * refused / run.deploys, 2) if run.deploys else 0.0,
        refused_after_first=sum(max(n.refusals - 1, 0) for n in run.nodes),
        nodes_refused=sum(1 for n in run.nodes if n.refusals),
        refused_without_hidden_use=sum(n.refusals for n in run.nodes if not n.spec.hides_use),
        refused_on_several_pools_by_cause=dict(sorted(run.several_pools_by_cause.items())),
        disk_refused=dict(run.disk_refused),
        disk_given_up_share=round(sum(n.disk_given_up for n in run.nodes) / max(sum(s.sru for s in specs), 1), 4),
        precheck_stops=run.precheck_stops,
        unserved=run.unserved,
        utilisation=round(run.util_num / run.util_den, 4) if run.util_den else 0.0,
        phantom_slice_hours=round(run.phantom_hours, 1),
        seconds=seconds,
        daily=run.daily,
        drift=run.drift_figures() if drifted else {},
        ipv4_requests=run.ipv4_requests,
        refused_for_ipv4=run.refused_by_cause.get("public-ip", 0),
        refused_per_1000_nodes=round(1000 * refused / len(specs), 2),
        refused_by_reason=dict(sorted(run.refused_by_reason.items())),
        refused_by_build=dict(sorted(run.refused_by_build.items())),
        first_refusals_by_build=dict(sorted(run.first_refusals_by_build.items())),
        odds_calibration=_calibration(run.odds_outcomes),
        probes={"sent": run.probes_sent, "refused_on_a_build_a_probe_taught": run.refused_on_probe_taught}
        if run.probes
        else {},
        evidence=_evidence(run),
    )


def _evidence(run: Run) -> dict:
    """How far the month's readings were believed, by who vouched: held aside, their node's alone, reached
    their group, refused past the token's bound; with --forged-reports, the forger's among them."""
    if run.evidence is None:
        return {}
    return {"by_source": {by: dict(counts) for by, counts in sorted(run.evidence.counts.items())}} | (
        {"forged_sent": run.forger.sent} if run.forger is not None else {}
    )


def _mix(specs: Sequence[NodeSpec], *, stated: bool, hidden_use: str) -> dict:
    """What the replayed fleet holds; `stated`: the stated mix rather than the caller's fleet."""
    return {
        "hidden_use": sum(1 for s in specs if s.hides_use),
        "several_pools": sum(1 for s in specs if len(s.pools) > 1),
        "several_pools_in_plausible_set": sum(1 for s in specs if len(s.pools) > 1 and in_plausible_set(s)),
        "pools_reported": sum(1 for s in specs if s.pools_reported),
        "cache_grows": sum(1 for s in specs if s.cache_grows),
        "hidden_use_choice": hidden_use if stated else "caller's fleet",
        "zos_builds": {b: sum(1 for s in specs if s.zos_build == b) for b in sorted({s.zos_build for s in specs})},
        "memory_gib": sorted(set(MEMORY_CHOICES_GIB)) if stated else sorted({s.mru // GiB for s in specs}),
        "ssd_gib": list(SSD_CHOICES_GIB) if stated else sorted({s.sru // GiB for s in specs}),
        "standby_share_of_events": 0.08,
        "mean_lifetime_days": MEAN_LIFETIME_HOURS / 24,
    }


def _calibration(outcomes: list[tuple[float, bool]]) -> dict:
    count, brier, ece = capacity.odds_calibration(outcomes)
    return {
        "outcomes": count,
        "brier": None if brier is None else round(brier, 5),
        "ece": None if ece is None else round(ece, 5),
    }
