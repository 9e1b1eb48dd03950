"""A month of marketplace traffic on simulated ZOS nodes, with the dashboard's decisions in the loop.

One fleet (a stated mix: every node on a ZOS build, most on one, a few on another, each with its own
memory use and each VM's beyond its size, a small per-node spread and the daily test VM, as
`--hidden-use builds` has it; a third with 2-4 SSD
pools of near-equal size in an unknown device order, the pools hidden from the dashboard unless
`pools_reported` says otherwise, as from the Grid Proxy; some standby churn) and one event stream
(deploy requests, each with the lifetime its VM will have; nodes going to standby and waking) are
replayed against each policy:

- `legacy`: the seed's carve (1 GiB reserve, 100% of the disk), no precheck, no learning;
- `flat-overhead`: the seed's proposed fix (+3 GiB, +20 GiB per VM), no precheck;
- `zos`: ZOS's accounting and disk placement, the precheck before every deploy, no learning;
- `zos-learning`: the product as shipped: `zos` plus what refusals teach (the fleet's memory line per
  ZOS build told over RMB, `memory`; full pools), used by the precheck at once and by the daily bulk
  re-register of stale nodes; it offers only slices at or above SLICE_MIN_ODDS.

ZOS is played by `grid.simgrid.ZosMachine` (its own implementation of ZOS's rules: memory check
with the hidden use, storaged's placement); the dashboard's side is its own code: `capacity.carve`,
`capacity.precheck`/`fits` with the node's pools, VMs and lessons, `grid.classify` and
`capacity.refusal_lesson`, and the stale rule of the bulk re-register. The database plumbing around
them (rows, jobs, audit) is left out so that a month of a thousand nodes runs in minutes; the suite
tests that plumbing on its own.

The marketplace asks the dashboard which nodes have placeable slices (where the policy has a
precheck; otherwise any free slice), fills the fullest node first, and after a refusal stops sending
to that node until one of its VMs is released.

Figures, per policy: deploys sent to ZOS, refusals by cause, refusals per 1,000 deploys, refusals
after the first one on each node, utilisation and phantom slice-hours:
- utilisation: on nodes the marketplace can put nothing more on (full by the dashboard's word, or
  turned away after a refusal), the memory of the VMs running there over what ZOS would hold at best
  under its own rule (those VMs and the node's slices ZOS would still take now, one after another,
  without the test VM), weighted by the time each node stays full: at most 1 by construction;
- refusals per 1,000 nodes by why (before or after the group's lesson, the test VM, disk) and by
  build; the odds of every deploy sent against its outcome (Brier score, ECE); with probes, the
  probe contracts made and the buyer refusals on a build a probe had taught;
- phantom slice-hours: free catalog slices that ZOS would refuse if deployed now, times hours (under
  the learning policy, of the slices it offers: placeable now and at or above SLICE_MIN_ODDS).


Its parts: `memory` (the fleet's memory lessons and odds), `policies` (the four policies and their reactions), `fleet` (the nodes, ZOS booted on
each, the events), `run` (one policy's month, event by event), `trials` (what ZOS would say of a node's free slices now), `figures` (`simulate` and its figures).
"""

from sim.month.figures import TICK_EVERY, PolicyFigures, Simulation, simulate
from sim.month.fleet import (
    HIDDEN_CHOICES,
    HOURS,
    MEAN_LIFETIME_HOURS,
    MEMORY_CHOICES_GIB,
    SSD_CHOICES_GIB,
    Event,
    NodeSpec,
    allowed_mru,
    event_stream,
    fleet_mix,
    in_plausible_set,
    pools_reported_for,
)
from sim.month.policies import MODES, ORACLE, POLICY_NAMES, Contender, Mode, contender
from sim.month.run import MAX_ATTEMPTS, RE_REGISTER_EVERY_HOURS, Run, SimNode, Slot

__all__ = [
    "HIDDEN_CHOICES",
    "HOURS",
    "MAX_ATTEMPTS",
    "MEAN_LIFETIME_HOURS",
    "MEMORY_CHOICES_GIB",
    "MODES",
    "ORACLE",
    "POLICY_NAMES",
    "RE_REGISTER_EVERY_HOURS",
    "SSD_CHOICES_GIB",
    "TICK_EVERY",
    "Contender",
    "Event",
    "Mode",
    "NodeSpec",
    "PolicyFigures",
    "Run",
    "SimNode",
    "Simulation",
    "Slot",
    "allowed_mru",
    "contender",
    "event_stream",
    "fleet_mix",
    "in_plausible_set",
    "pools_reported_for",
    "simulate",
]
