"""The pages and the API at N nodes as seeded, then with 1% of the fleet withheld and 1,000 live holds
(BENCHMARKS.md, "Operators' controls at 10,000 nodes"):

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/slicedash_bench_holds .venv/bin/python bench/placement_holds.py . 10000

The same seeded fleet is measured three times, server time and queries (the pages taken in turn,
median / min of 15 after 2 warm-ups): as seeded; with every 100th node withheld (one maintenance window
each, one `node_withhold` call as the farm's form makes them); and with 1,000 holds more, on free slices
of 1,000 open nodes picked at random (seeded), each for half an hour, made through hold_create as the API
makes them. Placement with rules (pack, per_farm), the overview `/` (its totals and rows read the holds),
the map (a farm's kept cells keyed on its held counts), the API's nodes page and placement.
"""

import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

PAGES = {
    "placement": ("/placement/?cru=1&mru=4GiB&sru=50GiB", b"Where can a slice go?"),
    "placement_big": ("/placement/?cru=1&mru=4GiB&sru=400GiB", b"Where can a slice go?"),
    "placement_pack_per_farm": ("/placement/?cru=1&mru=4GiB&sru=50GiB&strategy=pack&per_farm=2", b"Where can"),
    "overview": ("/", None),
    "map": ("/map/", None),
}
API = {
    "api_nodes_page": "/api/v1/nodes?per_page=100",
    "api_placement": "/api/v1/placement?cru=1&mru=4294967296&sru=53687091200",
}
HOLDS = 1000


def main(repo: Path, size: int) -> dict:
    sys.path.insert(0, str(repo))
    from bench.env import bench_env, database_drop, database_recreate, django_setup

    work = Path(tempfile.mkdtemp(prefix="placement-holds-"))
    env = bench_env(work)
    database_recreate(env)
    try:
        django_setup(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from bench import pages, seed
        from dashboard.deployments.services.holds import hold_create
        from dashboard.models import Hold, Slice
        from sim.grid import SimulatedGrid

        specs = seed.fleet_specs(size)
        workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
        seed.database_seed(specs, workloads)
        call_command("figures_refresh", verbosity=0)
        from bench.api import bench_token
        from dashboard.models import Node
        from dashboard.nodes.services.withholds import node_withhold

        client = pages.admin_client()
        read = bench_token(scope="read", name="bench-read")

        def measure() -> dict:
            out = pages.pages_interleaved(client, PAGES, repeat=15)
            for name, url in API.items():
                out[name] = pages.page_figures(client, url, repeat=15, headers={"Authorization": f"Bearer {read}"})
            return out

        out = {"as seeded": measure()}
        node_withhold(nodes=list(Node.objects.order_by("grid_id")[::100]), reason="bench maintenance", via="command")
        out["1% withheld"] = measure()
        free = list(
            # A closed node (down, rented by another twin ...) cannot be held; one on standby can.
            Slice.objects.filter(state="free", node__closure__in=("", "standby"))
            .order_by("node_id", "index")
            .values_list("node__grid_id", "index")
        )
        first_of = {}
        for node_id, index in free:
            first_of.setdefault(node_id, index)
        chosen = random.Random(24).sample(sorted(first_of), min(HOLDS, len(first_of)))
        for n, node_id in enumerate(chosen):
            hold_create(
                node_id=node_id,
                slice_index=first_of[node_id],
                ttl_seconds=1800,
                marketplace_id=f"bench-{n}",
                source="command",
            )
        assert Hold.objects.count() == len(chosen)
        out[f"1% withheld, {len(chosen)} live holds"] = measure()
        # Every hold released and every window ended: the fleet as seeded again, what the machine drifted.
        from dashboard.deployments.services.holds import hold_release
        from dashboard.nodes.services.withholds import withhold_release

        for pk in Hold.objects.values_list("pk", flat=True):
            hold_release(hold_id=pk, source="command")
        for node in Node.objects.filter(closure="withheld"):
            withhold_release(node=node, via="command")
        out["all released"] = measure()
        keep = ("median_ms", "min_ms", "queries")
        return {case: {name: {k: f[k] for k in keep} for name, f in figures.items()} for case, figures in out.items()}
    finally:
        database_drop(env)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 10000), indent=1))
