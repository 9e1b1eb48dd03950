"""`make reliability`: the long reliability runs, one after the other, with the machine's load recorded.

    .venv/bin/python bench/reliability/run.py [--quick] [--only kill,fuzz,faults,load,api,deploy,schema,drip,nogroup,fields]

1. kill   bench/reliability/kill_loop.py --kills 100   SIGKILLs during re-registers, then every invariant
2. fuzz   bench/reliability/fuzz.py --cases 10000      parsers, pages and forms: no 500, no change
3. faults pytest tests/reliability/test_reliability_faults.py, _concurrency.py and _security.py (the suite's cases)
4. load   bench/reliability/load.py --clients 50 --seconds 60   gunicorn, errors and p50/p99
5. api    bench/reliability/api_load.py --clients 50 --seconds 60   the same server, 50 API clients with
          their own bearer tokens (fleet, nodes, one node, precheck): errors, requests/s, p50/p99
6. deploy manage.py check --deploy --fail-level WARNING with production settings
7. schema tests/api/test_api_schemathesis.py with SCHEMATHESIS_EXAMPLES=500   schemathesis over the API's
          OpenAPI schema, every operation, valid and invalid inputs: no server error, every answer as documented
8. drip   bench/reliability/drip.py --rounds 5   a Grid Proxy dripping a byte a second: node_register
          fails within GRID_DEADLINE in one line, a web re-register fails on its step deadline
          (not "worker lost"), no second job
9. nogroup bench/reliability/nogroup.py   a signed-in user in no group asks gunicorn for every page,
          the CSV and the API: refusals only, no data, no 5xx
10. fields tests/api/test_api_fuzz_fields.py and tests/nodes/test_integrity_findings.py   every field of every API
          operation fed NUL, surrogates, bidi controls, 10 MB, year 1 / 9999 at +-14:00, 2**64: no 5xx, no
          row written on a refusal; and issue 22's findings (reports, times, hostile proxies) as reported

It first waits (up to --max-wait s) for the 1-minute load average to fall below --max-load, and
again (up to 10 minutes) before each later stage: the machine has 2 cores and other work, or the
previous stage's, would be measured too. Each stage runs in its own process
(they set up Django with different settings); everything is on loopback and stops by itself.
Writes every stage's figures to bench/reliability/results/latest.json (a quick run: to
var/reliability-quick.json) and prints them.
--quick: 10 kills, 500 fuzz cases, 10 clients for 10 s (load and api), 10 schemathesis examples, 1 drip round
(a smoke test of the runs themselves).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
PYTHON = BASE_DIR / ".venv" / "bin" / "python"
RESULTS = BASE_DIR / "bench" / "reliability" / "results"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/slicedash_rel"
STAGES = ("kill", "fuzz", "faults", "load", "api", "deploy", "schema", "drip", "nogroup", "fields")


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=BASE_DIR, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else f"(git {' '.join(args)} failed)"


def log(message: str) -> None:
    print(f"[reliability {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_wait(*, threshold: float, max_wait: float) -> float:
    """Seconds waited for the 1-minute load average to drop below `threshold` (gives up after max_wait)."""
    began = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - began < max_wait:
        log(f"load average {os.getloadavg()[0]:.2f} >= {threshold}; waiting")
        time.sleep(30)
    return time.monotonic() - began


def stage_json(command: list[str], *, env: dict, timeout: float) -> dict:
    """Run a stage that prints one JSON object (and may write it with --json)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    began = time.monotonic()
    done = subprocess.run(
        [*command, "--json", str(path)], cwd=BASE_DIR, env=env, timeout=timeout, stdout=subprocess.PIPE, text=True
    )
    try:
        figures = json.loads(path.read_text()) if path.stat().st_size else {"output": done.stdout[-3000:]}
    finally:
        path.unlink(missing_ok=True)
    figures.pop("rounds", None)
    return {"exit_status": done.returncode, "wall_s": round(time.monotonic() - began, 1), **figures}


