"""Loaded first (pytest.ini `-p tests.testenv`): the suite runs on PostgreSQL and Redis.

Each variable can be overridden from the environment, e.g. to give two checkouts their
own databases: DATABASE_URL=postgres://postgres@127.0.0.1:5432/mine make test
"""

import os
import tempfile

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/slicedash")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("GRID_BACKEND", "simulator")
os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="slicedash-test-"))
# Tests exercise retries; the production back-off would only make them slow.
os.environ.setdefault("GRID_BACKOFF", "0.01")
