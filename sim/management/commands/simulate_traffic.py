"""manage.py simulate_traffic [--nodes 1000] [--events 10000] [--seed 7] [--policies ...] [--json]
                               [--no-rmb] [--pools-reported 0] [--unreported-releases 0.05] [--foreign-deploys 0.02]
                               [--no-watch] [--write SIMULATION.md] [--chart docs/simulation.png]

A month of marketplace traffic on simulated ZOS nodes, replayed against each policy with the
dashboard's own decisions in the loop (sim/month/ says what is modelled and how each
figure is measured). By default the deployment has an rmb-peer: every node is up when it is registered
and answers its pools (issue 33). With --no-rmb they are hidden from the dashboard, as from the Grid Proxy
alone, but for --pools-reported of them (a share, 0 to 1), as the marketplace's deployer can report them; what
the grid does behind the catalog's back and the product's fleet watch and slice audit come from
sim/month/drift.py (--no-watch turns both off). Prints a table (or JSON); --write also writes
the Markdown report and its chart, with catalog_truth with and without the watch (two runs).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from django.conf import settings

from dashboard.management.cli import ProductCommand, usage_error
from sim.month import HOURS, ORACLE, POLICY_NAMES, Simulation, simulate
from sim.month.drift import Drift
from sim.month.fleet import HIDDEN_USE_CHOICES
from sim.month.worlds import six_worlds, worlds_markdown

# The oracle (told every node's hidden use) is asked by name: the limit the others are measured against.
POLICIES_HELP = f"comma-separated, from {', '.join((*POLICY_NAMES, ORACLE))}"


class Command(ProductCommand):
    help = "Simulate a month of marketplace traffic against each capacity policy and compare refusals and utilisation."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--events", type=int, default=10000)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--policies", default=",".join(POLICY_NAMES), help=POLICIES_HELP)
        parser.add_argument(
            "--pools-reported",
            type=float,
            default=None,
            help="share of nodes whose SSD pools the dashboard is told (0 to 1; default: every node, each up when "
            "registered and answering over RMB; with --no-rmb, 0 as from the Grid Proxy alone)",
        )
        parser.add_argument(
            "--no-rmb", action="store_true", help="a deployment without an rmb-peer: pools only from --pools-reported"
        )
        parser.add_argument(
            "--cache-grows",
            action="store_true",
            help="every node's zos-cache boots at 5 GiB and grows a step at 60%% full with the images pulled",
        )
        _world_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")
        parser.add_argument(
            "--ipv4-share",
            type=float,
            default=0.2,
            help="share of the deploy requests that ask a public IPv4 from their farm's pool (0 to 1)",
        )
        parser.add_argument(
            "--unreported-releases", type=float, default=0.05, help="share of releases the marketplace never reports"
        )
        parser.add_argument(
            "--foreign-deploys", type=float, default=0.02, help="share of deploys that land outside the catalog"
        )
        parser.add_argument("--no-watch", action="store_true", help="without the fleet watch and the slice audit")
        parser.add_argument("--write", default="", help="also write the Markdown report here (e.g. SIMULATION.md)")
        parser.add_argument("--chart", default="", help="and its chart, a PNG (e.g. docs/simulation.png)")

    def handle(
        self, *args, nodes, events, seed, policies, json: bool, write, chart, pools_reported, no_watch: bool, **options
    ):
        if pools_reported is None:
            # Every node of the month is up when it is registered, so with an rmb-peer each answers its pools.
            pools_reported = 0.0 if options["no_rmb"] else 1.0
        names = tuple(p.strip() for p in policies.split(",") if p.strip())
        _check_sizes(nodes=nodes, events=events, forged_reports=options["forged_reports"])
        if options["worlds"]:
            drift = Drift(
                unreported_releases=options["unreported_releases"],
                foreign_deploys=options["foreign_deploys"],
                seed=seed,
            )
            return self._worlds(
                nodes=nodes, events=events, seed=seed, drift=drift, pools_reported=pools_reported, write=write
            )
        unreported, foreign = options["unreported_releases"], options["foreign_deploys"]
        try:
            drift = Drift(unreported_releases=unreported, foreign_deploys=foreign, watch=not no_watch, seed=seed)
            # One month's settings: every replay beside it (forger, probes, no watch) changes one thing only.
            month = {"nodes": nodes, "events": events, "seed": seed, "names": names, "drift": drift}
            month |= {"pools_reported": pools_reported} | {
                k: options[k] for k in ("cache_grows", "hidden_use", "ipv4_share")
            }
            progress = None if json else lambda f: self.stderr.write(f"{f.name}: done in {f.seconds:.1f} s")
            result = _month_again(progress=progress, **month)
            if options["forged_reports"]:
                result = _with_forged(result, forged=options["forged_reports"], **month)
            if options["probes"]:
                result = _with_probes(result, **month)
            unwatched = None
            if write and drift.watch:  # the report sets the figure beside what it falls to without the watch
                self.stderr.write("again without the watch and the audit")
                unwatched = _month_again(**(month | {"drift": replace(drift, watch=False)}))
        except ValueError as exc:
            raise usage_error(str(exc)) from None
        if json:
            self.stdout.write(_dumps(result.as_dict()))
        else:
            self.stdout.write(table(result) + truth_table(result))
        if chart:
            chart_write(result, Path(chart))
        if write:
            Path(write).write_text(report(result, chart=chart, unwatched=unwatched))
            self.stderr.write(f"wrote {write}" + (f" and {chart}" if chart else ""))

    def _worlds(self, *, nodes: int, events: int, seed: int, drift: Drift, pools_reported: float, write: str) -> None:
        """Six months (sim.month.worlds), each with the month's drift and pools as told."""

        def month(**options) -> Simulation:
            self.stderr.write(f"{options['hidden_use']}{' with probes' if options['probes'] else ''}")
            return _month_again(
                nodes=nodes, events=events, seed=seed, drift=drift, pools_reported=pools_reported, **options
            )

        command = f"python manage.py simulate_traffic --worlds --nodes {nodes} --events {events} --seed {seed}"
        text = worlds_markdown(six_worlds(month), command=command)
        self.stdout.write(text)
        if write:
            Path(write).write_text(f"# Six worlds of hidden memory use, beside the oracle\n\n{text}")
            self.stderr.write(f"wrote {write}")


