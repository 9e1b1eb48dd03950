"""Paged reads: GET /nodes by farms, ids and status; farm_pages until a short page; id_pages."""

import threading

import pytest

from dashboard.capacity import GiB
from dashboard.grid.paging import ReadFailed, farm_pages, id_pages
from dashboard.grid.proxy import GridProxyClient
from sim.grid import SimulatedGrid, serve_simulator
from tests.gridproxy_canned import sample, start_canned_proxy


@pytest.fixture
def canned():
    proxy, server = start_canned_proxy()
    yield proxy
    server.shutdown()
    server.server_close()


@pytest.fixture
def grid(tmp_path):
    """Farms 1 (ids 1-5, node 3 down) and 2 (ids 10-11) behind simhttp, read by the real client."""
    sim = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    for node_id in (1, 2, 3, 4, 5, 10, 11):
        sim.add_node(
            node_id,
            cru=4,
            mru=16 * GiB,
            sru=500 * GiB,
            farm_id=1 if node_id < 10 else 2,
            status="down" if node_id == 3 else "up",
        )
    server = serve_simulator(sim)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield GridProxyClient(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
    server.shutdown()
    server.server_close()


def test_the_client_asks_for_farms_ids_and_status(canned):
    canned.answer("/nodes", [n for n in sample("nodes-page.json") if n["farmId"] == 7])
    GridProxyClient(canned.url, retries=0).nodes(farm_ids=[7, 8], node_ids=[1774, 11], status="up", size=10)
    assert canned.queries == ["farm_ids=7%2C8&node_ids=1774%2C11&status=up&page=1&size=10&ret_count=true"]


def test_the_client_skips_a_node_it_did_not_ask_for(canned):
    canned.answer("/nodes", sample("nodes-page.json"))
    page = GridProxyClient(canned.url, retries=0).nodes(node_ids=[1774])
    assert [n.node_id for n in page.nodes] == [1774] and page.entries == len(sample("nodes-page.json"))


def test_farm_pages_read_until_a_short_page(grid):
    pages = list(farm_pages(grid, farm_ids=[1, 2], size=3))
    assert [[n.node_id for n in p.nodes] for p in pages] == [[1, 2, 3], [4, 5, 10], [11]]


def test_farm_pages_take_the_status_filter(grid):
    assert [n.node_id for p in farm_pages(grid, farm_ids=[1], status="up", size=10) for n in p.nodes] == [1, 2, 4, 5]


def test_id_pages_read_what_a_page_lacked_on_its_own(grid):
    reads = list(id_pages(grid, node_ids=[11, 2, 3, 404], status="up", size=10))
    assert [n.node_id for n in reads[0].nodes] == [2, 11]
    assert (reads[1].not_found, reads[1].left_out) == ((404,), ((3, "the grid says it is down, not up"),))


def test_a_page_that_fails_names_itself(tmp_path):
    client = GridProxyClient("http://127.0.0.1:9", retries=0, deadline=2)
    with pytest.raises(ReadFailed, match=r"^page 1 of farm 4242: "):
        next(farm_pages(client, farm_ids=[4242]))


# --- a paged read has an end (issue 22, finding 4) ----------------------------------------------


class PagedGrid:
    """A grid whose GET /nodes is `pages(page, size) -> (node ids, count or None)`; counts its requests."""

    def __init__(self, pages):
        self.pages, self.asked = pages, []

    def nodes(self, *, farm_ids, status=None, page=1, size=50):
        from dashboard.capacity import Resources
        from dashboard.grid.types import NodeCapacity, NodePage

        self.asked.append(page)
        ids, count = self.pages(page, size)
        total = Resources(cru=4, mru=16 * GiB, sru=500 * GiB)
        nodes = tuple(
            NodeCapacity(
                node_id=i,
                farm_id=farm_ids[0],
                farm_name="f",
                twin_id=None,
                status="up",
                dedicated=False,
                rented_by_twin_id=None,
                total=total,
                used=Resources(cru=0, mru=2 * GiB, sru=20 * GiB),
            )
            for i in ids
        )
        return NodePage(nodes=nodes, page=page, size=size, count=count)


def read_all(grid, **options):
    """(node ids yielded, the ReadStopped line or None)."""
    from dashboard.grid.paging import ReadStopped

    got = []
    try:
        for read in farm_pages(grid, farm_ids=[1], size=5, **options):
            got.extend(n.node_id for n in read.nodes)
    except ReadStopped as stopped:
        return got, str(stopped)
    return got, None


def test_a_page_that_repeats_the_last_one_stops_the_read_and_is_not_yielded():
    grid = PagedGrid(lambda page, size: (range(1, 6), None))  # ignores `page`
    got, stopped = read_all(grid)
    assert (got, grid.asked) == ([1, 2, 3, 4, 5], [1, 2])
    assert stopped.startswith("page 2 of farm 1: it brought no node not already read")


def test_a_page_that_repeats_some_nodes_yields_only_the_new_ones():
    grid = PagedGrid(lambda page, size: ([1, 2, 3, 4, 5] if page == 1 else [4, 5, 6], None))
    assert read_all(grid) == ([1, 2, 3, 4, 5, 6], None)


def test_invented_nodes_stop_at_the_page_ceiling():
    grid = PagedGrid(lambda page, size: (range(page * 100, page * 100 + size), None))
    got, stopped = read_all(grid, max_pages=3)
    assert (len(got), grid.asked) == (15, [1, 2, 3])
    assert stopped.startswith("page 4 of farm 1: not read: 3 full pages") and "GRID_MAX_PAGES" in stopped


def test_a_read_stops_at_the_announced_count_without_asking_for_a_short_page():
    grid = PagedGrid(lambda page, size: (range(page * 100, page * 100 + size), 10))
    assert read_all(grid) == ([*range(100, 105), *range(200, 205)], None)
    assert grid.asked == [1, 2]


def test_a_page_past_the_announced_count_is_refused_whole():
    grid = PagedGrid(lambda page, size: (range(page * 100, page * 100 + size), 8))
    got, stopped = read_all(grid)
    assert got == [100, 101, 102, 103, 104]
    assert (
        stopped
        == "page 2 of farm 1: it would bring the read to 10 node(s), past the 8 the proxy announced; nothing of it kept"
    )


def test_against_a_real_proxy_that_ignores_page_the_read_ends(canned):
    entries = sample("nodes-page.json")
    canned.answer("/nodes", [dict(e, farmId=7) for e in entries])
    got = []
    with pytest.raises(ReadFailed, match="brought no node not already read"):
        for read in farm_pages(GridProxyClient(canned.url, retries=0), farm_ids=[7], size=len(entries)):
            got.extend(n.node_id for n in read.nodes)
    assert (len(got), canned.hits["/nodes"]) == (len(entries), 2)


def test_the_client_reads_the_count_the_proxy_announces(grid):
    page = grid.nodes(farm_ids=[1], page=1, size=2)
    assert (len(page.nodes), page.count) == (2, 5)


def test_a_farm_read_stops_at_the_count_without_asking_for_a_short_page(tmp_path):
    sim = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    for node_id in range(1, 7):
        sim.add_node(node_id, cru=4, mru=16 * GiB, sru=500 * GiB, farm_id=1)
    server = serve_simulator(sim)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        client = GridProxyClient(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        pages = list(farm_pages(client, farm_ids=[1], size=3))
    finally:
        server.shutdown()
        server.server_close()
    assert [len(p.nodes) for p in pages] == [3, 3]  # 6 announced, 6 read: no third request


def test_a_proxy_that_invents_nodes_past_its_own_count_is_stopped_there(canned):
    from tests.gridproxy_canned import Answer

    def invent(query):
        page = int(query["page"])
        return [dict(sample("nodes-page.json")[0], nodeId=page * 100 + n, farmId=7) for n in range(4)]

    canned.answer("/nodes", Answer(body=invent, headers={"count": "6"}))
    got = []
    with pytest.raises(ReadFailed, match="past the 6 the proxy announced"):
        for read in farm_pages(GridProxyClient(canned.url, retries=0), farm_ids=[7], size=4):
            got.extend(n.node_id for n in read.nodes)
    assert (got, canned.hits["/nodes"]) == ([100, 101, 102, 103], 2)


# --- reading ahead of the caller ---------------------------------------------------------------


def test_pages_ahead_gives_the_same_reads_in_order_and_raises_where_the_read_failed():
    from dashboard.grid.paging import pages_ahead
    from dashboard.grid.types import GridUnavailable

    def reads():
        yield 1
        yield 2
        raise GridUnavailable("page 3: the proxy answered 503")

    got = []
    with pytest.raises(GridUnavailable, match="page 3"):
        for item in pages_ahead(reads()):
            got.append(item)
    assert got == [1, 2]


def test_pages_ahead_reads_in_the_callers_context():
    from dashboard.grid.budget import background, current_priority
    from dashboard.grid.paging import pages_ahead

    def priorities():
        yield current_priority()

    with background():
        assert list(pages_ahead(priorities())) == ["background"]
    assert list(pages_ahead(priorities())) == ["interactive"]


# --- pages asked for two at a time once the count is known (issue 43) --------------------------


class OverlapGrid(PagedGrid):
    """A PagedGrid whose page `held` answers only once page `held + 1` has been asked for (or after
    `patience` seconds): `overlapped` says whether the two were on the wire together."""

    def __init__(self, pages, *, held=2, patience=10.0):
        super().__init__(pages)
        self.held, self.patience = held, patience
        self.next_asked = threading.Event()
        self.overlapped = None
        self.lock = threading.Lock()

    def nodes(self, *, farm_ids, status=None, page=1, size=50):
        if page == self.held + 1:
            self.next_asked.set()
        if page == self.held:
            self.overlapped = self.next_asked.wait(self.patience)
        with self.lock:
            return super().nodes(farm_ids=farm_ids, status=status, page=page, size=size)


def count_of(total):
    """Pages of `size` ids from 1 up to `total`, announcing `total` (the proxy's ret_count)."""
    return lambda page, size: (range((page - 1) * size + 1, min(page * size, total) + 1), total)


def test_once_the_count_is_known_the_next_page_is_on_the_wire_with_this_one():
    grid = OverlapGrid(count_of(23), held=2)
    pages = list(farm_pages(grid, farm_ids=[1], size=5, in_flight=2))
    assert grid.overlapped is True
    assert [[n.node_id for n in p.nodes] for p in pages] == [list(range(s, min(s + 5, 24))) for s in (1, 6, 11, 16, 21)]
    assert sorted(grid.asked) == [1, 2, 3, 4, 5]  # never past the count's last page


def test_one_at_a_time_unless_asked_and_never_before_the_count_is_known():
    grid = OverlapGrid(count_of(23), held=1, patience=0.2)
    list(farm_pages(grid, farm_ids=[1], size=5, in_flight=2))
    assert grid.overlapped is False  # page 1 alone: how many pages there are is not known before it
    grid = OverlapGrid(count_of(23), held=2, patience=0.2)
    list(farm_pages(grid, farm_ids=[1], size=5))
    assert grid.overlapped is False and grid.asked == [1, 2, 3, 4, 5]


def test_without_a_count_nothing_is_read_ahead():
    grid = OverlapGrid(lambda page, size: (range((page - 1) * size + 1, page * size + 1) if page < 4 else [99], None))
    grid.patience = 0.2
    assert [len(p.nodes) for p in farm_pages(grid, farm_ids=[1], size=5, in_flight=2)] == [5, 5, 5, 1]
    assert grid.overlapped is False and grid.asked == [1, 2, 3, 4]


def test_read_ahead_a_stop_is_where_it_was_and_nothing_past_it_is_yielded():
    # Page 3 repeats page 2 while announcing 30 nodes: the read stops at page 3 as one at a time would.
    grid = PagedGrid(lambda page, size: (range(1, 6) if page == 1 else range(6, 11), 30))
    got, stopped = read_all(grid, in_flight=2)
    assert got == list(range(1, 11))
    assert stopped.startswith("page 3 of farm 1: it brought no node not already read")
    assert set(grid.asked) <= {1, 2, 3, 4}  # at most one answer past the stop, unread


def test_read_ahead_a_failed_page_is_raised_in_its_place_after_the_pages_before_it():
    from dashboard.grid.types import GridUnavailable

    def pages(page, size):
        if page == 3:
            raise GridUnavailable("the proxy answered 503")
        return count_of(20)(page, size)

    got = []
    with pytest.raises(ReadFailed, match=r"^page 3 of farm 1: the proxy answered 503"):
        for read in farm_pages(PagedGrid(pages), farm_ids=[1], size=5, in_flight=2):
            got.extend(n.node_id for n in read.nodes)
    assert got == list(range(1, 11))


def test_read_ahead_each_page_asks_the_request_budget_in_the_callers_priority(canned):
    from dashboard.grid.budget import BACKGROUND, MemoryWindow, RequestBudget, background

    class Counted(MemoryWindow):
        admitted: list = []

        def admit(self, *, allowed, member=None, hold=0.0):
            Counted.admitted.append(allowed)
            return super().admit(allowed=allowed, member=member, hold=hold)

    entries = [dict(sample("nodes-page.json")[0], farmId=7) for _ in range(4)]

    def page_of(query):
        page = int(query["page"])
        return [dict(e, nodeId=page * 10 + i) for i, e in enumerate(entries[: 2 if page == 4 else 4])]

    from tests.gridproxy_canned import Answer

    canned.answer("/nodes", Answer(body=page_of, headers={"count": "14"}))
    budget = RequestBudget(window=Counted(), limit=15, reserve=3)
    with background():
        pages = list(
            farm_pages(GridProxyClient(canned.url, retries=0, budget=budget), farm_ids=[7], size=4, in_flight=2)
        )
    assert [len(p.nodes) for p in pages] == [4, 4, 4, 2]
    # Every request the proxy saw was admitted by the budget, each at background work's share.
    assert Counted.admitted == [budget.allowed(BACKGROUND)] * canned.hits["/nodes"] and canned.hits["/nodes"] == 4
