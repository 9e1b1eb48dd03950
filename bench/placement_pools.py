"""Placement at N nodes, a small and a large disk: the page's server time and queries (BENCHMARKS.md,
"Placement under unknown pools"). Run it from two checkouts, one after the other, to compare them:

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/slicedash_bench_pl .venv/bin/python bench/placement_pools.py . 10000

REPO is the checkout whose code is measured (its `bench/` and `dashboard/` are imported).
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

SIZES = {
    "placement": "/placement/?cru=1&mru=4GiB&sru=50GiB",
    "placement_big": "/placement/?cru=1&mru=4GiB&sru=400GiB",
}


def main(repo: Path, size: int) -> dict:
    sys.path.insert(0, str(repo))
    from bench.env import bench_env, database_drop, database_recreate, django_setup

    work = Path(tempfile.mkdtemp(prefix="placement-pools-"))
    env = bench_env(work)
    database_recreate(env)
    try:
        django_setup(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from bench import pages, seed
        from sim.grid import SimulatedGrid

        specs = seed.fleet_specs(size)
        workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
        seed.database_seed(specs, workloads)
        call_command("figures_refresh", verbosity=0)
        client = pages.admin_client()
        urls = {name: (url, b"Where can a slice go?") for name, url in SIZES.items()}
        out = pages.pages_interleaved(client, urls, repeat=15)
        return {name: {k: figures[k] for k in ("median_ms", "min_ms", "queries")} for name, figures in out.items()}
    finally:
        database_drop(env)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 10000)))
