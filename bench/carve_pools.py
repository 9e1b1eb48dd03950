"""The carve's cost with the pools reported and without them (every plausible layout, issue 26).

    .venv/bin/python bench/carve_pools.py [--nodes 500] [--seed 1]

Pure arithmetic, no database: one carve per node of a random fleet (8-256 GiB of memory, 200 GiB-8 TiB
of SSD), not remembered (capacity.carve); the product remembers carves by shape (carve_memoised), so a
fleet pays this once per distinct node. Prints milliseconds per carve, for one reported pool of the whole
SSD and for unknown pools.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dashboard import capacity
from dashboard.capacity import GiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    zos = capacity.PROFILES["zos"]
    nodes = [
        capacity.Resources(cru=8, mru=rng.choice([8, 16, 31, 64, 128, 256]) * GiB, sru=rng.randint(200, 8000) * GiB)
        for _ in range(args.nodes)
    ]
    for label, pools in (("one reported pool", lambda n: [n.sru]), ("pools unknown", lambda n: None)):
        times = []
        for node in nodes:
            began = time.perf_counter()
            capacity.carve(node, zos, pools=pools(node))
            times.append((time.perf_counter() - began) * 1000)
        print(
            f"{label}: mean {statistics.mean(times):.2f} ms, median {statistics.median(times):.2f} ms, "
            f"max {max(times):.1f} ms per carve ({args.nodes} nodes)"
        )


if __name__ == "__main__":
    main()
