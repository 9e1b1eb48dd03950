"""The outside world: the grid interface, the Grid Proxy client and the simulated ZOS grid.

`get_grid()` returns the backend chosen by settings.GRID_BACKEND. It speaks in capacity
types, never in models.
"""

from django.conf import settings
from django.utils.module_loading import import_string

from dashboard.grid.types import Grid


def get_grid() -> Grid:
    if settings.GRID_BACKEND == "gridproxy":
        from dashboard.grid.budget import budget_from_settings
        from dashboard.grid.proxy import GridProxyClient

        return GridProxyClient(
            settings.GRID_PROXY_URL,
            connect_timeout=settings.GRID_CONNECT_TIMEOUT,
            read_timeout=settings.GRID_READ_TIMEOUT,
            retries=settings.GRID_RETRIES,
            backoff=settings.GRID_BACKOFF,
            deadline=settings.GRID_DEADLINE,
            contracts_page_size=settings.GRID_PAGE_SIZE,
            max_pages=settings.GRID_MAX_PAGES,
            statistics_deadline=settings.GRID_STATISTICS_DEADLINE,
            budget=budget_from_settings(),
        )
    # The simulated grid by name (settings.SIMULATED_GRID): production code never imports sim/.
    return import_string(settings.SIMULATED_GRID)()
