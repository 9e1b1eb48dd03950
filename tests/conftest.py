"""Shared fixtures. Append new ones; keep the others'."""

import pytest


@pytest.fixture
def simgrid_path(tmp_path, settings):
    """Each test gets its own simulated grid file."""
    path = tmp_path / "simgrid.sqlite3"
    settings.SIMGRID_PATH = path
    settings.GRID_BACKEND = "simulator"
    return path
