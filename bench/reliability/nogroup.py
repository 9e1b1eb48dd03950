"""A signed-in user in no group asks gunicorn for every page, the CSV export and the API: nothing but refusals.

    .venv/bin/python bench/reliability/nogroup.py [--nodes 20]

Production-like (bench/reliability/web.py: DEBUG=false, gunicorn, PostgreSQL). The database is
flushed and seeded: the bench's fleet at --nodes nodes (bench/seed.py: slices, deployments,
failed deploys with ZOS's error text, a farm policy), and, as the security sweep's world(), node
1774, a finished precheck job, a policy, an API token and an alert, whose ids fill the URLs.
The user "nora" is in no group; she once was in support and made a read-scope API token then
(a token outlives its user's group, so the API must check the permission on every call).
She signs in through the login form and, with her session cookie:

- GET on every view in config.urls except login and logout (the URL conf is read at run
  time, so a new page is tried without anyone adding it), as a page and as an htmx request;
- the CSV export (/export.csv and /?format=csv);
- Django's admin: its root and every registered model's list;
- the API: its schema and docs, and every GET operation, with the cookie alone and with the
  cookie and her old token.

Every answer is counted by status, and searched for the seeded data (node 3917, farm names, ZOS
error texts, the farm policy, the alert, the job's result, a node's memory in bytes). The control:
"sam", in support, reads six pages with the same detector, which must find data on each. Prints
one JSON object. Exit status 1 when any of nora's answers carries data, any is a 5xx (or gunicorn
logs a server error), a page of the dashboard answers anything but 403 (405 for a view that only
takes POST), or the control finds no data.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from bench.reliability.kill_loop import RedisServer  # noqa: E402
from bench.reliability.web import Gunicorn, django_fresh, production_env  # noqa: E402

# As tests/reliability/test_reliability_security.py: what anyone may see, and the doors for programs.
# The favicon is a redirect to a static file, asked before any login.
PUBLIC = {"login", "logout", "favicon"}
HTMX = {"HX-Request": "true"}
# Not 1774: the API schema's examples name that node, so the detector would find it in the docs.
WORLD_NODE = 3917
JOB_WORDS = "nogroup-sweep precheck: 3 slices fit"
ALERT_SUMMARY = "Farm 4242 offers 1 phantom slice (nogroup sweep)"
# Pages support reads, where the data detector must find data (else a 0 below would mean nothing).
CONTROL = ("/", "/export.csv", "/nodes/{node_id}/", "/deployments/failed/", "/jobs/{job_id}/", "/policy/")


def seed(*, nodes: int, workdir: Path) -> dict:
    """The bench fleet plus one of each thing a URL can name; returns the URL ids and the data markers."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.utils import timezone

    from bench.seed import FARM_POLICY, database_seed, fleet_specs, simulator_seed
    from dashboard import capacity
    from dashboard.access.services.tokens import api_token_create
    from dashboard.models import Alert, Deployment, Job, Node, Policy
    from dashboard.nodes.services.registration import node_register
    from sim.grid import SimulatedGrid

    GiB = capacity.GiB
    specs = fleet_specs(nodes)
    workloads, _ = simulator_seed(SimulatedGrid(workdir / "simgrid.sqlite3"), specs)
    database_seed(specs, workloads)
    node = node_register(
        node_id=WORLD_NODE,
        total=capacity.Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB)),
        farm_id=4242,
        farm_name="mitana-nogroup",
        status="up",
        policy_name="legacy",
    )
    job = Job.objects.create(
        kind=Job.Kind.PRECHECK,
        node=node,
        state=Job.State.SUCCEEDED,
        result={"words": JOB_WORDS},
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )
    policy = Policy.objects.get(name=FARM_POLICY[0])
    alert = Alert.objects.create(
        rule="phantom-slices",
        subject="farm 4242",
        since=timezone.now(),
        summary=ALERT_SUMMARY,
        evaluated_at=timezone.now(),
    )
    users = get_user_model()
    password = secrets.token_urlsafe(16)
    nora = users.objects.create_user("nora", password=password)
    support = Group.objects.get(name="support")
    nora.groups.add(support)
    issued = api_token_create(user=nora, name="nora's script", scopes=["read"], source="command")
    nora.groups.remove(support)
    users.objects.create_user("sam", password=password).groups.add(support)
    # Data the seeded rows hold that no refusal should show. Numbers only as whole words: the
    # fleet's ids are 1..nodes, which any page holds somewhere; 1774 and the deployments' ids not.
    failed = list(Deployment.objects.filter(state=Deployment.State.FAILED).values_list("raw_error", flat=True))
    markers = {
        f"node {WORLD_NODE}": re.compile(rf"(?<![0-9A-Za-z]){WORLD_NODE}(?![0-9A-Za-z])"),
        "a farm name": re.compile(r"bench-farm-\d+|mitana-nogroup"),
        "a ZOS error": re.compile(r"within deployment \d+ failed with error|cannot fulfil required memory"),
        "the farm policy": re.compile(re.escape(FARM_POLICY[0])),
        "the alert": re.compile(re.escape(ALERT_SUMMARY)),
        "the job's result": re.compile(re.escape(JOB_WORDS)),
        "a slice size in bytes": re.compile(rf"(?<![0-9]){31 * GiB}(?![0-9])"),
    }
    return {
        "ids": {
            "node_id": WORLD_NODE,
            "job_id": job.pk,
            "policy_id": policy.pk,
            "token_id": issued.token.pk,
            "alert_id": alert.pk,
            "farm_id": node.farm_id,
            # No lesson is seeded: a page past its permission check must not even look for one.
            "lesson_id": 1,
        },
        "password": password,
        "token": issued.secret,
        "markers": markers,
        "seeded": {"nodes": Node.objects.count(), "failed_deployments": len(failed), "jobs": Job.objects.count()},
    }


