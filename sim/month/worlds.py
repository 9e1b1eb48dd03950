"""Six months side by side: each world of hidden memory use, with and without probes, beside the oracle.

Nobody knows in advance which world production is (issue 44): a build's use alone (`builds`), a build's
and a fifth of the nodes' own (`wide`), or the nodes' own alone (`nodes`). Each world's month is played
by the shipped learning policy and by the `oracle` (told every node's hidden use: the physical limit),
without probes and with the probes GET /api/v1/probes lists. `simulate_traffic --worlds` prints the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.month.figures import Simulation
from sim.month.fleet import HIDDEN_USE_CHOICES
from sim.month.policies import ORACLE

LEARNING = "zos-learning"


@dataclass(frozen=True)
class World:
    hidden_use: str
    probes: bool
    refused_per_1000_nodes: float
    catalog_truth: float | None
    utilisation: float
    oracle_utilisation: float
    oracle_refused_per_1000_nodes: float

    @property
    def below_oracle_points(self) -> float:
        return round(100 * (self.oracle_utilisation - self.utilisation), 1) + 0.0  # never "-0"


def six_worlds(month: Callable[..., Simulation]) -> list[World]:
    """Each world, without and with probes; `month(hidden_use=, probes=, names=)` plays one month."""
    worlds = []
    for hidden_use in HIDDEN_USE_CHOICES:
        for probes in (False, True):
            played = month(hidden_use=hidden_use, probes=probes, names=(ORACLE, LEARNING)).policies
            learning, oracle = played[LEARNING], played[ORACLE]
            worlds.append(
                World(
                    hidden_use=hidden_use,
                    probes=probes,
                    refused_per_1000_nodes=learning.refused_per_1000_nodes,
                    catalog_truth=learning.drift.get("catalog_truth"),
                    utilisation=learning.utilisation,
                    oracle_utilisation=oracle.utilisation,
                    oracle_refused_per_1000_nodes=oracle.refused_per_1000_nodes,
                )
            )
    return worlds


def worlds_markdown(worlds: list[World], *, command: str) -> str:
    rows = [
        f"Repeat with `{command}`. Targets (issue 44): at most 10 buyer refusals per 1,000 nodes, catalog truth",
        "at least 0.995, utilisation within 3 points of the oracle's.",
        "",
        "| hidden use | probes | refused per 1,000 nodes | catalog truth | utilisation | oracle's | points below | "
        "oracle refused per 1,000 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for w in worlds:
        truth = "" if w.catalog_truth is None else f"{w.catalog_truth:.5f}"
        rows.append(
            f"| {w.hidden_use} | {'yes' if w.probes else 'no'} | {w.refused_per_1000_nodes:g} | {truth} | "
            f"{w.utilisation:.4f} | {w.oracle_utilisation:.4f} | {w.below_oracle_points:.1f} | "
            f"{w.oracle_refused_per_1000_nodes:g} |"
        )
    return "\n".join(rows) + "\n"