def stage_pytest(paths: list[str], *, env: dict, timeout: float) -> dict:
    began = time.monotonic()
    done = subprocess.run(
        [
            str(BASE_DIR / ".venv" / "bin" / "pytest"),
            *paths,
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::UserWarning",
            "-rfEX",
        ],
        cwd=BASE_DIR,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    return {
        "exit_status": done.returncode,
        "wall_s": round(time.monotonic() - began, 1),
        "summary": lines[-1] if lines else "",
        "notes": [line for line in lines if line.startswith(("FAILED", "ERROR", "XFAIL", "XPASS"))],
    }


def stage_schema(*, examples: int, env: dict, timeout: float) -> dict:
    """The suite's schemathesis test with more examples; its figures come back through SCHEMATHESIS_REPORT."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    try:
        result = stage_pytest(
            ["tests/api/test_api_schemathesis.py"],
            timeout=timeout,
            env={**env, "SCHEMATHESIS_EXAMPLES": str(examples), "SCHEMATHESIS_REPORT": str(path)},
        )
        figures = json.loads(path.read_text()) if path.stat().st_size else {}
    finally:
        path.unlink(missing_ok=True)
    return {**result, **{k: v for k, v in figures.items() if k != "wall_s"}}


def stage_fields(*, env: dict, timeout: float) -> dict:
    """The API's fields fuzzed from its schema, and issue 22's findings; figures through API_FUZZ_REPORT."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = Path(out.name)
    try:
        result = stage_pytest(
            [
                "tests/api/test_api_fuzz_fields.py",
                "tests/nodes/test_integrity_findings.py",
                "tests/api/test_api_writes.py",
            ],
            timeout=timeout,
            env={**env, "API_FUZZ_REPORT": str(path)},
        )
        figures = json.loads(path.read_text()) if path.stat().st_size else {}
    finally:
        path.unlink(missing_ok=True)
    return {**result, **figures}


def stage_deploy_check(*, env: dict) -> dict:
    production = {
        **env,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "dash.example.com",
        "VAR_DIR": tempfile.mkdtemp(prefix="slicedash-deploy-check-"),
    }
    production.pop("SECURE_SSL_REDIRECT", None)
    done = subprocess.run(
        [str(PYTHON), "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=production,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {
        "exit_status": done.returncode,
        "command": "manage.py check --deploy --fail-level WARNING",
        "output": (done.stdout + done.stderr).strip()[-2000:],
    }


@dataclass(frozen=True)
class RunSizes:
    """How much each stage does: the full run's figures, or --quick's smoke test of the runs themselves."""

    kills: int
    cases: int
    clients: int
    seconds: int
    examples: int
    drips: int


FULL = RunSizes(kills=100, cases=10000, clients=50, seconds=60, examples=500, drips=5)
QUICK = RunSizes(kills=10, cases=500, clients=10, seconds=10, examples=10, drips=1)


def stage_run(stage: str, sizes: RunSizes, *, env: dict) -> dict:
    """Run one stage in its own process and return its figures (with its exit status)."""
    clients = ["--clients", str(sizes.clients), "--seconds", str(sizes.seconds)]
    runs = {
        "kill": lambda: stage_json(
            [str(PYTHON), "bench/reliability/kill_loop.py", "--kills", str(sizes.kills)], env=env, timeout=3600
        ),
        "fuzz": lambda: stage_json(
            [str(PYTHON), "bench/reliability/fuzz.py", "--cases", str(sizes.cases)], env=env, timeout=5400
        ),
        "faults": lambda: stage_pytest(
            [
                "tests/reliability/test_reliability_faults.py",
                "tests/reliability/test_reliability_concurrency.py",
                "tests/reliability/test_reliability_security.py",
                "bench/tests/test_reliability_kill.py",
            ],
            env=env,
            timeout=1800,
        ),
        "load": lambda: stage_json([str(PYTHON), "bench/reliability/load.py", *clients], env=env, timeout=1800),
        "api": lambda: stage_json([str(PYTHON), "bench/reliability/api_load.py", *clients], env=env, timeout=1800),
        "schema": lambda: stage_schema(examples=sizes.examples, env=env, timeout=3600),
        "drip": lambda: stage_json(
            [str(PYTHON), "bench/reliability/drip.py", "--rounds", str(sizes.drips)], env=env, timeout=900
        ),
        "nogroup": lambda: stage_json([str(PYTHON), "bench/reliability/nogroup.py"], env=env, timeout=600),
        "fields": lambda: stage_fields(env=env, timeout=1800),
    }
    if stage in runs:
        return runs[stage]()
    began = time.monotonic()
    return {**stage_deploy_check(env=env), "wall_s": round(time.monotonic() - began, 1)}


def report_write(report: dict, *, stages: list[str], quick: bool) -> Path:
    """Write the report where it belongs; with --only some stages, the others keep their last figures."""
    # A quick run is a smoke test of the runs themselves: its figures are not results.
    target = (BASE_DIR / "var" / "reliability-quick.json") if quick else (RESULTS / "latest.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    if not quick and set(stages) != set(STAGES) and target.exists():
        # Each kept stage says when and at which commit it ran.
        kept = json.loads(target.read_text())
        for stage, figures in kept.get("stages", {}).items():
            if stage not in report["stages"]:
                figures.setdefault("date", kept.get("date"))
                figures.setdefault("commit", kept.get("commit"))
                report["stages"][stage] = figures
    target.write_text(json.dumps(report, indent=2) + "\n")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/reliability/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(STAGES))
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--max-wait", type=float, default=1800.0)
    args = parser.parse_args(argv)
    stages = [s for s in args.only.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(sorted(unknown))}; choose from {', '.join(STAGES)}")

    env = {**os.environ, "PYTHONPATH": str(BASE_DIR)}
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    # The suite's cases (faults stage) use the shared Redis for their in-process worker; db 7 is the
    # reliability runs' own. The kill loop and the load run start their own redis-server.
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/7")
    waited = 0.0 if args.quick else load_wait(threshold=args.max_load, max_wait=args.max_wait)
    report: dict = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short", "HEAD"),
        # Others' work in progress in the same checkout is measured too; say which files differed.
        "uncommitted": git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "quick": args.quick,
        "load_wait_s": round(waited, 0),
        "stages": {},
    }
    sizes = QUICK if args.quick else FULL
    for n, stage in enumerate(stages):
        if n and not args.quick:
            # The previous stage's own work is still in the 1-minute average: let the machine settle.
            report["load_wait_s"] += round(load_wait(threshold=args.max_load, max_wait=600), 0)
        load = [round(x, 2) for x in os.getloadavg()]
        log(f"{stage}: starting (load average {load[0]})")
        result = stage_run(stage, sizes, env=env)
        report["stages"][stage] = {
            "loadavg_at_start": load,
            "date": report["date"],
            "commit": report["commit"],
            **result,
        }
        log(f"{stage}: exit status {result['exit_status']} in {result.get('wall_s', '?')} s")

    target = report_write(report, stages=stages, quick=args.quick)
    print(json.dumps(report, indent=2))
    log(f"written to {target.relative_to(BASE_DIR)}")
    return 1 if any(s["exit_status"] for s in report["stages"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
