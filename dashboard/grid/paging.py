"""Reading many nodes: GET /nodes page by page, and one by one only for what the pages lacked.

A farm of 500 nodes read node by node is 500 requests (a minute or more from outside at
100-300 ms each); read in pages of 100 it is six. These generators yield one page at a time,
so a caller can commit what it has before asking for the next one and its memory does not
grow with the fleet. A page that cannot be read raises the grid's own error: the caller
decides how far it got and what to say.

A paged read has an end whatever the proxy sends. It stops at a short page (the last one), and
also, raising ReadStopped with one line saying why:
- when a page adds no node not already read (a proxy that ignores `page` sends page 1 again);
- when a page would take the read past the count the proxy announced (`count`, with ret_count);
- at `max_pages` (GRID_MAX_PAGES), when the proxy keeps sending full pages of new nodes.
The page that trips a stop is not yielded, so nothing of it is committed; the pages before it were
yielded (and committed by the caller) as usual. Reads by id are bounded by the ids asked for.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TypeVar

from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.types import Grid, GridError, MalformedPayload, NodeCapacity, NodeNotFound, NodePage

T = TypeVar("T")

# The Grid Proxy client refuses bigger pages (its answer would not fit its body limit).
MAX_PAGE_SIZE = 1000
# A farm read stops after this many pages unless the caller says otherwise (settings.GRID_MAX_PAGES).
DEFAULT_MAX_PAGES = 100


class ReadFailed(GridError):
    """A page (or a node read on its own) could not be read; says which, in the grid's words."""

    def __init__(self, what: str, error: GridError):
        super().__init__(f"{what}: {error or type(error).__name__}")
        self.what = what
        self.cause = error.cause


class ReadStopped(ReadFailed):
    """The pages did not end as pages end (a repeated page, more nodes than announced, the page ceiling).

    The message is one line naming the page and why; the pages before it were read and yielded.
    """

    cause = "grid-unavailable"

    def __init__(self, what: str, why: str):
        GridError.__init__(self, f"{what}: {why}")
        self.what = what


def _read(what: str, read):
    try:
        return read()
    except GridError as exc:
        raise ReadFailed(what, exc) from exc


