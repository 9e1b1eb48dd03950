"""The Grid Proxy client's wall-clock budget, its retries and its redirects, against loopback servers."""

import logging
import socket
import threading
import time

import pytest

from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.proxy.watchdog import deadlines_moved
from dashboard.grid.types import GridUnavailable
from tests.gridproxy_canned import Answer, sample, start_canned_proxy
from tests.support import FakeClock


@pytest.fixture
def proxy():
    canned, server = start_canned_proxy()
    yield canned
    server.shutdown()
    server.server_close()


@pytest.fixture
def clock():
    """A clock the test moves; a request blocked on its socket is told when it jumps (the watchdog)."""
    clock = FakeClock()
    clock.on_advance.append(deadlines_moved)
    return clock


def client_for(url, clock=None, **options) -> GridProxyClient:
    """The client on `clock` (its back-off sleeping on it too), or on the real clock when None."""
    settings = {"connect_timeout": 1.0, "read_timeout": 2.0, "retries": 0, "backoff": 0.001, "deadline": 10.0}
    settings.update(options)
    if clock is not None:
        settings.update(clock=clock, sleep=clock.sleep)
    return GridProxyClient(url, **settings)


def timed(call):
    started = time.monotonic()
    with pytest.raises(GridUnavailable) as raised:
        call()
    return str(raised.value), time.monotonic() - started


# --- the budget -------------------------------------------------------------------------------
# Each case gives up with the budget in its words. The quick tests run it on a clock the server
# moves as it drips (no wait on the real clock); the slow test runs each on the real clock and
# asserts how long it took.


def dripped_answer(proxy, clock=None, deadline: float = 2.5) -> tuple[str, float]:
    proxy.answer("/nodes/1774", Answer(200, sample("node-1774.json"), drip=1.0, clock=clock))
    return timed(lambda: client_for(proxy.url, clock, read_timeout=5.0, deadline=deadline).node(1774))


def dripped_headers(_proxy, clock=None) -> tuple[str, float]:
    # Not the body this time: the status line itself, which no read time-out ever sees idle.
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip_headers():
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if clock is not None:
                    clock.advance(0.3)
                elif stop.wait(0.3):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
            stop.wait(30)  # the headers never end: only the client's deadline ends this answer

    threading.Thread(target=drip_headers, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        return timed(lambda: client_for(url, clock, read_timeout=5.0, deadline=1.5).node(1774))
    finally:
        stop.set()
        listener.close()


def busy_for_ever(proxy, clock=None) -> tuple[str, float]:
    proxy.answer("/nodes/1774", Answer(503, {"error": "busy"}))
    return timed(lambda: client_for(proxy.url, clock, retries=1000, backoff=0.05, deadline=1.0).node(1774))


def step_budget_first(proxy, clock=None) -> tuple[str, float]:
    proxy.answer("/nodes/1774", Answer(200, sample("node-1774.json"), drip=1.0, clock=clock))
    with grid_step_deadline(1.0, **({"clock": clock} if clock is not None else {})):
        return timed(lambda: client_for(proxy.url, clock, deadline=30.0).node(1774))


def test_it_gives_up_on_an_answer_dripped_a_byte_a_second_within_its_budget(proxy, clock):
    # A byte a second past a read time-out of 5 s: only the deadline ends it (the slow test times 2.5 s).
    message, _took = dripped_answer(proxy, clock, deadline=1.2)
    assert message == f"the grid proxy did not finish answering within 1.2 s ({proxy.url}/nodes/1774)"


def test_it_gives_up_on_headers_dripped_a_byte_at_a_time(proxy, clock):
    message, _took = dripped_headers(proxy, clock)
    assert message.startswith("the grid proxy did not finish answering within 1.5 s")


def test_it_spends_the_budget_once_over_all_its_tries(proxy, clock):
    message, _took = busy_for_ever(proxy, clock)  # 1,000 retries would take 50 s and more
    # Back-off doubling from 0.05 s, the last pause cut to what was left of the 1 s: five tries, and
    # the sixth is not sent, the budget spent.
    assert clock.slept == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.25])
    assert proxy.hits["/nodes/1774"] == 5
    assert message.startswith("the grid proxy did not finish answering within 1 s")


