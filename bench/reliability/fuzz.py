"""The fuzz at full size: tests/reliability/test_reliability_fuzz.py with 10,000 cases and a fresh seed.

    .venv/bin/python bench/reliability/fuzz.py [--cases 10000]

Runs the suite's fuzz module under pytest with RELIABILITY_FUZZ_CASES (each property takes its
share, see WEIGHTS there) and Hypothesis's statistics, and prints one JSON object: the cases
each property ran, failures, and the time. The test database is pytest-django's
test_<name of DATABASE_URL> (default test_slicedash_rel). Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/slicedash_rel"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    env = {**os.environ, "RELIABILITY_FUZZ_CASES": str(args.cases)}
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    began = time.monotonic()
    done = subprocess.run(
        [
            str(BASE_DIR / ".venv" / "bin" / "pytest"),
            "tests/reliability/test_reliability_fuzz.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-show-statistics",
            "-W",
            "ignore::UserWarning",
        ],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - began
    per_test: dict[str, int] = {}
    current = None
    for line in done.stdout.splitlines():
        heading = re.match(r"^tests/test_reliability_fuzz\.py::(\w+):", line.strip())
        if heading:
            current = heading.group(1)
            per_test.setdefault(current, 0)
        ran = re.search(r"(\d+) passing(?: examples?)?, (\d+) failing", line)
        if ran and current:
            per_test[current] += int(ran.group(1)) + int(ran.group(2))
    summary = re.findall(r"^=*\s*(\d+ (?:passed|failed|error)[^=]*?)\s*=*$", done.stdout, re.MULTILINE)
    report = {
        "cases_asked": args.cases,
        "cases_run": sum(per_test.values()),
        "per_property": per_test,
        "pytest": summary[-1] if summary else done.stdout[-300:],
        "exit_status": done.returncode,
        "seconds": round(elapsed, 1),
    }
    if done.returncode:
        report["failures"] = done.stdout[-6000:]
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
