"""The precheck: pure (capacity.precheck) checks per second, and end to end over HTTP.

End to end is catalogs.services.precheck.precheck_run with a GridProxyClient pointed at the simulator's
HTTP face in another process on loopback: GET /nodes/{id}, the node's policy and free
slices from PostgreSQL, the verdicts, and the UPDATE of the node's figures.
"""

from __future__ import annotations

import statistics
import time

from bench.env import BenchEnv
from bench.procs import SimulatorServer
from bench.seed import fleet_specs, legacy_carve
from dashboard import capacity


def precheck_pure(*, seconds: float) -> dict:
    """capacity.precheck on the bench's node shapes (legacy catalogs, one VM deployed), for `seconds`."""
    policy = capacity.PROFILES["zos"]
    cases = []
    for spec in fleet_specs(8)[-4:]:  # nodes 5..8: one of each shape
        carve = legacy_carve(spec)
        size = capacity.SliceSize(cru=carve.slice.cru, mru=carve.slice.mru, sru=carve.slice.sru)
        reserve = max(spec.mru // 10, 2 * capacity.GiB)
        used = capacity.Resources(cru=1, mru=size.mru + reserve, sru=size.sru + 500 * capacity.MiB + 20 * capacity.GiB)
        cases.append(([(i, size) for i in range(1, carve.slices)], spec.total, used))
    checks = verdicts = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for free, total, used in cases:
            verdicts += capacity.precheck(free, total, used, policy).free_slices
        checks += len(cases)
    elapsed = time.perf_counter() - started
    return {
        "checks_per_s": round(checks / elapsed),
        "slices_per_check": round(verdicts / checks, 2),
        "verdicts_per_s": round(verdicts / elapsed),
        "seconds": round(elapsed, 2),
    }


def precheck_end_to_end(*, env: BenchEnv, node_ids: list[int], requests: int, nodelay: bool = False) -> dict:
    """precheck_run over HTTP: median and p99; with nodelay the server sets TCP_NODELAY (see bench.simserve)."""
    from dashboard.catalogs.services.precheck import precheck_run
    from dashboard.grid.proxy import GridProxyClient
    from dashboard.models import Node

    server = SimulatorServer(env, nodelay=nodelay)
    url = server.start()
    try:
        client = GridProxyClient(url, connect_timeout=2.0, read_timeout=5.0, retries=0, backoff=0.0)
        nodes = list(Node.objects.filter(grid_id__in=node_ids, status="up").order_by("grid_id"))
        if not nodes:
            raise RuntimeError("no node to precheck")
        for node in nodes[:5]:  # connection pool, imports
            precheck_run(node=node, grid=client)
        full, read = [], []
        for i in range(requests):
            node = nodes[i % len(nodes)]
            started = time.perf_counter()
            precheck_run(node=node, grid=client)
            full.append(time.perf_counter() - started)
        for i in range(requests):
            started = time.perf_counter()
            client.node(nodes[i % len(nodes)].grid_id)
            read.append(time.perf_counter() - started)
        client.close()
    finally:
        server.stop()
    return {
        "requests": requests,
        "median_ms": _ms(statistics.median(full)),
        "p99_ms": _ms(_p99(full)),
        "http_read_median_ms": _ms(statistics.median(read)),
        "http_read_p99_ms": _ms(_p99(read)),
    }


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
