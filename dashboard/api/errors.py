"""Errors the endpoints raise; main.py turns each into its status and {"detail", "field"}."""

from __future__ import annotations

from dashboard.grid.types import GridError


class BadInput(Exception):
    """A 400 naming the input at fault."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class GridTrouble(Exception):
    """The grid could not be read: a 503 with the grid's own words (nothing was written)."""

    def __init__(self, exc: GridError):
        super().__init__(f"the grid could not be read, nothing was recorded: {exc}")
        self.cause = getattr(exc, "cause", "") or "grid-unavailable"


class JobNotQueued(Exception):
    """The job was recorded and the broker could not be told: it failed at once. A 503 with its words."""

    def __init__(self, job_id: int, error: str):
        super().__init__(f"job #{job_id} was recorded and failed at once: {error}; try again shortly")
        self.job_id = job_id