def targets(ids: dict) -> list[dict]:
    """Every GET the sweep makes: {"kind", "url", "headers"}."""
    from django.contrib import admin
    from django.urls import URLPattern, URLResolver, get_resolver, reverse

    from dashboard.api.main import api

    found = []
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLPattern) and entry.name not in PUBLIC:
            kwargs = {name: ids[name] for name in getattr(entry.pattern, "converters", {})}
            url = reverse(entry.name, kwargs=kwargs)
            kind = {
                "metrics": "token door (/metrics)",
                "metrics-farms": "token door (/metrics)",
                "fleet-export": "csv export",
            }.get(entry.name, "page")
            found.append({"kind": kind, "url": url, "headers": {}})
            if kind != "token door (/metrics)":
                found.append({"kind": f"{kind} (htmx)", "url": url, "headers": HTMX})
        elif isinstance(entry, URLResolver) and entry.app_name == "admin":
            found.append({"kind": "admin", "url": "/" + str(entry.pattern), "headers": {}})
            for model in admin.site._registry:
                found.append(
                    {
                        "kind": "admin",
                        "headers": {},
                        "url": reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"),
                    }
                )
    found += [{"kind": "csv export", "url": "/?format=csv", "headers": {}}]
    schema = api.get_openapi_schema(path_prefix="/api/v1/")
    found += [
        {"kind": "api schema", "url": f"/api/v1{path}", "headers": {}} for path in (api.openapi_url, api.docs_url)
    ]
    for path, operations in schema["paths"].items():
        if "get" in operations:
            url = path.replace("{node_id}", str(ids["node_id"]))
            found.append({"kind": "api (session cookie)", "url": url, "headers": {}})
            found.append({"kind": "api (cookie + her old token)", "url": url, "headers": {"Authorization": "token"}})
    return found


def expected(kind: str, status: int, location: str) -> bool:
    if kind.startswith(("page", "csv")):
        return status in (403, 405)
    if kind == "admin":
        return status == 302 and location.startswith("/admin/login/")
    if kind == "api (session cookie)":
        return status == 401
    if kind == "api (cookie + her old token)":
        return status == 403
    if kind == "token door (/metrics)":
        return status in (401, 404)
    return status in (200, 404)  # the API's schema and docs: documentation, no data


def data_found(markers: dict, body: str) -> list[str]:
    """The names of the seeded data the answer shows."""
    return [name for name, pattern in markers.items() if pattern.search(body)]


def control_read(browser, world: dict) -> dict:
    """Support's pages read with the same detector: each must show data, else a 0 for nora means nothing."""
    control = {}
    for url in (page.format(**world["ids"]) for page in CONTROL):
        answer = browser.request("GET", url)
        control[url] = {"status": answer.status_code, "data": data_found(world["markers"], answer.text)}
    return control


