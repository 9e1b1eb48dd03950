"""Processes that read a loopback proxy through one shared request budget (tests/test_grid_budget.py).

A module of its own so `multiprocessing`'s spawn start method can import the function by name.
"""

from __future__ import annotations

from pathlib import Path


def read_through_budget(
    url: str, store: str, where: str, limit: int, reserve: int, reads: int, background: bool
) -> int:
    """Read node 1774 `reads` times through a budget kept in `store` ("redis" URL or "file" path); the reads made."""
    from contextlib import nullcontext

    from dashboard.grid.budget import FileWindow, RedisWindow, RequestBudget
    from dashboard.grid.budget import background as in_background
    from dashboard.grid.proxy import GridProxyClient

    window = RedisWindow(where, key=f"slicedash:test-budget:{url}") if store == "redis" else FileWindow(Path(where))
    budget = RequestBudget(window=window, limit=limit, reserve=reserve)
    client = GridProxyClient(url, retries=0, deadline=60.0, budget=budget)
    done = 0
    with in_background() if background else nullcontext():
        for _ in range(reads):
            client.node(1774)
            done += 1
    return done
