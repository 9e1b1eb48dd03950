"""The Grid Proxy client, read-only, in three parts:

- `client.py`: GridProxyClient, the Grid interface over HTTP (budgets, retries, redirects);
- `parse.py`: the strict parsers of the proxy's answers (`parse_node`, `parse_statistics`);
- `watchdog.py`: the socket watchdog that holds a request to its wall-clock deadline.
"""

from dashboard.grid.proxy.client import DEPLOY_NOT_SUPPORTED, GridProxyClient
from dashboard.grid.proxy.parse import parse_node, parse_statistics

__all__ = ["DEPLOY_NOT_SUPPORTED", "GridProxyClient", "parse_node", "parse_statistics"]