def _world_arguments(parser) -> None:
    """The world the month is played in: hidden memory use, probes, a hostile reporter, six worlds at once."""
    parser.add_argument(
        "--hidden-use",
        choices=HIDDEN_USE_CHOICES,
        default="builds",
        help="how memory use differs from ZOS's count: builds (most nodes on one ZOS build, a few on "
        "another, a small spread, the daily test VM), wide (builds and a fifth of the nodes with a "
        "per-VM use of their own), nodes (no builds: a fifth of the nodes with a hidden use of their own)",
    )
    parser.add_argument(
        "--probes",
        action="store_true",
        help="the deployer sends the probes GET /api/v1/probes lists (learning policies): their cost and "
        "the buyer refusals they save (a second run without them)",
    )
    parser.add_argument(
        "--forged-reports",
        type=int,
        default=0,
        help="a hostile reporter's token sends this many made-up memory refusals over the month (absurd and "
        "plausible in turn; learning policies): what they cost against the same month without them",
    )
    parser.add_argument(
        "--worlds",
        action="store_true",
        help="six months instead: each --hidden-use world without and with probes, beside the oracle",
    )


def _check_sizes(*, nodes: int, events: int, forged_reports: int) -> None:
    """A usage error (exit 2, one line) for a size out of range, before any month is played."""
    if nodes < 1 or nodes > 100_000:
        raise usage_error("--nodes must be between 1 and 100,000")
    if events < 0 or events > 10_000_000:
        raise usage_error("--events must be between 0 and 10,000,000")
    if not 0 <= forged_reports <= 10_000:  # before any month is played, not after the first
        raise usage_error("--forged-reports must be between 0 and 10,000")


