"""The nodes' own answers over RMB, through an rmb-peer's Redis (client.py; the parsers in parse.py).

`get_rmb()` is the process's door: the rmb-peer's client when RMB_REDIS_URL is set; else, on the
simulated grid, its loopback (settings.SIMULATED_RMB, by name: the product never imports sim/), whose
answers go through the same reader; else None (no peer: pools come from reports only). The client's
budget lives in the peer's Redis, which every process that speaks RMB shares by definition (one peer
serves the marketplace's twin).
"""

from __future__ import annotations

import threading

from django.utils.module_loading import import_string

from dashboard.grid.rmb.client import POOLS, STATISTICS, VERSION, RmbCalls, RmbClient, RmbPeerFailed, Target

_clients: dict[tuple, RmbClient] = {}
_lock = threading.Lock()


def rmb_for(*, url: str, deadline: float, limit: int, reserve: int, max_in_flight: int) -> RmbClient:
    """The process's client for these settings (one Redis connection pool per process)."""
    from dashboard.grid.budget import RedisInFlight, RedisWindow, RequestBudget

    key = (url, deadline, limit, reserve, max_in_flight)
    with _lock:
        if key not in _clients:
            budget = RequestBudget(
                window=RedisWindow(url, key="slicedash:rmb-budget"),
                limit=limit,
                reserve=reserve,
                limit_setting="RMB_RATE_LIMIT",
                reserve_setting="RMB_RATE_RESERVE",
                shared="this rmb-peer",
            )
            _clients[key] = RmbClient(
                url, deadline=deadline, budget=budget, in_flight=RedisInFlight(url, cap=max_in_flight)
            )
        return _clients[key]


def get_rmb() -> RmbCalls | None:
    from django.conf import settings

    if not settings.RMB_REDIS_URL:
        if settings.GRID_BACKEND == "simulator" and settings.SIMULATED_RMB:
            return import_string(settings.SIMULATED_RMB)()
        return None
    return rmb_for(
        url=settings.RMB_REDIS_URL,
        deadline=settings.RMB_DEADLINE,
        limit=settings.RMB_RATE_LIMIT,
        reserve=settings.RMB_RATE_RESERVE,
        max_in_flight=settings.RMB_MAX_IN_FLIGHT,
    )


__all__ = ["POOLS", "STATISTICS", "VERSION", "RmbCalls", "RmbClient", "RmbPeerFailed", "Target", "get_rmb", "rmb_for"]
