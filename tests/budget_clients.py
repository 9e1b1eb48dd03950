"""Processes that read a loopback proxy through one shared request budget (tests/grid/test_grid_budget.py).

A module of its own so `multiprocessing`'s spawn start method can import the function by name.
"""

from __future__ import annotations

from pathlib import Path


def read_through_budget(
    url: str, store: str, where: str, limit: int, reserve: int, reads: int, background: bool, key: str = ""
) -> int:
    """Read node 1774 (or the first node of a fleet proxy) `reads` times through a budget kept in `store`
    ("redis" URL or "file" path); the reads made."""
    from contextlib import nullcontext

    from dashboard.grid.budget import FileWindow, RedisWindow, RequestBudget
    from dashboard.grid.budget import background as in_background
    from dashboard.grid.proxy import GridProxyClient

    key = key or f"slicedash:test-budget:{url}"
    window = RedisWindow(where, key=key) if store == "redis" else FileWindow(Path(where))
    budget = RequestBudget(window=window, limit=limit, reserve=reserve)
    client = GridProxyClient(url, retries=0, deadline=60.0, budget=budget)
    done = 0
    node_id = 1774 if "fleet" not in key else 1
    with in_background() if background else nullcontext():
        for _ in range(reads):
            client.node(node_id)
            done += 1
    return done