def _month_again(*, nodes, events, seed, names, drift, **options) -> Simulation:
    """The same month replayed with one thing changed (`options`), for a figure set beside the first."""
    return simulate(
        nodes=nodes, events=events, seed=seed, policies=names, drift=drift, min_odds=settings.SLICE_MIN_ODDS, **options
    )


def _with_probes(result: Simulation, **month) -> Simulation:
    """The month with the probes sent; each policy's figures say what they saved over `result` (without)."""
    probed = _month_again(probes=True, **month)
    for name, figures in probed.policies.items():
        if figures.probes:
            figures.probes["buyer_refusals_saved"] = result.policies[name].refused - figures.refused
    return probed


def _with_forged(result: Simulation, *, forged: int, **month) -> Simulation:
    """The month with a hostile reporter; each learning policy's figures say what it cost over `result`."""
    attacked = _month_again(forged_reports=forged, **month)
    for name, figures in attacked.policies.items():
        clean = result.policies[name]
        if figures.evidence.get("forged_sent"):
            figures.evidence["cost"] = {
                "refused_without": clean.refused,
                "refused_with": figures.refused,
                "refused_per_1000_nodes_without": clean.refused_per_1000_nodes,
                "refused_per_1000_nodes_with": figures.refused_per_1000_nodes,
                "catalog_truth_without": clean.drift.get("catalog_truth"),
                "catalog_truth_with": figures.drift.get("catalog_truth"),
                "utilisation_without": clean.utilisation,
                "utilisation_with": figures.utilisation,
            }
    return attacked


def _dumps(data: dict) -> str:
    return json.dumps(data, indent=2)


