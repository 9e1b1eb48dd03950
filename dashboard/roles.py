"""The two groups, support and admins, with every permission their migrations give them.

Migrations create and widen the groups on a migrated database. A flushed one (a test, the demo
rebuilt) has none: `roles_restore` runs the same functions, 0002_roles' create_roles and then
each later migration's `roles_grant`, found by name so renumbering a migration breaks nothing.
"""

from __future__ import annotations

import importlib
import pkgutil


def roles_restore(apps) -> None:
    import dashboard.migrations

    importlib.import_module("dashboard.migrations.0002_roles").create_roles(apps, None)
    for name in sorted(m.name for m in pkgutil.iter_modules(dashboard.migrations.__path__)):
        grant = getattr(importlib.import_module(f"dashboard.migrations.{name}"), "roles_grant", None)
        if grant is not None:
            grant(apps, None)
