"""classify(): every ZOS failure string the product knows, wrapped and bare, and garbage."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard.capacity import GiB, MiB, SliceSize
from dashboard.grid.classify import CAUSES, classify
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import DeploymentFailed, GridUnavailable, NodeNotFound, NodeOffline
from sim.grid import SimulatedGrid
from tests.support import examples

MEMORY = "failed to satisfy required capacity: cannot fulfil required memory size 4294967296 bytes out of usable 4187593114 bytes"
VDISK = (
    f"failed to find a candidate to host vdisk of size '{151 * GiB}': not enough space left in pools of this type ssd"
)
ROOTFS = "failed to create vm rootfs: not enough space left in pools of this type ssd"


def go(reason: str, workload: str = "vm7", deployment: int = 4711) -> str:
    return f"workload {workload} within deployment {deployment} failed with error: {reason}"


@pytest.mark.parametrize(
    ("raw", "cause", "reason"),
    [
        # memory, bare and wrapped (and wrapped again by grid-client's caller)
        (MEMORY, "memory", MEMORY),
        (go(MEMORY), "memory", MEMORY),
        ("error waiting deployment: " + go(MEMORY), "memory", MEMORY),
        (
            "failed to satisfy required capacity: cannot fulfil required memory size",
            "memory",
            "failed to satisfy required capacity: cannot fulfil required memory size",
        ),
        # disk
        ("not enough space left in pools of this type ssd", "disk", "not enough space left in pools of this type ssd"),
        (ROOTFS, "disk", ROOTFS),
        (go(ROOTFS), "disk", ROOTFS),
        (VDISK, "disk", VDISK),
        (go(VDISK, workload="vm7disk"), "disk", VDISK),
        # validation
        ("mem capacity can't be less that 250M", "validation", "mem capacity can't be less that 250M"),
        (
            f"disk size can't be less that {2 * GiB}. Set to 0 for minimum",
            "validation",
            f"disk size can't be less that {2 * GiB}. Set to 0 for minimum",
        ),
        (
            "deployment is invalid: mem capacity can't be less that 250M",
            "validation",
            "mem capacity can't be less that 250M",
        ),
        ("cpu capcity can't be 0", "validation", "cpu capcity can't be 0"),
        # the Go deployer's other states carry reasons too (and its 'worklaod' typo)
        (f"workload vm7 state within deployment 9 is deleted: {MEMORY}", "memory", MEMORY),
        (f"worklaod vm7 within deployment 9 was not updated: {ROOTFS}", "disk", ROOTFS),
    ],
)
def test_it_unwraps_and_classifies_every_zos_failure(raw, cause, reason):
    diagnosis = classify(raw)

    assert (diagnosis.cause, diagnosis.reason) == (cause, reason)


def test_it_reads_the_numbers_of_a_memory_refusal():
    diagnosis = classify(go(MEMORY))

    assert (diagnosis.needed_bytes, diagnosis.usable_bytes) == (4 * GiB, 4187593114)


def test_it_says_the_memory_numbers_in_gib_and_what_to_do():
    words = classify(go(MEMORY)).words

    assert "needs 4.00 GiB but only 3.90 GiB is usable on the node, short by 0.10 GiB" in words
    assert "re-register the node to drop phantom slices" in words


def test_it_reads_the_size_of_a_disk_that_did_not_fit():
    diagnosis = classify(go(VDISK, workload="vm7disk"))

    assert (diagnosis.needed_bytes, diagnosis.usable_bytes) == (151 * GiB, None)
    assert "the 151.00 GiB data disk" in diagnosis.words


def test_it_names_the_workload_and_deployment_the_go_deployer_named():
    diagnosis = classify(go(VDISK, workload="vm7disk", deployment=12))

    assert (diagnosis.workload, diagnosis.deployment_id) == ("vm7disk", 12)


def test_it_says_the_minimum_rootfs_in_gib():
    assert "at least 2.00 GiB" in classify(f"disk size can't be less that {2 * GiB}. Set to 0 for minimum").words


def test_the_rust_clients_bare_error_state_is_unknown_and_says_where_to_look():
    diagnosis = classify("vm deployment entered error state")

    assert diagnosis.cause == "unknown"
    assert "run the precheck on the node" in diagnosis.words and "Rust" not in diagnosis.words
    assert "dropped ZOS's reason" in diagnosis.detail and "deployment changes" in diagnosis.detail


@pytest.mark.parametrize(
    "raw",
    [
        "context deadline exceeded",
        "waiting for deployment 42 timed out",
        "the grid proxy at http://x/nodes/1 is unavailable: connection refused, after 4 tries",
        "HTTPSConnectionPool(host='gridproxy.grid.tf', port=443): Max retries exceeded with url: /nodes/1",
        "dial tcp 10.0.0.1:443: connect: connection reset by peer",
        "503 Service Unavailable",
        "the grid proxy answered 500 Internal Server Error for http://x/nodes/1 after 4 tries",
    ],
)
def test_time_outs_and_connection_errors_mean_the_grid_was_unavailable(raw):
    assert classify(raw).cause == "grid-unavailable"


@pytest.mark.parametrize(
    "raw",
    [
        "cannot fetch statistics from node 3001 with status: down",
        "node 3001 is standby: it cannot deploy anything until it is up again",
        "node 1774 is offline",
        "node not found",
        "node 1774 is not on the grid (404 from http://x/nodes/1774)",
    ],
)
def test_down_and_missing_nodes_mean_the_node_was_offline(raw):
    assert classify(raw).cause == "node-offline"


@pytest.mark.parametrize(
    ("raw", "said", "not_said"),
    [
        ("node 3001 is standby: it cannot deploy anything until it is up again", "once it is woken", "is down"),
        ("cannot fetch statistics from node 3001 with status: standby", "on standby", "is down"),
        ("cannot fetch statistics from node 3001 with status: down", "once it is up again", "standby"),
        ("node 1774 is not on the grid (404 from http://x/nodes/1774)", "no longer on the grid", "standby"),
    ],
)
def test_the_words_match_the_state_the_refusal_names(raw, said, not_said):
    words = classify(raw).words
    assert said in words and not_said not in words


@pytest.mark.parametrize("raw", ["", "   ", None, b"\xff\xfe garbage", 12345, "\x00\x00", "lorem ipsum dolor", "[]{}"])
def test_empty_and_garbage_input_is_unknown_and_never_raises(raw):
    diagnosis = classify(raw)

    assert (diagnosis.cause, diagnosis.needed_bytes, diagnosis.usable_bytes) == ("unknown", None, None)
    assert diagnosis.words


def test_absurd_numbers_are_not_reported_as_bytes():
    diagnosis = classify("cannot fulfil required memory size 99999999999999999999999 bytes out of usable 1 bytes")

    assert (diagnosis.cause, diagnosis.needed_bytes, diagnosis.usable_bytes) == ("memory", None, 1)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=300))
def test_any_text_gets_a_known_cause(raw):
    assert classify(raw).cause in CAUSES


# --- what the product's own grids say, read back ----------------------------------------------


@pytest.fixture
def full_node(tmp_path):
    grid = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    grid.add_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    for i in range(6):
        grid.deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=151 * GiB), name=f"vm{i}")
    return grid


@pytest.mark.parametrize(
    ("size", "cause"),
    [
        (SliceSize(cru=1, mru=4 * GiB, sru=GiB), "memory"),
        (SliceSize(cru=1, mru=GiB, sru=151 * GiB), "disk"),
        (SliceSize(cru=1, mru=100 * MiB, sru=GiB), "validation"),
    ],
)
def test_it_classifies_what_the_simulator_refuses_with(full_node, size, cause):
    with pytest.raises(DeploymentFailed) as raised:
        full_node.deploy_vm(1774, size, name="vm6")

    assert classify(raised.value.raw).cause == cause


def test_it_classifies_the_typed_grid_errors_as_their_own_cause(full_node):
    full_node.set_status(1774, "down")
    errors = []
    for call in (lambda: full_node.statistics(1774), lambda: full_node.node(99)):
        with pytest.raises((NodeOffline, NodeNotFound)) as raised:
            call()
        errors.append(raised.value)
    with pytest.raises(GridUnavailable) as raised:
        GridProxyClient("http://127.0.0.1:9", connect_timeout=0.2, read_timeout=0.2, retries=0).node(1)
    errors.append(raised.value)

    assert [classify(str(e)).cause for e in errors] == [e.cause for e in errors]


def test_issue_45_defect_10_a_reason_after_error_state_is_said_not_dropped():
    diagnosis = classify("vm deployment entered error state: failed to mount flist: zos-cache is read-only")
    assert diagnosis.cause == "unknown"
    assert diagnosis.reason == "failed to mount flist: zos-cache is read-only"
    assert "failed to mount flist: zos-cache is read-only" in diagnosis.words
    assert "did not pass on why" not in diagnosis.words


def test_issue_45_defect_10_a_known_reason_after_error_state_is_classified_as_itself():
    needed, usable = 4 * 1024**3, 3 * 1024**3
    text = f"vm deployment entered error state: cannot fulfil required memory size {needed} bytes out of usable {usable} bytes"
    assert (classify(text).cause, classify(text).needed_bytes) == ("memory", needed)


def test_issue_45_defect_10_the_bare_wrapper_still_says_the_reason_was_dropped():
    assert "did not pass on why" in classify("vm deployment entered error state").words
