"""The one request budget (grid/budget.py): its windows, its reserve, its deadline, and the client's 429s."""

import multiprocessing
import os
import time
import uuid

import pytest

from dashboard.grid import telemetry
from dashboard.grid.budget import (
    BUDGET_ENDPOINT,
    FileWindow,
    MemoryWindow,
    RedisWindow,
    RequestBudget,
    background,
)
from dashboard.grid.deadline import Deadline
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import GridUnavailable
from tests.budget_clients import read_through_budget
from tests.gridproxy_canned import Answer, sample, start_canned_proxy
from tests.support import FakeClock

REDIS_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")


@pytest.fixture
def proxy():
    canned, server = start_canned_proxy()
    canned.answer("/nodes/1774", sample("node-1774.json"))
    yield canned
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["memory", "file", "redis"])
def window(request, tmp_path):
    if request.param == "memory":
        return MemoryWindow()
    if request.param == "file":
        return FileWindow(tmp_path / "budget.json")
    return RedisWindow(REDIS_URL, key=f"slicedash:test-budget:{uuid.uuid4().hex}")


def test_it_admits_what_the_window_allows_then_says_how_long_to_wait(window):
    admitted = [window.admit(allowed=4) for _ in range(4)]
    wait = window.admit(allowed=4)

    assert admitted == [0.0] * 4
    assert 0 < wait <= 1.0


def _admitted(budget: RequestBudget, tries: int) -> int:
    admitted = 0
    for _ in range(tries):
        try:
            budget.take(Deadline.within(0.05))
        except GridUnavailable:
            continue
        admitted += 1
    return admitted


def test_background_work_leaves_the_reserve_to_interactive_requests(window):
    budget = RequestBudget(window=window, limit=5, reserve=2)
    with background():
        background_admitted = _admitted(budget, 5)
    interactive_admitted = _admitted(budget, 5)

    assert background_admitted == 3
    assert interactive_admitted == 2


def test_a_wait_past_the_deadline_fails_at_once_with_the_budget_in_its_words(window):
    budget = RequestBudget(window=window, limit=2, reserve=0)
    budget.take(Deadline.within(5.0))
    budget.take(Deadline.within(5.0))

    with pytest.raises(GridUnavailable) as raised:
        budget.take(Deadline.within(0.05), what="GET /nodes/1774")

    assert "GET /nodes/1774 was not sent" in str(raised.value)
    assert "GRID_RATE_LIMIT" in str(raised.value)


def test_a_wait_within_the_deadline_is_waited_and_counted():
    clock = FakeClock()
    budget = RequestBudget(window=MemoryWindow(clock=clock), limit=1, reserve=0, sleep=clock.sleep, clock=clock)
    telemetry.drain()
    budget.take(Deadline.within(5.0, clock=clock))

    waited = budget.take(Deadline.within(5.0, clock=clock))

    # One request a second, the first taken at the same instant: the second waits the whole second.
    assert waited == pytest.approx(1.0) and clock.slept == [waited]
    assert any(key[0] == BUDGET_ENDPOINT and key[1] == "interactive" for key in telemetry.drain().counts)


@pytest.mark.slow  # waits a second on the real clock
def test_a_wait_within_the_deadline_is_waited_on_the_real_clock():
    slept = []
    budget = RequestBudget(window=MemoryWindow(), limit=1, reserve=0, sleep=lambda s: (slept.append(s), time.sleep(s)))
    budget.take(Deadline.within(5.0))

    waited = budget.take(Deadline.within(5.0))

    assert waited == pytest.approx(sum(slept)) and 0 < waited <= 1.0


def test_a_store_that_cannot_be_asked_falls_back_to_this_process_window():
    budget = RequestBudget(window=RedisWindow("redis://127.0.0.1:1/0", socket_timeout=0.2), limit=2, reserve=0)

    assert budget.take(Deadline.within(5.0)) == 0.0
    assert isinstance(budget._fallback, MemoryWindow)


