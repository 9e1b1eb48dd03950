"""The slice audit at scale, against the simulated grid behind its HTTP face with latency added: it reads
one request a node (at 100 contracts a page) and takes at most twice its network floor."""

import threading
import time

import pytest

from dashboard.capacity import GiB, SliceSize
from dashboard.catalogs.selectors.catalog_audit import Pace
from dashboard.catalogs.services.catalog_audit import catalog_audit_here
from dashboard.grid.proxy import GridProxyClient
from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid, serve_simulator

NODES = 300
LATENCY = 0.02  # seconds added to every answer
pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_an_audit_of_300_nodes_is_one_request_a_node_within_twice_its_floor(simgrid_path):
    grid = SimulatedGrid(simgrid_path)
    for n in range(1, NODES + 1):
        grid.add_node(n, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=1 + n % 4)
        node_register_from_grid(live=grid.node(n))
        if n % 30 == 0:
            grid.deploy_vm(n, SliceSize(cru=1, mru=2 * GiB, sru=50 * GiB), name=f"outside{n}")
    server = serve_simulator(grid, port=0, latency=LATENCY)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        client = GridProxyClient(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        started, cpu = time.monotonic(), time.process_time()
        result = catalog_audit_here(fix=False, grid=client, pace=Pace(rate=1000.0)).outcome
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        server.shutdown()
        server.server_close()
    floor = NODES * LATENCY
    print(f"\naudit of {NODES} nodes: {elapsed:.2f} s (floor {floor:.1f} s), {cpu / NODES * 1000:.2f} ms CPU a node")

    assert (result.requests, result.counts["foreign"], result.checked) == (NODES, NODES // 30, NODES)
    assert elapsed <= 2 * floor