def table(result: Simulation) -> str:
    head = (
        f"{result.nodes} nodes (ZOS builds {_counts(result.mix.get('zos_builds', {}))}; "
        f"{result.mix['hidden_use']} with memory use hidden from ZOS's count, "
        f"{result.mix['several_pools']} with several SSD pools, {result.mix['several_pools_in_plausible_set']} of them "
        f"in the plausible set; pools reported for {result.mix['pools_reported']}), "
        f"{result.events} events over {HOURS // 24} days, "
        f"seed {result.seed}; {result.seconds:.0f} s, peak memory {result.peak_memory_mib:.0f} MiB"
    )
    lines = [
        head,
        "",
        "| policy | deploys | refused | per 1,000 | after the first | where no use is hidden | by cause "
        "| utilisation | phantom slice-hours | unserved |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, f in result.policies.items():
        causes = ", ".join(f"{k} {v}" for k, v in f.refused_by_cause.items()) or "none"
        lines.append(
            f"| {name} | {f.deploys:,} | {f.refused:,} | {f.refused_per_1000:.1f} | {f.refused_after_first:,} | "
            f"{f.refused_without_hidden_use:,} | {causes} | "
            f"{f.utilisation:.3f} | {f.phantom_slice_hours:,.0f} | {f.unserved:,} |"
        )
    ipv4 = "; ".join(f"{name} {f.refused_for_ipv4:,} of {f.ipv4_requests:,}" for name, f in result.policies.items())
    lines += ["", f"Requests asking a public IPv4, and the chain's refusals for the farm's IPs: {ipv4}"]
    lines += _several_pools_table(result) + _refusals_by_reason_table(result)
    return "\n".join(lines)


def _several_pools_table(result: Simulation) -> list[str]:
    """Refusals on nodes of several SSDs, and disk refusals by what the dashboard knew of the pools."""
    lines = [
        "",
        "Refusals on nodes of several SSDs, and disk refusals by what the dashboard knew of the pools:",
        "",
        "| policy | on several SSDs, by cause | disk, pools hidden, drives in the plausible set "
        "| disk, pools hidden, outside it | disk, pools reported |",
        "|---|---|---:|---:|---:|",
    ]
    for name, f in result.policies.items():
        causes = ", ".join(f"{k} {v}" for k, v in f.refused_on_several_pools_by_cause.items()) or "none"
        disk = f.disk_refused
        lines.append(
            f"| {name} | {causes} | {disk['in_plausible_set']:,} | {disk['outside_plausible_set']:,} "
            f"| {disk['pools_reported']:,} |"
        )
    return lines


def _refusals_by_reason_table(result: Simulation) -> list[str]:
    """The month by why ZOS refused, by ZOS build, and the odds against what happened."""
    lines = [
        "",
        "The month by why ZOS refused, by ZOS build, and the odds against what happened:",
        "",
        "| policy | refused per 1,000 nodes | by why | by build | nodes first refused, by build "
        "| odds: outcomes, Brier, ECE | probes sent, refused on a build a probe taught, refusals saved |",
        "|---|---:|---|---|---|---|---|",
    ]
    for name, f in result.policies.items():
        cal = f.odds_calibration
        odds = f"{cal['outcomes']:,}, {cal['brier']}, {cal['ece']}" if cal.get("outcomes") else "none"
        probes = (
            f"{f.probes['sent']:,}, {f.probes['refused_on_a_build_a_probe_taught']:,}, "
            f"{f.probes.get('buyer_refusals_saved', '-')}"
            if f.probes
            else "-"
        )
        lines.append(
            f"| {name} | {f.refused_per_1000_nodes:.1f} | {_counts(f.refused_by_reason)} | "
            f"{_counts(f.refused_by_build)} | {_counts(f.first_refusals_by_build)} | {odds} | {probes} |"
        )
    return lines


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"


def truth_table(result: Simulation, unwatched: Simulation | None = None) -> str:
    """catalog_truth per policy (with the watch as run, and without it when `unwatched` is given)."""
    drift = result.mix.get("drift")
    if drift is None:
        return ""
    watch = "with the watch and audit" if drift["watch"] else "without the watch and audit"
    columns = [f"catalog_truth, {watch}", "where no use is hidden"]
    if unwatched is not None:
        columns += ["catalog_truth, without them", "where no use is hidden, without them"]
    lines = [
        "",
        "",
        f"Drift: {drift['unreported_releases']:.0%} of releases unreported, {drift['foreign_deploys']:.0%} of "
        f"deploys foreign, outages at {drift['down_share_of_events']:.0%} of events, new disks at "
        f"{drift['disk_share_of_events']:.1%}.",
        "",
        "| policy | " + " | ".join(columns) + f" | node-hours not true {watch}, by why |",
        "|---|" + "---:|" * len(columns) + "---|",
    ]
    for name, f in result.policies.items():
        cells = [f.drift["catalog_truth"], f.drift["catalog_truth_where_no_use_is_hidden"]]
        if unwatched is not None:
            other = unwatched.policies[name].drift
            cells += [other["catalog_truth"], other["catalog_truth_where_no_use_is_hidden"]]
        why = ", ".join(f"{k} {v:,.1f}" for k, v in f.drift["catalog_untrue_node_hours"].items()) or "none"
        lines.append(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + f" | {why} |")
    return "\n".join(lines)


def report(result: Simulation, *, chart: str, unwatched: Simulation | None = None) -> str:
    picture = f"\n![Refusals and utilisation per day, by policy]({chart})\n" if chart else ""
    command = f"python manage.py simulate_traffic --nodes {result.nodes} --events {result.events} --seed {result.seed}"
    if result.mix["pools_reported"] != result.nodes:  # the default: every node answers its pools over RMB
        command += f" --pools-reported {result.mix['pools_reported'] / result.nodes:g}"
    return f"""# A month of marketplace traffic, simulated

Repeat with `make simulate` (or `{command} --write SIMULATION.md --chart docs/simulation.png`).
What is modelled and how each figure is measured: `sim/month/`; what drifts behind the catalog's
back and how the watch and audit answer it: `sim/month/drift.py`.

{table(result)}{truth_table(result, unwatched)}
{picture}
## Reading it
- **deploys**: VMs sent to ZOS; **refused**: ZOS said no (memory, or no pool with room for a disk).
- **where no use is hidden**: refusals on nodes whose memory use is all accounted (none should be refused).
- **after the first**: refusals on a node beyond its first one. The first refusal on a node with hidden
  memory use is how ZOS tells it (its statistics do not); the shipped policy learns from it and never
  sends a slice there that would be refused again.
- **utilisation**: on nodes the marketplace could put nothing more on, the memory of the VMs running there
  over what ZOS would hold at best under its own rule: those VMs and the node's slices ZOS would still
  take now, one after another (without the daily test VM), weighted by how long each stayed full. At
  most 1 by construction; below 1 where the catalog (or the odds) leaves slices ZOS would take.
- **by why**: `memory_before_lesson` (hidden use no refusal or probe had taught the node's group yet),
  `memory_after_lesson`, `memory_test_vm` (ZOS's daily provisiontest VM was running: without it the VM
  fitted), `disk`. **odds**: each deploy's slice odds against its outcome (Brier score, expected
  calibration error over ten bins).
- **phantom slice-hours**: free catalog slices that ZOS would refuse now (or that sit on a node in standby),
  times the hours they were offered.
- **unserved**: requests for which no node offered a slice the marketplace could use (the fleet was full).
- **pools**: the Grid Proxy never reports a node's SSD pools, so here the dashboard is not told them
  (unless `--pools-reported`): the zos policies carve for every plausible layout of the SSD total
  (capacity/layouts.py: 1 to 4 equal drives, or up to 8 of a standard size, each pool 2% under its share).
  A node whose drives fit that set (**in the plausible set**) must see no disk refusal; a node of
  near-equal drives a little smaller than their share is outside it, and its first disk refusal
  teaches a bound.
- **catalog_truth**: the share of node-hours in which the node's catalog was true: its status known, no
  slice marked taken whose VM is gone (an orphan), and its free slices, deployed now one after another
  against ZOS's real state, all deploy (no phantom). **where no use is hidden**: the same on the nodes
  whose memory use ZOS's statistics show in full; on the others the catalog cannot be true before the
  first refusal tells the hidden use (`phantom_hidden_use`), whatever watches it. What drifts and what the
  fleet watch and the slice audit do about it: `sim/month/drift.py`; `--no-watch` turns both off.

The policies: `legacy` is the seed's carve (1 GiB reserve, 100% of the disk) with no precheck;
`flat-overhead` its proposed fix (+3 GiB, +20 GiB per VM); `zos` ZOS's accounting and disk placement in
every device order, with the precheck; `zos-learning` the product as shipped: `zos` plus what refusals
teach, used by the precheck at once and by the daily bulk re-register of stale nodes.

The fleet: memory of {", ".join(str(m) for m in result.mix["memory_gib"])} GiB, SSD of
{", ".join(str(s) for s in result.mix["ssd_gib"])} GiB; hidden memory use `{result.mix.get("hidden_use_choice")}`
(`--hidden-use`; builds: every node on a ZOS build, {_counts(result.mix.get("zos_builds", {}))}, each with
its own use and a per-VM use beyond the guest's memory, a small per-node spread, and the daily 512 MiB test
VM for 3 minutes), a third with 2-4 SSD pools of near-equal size (within 2%) in an unknown device order. Events:
deploy requests (each VM lives a random time, {result.mix["mean_lifetime_days"]:.0f} days on average),
nodes switched to standby when idle and woken again.
"""


def chart_write(result: Simulation, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display here; the PNG is the product
    from matplotlib import pyplot

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (refusals, utilisation) = pyplot.subplots(2, 1, figsize=(9, 7), sharex=True)
    for name, f in result.policies.items():
        days = list(range(len(f.daily)))
        refusals.plot(days, [d["refused"] for d in f.daily], label=name)
        utilisation.plot(days, [d["util_num"] / d["util_den"] if d["util_den"] else None for d in f.daily], label=name)
    refusals.set_ylabel("refusals per day")
    refusals.set_title(f"{result.nodes} nodes, {result.events} events, seed {result.seed}")
    refusals.legend()
    utilisation.set_ylabel("utilisation of full nodes")
    utilisation.set_xlabel("day")
    utilisation.set_ylim(0, 1.05)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
