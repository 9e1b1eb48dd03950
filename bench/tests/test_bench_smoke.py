"""Every path of `make bench` at a tiny size (20 nodes, 40 onboarded), so a rename in the app cannot
break the bench unseen (issue 37: a renamed field crashed the full run at 10,000 nodes).

The bench runs as `make bench` runs it, a process of its own with its own database (this checkout's
name with "bench" in it, dropped at the end) and real workers; its broker is this run's Redis db,
which the bench flushes, so the suite's claim on it is written again afterwards.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import testenv

REPO = Path(__file__).resolve().parent.parent.parent
# Every case the full run measures; a path that raises leaves the run without its figures.
BENCH_PATHS = (
    "seed_simulator",
    "seed_database",
    "precheck",
    "pages",
    "api",
    "bulk",
    "floor",
    "click_to_result",
    "watch",
    "onboard",
    "onboard_cli",
    "bulk_pages",
    "targets",
)


@pytest.fixture
def bench_broker_url():
    url = os.environ["CELERY_BROKER_URL"]
    yield url
    # The bench flushed the db: claim it again for this checkout (tests/testenv.py).
    db = int(url.rsplit("/", 1)[1])
    testenv.redis_db_claim(testenv.CHECKOUT, db)


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.timeout(600)
def test_it_runs_every_bench_path_at_20_nodes(bench_broker_url, tmp_path):
    database, _ = testenv.checkout_names(testenv.CHECKOUT)
    env = os.environ | {
        "BENCH_DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{database}_bench_smoke",
        "BENCH_BROKER_URL": bench_broker_url,
    }
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--sizes", "20", "--quick", "--no-write", "--onboard-nodes", "40"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads(done.stdout)
    assert [path for path in BENCH_PATHS if not figures.get(path)] == []
    assert figures["pages"]["20"]["policy_edit"]["nodes"] == 20
    assert figures["onboard"]["onboarded"] == 40
    assert figures["onboard_cli"]["registered"] == 40