@pytest.mark.parametrize(("limit", "reserve"), [(0, 0), (5, 5), (5, -1), (True, 0)])
def test_it_refuses_a_limit_or_reserve_that_leaves_no_request(limit, reserve):
    with pytest.raises(ValueError, match="GRID_RATE"):
        RequestBudget(window=MemoryWindow(), limit=limit, reserve=reserve)


# --- the client: the budget before each try, a 429 waited for ---------------------------------


def test_the_client_asks_the_budget_before_each_request(proxy):
    window = MemoryWindow()
    client = GridProxyClient(proxy.url, retries=0, budget=RequestBudget(window=window, limit=3, reserve=0))
    for _ in range(3):
        client.node(1774)

    assert window.admit(allowed=3) > 0  # the three reads took the window


def test_a_429_is_waited_as_retry_after_asks_retried_and_counted(proxy):
    proxy.answer(
        "/nodes/1774", Answer(429, {"error": "slow down"}, headers={"Retry-After": "0.2"}), sample("node-1774.json")
    )
    clock = FakeClock()
    telemetry.drain()

    node = GridProxyClient(proxy.url, retries=0, clock=clock, sleep=clock.sleep).node(1774)

    tally = telemetry.drain()
    assert node.node_id == 1774
    assert proxy.hits["/nodes/1774"] == 2
    assert clock.slept == [0.2]
    assert sum(n for key, n in tally.counts.items() if key[1] == "rate_limited") == 1


@pytest.mark.slow  # waits on the real clock
def test_a_429_is_waited_on_the_real_clock_before_the_next_try(proxy):
    proxy.answer(
        "/nodes/1774", Answer(429, {"error": "slow down"}, headers={"Retry-After": "0.2"}), sample("node-1774.json")
    )

    assert GridProxyClient(proxy.url, retries=0).node(1774).node_id == 1774
    assert proxy.arrivals[1] - proxy.arrivals[0] >= 0.2


def test_a_429_asking_past_the_deadline_ends_the_request_at_once_saying_so(proxy):
    proxy.answer("/nodes/1774", Answer(429, {"error": "slow down"}, headers={"Retry-After": "30"}))

    with pytest.raises(GridUnavailable) as raised:
        GridProxyClient(proxy.url, retries=3, deadline=2.0).node(1774)

    assert "refused" in str(raised.value) and "429" in str(raised.value) and "deadline" in str(raised.value)
    assert proxy.hits["/nodes/1774"] == 1


# --- several real processes, one budget -------------------------------------------------------


def _most_in_any_window(arrivals: list[float], seconds: float) -> int:
    times = sorted(arrivals)
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= seconds:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.slow
@pytest.mark.parametrize("store", ["redis", "file"])
def test_several_processes_together_never_pass_the_limit(proxy, store, tmp_path):
    limit, processes, reads = 6, 4, 9
    where = REDIS_URL if store == "redis" else str(tmp_path / "budget.json")
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    with context.Pool(processes) as pool:
        done = pool.starmap(
            read_through_budget, [(proxy.url, store, where, limit, 0, reads, i % 2 == 0) for i in range(processes)]
        )
    took = time.monotonic() - started

    assert sum(done) == processes * reads == len(proxy.arrivals)
    # Admitted at the client, counted on arrival: a window a little shorter than 1 s absorbs the
    # loopback's jitter between the two; the budget must still hold there.
    assert _most_in_any_window(proxy.arrivals, 0.8) <= limit
    # 36 reads at 6 a second cannot take less than 5 s, whatever the processes did.
    assert took >= (processes * reads) / limit - 1


class _Flaky:
    """A shared window that cannot answer until told it can: the store down, then back."""

    def __init__(self):
        self.down, self.asked = True, 0

    def admit(self, *, allowed, member=None, hold=0.0):
        self.asked += 1
        if self.down:
            raise ConnectionError("store down")
        return 0.0

    def settle(self, member):
        if self.down:
            raise ConnectionError("store down")


