"""The squashed migrations: a fresh database and an upgraded one end with the same schema and groups.

Each squash has a snapshot of a database migrated with the chain it replaces, taken before the squash:
its schema, its django_migrations rows and its groups. tests/data/schema_0036.sql is the old chain
0001_initial .. 0036_snapshot_tiers (squashed in issue 38 into 0001_tables .. 0003_roles),
tests/data/schema_0013.sql the chain 0001_tables .. 0013_lesson_evidence (squashed in issue 46 into
0004_zos_rules_and_lessons). Each test makes a database of its own on the suite's PostgreSQL server, runs
`manage.py migrate` against it as production would, compares it with the snapshot read back from
PostgreSQL's catalogue, and drops it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings

from tests.testenv import DATABASE_NAME

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Squash:
    snapshot: Path  # a database migrated with the chain the squash replaces
    dashboard_rows: int  # the snapshot's dashboard rows in django_migrations
    last_replaced: str
    # What an upgraded database records: the squash's migrations. The migrations after a squash change
    # the schema, so its tests migrate the dashboard to `target`, its last migration, and no further.
    recorded: tuple[str, ...]
    target: str


FIRST = Squash(
    snapshot=ROOT / "tests" / "data" / "schema_0036.sql",
    dashboard_rows=45,  # 0001_initial .. 0036_snapshot_tiers, merges included
    last_replaced="0036_snapshot_tiers",
    recorded=("0001_tables", "0002_farm_totals_trigger", "0003_roles"),
    target="0003_roles",
)
SECOND = Squash(
    snapshot=ROOT / "tests" / "data" / "schema_0013.sql",
    # A fresh database records the 45 that 0001_tables .. 0003_roles replace, those three, and 0004 .. 0013.
    dashboard_rows=45 + 3 + 10,
    last_replaced="0013_lesson_evidence",
    recorded=("0004_zos_rules_and_lessons",),
    target="0004_zos_rules_and_lessons",
)
SQUASHES = pytest.mark.parametrize("squash", [FIRST, SECOND], ids=["0036", "0013"])

# What PostgreSQL holds of a schema, each row one line; columns by name, so their order does not count
# (a fresh table lists its columns in model order, an upgraded one in the order they were added).
SCHEMA_QUERIES = {
    "column": """
        SELECT c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod),
               CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped""",
    "index": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraint": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace""",
    "trigger": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal",
    "function": "SELECT proname, pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
    "sequence": "SELECT sequencename, data_type::text FROM pg_sequences WHERE schemaname = 'public'",
}
GROUP_PERMISSIONS = """
    SELECT g.name, c.app_label, p.codename FROM auth_group g
    JOIN auth_group_permissions gp ON gp.group_id = g.id JOIN auth_permission p ON p.id = gp.permission_id
    JOIN django_content_type c ON c.id = p.content_type_id"""


def _conninfo(dbname: str) -> str:
    db = settings.DATABASES["default"]
    fields = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "password": db["PASSWORD"]}
    return psycopg.conninfo.make_conninfo(dbname=dbname, **{k: v for k, v in fields.items() if v})


def _url(dbname: str) -> str:
    db = settings.DATABASES["default"]
    password = f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else ""
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{quote(db['USER'], safe='')}{password}@{quote(db['HOST'], safe='')}{port}/{dbname}"


def _database_drop(name: str) -> None:
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _database_create(name: str) -> str:
    _database_drop(name)
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name


@pytest.fixture
def empty_database() -> Iterator[Callable[[str], str]]:
    """empty_database("fresh"): an empty database of this checkout's own (named after its test
    database), dropped afterwards."""
    made = []

    def make(role: str) -> str:
        made.append(_database_create(f"test_{DATABASE_NAME}_squash_{role}"))
        return made[-1]

    try:
        yield make
    finally:
        for name in made:
            _database_drop(name)


# Run in a process of its own, against the database in its DATABASE_URL: given a migration, every app
# migrated to its last migration but the dashboard, which stops at that one.
MIGRATE = """
import sys
import django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

options = {"interactive": False, "verbosity": 1, "plan": "--plan" in sys.argv}
target = [arg for arg in sys.argv[1:] if arg != "--plan"]
if target:
    for app in sorted(MigrationLoader(connection).migrated_apps - {"dashboard"}):
        call_command("migrate", app, **options)
    call_command("migrate", "dashboard", *target, **options)
else:
    call_command("migrate", **options)
"""


