"""The policies a month of traffic is replayed against, and which of the product's reactions run with each.

- `legacy`: the seed's carve (1 GiB reserve, 100% of the disk), no precheck, no learning;
- `flat-overhead`: the seed's proposed fix (+3 GiB, +20 GiB per VM), no precheck;
- `zos`: ZOS's accounting and disk placement, the precheck before every deploy, no learning;
- `zos-learning`: the product as shipped: `zos` plus what refusals teach (hidden memory per VM,
  full pools), used by the precheck at once and by the daily bulk re-register of stale nodes;
- `oracle`: `zos` told every node's hidden memory use (ZOS's own and each VM's, its build's and its own)
  before the month starts: the physical limit a learning policy is measured against (issue 44). It
  still meets the daily test VM it cannot know the hour of.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import capacity

POLICY_NAMES = ("legacy", "flat-overhead", "zos", "zos-learning")
# Not among the defaults: a month's comparison of the shipped policies stays as it was; --policies asks it.
ORACLE = "oracle"


@dataclass(frozen=True)
class Mode:
    profile: str
    precheck: bool
    learning: bool
    reregister: bool
    oracle: bool = False  # told each node's hidden use in advance (the limit, not a policy to ship)


MODES = {
    "legacy": Mode("legacy", precheck=False, learning=False, reregister=False),
    "flat-overhead": Mode("flat-overhead", precheck=False, learning=False, reregister=False),
    "zos": Mode("zos", precheck=True, learning=False, reregister=True),
    "zos-learning": Mode("zos", precheck=True, learning=True, reregister=True),
    ORACLE: Mode("zos", precheck=True, learning=False, reregister=True, oracle=True),
}


@dataclass(frozen=True)
class Contender:
    """A policy replayed by name in the figures: its parameters, and which of the product's reactions run
    with it (`mode.profile` is not read: the parameters are `policy`). The built-in names are contenders
    too (`contender("zos-learning")`); the policy page's job passes the policy in force and a candidate."""

    name: str
    policy: capacity.Policy
    mode: Mode


def contender(name: str) -> Contender:
    """One of the built-in policies (the four shipped ones and the oracle), by name."""
    if name not in MODES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(MODES)}")
    return Contender(name=name, policy=capacity.profile(MODES[name].profile), mode=MODES[name])
