"""The example answers in ../shared/gridproxy/ (copied into tests/data/gridproxy/, which CI can see) parse,
and the copies are the shared ones wherever the shared folder is beside the checkout.

`node-today.json` is one GET /nodes entry in today's shape; the node-1774 files and nodes-page.json are
an older proxy's (no features, gpus, dmi ...), which the parser must still read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashboard.grid.proxy.parse import parse_node, parse_statistics
from tests.contracts_support import problems

DATA = Path(__file__).parents[1] / "data" / "gridproxy"
# CI lays shared/ beside the checkout, as it is beside every worktree here.
SHARED = [Path(__file__).resolve().parents[3] / "shared" / "gridproxy"]
EXAMPLES = ("node-today.json", "node-1774.json", "node-1774-statistics.json", "nodes-page.json")


def load(name: str):
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_copy_is_the_shared_example(name):
    shared = next((folder for folder in SHARED if (folder / name).is_file()), None)
    if shared is None:
        pytest.skip("the shared examples are not beside this checkout")
    assert (DATA / name).read_bytes() == (shared / name).read_bytes()


def test_todays_node_is_valid_and_read_with_its_features():
    node = load("node-today.json")
    assert problems("gridproxy", "Node", node, strict=True) == []
    read = parse_node(node)
    assert (read.node_id, read.light, read.gpus, read.num_gpu) == (8204, False, (), 0)
    assert "ipv4" in read.features and read.power_state == "" and read.twin_id == 29613


def test_the_older_single_node_is_read_with_its_features_unknown():
    read = parse_node(load("node-1774.json"))
    assert read.node_id == 1774 and read.features is None and read.light is None


def test_the_older_page_is_read_node_by_node():
    nodes = [parse_node(entry) for entry in load("nodes-page.json")]
    assert nodes and all(n.light is None for n in nodes)


def test_the_statistics_example_is_valid_and_read():
    statistics = load("node-1774-statistics.json")
    assert problems("gridproxy", "NodeStatistics", statistics, strict=True) == []
    assert parse_statistics(statistics, node_id=1774).deployments == 1