def migrate(dbname: str, target: str = "", *, plan: bool = False) -> str:
    """`manage.py migrate` on that database, in a process of its own as production runs it; what it printed.
    Given a target, the dashboard stops at that migration."""
    env = {**os.environ, "DATABASE_URL": _url(dbname), "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", MIGRATE, *([target] if target else []), *(["--plan"] if plan else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# `state IN ('queued', 'running')` as PostgreSQL prints it for an index made by CREATE INDEX, and as
# it prints the same index restored from a dump (the snapshot): one meaning, two spellings.
ANY_VARCHAR_ARRAY = re.compile(r"ANY \(\(ARRAY\[([^\]]*)\]\)::text\[\]\)")
VARCHAR_ITEM = re.compile(r"('(?:[^']|'')*'::character varying)")


def _as_restored(definition: str) -> str:
    def restored(match: re.Match) -> str:
        return "ANY (ARRAY[" + VARCHAR_ITEM.sub(r"(\1)::text", match.group(1)) + "])"

    return ANY_VARCHAR_ARRAY.sub(restored, definition)


def schema_of(dbname: str) -> list[str]:
    with psycopg.connect(_conninfo(dbname)) as conn:
        return sorted(
            _as_restored(f"{kind} " + " | ".join(map(str, row)))
            for kind, query in SCHEMA_QUERIES.items()
            for row in conn.execute(query)
        )


def rows_of(dbname: str, query: str) -> set[tuple]:
    with psycopg.connect(_conninfo(dbname)) as conn:
        return set(conn.execute(query))


def snapshot_load(dbname: str, squash: Squash) -> None:
    # A connection of its own: the dump empties search_path for the session that runs it.
    with psycopg.connect(_conninfo(dbname), autocommit=True) as conn:
        conn.execute(squash.snapshot.read_text())


@pytest.fixture(scope="module")
def snapshots() -> Iterator[Callable[[Squash], dict]]:
    """snapshots(squash): its snapshot's schema and groups, read back from a database it was loaded
    into (once a module)."""
    read: dict[Squash, dict] = {}

    def of(squash: Squash) -> dict:
        if squash not in read:
            name = _database_create(f"test_{DATABASE_NAME}_squash_old_{squash.last_replaced[:4]}")
            try:
                snapshot_load(name, squash)
                read[squash] = {"schema": schema_of(name), "groups": rows_of(name, GROUP_PERMISSIONS)}
            finally:
                _database_drop(name)
        return read[squash]

    return of


@SQUASHES
def test_the_snapshot_is_of_the_whole_replaced_chain(snapshots, squash):
    old_chain = snapshots(squash)
    assert any(line.startswith("trigger node_farms_changed_update ") for line in old_chain["schema"])
    assert {name for name, _, _ in old_chain["groups"]} == {"admins", "support"}
    text = squash.snapshot.read_text()
    assert text.count("INSERT INTO public.django_migrations VALUES (") > squash.dashboard_rows
    assert text.count("'dashboard', '0") == squash.dashboard_rows and f"'{squash.last_replaced}'" in text


@SQUASHES
def test_a_fresh_database_gets_the_replaced_chains_schema_and_groups(empty_database, snapshots, squash):
    fresh = empty_database("fresh")
    migrate(fresh, squash.target)
    assert schema_of(fresh) == snapshots(squash)["schema"]
    assert rows_of(fresh, GROUP_PERMISSIONS) == snapshots(squash)["groups"]


@SQUASHES
def test_an_upgraded_database_runs_nothing_again_and_keeps_its_schema_and_groups(empty_database, snapshots, squash):
    upgraded = empty_database("upgraded")
    snapshot_load(upgraded, squash)
    applied = "SELECT app, name, applied FROM django_migrations"
    before = rows_of(upgraded, applied)

    plan = migrate(upgraded, squash.target, plan=True)
    migrate(upgraded, squash.target)

    assert plan.count("No planned migration operations.") == 6, plan  # the five other apps too
    after = rows_of(upgraded, applied)
    # Only the squashed migrations are recorded, as applied by the ones they replace.
    assert before <= after
    assert {(app, name) for app, name, _ in after - before} == {("dashboard", name) for name in squash.recorded}
    assert schema_of(upgraded) == snapshots(squash)["schema"]
    assert rows_of(upgraded, GROUP_PERMISSIONS) == snapshots(squash)["groups"]


def test_the_migrations_after_the_first_squash_leave_a_fresh_and_an_upgraded_database_alike(empty_database):
    fresh, upgraded = empty_database("fresh"), empty_database("upgraded")
    snapshot_load(upgraded, FIRST)
    migrate(fresh)
    migrate(upgraded)
    assert schema_of(fresh) == schema_of(upgraded)
    assert rows_of(fresh, GROUP_PERMISSIONS) == rows_of(upgraded, GROUP_PERMISSIONS)


def test_a_database_part_way_through_the_squashed_chain_is_refused_not_left_behind(empty_database):
    # Stopped at 0012_node_refused_reading before the squash: Django alone would say "No migrations to
    # apply" and leave it without 0013's columns; dashboard.checks refuses it, saying what to do.
    partial = empty_database("partial")
    snapshot_load(partial, SECOND)
    with psycopg.connect(_conninfo(partial), autocommit=True) as conn:
        conn.execute("DELETE FROM django_migrations WHERE app = 'dashboard' AND name = '0013_lesson_evidence'")
    env = {**os.environ, "DATABASE_URL": _url(partial), "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode != 0
    assert "dashboard.E001" in done.stderr and "(not 0013_lesson_evidence)" in done.stderr, done.stderr
