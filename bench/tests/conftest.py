"""The suite's fixtures these tests use, from tests/conftest.py (a fixture imported into a conftest
is a fixture of its folder), and its autouse ones (fast passwords, the grid request tally)."""

from tests.conftest import (  # noqa: F401
    broker_purged,
    fast_password_hasher,
    grid_requests_forgotten,
    simgrid_path,
)