def sweep_answer(browser, target: dict, world: dict) -> dict:
    """One of the sweep's GETs as nora, with her old token where the target asks for it."""
    headers = dict(target["headers"])
    if headers.get("Authorization") == "token":
        headers["Authorization"] = f"Bearer {world['token']}"
    answer = browser.request("GET", target["url"], headers=headers)
    body = answer.text
    location = answer.headers.get("Location", "")
    return {
        "kind": target["kind"],
        "url": target["url"],
        "htmx": "HX-Request" in headers,
        "status": answer.status_code,
        "location": location,
        "data": data_found(world["markers"], body),
        "expected": expected(target["kind"], answer.status_code, location),
        "says_whom_to_ask": "in no group" in body,
        "content_type": answer.headers.get("Content-Type", "").split(";")[0],
    }


def sweep_report(answers: list[dict], *, world: dict, control: dict, server_errors: int, began: float) -> dict:
    by_kind: dict[str, Counter] = {}
    for a in answers:
        by_kind.setdefault(a["kind"], Counter())[str(a["status"])] += 1
    pages = [a for a in answers if a["kind"].startswith(("page", "csv"))]
    with_data = [a for a in answers if a["data"]]
    unexpected = [a for a in answers if not a["expected"]]
    return {
        "user": "nora, signed in through the login form, in no group (her read token made while in support)",
        "seeded": world["seeded"],
        "requests": len(answers),
        "by_status": dict(sorted(Counter(str(a["status"]) for a in answers).items())),
        "by_kind": {kind: dict(sorted(c.items())) for kind, c in by_kind.items()},
        "pages_tried": len(pages),
        "pages_403": sum(a["status"] == 403 for a in pages),
        "pages_saying_whom_to_ask": sum(a["says_whom_to_ask"] for a in pages),
        "answers_200": sum(a["status"] == 200 for a in answers),
        "answers_200_with_data": sum(a["status"] == 200 and bool(a["data"]) for a in answers),
        "answers_with_data": len(with_data),
        "answers_5xx": sum(a["status"] >= 500 for a in answers),
        "server_errors": server_errors,
        "unexpected": [{k: a[k] for k in ("kind", "url", "htmx", "status", "location", "data")} for a in unexpected],
        "with_data": [{k: a[k] for k in ("kind", "url", "status", "data")} for a in with_data],
        "control_support": {
            url: f"{c['status']}, {', '.join(c['data']) or 'NO DATA FOUND'}" for url, c in control.items()
        },
        "seconds": round(time.monotonic() - began, 1),
        "answers": [f"{a['status']} GET {a['url']}{' (htmx)' if a['htmx'] else ''} [{a['kind']}]" for a in answers],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="slicedash-nogroup-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    env = production_env(workdir=workdir, broker_url=redis_server.url, GRID_BACKEND="simulator")
    gunicorn = Gunicorn(env=env, workdir=workdir, workers=1, threads=4)
    answers = []
    began = time.monotonic()
    try:
        log("migrating, emptying the database, collecting static files, seeding")
        django_fresh(env)
        world = seed(nodes=args.nodes, workdir=workdir)
        sweep = targets(world["ids"])
        gunicorn.start()
        from bench.reliability.load import Browser

        sam = Browser(gunicorn.url)
        sam.login("sam", world["password"])
        control = control_read(sam, world)
        nora = Browser(gunicorn.url)
        nora.login("nora", world["password"])
        log(f"{len(sweep)} requests as nora (in no group)")
        answers += [sweep_answer(nora, target, world) for target in sweep]
        server_errors = gunicorn.server_errors()
    finally:
        gunicorn.stop()
        redis_server.stop()

    report = sweep_report(answers, world=world, control=control, server_errors=server_errors, began=began)
    if server_errors:
        report["server_log_tail"] = gunicorn.log_tail()
    print(json.dumps({k: v for k, v in report.items() if k != "answers"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    blind = [url for url, c in control.items() if c["status"] != 200 or not c["data"]]
    failed = report["with_data"] or report["answers_5xx"] or server_errors or report["unexpected"] or blind
    return 1 if failed else 0


def log(message: str) -> None:
    print(f"[nogroup {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
