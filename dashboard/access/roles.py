"""The two groups, support and admins, and the permissions each holds: declared once, here.

Migration 0003_roles makes them on a fresh database; `roles_restore` makes them again on a flushed one
(a test, the demo rebuilt). Support reads everything; admins also act (re-register, bulk jobs,
policy, tokens, alerts, onboarding, the catalog fix, withholds).
"""

from __future__ import annotations

from django.contrib.auth.management import create_permissions

SUPPORT_PERMISSIONS = (
    "view_alert",
    "view_auditevent",
    "view_capacitysample",
    "view_deployment",
    "view_job",
    "view_node",
    "view_observation",
    "view_policy",
    "view_slice",
)
ROLES: dict[str, tuple[str, ...]] = {
    "support": SUPPORT_PERMISSIONS,
    "admins": SUPPORT_PERMISSIONS
    + (
        "acknowledge_alert",
        "add_policy",
        "bulk_reregister",
        "change_policy",
        "deploy_slice",
        "fix_catalog",
        "manage_apitoken",
        "onboard_nodes",
        "precheck_node",
        "reregister_node",
        "view_apitoken",
        "withhold_node",
    ),
}


def roles_create(apps, schema_editor=None) -> None:
    """Each group made if missing and given its permissions (added: one given by hand in /admin/ stays)."""
    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        models_module = getattr(app_config, "models_module", None)  # a migration state's stub has none
        app_config.models_module = models_module or True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = models_module
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in ROLES.items():
        permissions = list(Permission.objects.filter(content_type__app_label="dashboard", codename__in=codenames))
        missing = set(codenames) - {p.codename for p in permissions}
        if missing:
            raise LookupError(f"the {name} group names permissions no model declares: {sorted(missing)}")
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*permissions)


def roles_remove(apps, schema_editor=None) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


def roles_restore(apps) -> None:
    """The groups of a flushed database made again, as 0003_roles makes them."""
    roles_create(apps)
