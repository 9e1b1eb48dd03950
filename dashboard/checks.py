"""`migrate`'s own check of the squashed migrations: a database that applied only some of what a squash
replaces would be left silently without their columns.

Django uses a squash only where all or none of the migrations it replaces are applied; with some, and
their files gone, `migrate` says "No migrations to apply" and the schema stays part-way. Refused here
with what to do (docs/production.md, "Upgrading past the migration squashes"). A database check: it runs
with `migrate` and `check --database default`, never at import.
"""

from __future__ import annotations

from django.core import checks
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder


def part_applied_squashes(applied: set[tuple[str, str]], squashes: dict[tuple[str, str], list]) -> list[str]:
    """Each squash (app, name) -> the (app, name) it replaces: those of which some but not all are applied."""
    found = []
    for key, replaced in sorted(squashes.items()):
        done = [r for r in replaced if tuple(r) in applied]
        if key not in applied and 0 < len(done) < len(replaced):
            missing = [name for app, name in replaced if (app, name) not in applied]
            found.append(
                f"{key[0]}.{key[1]}: {len(done)} of the {len(replaced)} migrations it replaces are applied "
                f"(not {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''})"
            )
    return found


@checks.register(checks.Tags.database)
def squashes_whole(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    errors = []
    for alias in databases or ():
        connection = connections[alias]
        if not MigrationRecorder(connection).has_table():
            continue  # a new database: every squash runs in full
        loader = MigrationLoader(None, ignore_no_migrations=True, load=False)
        loader.load_disk()
        squashes = {key: list(m.replaces) for key, m in loader.disk_migrations.items() if m.replaces}
        applied = set(MigrationRecorder(connection).applied_migrations())
        errors.extend(
            checks.Error(
                f"the database {alias!r} is part-way through migrations now squashed: {words}",
                hint="migrate it on a release from before the squash first (docs/production.md)",
                id="dashboard.E001",
            )
            for words in part_applied_squashes(applied, squashes)
        )
    return errors
