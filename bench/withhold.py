"""The overview, the map, the placement answer and the API's nodes page at N nodes, before and after 1%
of the fleet is withheld (BENCHMARKS.md, "Withheld nodes"), and what the beat's withhold edges cost:

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/slicedash_bench_wh .venv/bin/python bench/withhold.py 10000

Server time and queries as bench/pages.py measures them (the pages taken in turn, median of 15 after 2
warm-up requests). The withheld nodes are every 100th node, one maintenance window each (one
`node_withhold` call, as a farm's form makes them); the edges are timed at rest (nothing opens or ends),
and at an edge where all those windows end at once (their nodes' rows and figures follow); the pages are
measured a third time once the windows ended (the fleet of the first measure again: the machine's drift).
"""

import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path


def main(repo: Path, size: int, repeat: int = 15) -> dict:
    sys.path.insert(0, str(repo))
    from bench.env import bench_env, database_drop, database_recreate, django_setup

    work = Path(tempfile.mkdtemp(prefix="withhold-bench-"))
    env = bench_env(work)
    database_recreate(env)
    try:
        django_setup(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from bench import pages, seed
        from bench.api import NODES_PAGE, bench_token
        from sim.grid import SimulatedGrid

        specs = seed.fleet_specs(size)
        workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
        seed.database_seed(specs, workloads)
        call_command("figures_refresh", verbosity=0)
        client = pages.admin_client()
        read = bench_token(scope="read", name="bench-read")
        urls = {
            "overview": ("/", f"<dd>{size:,}<".encode()),
            "fleet_map": ("/map/", b'class="map-farm"'),
            "placement": (pages.PLACEMENT_URL, b"Where can a slice go?"),
        }

        def measure() -> dict:
            out = pages.pages_interleaved(client, urls, repeat=repeat)
            out["api_nodes_page"] = pages.page_figures(
                client, NODES_PAGE, repeat=repeat, headers={"Authorization": f"Bearer {read}"}
            )
            return {name: {k: f[k] for k in ("median_ms", "min_ms", "queries")} for name, f in out.items()}

        before = measure()
        from django.utils import timezone

        from dashboard.models import Node
        from dashboard.nodes.services.withholds import node_withhold, withhold_edges

        now = timezone.now()
        chosen = list(Node.objects.order_by("grid_id")[::100])
        started = time.perf_counter()
        node_withhold(nodes=chosen, reason="bench maintenance", ends_at=now + timedelta(hours=2), via="command")
        withhold_s = time.perf_counter() - started
        withheld = Node.objects.filter(closure="withheld").count()
        after = measure()
        at_rest = []
        for _ in range(repeat):
            started = time.perf_counter()
            assert withhold_edges(now=now + timedelta(hours=1)) == []
            at_rest.append(time.perf_counter() - started)
        started = time.perf_counter()
        ended = withhold_edges(now=now + timedelta(hours=2))
        edge_s = time.perf_counter() - started
        # The windows ended: the same fleet as `before`, measured again (what the machine's drift adds).
        ended_again = measure()
        return {
            "nodes": size,
            "withheld": withheld,
            "before": before,
            "after": after,
            "after_the_windows_ended": ended_again,
            "node_withhold_ms": round(withhold_s * 1000, 1),
            "edges_at_rest_ms": round(statistics.median(at_rest) * 1000, 1),
            "edge_ms": round(edge_s * 1000, 1),
            "edge_nodes": len(ended),
        }
    finally:
        database_drop(env)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(Path(__file__).resolve().parent.parent, int(sys.argv[1]) if len(sys.argv) > 1 else 10000)))