@dataclass(frozen=True)
class PageRead:
    """What one read brought: a page of GET /nodes, or the nodes a page lacked read one by one."""

    what: str  # for progress and the job's result, e.g. "page 3 of farms 4242, 4243"
    nodes: tuple[NodeCapacity, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # malformed entries: (node id or position, reason)
    # Ids asked for that the grid does not know (404), and ids it reported with another status.
    not_found: tuple[int, ...] = ()
    left_out: tuple[tuple[int, str], ...] = field(default_factory=tuple)
    requests: int = 1


def farm_pages(
    grid: Grid,
    *,
    farm_ids: Sequence[int],
    status: str | None = None,
    size: int = 100,
    max_pages: int = DEFAULT_MAX_PAGES,
    in_flight: int = 1,
) -> Iterator[PageRead]:
    """Every node of these farms, a page at a time, until a short page (the last one); see the module doc.

    Each page yielded holds only nodes not yielded before. Raises ReadStopped (nothing of that page
    yielded) when a page brings nothing new, passes the announced count, or would be past `max_pages`.
    With `in_flight` > 1, once page 1 has announced the count, the pages after it are asked for up to
    that many at a time (never past the count's last page nor `max_pages`); they are judged and yielded
    in order as above, so a stop is where it was, only up to `in_flight - 1` answers past it unread.
    """
    size = _page_size(size)
    farms = ", ".join(str(f) for f in farm_ids)
    of = f"farm{'s' if len(farm_ids) > 1 else ''} {farms}"
    seen: set[str] = set()  # node ids, and the labels of malformed entries, read so far
    read_nodes = 0
    page = 1
    last: int | None = None  # the count's last page, once page 1 has said the count

    def fetch(page: int) -> NodePage:
        what = f"page {page} of {of}"
        return _read(what, lambda: grid.nodes(farm_ids=list(farm_ids), status=status, page=page, size=size))

    reads = PagesInFlight(fetch, in_flight=in_flight)
    while True:
        what = f"page {page} of {of}"
        if page > max_pages:
            raise ReadStopped(
                what,
                f"not read: {max_pages} full pages of {size} were read (GRID_MAX_PAGES) and the proxy was still "
                f"sending more; {read_nodes} node(s) read before it, nothing past the ceiling",
            )
        read = reads.get(page, last=last)
        keys, fresh = _page_judged(read, what=what, seen=seen, read_nodes=read_nodes)
        seen |= keys
        read_nodes += len(fresh)
        yield PageRead(what=what, nodes=fresh, skipped=read.skipped)
        if read.entries < size or (read.count is not None and read_nodes >= read.count):
            return
        if read.count is not None:
            last = min(-(-read.count // size), max_pages)
        page += 1


def _page_judged(
    read: NodePage, *, what: str, seen: set[str], read_nodes: int
) -> tuple[set[str], tuple[NodeCapacity, ...]]:
    """The page's keys (node ids and malformed entries' labels) and its nodes not read before; ReadStopped
    when it brings nothing new or would pass the count the proxy announced."""
    keys = {str(n.node_id) for n in read.nodes} | {label for label, _reason in read.skipped}
    if read.entries and not keys - seen:
        raise ReadStopped(
            what,
            f"it brought no node not already read (the proxy sent a page it had sent: does it ignore `page`?); "
            f"stopped after {read_nodes} node(s)",
        )
    fresh = tuple(n for n in read.nodes if str(n.node_id) not in seen)
    if read.count is not None and read_nodes + len(fresh) > read.count:
        raise ReadStopped(
            what,
            f"it would bring the read to {read_nodes + len(fresh)} node(s), past the {read.count} the proxy "
            f"announced; nothing of it kept",
        )
    return keys, fresh


class PagesInFlight:
    """Pages of one paged read, asked for up to `in_flight` at a time and handed back in page order.

    `get(page, last=...)` returns page `page` (read in the caller's thread, or taken from a read started
    earlier) after starting the reads of the next `in_flight - 1` pages up to `last`, each in a daemon
    thread of its own in a copy of the caller's context (the request budget's priority, the step
    deadline): every one goes through the grid's own request path, so the shared request budget
    admits each as it admits any. Without `last` (no count announced yet) nothing is read ahead. An
    error a read ahead raised is raised by the `get` of its page; reads never asked for are dropped.
    """

    def __init__(self, fetch: Callable[[int], T], *, in_flight: int = 1) -> None:
        self._fetch = fetch
        self._in_flight = max(1, int(in_flight))
        self._started: dict[int, _ReadAhead] = {}

    def get(self, page: int, *, last: int | None) -> T:
        if last is not None:
            for ahead in range(page + 1, min(page + self._in_flight - 1, last) + 1):
                if ahead not in self._started:
                    self._started[ahead] = _ReadAhead(self._fetch, ahead)
        started = self._started.pop(page, None)
        return started.result() if started is not None else self._fetch(page)


class _ReadAhead:
    """One page's read in a daemon thread (a caller that stops early leaves it to end by its own deadline)."""

    def __init__(self, fetch: Callable[[int], object], page: int) -> None:
        self._outcome: tuple[bool, object] = (False, None)
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run, fetch, page), name=f"grid-page-{page}", daemon=True
        )
        self._thread.start()

    def _run(self, fetch: Callable[[int], object], page: int) -> None:
        try:
            self._outcome = (True, fetch(page))
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self._outcome = (False, exc)

    def result(self):
        self._thread.join()
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def id_pages(grid: Grid, *, node_ids: Sequence[int], status: str | None = None, size: int = 100) -> Iterator[PageRead]:
    """These nodes, asked for by id a page at a time; an id a page omits is read on its own.

    A proxy omits a node from a filtered list for reasons of its own (an index lagging behind,
    a node between states); GET /nodes/{id} still answers for it, and the person asked for it.
    """
    size = _page_size(size)
    ids = sorted(set(node_ids))
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        read = ids_page(grid, node_ids=chunk, status=status)
        # An entry the page had but the parser refused is not lacking: asked alone, it would be refused again.
        got = {n.node_id for n in read.nodes} | {int(label) for label, _why in read.skipped if label.isdigit()}
        yield read
        missing = [n for n in chunk if n not in got]
        if missing:
            yield one_by_one(grid, missing, status=status)


def ids_page(grid: Grid, *, node_ids: Sequence[int], status: str | None = None) -> PageRead:
    """ONE request for these ids (at most MAX_PAGE_SIZE); the ids it lacks are the caller's to read.

    Raises ReadFailed when the page cannot be read. Callers that read what a page lacks their own
    way (the bulk re-register, with its retries and its count of unreachable nodes) use this.
    """
    chunk = sorted(set(node_ids))
    if not chunk or len(chunk) > MAX_PAGE_SIZE:
        raise ValueError(f"a page asks for 1 to {MAX_PAGE_SIZE} node ids, not {len(chunk)}")
    what = f"nodes {chunk[0]}-{chunk[-1]} by id ({len(chunk)} asked)"
    read = _read(what, lambda: grid.nodes(node_ids=chunk, status=status, page=1, size=len(chunk)))
    return PageRead(what=what, nodes=read.nodes, skipped=read.skipped)


def one_by_one(
    grid: Grid, node_ids: list[int], *, status: str | None = None, step_seconds: float | None = None
) -> PageRead:
    """The nodes a page lacked, each asked for on its own (a proxy's list can lag behind its nodes), each
    within `step_seconds` when given (grid.deadline.grid_step_deadline); what the grid cannot answer for
    one node is that node's, said in the read, never the run's."""
    nodes, not_found, left_out, refused = [], [], [], []
    for node_id in node_ids:
        try:
            with grid_step_deadline(step_seconds) if step_seconds is not None else nullcontext():
                node = grid.node(node_id)
        except NodeNotFound:
            not_found.append(node_id)
            continue
        except MalformedPayload as exc:
            refused.append((str(node_id), str(exc)))  # refused as a page's malformed entry is: counted, said
            continue
        except GridError as exc:
            # One node the grid cannot answer for is that node's problem, not the run's.
            left_out.append((node_id, str(exc) or type(exc).__name__))
            continue
        if status is not None and node.status != status:
            left_out.append((node_id, f"the grid says it is {node.status}, not {status}"))
            continue
        nodes.append(node)
    shown = ", ".join(str(n) for n in node_ids[:5]) + (" …" if len(node_ids) > 5 else "")
    return PageRead(
        what=f"{len(node_ids)} node(s) a page lacked, one by one ({shown})",
        nodes=tuple(nodes),
        skipped=tuple(refused),
        not_found=tuple(not_found),
        left_out=tuple(left_out),
        requests=len(node_ids),
    )


_DONE = object()


def _hand(ahead: queue.Queue, stop: threading.Event, item) -> bool:
    """Put the item in the queue for the caller; False when the caller stopped first."""
    while not stop.is_set():
        try:
            ahead.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False


def _read_ahead(reads: Iterator, ahead: queue.Queue, stop: threading.Event, step_seconds: float | None) -> None:
    """pages_ahead's thread: each read (inside its own step deadline when given) handed over in order,
    then _DONE; an error a read raises is handed over in its place, and ends the reading."""
    iterator = iter(reads)
    while not stop.is_set():
        try:
            if step_seconds is not None:
                with grid_step_deadline(step_seconds):
                    item = next(iterator, _DONE)
            else:
                item = next(iterator, _DONE)
        except BaseException as exc:  # handed to the caller, who raises it
            _hand(ahead, stop, exc)
            return
        if not _hand(ahead, stop, item) or item is _DONE:
            return


def pages_ahead(reads: Iterator[T], *, depth: int = 2, step_seconds: float | None = None) -> Iterator[T]:
    """The same reads, made in a thread of their own up to `depth` reads ahead of the caller.

    A caller that writes each page while the next one is on the wire takes about the network's
    time instead of the network's plus its own. The thread runs in a copy of the caller's context
    (the request budget's priority, an outer step deadline), each read inside its own step deadline
    of `step_seconds` when given; it must touch no database (the caller's connection and
    transaction are not its). An error a read raises is raised here, at the same point of the
    sequence; a caller that stops early stops the thread.
    """
    ahead: queue.Queue = queue.Queue(maxsize=max(depth, 1))
    stop = threading.Event()
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run,
        args=(_read_ahead, reads, ahead, stop, step_seconds),
        name="grid-pages-ahead",
        daemon=True,
    )
    thread.start()
    try:
        while True:
            item = ahead.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