def test_it_keeps_to_the_job_steps_budget_when_that_ends_first(proxy, clock):
    message, _took = step_budget_first(proxy, clock)
    assert message.startswith("the grid proxy did not finish answering within 1 s")


@pytest.mark.slow  # wall-clock assertions
@pytest.mark.parametrize(
    "case, at_least, under, words",
    [
        (dripped_answer, 2.4, 3.5, ("did not finish answering within 2.5 s",)),
        (dripped_headers, 0, 2.5, ("did not finish answering within 1.5 s",)),
        (busy_for_ever, 0, 2.0, ("answered 503", "within 1 s")),  # on the real clock the last try may not start
        (step_budget_first, 0, 2.0, ("did not finish answering within 1 s",)),
    ],
    ids=["dripped answer, 2.5 s", "dripped headers, 1.5 s", "503 for ever, 1 s", "the step's 1 s first"],
)
def test_each_budget_holds_on_the_clock(proxy, case, at_least, under, words):
    message, took = case(proxy)
    assert at_least < took < under
    assert any(said in message for said in words), message


def test_it_reads_a_prompt_answer_well_inside_the_budget(proxy):
    proxy.answer("/nodes/1774", sample("node-1774.json"))
    client = client_for(proxy.url, deadline=1.0)

    # The same kept-alive connection, twice: its socket is watched for each request.
    assert [client.node(1774).node_id for _ in range(2)] == [1774, 1774]


# --- retries ------------------------------------------------------------------------------------


def test_it_logs_one_debug_line_a_retry_and_nothing_from_urllib3(proxy, caplog):
    proxy.answer("/nodes/1774", Answer(500, {"error": "down"}))

    with caplog.at_level(logging.DEBUG):
        with pytest.raises(GridUnavailable, match="after 3 tries"):
            client_for(proxy.url, FakeClock(), retries=2).node(1774)

    ours = [r for r in caplog.records if r.name == "dashboard.grid.proxy"]
    assert [r.levelno for r in ours] == [logging.DEBUG, logging.DEBUG]
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


# --- redirects ----------------------------------------------------------------------------------


def test_it_refuses_a_redirect_to_another_host_naming_that_host(proxy):
    proxy.answer("/nodes/1774", Answer(302, "", headers={"Location": "http://elsewhere.example:8443/nodes/1774"}))

    message, _ = timed(lambda: client_for(proxy.url).node(1774))

    assert "redirecting to another host, elsewhere.example:8443" in message
    assert message.startswith(f"the grid proxy at {proxy.url.removeprefix('http://')} answered 302")


def test_it_follows_a_redirect_on_the_same_host(proxy):
    proxy.answer("/nodes/1774", Answer(301, "", headers={"Location": "/v2/nodes/1774"}))
    proxy.answer("/v2/nodes/1774", sample("node-1774.json"))

    assert client_for(proxy.url).node(1774).node_id == 1774
    assert proxy.hits["/v2/nodes/1774"] == 1


def test_it_refuses_a_redirect_to_another_scheme_on_the_same_host(proxy):
    host = proxy.url.removeprefix("http://")
    proxy.answer("/nodes/1774", Answer(301, "", headers={"Location": f"https://{host}/nodes/1774"}))

    message, _ = timed(lambda: client_for(proxy.url).node(1774))

    assert "redirecting to https:// on the same host; only http:// is followed" in message


def test_finding_8_a_redirect_asks_the_budget_and_is_counted(proxy):
    from dashboard.grid.budget import MemoryWindow, RequestBudget

    class Counting(MemoryWindow):
        asked = 0

        def admit(self, *, allowed, **held):
            Counting.asked += 1
            return super().admit(allowed=allowed, **held)

    proxy.answer("/nodes/1774", Answer(301, "", headers={"Location": "/v2/nodes/1774"}))
    proxy.answer("/v2/nodes/1774", sample("node-1774.json"))
    client = client_for(proxy.url)
    client.budget = RequestBudget(window=Counting(), limit=15, reserve=0)

    client.node(1774)

    assert (Counting.asked, client.requests_sent) == (2, 2)  # what the proxy saw: two requests