def test_finding_8_the_fallback_lasts_only_while_the_store_cannot_answer():
    from dashboard.grid.budget import FALLBACK_RETRY_SECONDS

    store, clock = _Flaky(), FakeClock()
    budget = RequestBudget(window=store, limit=5, reserve=0, sleep=clock.sleep, clock=clock)
    telemetry.drain()
    budget.take(Deadline.within(5.0, clock=clock))
    assert budget._fallback is not None
    assert any(key[:2] == (BUDGET_ENDPOINT, "fallback") for key in telemetry.drain().counts)  # /metrics says so

    store.down = False
    budget.take(Deadline.within(5.0, clock=clock))
    assert store.asked == 1  # within the retry interval the store is not asked again
    clock.advance(FALLBACK_RETRY_SECONDS)
    budget.take(Deadline.within(5.0, clock=clock))
    assert (store.asked, budget._fallback) == (2, None)  # the shared window again: one budget for all


# --- a place kept from admission to answer (what a busy host's late arrivals need) -----------


def test_a_request_awaiting_its_answer_keeps_its_place_then_counts_from_its_answer(window):
    from dashboard.grid.budget import POLL_SECONDS

    assert window.admit(allowed=1, member="awaited", hold=30.0) == 0.0

    # Its end is unknown: the next request looks again soon, rather than waiting out the hold.
    assert window.admit(allowed=1) == pytest.approx(POLL_SECONDS)
    window.settle("awaited")
    wait = window.admit(allowed=1)

    assert POLL_SECONDS < wait <= 1.0  # answered now: it counts for the second after its answer


def test_sending_settles_its_place_when_the_block_ends_even_by_an_error():
    clock = FakeClock()
    window = MemoryWindow(clock=clock)
    budget = RequestBudget(window=window, limit=1, reserve=0, sleep=clock.sleep, clock=clock)

    with pytest.raises(RuntimeError), budget.sending(Deadline.within(5.0, clock=clock)):
        clock.advance(2.0)  # the request took two seconds to answer, then failed
        raise RuntimeError("the answer was unreadable")
    clock.advance(0.5)

    assert window.admit(allowed=1) == pytest.approx(0.5)  # counted from its answer, not its admission


def _simulated_arrivals(*, held: bool, seed: int) -> list[float]:
    """Twenty clients behind one budget of 15, each request reaching the proxy at a random moment between
    its admission and its answer (a busy host's delays, up to 0.8 s): when the proxy counted each one."""
    import heapq
    import random

    rng, clock = random.Random(seed), FakeClock(start=0.0)
    window, arrivals = MemoryWindow(clock=clock), []
    events = [(rng.uniform(0, 0.1), n, "ask", "") for n in range(20)]
    heapq.heapify(events)
    while events and len(arrivals) < 600:
        at, n, what, member = heapq.heappop(events)
        clock.now = at
        if what == "answer":
            if held:
                window.settle(member)
            heapq.heappush(events, (at + rng.uniform(0, 0.05), n, "ask", ""))
            continue
        member = f"{n}-{at}"
        wait = window.admit(allowed=15, member=member, hold=30.0 if held else 0.0)
        if wait > 0:
            heapq.heappush(events, (at + wait, n, "ask", ""))
            continue
        answer = at + rng.choice([0.01, 0.01, 0.01, 0.8])
        arrivals.append(rng.uniform(at, answer))
        heapq.heappush(events, (answer, n, "answer", member))
    return arrivals


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_late_arrivals_never_pass_the_limit_when_places_are_kept_until_the_answer(seed):
    from tests.support import busiest_window

    assert busiest_window(_simulated_arrivals(held=True, seed=seed)) <= 15
    # The same clients with places freed at admission: requests admitted in two windows arrive in one.
    assert busiest_window(_simulated_arrivals(held=False, seed=seed)) > 15