def pages_bounded(
    fetch: Callable[[int, int], tuple[Sequence[T], int | None]],
    *,
    key: Callable[[T], Hashable],
    what: str,
    size: int = 100,
    max_pages: int = DEFAULT_MAX_PAGES,
) -> tuple[list[T], int]:
    """Every item of a paged list, with the ends of farm_pages: (items, pages asked for).

    `fetch(page, size)` returns a page's items and the count the server announced (None if it did
    not). Stops at a short page or at the count; ReadStopped, and nothing returned, when a page
    brings no new item, would pass the announced count, or would be past `max_pages`. A caller
    that must have all or nothing (the audit: a contract left out looks like a VM gone) gets that.
    """
    size = _page_size(size)
    items: list[T] = []
    seen: set[Hashable] = set()
    page = 1
    while True:
        where = f"page {page} of {what}"
        if page > max_pages:
            raise ReadStopped(
                where,
                f"not read: {max_pages} full pages of {size} were read (GRID_MAX_PAGES) and the proxy was still "
                f"sending more; nothing of it kept",
            )
        got, count = fetch(page, size)
        keys = [key(item) for item in got]
        fresh = [item for item, k in zip(got, keys, strict=True) if k not in seen]
        if got and not fresh:
            raise ReadStopped(
                where, "it brought nothing not already read (the proxy sent a page it had sent: does it ignore `page`?)"
            )
        if len(set(keys)) != len(keys):
            raise ReadStopped(where, "it lists the same entry twice; nothing of it kept")
        if count is not None and len(items) + len(fresh) > count:
            raise ReadStopped(
                where, f"it would bring the read to {len(items) + len(fresh)}, past the {count} the proxy announced"
            )
        items.extend(fresh)
        seen.update(keys)
        if len(got) < size or (count is not None and len(items) >= count):
            return items, page
        page += 1


def _page_size(size: int) -> int:
    return max(1, min(int(size), MAX_PAGE_SIZE))


__all__ = [
    "DEFAULT_MAX_PAGES",
    "MAX_PAGE_SIZE",
    "PageRead",
    "PagesInFlight",
    "ReadFailed",
    "ReadStopped",
    "farm_pages",
    "id_pages",
    "ids_page",
    "pages_ahead",
    "pages_bounded",
]
